//! The decision evaluator (EVALUATOR.md): validate, schedule, execute, compose.
//!
//! # Flow
//!
//! 1. [`plan`](crate::plan::plan) validates everything before any call, and
//!    [`verify_subagents`] checks every target's `subagent` pin against the worker its adapter
//!    reports (`digest-mismatch`, no call, no admission).
//! 2. With `scheduler.enabled`, the policy is registered with the shared admission registry
//!    (a conflicting revision is `invalid-definition`, no call).
//! 3. Aliases run in ruleset order through [`run_bounded_fair`]: concurrency 1, or with the
//!    scheduler enabled the minimum positive ceiling of binding, caller, graph, principal,
//!    workspace and every provider. Lanes are keyed by (first target's adapter, workspace,
//!    principal); the lane key never leaves the scheduler.
//! 4. Each alias runs its targets ([`crate::execution`]).
//! 5. Results are composed in canonical ruleset order.
//!
//! # Interruption
//!
//! One caller signal (a `CancellationToken`) and one total deadline (`now + totalTimeoutMs`)
//! govern the invocation. A fired signal makes the result `cancelled`; a passed total deadline
//! makes it `error` / `timeout`. A per-target timeout only ends its attempt.
//!
//! # Receipts
//!
//! With `receipts` (the spec's `receiptStore`), step 2 acquires the invocation's durable
//! `decision-receipt/v2` ([`crate::receipt`]): a non-owner gets its replay answer without any
//! call; the owner runs serially (concurrency 1, permit kept through backoff), writes the
//! pending slot before every dispatch, each evaluation as it finishes, and finally `composed`
//! → `completed` with the result. An uncertain dispatch ends the run (and the receipt) as
//! `execution-uncertain`. Without a store, scheduled runs give their permit back during backoff.
//!
//! # Admission evidence (`scheduler.onEvidence`)
//!
//! With the scheduler enabled and an [`EvidenceFn`], the host receives every admission decision
//! of every attempt as an [`AdmissionEvidence`]: once per admission request, at the instant the
//! decision is known — an admission before the adapter is called, a rejection before the attempt
//! is recorded — with exactly the evidence the attempt record carries in `admission`. Attempts
//! that never ask for admission (failed capability checks, interrupted runs, replays, runs without
//! the scheduler) produce nothing. The callback is write-only: it cannot change a result, and a
//! panic inside it is caught and ignored. It receives no principal or workspace ID.
//!
//! # Telemetry
//!
//! With `telemetry`, every admission request records a `decision.admit` span and the admission
//! counters ([`crate::telemetry`]). Telemetry is write-only: it never changes a result.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use turnstile_admission::{Estimate, Evidence, Millis};

use crate::adapter::AdapterSet;
use crate::binding::Target;
use crate::clock::Clock;
use crate::compose::compose;
use crate::driver::AdmissionDriver;
use crate::execution::{run_alias, unstarted, Context, Stop};
use crate::plan::{plan, verify_subagents, Plan};
use crate::policy::SchedulerPolicy;
use crate::reason::{ResultReason, RulesetStatus};
use crate::receipt::{begin, fingerprint, Begin, ReceiptRun, ReceiptWriter, Replay};
use crate::result::{Evaluations, ResultNaming, RulesetResult, RulesetResultSpec};
use crate::scheduler::{run_bounded_fair, FairOptions, Scheduled, WorkItem};
use crate::telemetry::Telemetry;

/// The injected source of randomness: values in [0, 1).
pub type RandomFn = Arc<dyn Fn() -> f64 + Send + Sync>;

/// The host's estimate of one attempt: `(alias, target, projection) → estimate`.
pub type EstimateFn = Arc<dyn Fn(&str, &Target, &Value) -> Estimate + Send + Sync>;

/// One admission decision of one attempt, as `scheduler.onEvidence` receives it.
///
/// The provider lane (`adapter`) and the alias are artifact names, not tenant identities; the
/// evidence never carries an ID (REFERENCE §5).
#[derive(Debug, Clone, Copy)]
pub struct AdmissionEvidence<'a> {
    /// The alias whose attempt asked for admission.
    pub alias: &'a str,
    /// The target's index within the alias's targets.
    pub target_index: usize,
    /// The provider lane (the target's adapter id).
    pub adapter: &'a str,
    /// The attempt's ordinal within its alias (from 1, across targets).
    pub ordinal: u32,
    /// The decision: `admit` or `reject`, with its reason and counts.
    pub evidence: &'a Evidence,
}

/// The host's `onEvidence` callback.
pub type EvidenceFn = Arc<dyn Fn(AdmissionEvidence<'_>) + Send + Sync>;

/// Admission for an evaluation: the policy and the shared driver it registers with.
#[derive(Clone)]
pub struct SchedulerRun {
    pub policy: SchedulerPolicy,
    pub driver: AdmissionDriver,
    pub estimate: Option<EstimateFn>,
    /// `onEvidence`: every admission decision of every attempt (see the module docs).
    pub on_evidence: Option<EvidenceFn>,
}

impl SchedulerRun {
    /// A run of `policy` on `driver`, without an estimate or an evidence callback.
    pub fn new(policy: SchedulerPolicy, driver: AdmissionDriver) -> Self {
        SchedulerRun {
            policy,
            driver,
            estimate: None,
            on_evidence: None,
        }
    }

    /// Sets the host's estimate of each attempt (`estimate(alias, target, input)`).
    pub fn with_estimate(mut self, estimate: EstimateFn) -> Self {
        self.estimate = Some(estimate);
        self
    }

    /// Sets the `onEvidence` callback.
    pub fn with_on_evidence(mut self, on_evidence: EvidenceFn) -> Self {
        self.on_evidence = Some(on_evidence);
        self
    }

    /// Hands one decision to `onEvidence`, if any; a panicking callback is ignored.
    pub(crate) fn report(&self, event: AdmissionEvidence<'_>) {
        if let Some(on_evidence) = &self.on_evidence {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_evidence(event)));
        }
    }
}

impl std::fmt::Debug for SchedulerRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerRun")
            .field("enabled", &self.policy.enabled)
            .field("profile_version", &self.policy.profile_version)
            .field("estimate", &self.estimate.is_some())
            .field("on_evidence", &self.on_evidence.is_some())
            .finish_non_exhaustive()
    }
}

/// One evaluation request.
#[derive(Clone)]
pub struct EvaluationRequest {
    pub ruleset: Value,
    pub binding: Value,
    pub definitions: Vec<Value>,
    pub input: Value,
    pub run_id: String,
    /// The idempotency key; also the admission budget id.
    pub invocation_id: String,
    pub adapters: AdapterSet,
    pub signal: Option<CancellationToken>,
    pub random: Option<RandomFn>,
    pub scheduler: Option<SchedulerRun>,
    /// The clock for unscheduled runs (scheduled runs use the driver's).
    pub clock: Option<Clock>,
    pub naming: ResultNaming,
    /// The durable receipt store (`receiptStore`); makes the run serial and idempotent.
    pub receipts: Option<ReceiptRun>,
    /// Admission spans and metrics.
    pub telemetry: Option<Telemetry>,
}

impl std::fmt::Debug for EvaluationRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvaluationRequest")
            .field("run_id", &self.run_id)
            .field("invocation_id", &self.invocation_id)
            .field("adapters", &self.adapters)
            .field("scheduler", &self.scheduler)
            .field("receipts", &self.receipts)
            .finish_non_exhaustive()
    }
}

impl EvaluationRequest {
    pub fn new(
        ruleset: Value,
        binding: Value,
        definitions: Vec<Value>,
        input: Value,
        adapters: AdapterSet,
    ) -> Self {
        EvaluationRequest {
            ruleset,
            binding,
            definitions,
            input,
            run_id: "run".into(),
            invocation_id: "invocation".into(),
            adapters,
            signal: None,
            random: None,
            scheduler: None,
            clock: None,
            naming: ResultNaming::default(),
            receipts: None,
            telemetry: None,
        }
    }

    pub fn with_receipts(mut self, receipts: ReceiptRun) -> Self {
        self.receipts = Some(receipts);
        self
    }

    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    pub fn with_ids(mut self, run_id: impl Into<String>, invocation_id: impl Into<String>) -> Self {
        self.run_id = run_id.into();
        self.invocation_id = invocation_id.into();
        self
    }

    pub fn with_signal(mut self, signal: CancellationToken) -> Self {
        self.signal = Some(signal);
        self
    }

    pub fn with_random(mut self, random: RandomFn) -> Self {
        self.random = Some(random);
        self
    }

    pub fn with_scheduler(mut self, scheduler: SchedulerRun) -> Self {
        self.scheduler = Some(scheduler);
        self
    }

    pub fn with_naming(mut self, naming: ResultNaming) -> Self {
        self.naming = naming;
        self
    }
}

/// A deterministic default random source (splitmix64), seeded from the invocation id.
fn seeded_random(seed_text: &str) -> RandomFn {
    let seed = seed_text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let state = Mutex::new(seed);
    Arc::new(move || {
        let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// Evaluates a ruleset. Never fails: every failure is a typed result.
pub async fn evaluate(request: EvaluationRequest) -> RulesetResult {
    let naming = request.naming.clone();
    let error_result = |reason: ResultReason, ruleset, binding, detail: String| {
        naming.ruleset_result(RulesetResultSpec {
            ruleset,
            binding,
            run_id: request.run_id.clone(),
            invocation_id: request.invocation_id.clone(),
            status: RulesetStatus::Error,
            reason,
            outcome: Value::Null,
            matched_rules: Vec::new(),
            evaluations: Evaluations::default(),
            detail: Some(detail),
        })
    };

    let plan = match plan(
        &request.ruleset,
        &request.binding,
        &request.definitions,
        &request.input,
    ) {
        Ok(plan) => plan,
        Err(refused) => {
            return error_result(
                refused.error.reason(),
                refused.ruleset,
                refused.binding,
                refused.error.detail(),
            )
        }
    };
    let ruleset_pin = plan.ruleset.pin();
    let binding_pin = plan.binding.pin();
    if let Err(error) = verify_subagents(&plan, &request.adapters) {
        return error_result(
            error.reason(),
            Some(ruleset_pin),
            Some(binding_pin),
            error.detail(),
        );
    }

    let scheduler = request.scheduler.as_ref().filter(|s| s.policy.enabled);
    if let Some(run) = scheduler {
        if let Err(error) = run
            .driver
            .register(
                &run.policy.workspace.id,
                &run.policy.profile_version,
                run.policy.profile(),
            )
            .await
        {
            return error_result(
                ResultReason::InvalidDefinition,
                Some(ruleset_pin),
                Some(binding_pin),
                error.to_string(),
            );
        }
    }

    let clock = scheduler
        .map(|s| s.driver.clock())
        .or(request.clock)
        .unwrap_or_else(|| Clock::starting_at(0));
    let total_deadline: Millis = clock
        .now_ms()
        .saturating_add(plan.binding.spec().total_timeout_ms);
    let signal = request.signal.clone().unwrap_or_default();
    let random = request
        .random
        .clone()
        .unwrap_or_else(|| seeded_random(&request.invocation_id));

    // Step 2: the receipt.
    let writer: Option<Box<ReceiptWriter>> = match &request.receipts {
        None => None,
        Some(run) => {
            let fingerprint = fingerprint(
                &request.invocation_id,
                &request.input,
                &ruleset_pin,
                &binding_pin,
                &definition_pins(&plan),
            );
            let begun = match fingerprint {
                Ok(fingerprint) => {
                    begin(
                        run,
                        &request.invocation_id,
                        &fingerprint,
                        clock,
                        plan.binding.spec().total_timeout_ms,
                    )
                    .await
                }
                Err(error) => Err(turnstile_store::ReceiptError::Canonical(error)),
            };
            match begun {
                Ok(Begin::Owner(writer)) => Some(writer),
                Ok(Begin::Replay(replay)) => {
                    if let Some(run) = scheduler {
                        run.driver
                            .release_budget(&run.policy.workspace.id, &request.invocation_id)
                            .await;
                    }
                    return replayed(replay, &plan, |reason, detail| {
                        error_result(
                            reason,
                            Some(ruleset_pin.clone()),
                            Some(binding_pin.clone()),
                            detail,
                        )
                    });
                }
                Err(error) => {
                    return error_result(
                        ResultReason::ReceiptUnavailable,
                        Some(ruleset_pin),
                        Some(binding_pin),
                        error.to_string(),
                    )
                }
            }
        }
    };
    let serial = writer.is_some();
    let concurrency = match scheduler {
        Some(s) if !serial => s.policy.ceiling(plan.binding.spec().concurrency),
        _ => 1,
    };

    let context = Context {
        plan: &plan,
        ruleset_pin: ruleset_pin.clone(),
        binding_pin: binding_pin.clone(),
        run_id: &request.run_id,
        invocation_id: &request.invocation_id,
        adapters: &request.adapters,
        signal: signal.clone(),
        clock,
        total_deadline,
        max_attempts: plan.binding.spec().max_attempts,
        used_attempts: std::sync::atomic::AtomicU64::new(0),
        random,
        scheduler,
        suspend_backoff: scheduler.is_some() && !serial,
        stopped: Mutex::new(None),
        receipt: writer.as_deref(),
        telemetry: request.telemetry.as_ref(),
        naming: &naming,
    };

    let work: Vec<WorkItem<usize>> = plan
        .aliases
        .iter()
        .enumerate()
        .map(|(index, alias)| {
            let adapter = alias
                .binding
                .targets
                .first()
                .map_or("", |t| t.adapter.as_str());
            let lane = match scheduler {
                Some(run) => format!(
                    "{adapter}\u{1f}{}\u{1f}{}",
                    run.policy.workspace.id, run.policy.principal.id
                ),
                None => adapter.to_owned(),
            };
            WorkItem::new(index, lane)
        })
        .collect();
    let options = FairOptions {
        cancel: Some(signal.clone()),
        deadline: Some(clock.instant_at(total_deadline)),
    };
    let scheduled = run_bounded_fair(
        work,
        concurrency,
        |index, slot| run_alias(&context, index, slot),
        options,
    )
    .await;

    let mut evaluations = Vec::with_capacity(scheduled.len());
    for item in scheduled {
        let spec = match item {
            Scheduled::Completed(spec) => spec,
            Scheduled::Unstarted { value, cause } => {
                let stop = Stop::from(cause);
                context.note_stop(stop);
                unstarted(&context, value, stop)
            }
        };
        evaluations.push((spec.alias.clone(), naming.decision_result(spec)));
    }
    let evaluations = Evaluations(evaluations);

    if let Some(run) = scheduler {
        run.driver
            .release_budget(&run.policy.workspace.id, &request.invocation_id)
            .await;
    }

    let stopped = match context.stopped() {
        Some(stop @ (Stop::Uncertain | Stop::ReceiptFailed)) => Some(stop),
        _ if signal.is_cancelled() => Some(Stop::Cancelled),
        other => other,
    };
    let (status, reason, outcome, matched_rules, detail) = match stopped {
        Some(Stop::Cancelled) => (
            RulesetStatus::Cancelled,
            ResultReason::Cancelled,
            Value::Null,
            Vec::new(),
            None,
        ),
        Some(Stop::TotalDeadline) => (
            RulesetStatus::Error,
            ResultReason::Timeout,
            Value::Null,
            Vec::new(),
            None,
        ),
        Some(Stop::Uncertain) => (
            RulesetStatus::Error,
            ResultReason::ExecutionUncertain,
            Value::Null,
            Vec::new(),
            Some(UNCERTAIN_DETAIL.to_owned()),
        ),
        Some(Stop::ReceiptFailed) => (
            RulesetStatus::Error,
            ResultReason::ReceiptUnavailable,
            Value::Null,
            Vec::new(),
            Some("the receipt could not be written; nothing further was dispatched".to_owned()),
        ),
        None => {
            let composed = compose(
                plan.ruleset.spec(),
                &plan.output_schema,
                &request.input,
                &evaluations,
            );
            (
                composed.status,
                composed.reason,
                composed.outcome,
                composed.matched_rules,
                composed.detail,
            )
        }
    };
    let result = naming.ruleset_result(RulesetResultSpec {
        ruleset: Some(ruleset_pin),
        binding: Some(binding_pin),
        run_id: request.run_id.clone(),
        invocation_id: request.invocation_id.clone(),
        status,
        reason,
        outcome,
        matched_rules,
        evaluations,
        detail,
    });
    if let Some(writer) = &writer {
        match stopped {
            // Already terminal (or written as far as the store allowed).
            Some(Stop::Uncertain) => {
                let _ = writer.uncertain();
            }
            Some(Stop::ReceiptFailed) => {
                let _ = writer.fail();
            }
            _ => {
                if writer.finish(&result).is_err() {
                    let _ = writer.fail();
                }
            }
        }
    }
    result
}

const UNCERTAIN_DETAIL: &str =
    "a call of this invocation may have reached the provider; it is never dispatched again";

/// The definition pins in ruleset order (part of the fingerprint).
fn definition_pins(plan: &Plan) -> Vec<crate::artifact::Pin> {
    plan.aliases.iter().map(|a| a.definition.pin()).collect()
}

/// The result a non-owner gets.
fn replayed(
    replay: Replay,
    plan: &Plan,
    error_result: impl Fn(ResultReason, String) -> RulesetResult,
) -> RulesetResult {
    match replay {
        Replay::Mismatch => error_result(
            ResultReason::ReplayMismatch,
            "the invocation id was used with a different input or different pins".to_owned(),
        ),
        Replay::Uncertain => error_result(
            ResultReason::ExecutionUncertain,
            UNCERTAIN_DETAIL.to_owned(),
        ),
        Replay::Stored(value) => match serde_json::from_value::<RulesetResult>(value) {
            Ok(mut result) => {
                result
                    .spec
                    .evaluations
                    .reorder(plan.aliases.iter().map(|a| a.alias.as_str()));
                result
            }
            Err(_) => error_result(
                ResultReason::ReceiptUnavailable,
                "the stored result could not be read".to_owned(),
            ),
        },
    }
}
