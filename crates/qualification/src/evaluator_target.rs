//! The `evaluator` target: the first `evaluatorSampleSeconds` of the arrival stream, each
//! arrival one invocation of the decision evaluator (`turnstile_decision::evaluate`) with a fake
//! adapter, on paused tokio time.
//!
//! # How a run goes
//!
//! A `current_thread` runtime with `start_paused(true)` hosts one shared [`AdmissionDriver`]
//! (clock reading 0 at the start) with the manifest's whole profile registered under its
//! `profileVersion`, so every principal's reservation is known up front (as in the controller
//! target). The main task sleeps to each arrival's `atMs` and spawns its invocation:
//!
//! - a 1-evaluation ruleset whose binding targets the arrival's provider (`artifacts.rs`):
//!   `timeoutMs = 2000 + serviceMs`, `maxRetries` and `initialDelayMs = maxDelayMs =
//!   retryBackoffMs` from the arrival model, `maxAttempts = maxRetries + 1`;
//! - the scheduler enabled with the manifest's workspace and provider limits and the arrival's
//!   principal and its limits, under the manifest's `profileVersion` (the same revision every
//!   time, so re-registering it never conflicts);
//! - `invocationId` = the arrival's ordinal (also its admission budget id, released by the
//!   evaluator when the invocation ends); the estimate of every attempt is `{tokens, attempts 1,
//!   batchSize 1, items 1, costUsd 0, retainedWork 1}`;
//! - `random() = 0.5`, so the jittered backoff is exactly `retryBackoffMs`;
//! - the fake adapter of `adapter.rs` (`serviceMs`, first attempt fails with `service-error`
//!   when `failsFirstAttempt`);
//! - when the arrival cancels, its caller signal fires at `cancelAtMs`.
//!
//! # Observations (same meaning as the controller target's)
//!
//! Every attempt record is one admission request (`attempts`). An arrival is `cancelled` when
//! its result is `cancelled`, `completed` when its evaluation was accepted, `shed` when its last
//! attempt was rejected by admission (counted in `shedReasons` under the evidence's reason), and
//! `failed` otherwise. Admitted attempts give `maximumEligibleLaneWaitMs` (their evidence's
//! `queueDelayMs`) and the admission ratios; `maximumActiveCalls` / `maximumQueuedCalls` are the
//! driver's high-water marks of the registry's workspace totals
//! ([`AdmissionDriver::peak_totals`]). Cancellation latency is the virtual time from `cancelAtMs`
//! to the invocation returning `cancelled`.
//!
//! # Invariants
//!
//! - Deterministic: one thread, paused time, injected randomness and the deterministic arrival
//!   stream give the same observations on every run (the tallies are sums and maxima, so the
//!   order in which finished invocations are collected does not matter).
//! - `shed + completed + failed + cancelled == arrivals`: every spawned invocation is joined.
//! - No principal or workspace ID reaches the observations or an error.
//!
//! # Differences from the controller target
//!
//! The attempt deadline is the evaluator's (`now + timeoutMs` at the start of each try, which
//! is REFERENCE §7's `now + 2000 + serviceMs`); it also bounds the fake call, which the
//! controller target does not cut, but a call admitted within the 2000 ms queue dwell always
//! ends by it. Events at one virtual instant run in tokio's task order rather than the
//! controller target's (instant, class, sequence) order, so counts may differ slightly from the
//! controller target's over the same prefix.

mod adapter;
mod artifacts;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use turnstile_admission::{Decision, Estimate, Reason, Registry};
use turnstile_decision::{
    evaluate, AdapterSet, AdmissionDriver, AdmissionError, Clock, EstimateFn, EvaluationRequest,
    RandomFn, RulesetResult, RulesetStatus, SchedulerPolicy, SchedulerRun, ScopeLimits,
};

use crate::arrivals::{Arrival, ArrivalStream};
use crate::manifest::{Manifest, PrincipalClass};
use crate::observations::{ratio, Observations};

pub use adapter::LoadAdapter;
pub use artifacts::{LoadArtifacts, Undigestable};

const WORKSPACE: &str = "load-harness";

/// Why the evaluator target could not produce observations.
#[derive(Debug, thiserror::Error)]
pub enum EvaluatorTargetError {
    /// The paused runtime could not be built.
    #[error("cannot build the paused tokio runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// The manifest profile was refused by the registry.
    #[error("the manifest profile was refused: {0}")]
    Profile(#[from] AdmissionError),
    /// The load artifacts cannot be digested.
    #[error(transparent)]
    Artifacts(#[from] Undigestable),
    /// An arrival names a principal the manifest does not declare.
    #[error("an arrival names an undeclared principal")]
    UnknownPrincipal,
    /// An invocation was refused before any call (the harness built an invalid request).
    #[error("an invocation was refused before any call: {0}")]
    Refused(String),
    /// An invocation task panicked or was aborted.
    #[error("an invocation task did not finish: {0}")]
    Task(String),
}

/// Runs the evaluator target over the first `sample_seconds` of the manifest's stream.
/// `progress` receives the virtual instant reached (ms) at every arrival.
pub fn run_evaluator(
    manifest: &Manifest,
    sample_seconds: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<Observations, EvaluatorTargetError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    runtime.block_on(run_paused(manifest, sample_seconds, progress))
}

/// How one arrival ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Completed,
    Failed,
    Shed(Reason),
    Cancelled { latency_ms: u64 },
}

/// What the tally needs from one finished invocation.
#[derive(Debug, Clone, Copy)]
struct Settled {
    class: PrincipalClass,
    ending: Ending,
    attempts: u64,
    admitted: bool,
    max_queue_delay_ms: u64,
}

#[derive(Default)]
struct ClassCounts {
    arrivals: u64,
    admitted: u64,
}

#[derive(Default)]
struct Tally {
    observations: Observations,
    quiet: ClassCounts,
    noisy: ClassCounts,
}

impl Tally {
    fn add(&mut self, settled: Settled) {
        let class = match settled.class {
            PrincipalClass::Quiet => &mut self.quiet,
            PrincipalClass::Noisy => &mut self.noisy,
        };
        class.arrivals += 1;
        class.admitted += u64::from(settled.admitted);
        let o = &mut self.observations;
        o.arrivals += 1;
        o.attempts += settled.attempts;
        o.maximum_eligible_lane_wait_ms = o
            .maximum_eligible_lane_wait_ms
            .max(settled.max_queue_delay_ms);
        match settled.ending {
            Ending::Completed => o.completed += 1,
            Ending::Failed => o.failed += 1,
            Ending::Shed(reason) => {
                o.shed += 1;
                *o.shed_reasons
                    .entry(reason.as_str().to_owned())
                    .or_default() += 1;
            }
            Ending::Cancelled { latency_ms } => {
                o.cancelled += 1;
                o.maximum_cancellation_latency_ms =
                    o.maximum_cancellation_latency_ms.max(latency_ms);
            }
        }
    }

    fn finish(mut self, peaks: (u64, u64), virtual_duration_ms: u64) -> Observations {
        let o = &mut self.observations;
        (o.maximum_active_calls, o.maximum_queued_calls) = peaks;
        o.retry_amplification_ratio = ratio(o.attempts, o.arrivals);
        o.quiet_principal_admission_ratio = ratio(self.quiet.admitted, self.quiet.arrivals);
        o.noisy_principal_admission_ratio = ratio(self.noisy.admitted, self.noisy.arrivals);
        o.virtual_duration_ms = virtual_duration_ms;
        self.observations
    }
}

/// Everything shared by the invocations of a run.
struct Shared {
    artifacts: LoadArtifacts,
    driver: AdmissionDriver,
    /// The scheduler policy of each principal (by principal id).
    policies: HashMap<String, (SchedulerPolicy, PrincipalClass)>,
    /// Provider ids as shared strings (one allocation per provider, not per arrival).
    providers: HashMap<String, Arc<str>>,
    random: RandomFn,
    input: Value,
}

impl Shared {
    fn new(manifest: &Manifest, driver: AdmissionDriver) -> Result<Self, EvaluatorTargetError> {
        let policies = manifest
            .principals
            .iter()
            .map(|principal| {
                let policy = SchedulerPolicy {
                    enabled: true,
                    profile_version: manifest.profile_version.clone(),
                    caller_concurrency: None,
                    graph_concurrency: None,
                    workspace: ScopeLimits {
                        id: WORKSPACE.to_owned(),
                        limits: manifest.workspace.clone(),
                    },
                    principal: ScopeLimits {
                        id: principal.id.clone(),
                        limits: principal.limits.clone(),
                    },
                    providers: manifest.providers.clone(),
                };
                (principal.id.clone(), (policy, principal.class))
            })
            .collect();
        let providers = manifest
            .providers
            .keys()
            .map(|id| (id.clone(), Arc::from(id.as_str())))
            .collect();
        Ok(Shared {
            artifacts: LoadArtifacts::new(&manifest.arrival_model)?,
            driver,
            policies,
            providers,
            random: Arc::new(|| 0.5),
            input: json!({}),
        })
    }

    /// The invocation of one arrival, and its principal class.
    fn request(
        &self,
        arrival: &Arrival,
        signal: CancellationToken,
    ) -> Result<(EvaluationRequest, PrincipalClass), EvaluatorTargetError> {
        let (policy, class) = self
            .policies
            .get(&arrival.principal_id)
            .ok_or(EvaluatorTargetError::UnknownPrincipal)?;
        let provider = self
            .providers
            .get(&arrival.provider_id)
            .cloned()
            .unwrap_or_else(|| Arc::from(arrival.provider_id.as_str()));
        let adapters = AdapterSet::new().with(Arc::new(LoadAdapter::new(
            provider,
            arrival.service_ms,
            arrival.fails_first_attempt,
        )));
        let tokens = arrival.tokens;
        let estimate: EstimateFn = Arc::new(move |_, _, _| {
            Estimate::new()
                .tokens(tokens)
                .attempts(1)
                .batch_size(1)
                .items(1)
                .cost_usd(0.0)
                .retained_work(1)
        });
        let request = EvaluationRequest::new(
            self.artifacts.ruleset.clone(),
            self.artifacts.binding(arrival),
            vec![self.artifacts.definition.clone()],
            self.input.clone(),
            adapters,
        )
        .with_ids("load-evaluator", arrival.ordinal.to_string())
        .with_signal(signal)
        .with_random(Arc::clone(&self.random))
        .with_scheduler(SchedulerRun {
            policy: policy.clone(),
            driver: self.driver.clone().into(),
            estimate: Some(estimate),
            on_evidence: None,
        });
        Ok((request, *class))
    }
}

async fn run_paused(
    manifest: &Manifest,
    sample_seconds: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<Observations, EvaluatorTargetError> {
    let clock = Clock::starting_at(0);
    let driver = AdmissionDriver::with_clock(Registry::new(), clock);
    driver
        .register(WORKSPACE, &manifest.profile_version, manifest.profile())
        .await?;
    let shared = Shared::new(manifest, driver.clone())?;

    let mut tally = Tally::default();
    let mut running: JoinSet<Result<Settled, EvaluatorTargetError>> = JoinSet::new();
    for arrival in ArrivalStream::new(manifest, sample_seconds) {
        clock.sleep_until(arrival.at_ms).await;
        progress(arrival.at_ms);
        while let Some(done) = running.try_join_next() {
            tally.add(joined(done)?);
        }
        let signal = CancellationToken::new();
        let (request, class) = shared.request(&arrival, signal.clone())?;
        running.spawn(invoke(request, signal, clock, arrival.cancel_at_ms, class));
    }
    while let Some(done) = running.join_next().await {
        tally.add(joined(done)?);
    }
    let peaks = driver.peak_totals(WORKSPACE).await.unwrap_or((0, 0));
    let virtual_duration_ms = clock.now_ms().max(sample_seconds * 1000);
    Ok(tally.finish(peaks, virtual_duration_ms))
}

fn joined(
    done: Result<Result<Settled, EvaluatorTargetError>, tokio::task::JoinError>,
) -> Result<Settled, EvaluatorTargetError> {
    done.map_err(|e| EvaluatorTargetError::Task(e.to_string()))?
}

/// Runs one invocation, firing its caller signal at `cancel_at_ms`.
async fn invoke(
    request: EvaluationRequest,
    signal: CancellationToken,
    clock: Clock,
    cancel_at_ms: Option<u64>,
    class: PrincipalClass,
) -> Result<Settled, EvaluatorTargetError> {
    let mut evaluation = std::pin::pin!(evaluate(request));
    let result = match cancel_at_ms {
        None => evaluation.await,
        Some(at) => {
            tokio::select! {
                biased;
                result = &mut evaluation => result,
                () = clock.sleep_until(at) => {
                    signal.cancel();
                    evaluation.await
                }
            }
        }
    };
    settle(&result, class, cancel_at_ms, clock.now_ms())
}

/// Classifies a finished invocation.
fn settle(
    result: &RulesetResult,
    class: PrincipalClass,
    cancel_at_ms: Option<u64>,
    now_ms: u64,
) -> Result<Settled, EvaluatorTargetError> {
    let spec = &result.spec;
    let Some((_, evaluation)) = spec.evaluations.0.first() else {
        return Err(EvaluatorTargetError::Refused(format!(
            "{:?}: {}",
            spec.reason,
            spec.detail.as_deref().unwrap_or("no detail")
        )));
    };
    let attempts = &evaluation.spec.attempts;
    let admitted: Vec<u64> = attempts
        .iter()
        .filter_map(|a| a.admission.as_ref())
        .filter(|e| e.decision == Decision::Admit)
        .map(|e| e.queue_delay_ms)
        .collect();
    let rejection = attempts
        .last()
        .and_then(|a| a.admission.as_ref())
        .filter(|e| e.decision == Decision::Reject)
        .map(|e| e.reason);
    let cancelled = || Ending::Cancelled {
        latency_ms: cancel_at_ms.map_or(0, |at| now_ms.saturating_sub(at)),
    };
    let ending = if spec.status == RulesetStatus::Cancelled {
        cancelled()
    } else if evaluation.spec.accepted() {
        Ending::Completed
    } else {
        match rejection {
            Some(Reason::Cancelled) => cancelled(),
            Some(reason) => Ending::Shed(reason),
            None => Ending::Failed,
        }
    };
    Ok(Settled {
        class,
        ending,
        attempts: attempts.len() as u64,
        admitted: !admitted.is_empty(),
        max_queue_delay_ms: admitted.into_iter().max().unwrap_or(0),
    })
}
