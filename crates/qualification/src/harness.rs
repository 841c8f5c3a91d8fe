//! The `admission-controller` target: every arrival goes straight through the registry-owned
//! sans-IO controller on virtual time, for the whole window.
//!
//! # Event loop
//!
//! Events sit in a min-heap ordered by (instant, sequence): arrivals at `atMs`, cancellations at
//! `cancelAtMs`, fake provider calls ending `serviceMs` after admission, and retries
//! `retryBackoffMs` after a failed first attempt. The loop always jumps to the earlier of the
//! next event and the controller's `poll_timeout()`, so nothing is polled and the run is exact.
//!
//! # Per arrival (REFERENCE §7)
//!
//! Each attempt acquires with `{tokens, attempts: 1, batchSize: 1, items: 1, costUsd: 0,
//! retainedWork: 1}` and deadline `now + 2000 + serviceMs` (or `now + deadlineMs` when the
//! principal sets it). A principal with `actualTokens` releases its calls with that usage. A first attempt that fails releases
//! with failure and retries at most `maxRetries` times after `retryBackoffMs`. A rejection is
//! `shed` (or `cancelled` when its reason is `cancelled`). A cancellation cancels a queued
//! attempt, aborts an active call (released with no outcome) or a pending retry. Every arrival
//! ends with `releaseBudget`.
//!
//! [`run_admission_controller_traced`] also returns how every arrival ended
//! ([`ArrivalOutcome`]), for the per-request comparison with the reference's rules
//! (`examples/shed_decomposition/`, run by `tests/shed_decomposition.rs`); the plain run keeps
//! nothing per finished arrival.
//!
//! [`run`] takes [`RunOptions`]: the fair-share tally ([`crate::fair_share`], on for a
//! manifest that shapes the order), the core's deadline-aware refusals (off for run A of the
//! [`crate::deadline_ab`] comparison), the attempts run A watches, and a cancellation delay (0
//! in every record's run: a cancellation is handled at the instant it is requested; a test
//! sets it to show that `maximumCancellationLatencyMs` can fail). Every run lists the attempts
//! it saw refused `deadline-unreachable`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::iter::Peekable;

use rustc_hash::FxHashMap;
use turnstile_admission::{
    Acquired, ActualUsage, AdmissionRequest, Counts, Estimate, LeaseId, Outcome, Reason, Registry,
    RegistryError, WaiterId,
};

use crate::arrivals::Arrival;
use crate::deadline_ab::{AttemptKey, RefusalWatch};
use crate::fair_share::FairShareTally;
use crate::manifest::{Manifest, ManifestPrincipal, PrincipalClass};
use crate::observations::{ratio, Observations};

const WORKSPACE: &str = "load-harness";

/// Events between two progress reports.
const PROGRESS_EVERY: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Cancel(u64),
    CallEnds { arrival: u64, lease: LeaseId },
    Retry(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued(WaiterId),
    Calling(LeaseId),
    BackingOff,
}

/// How an arrival ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Completed,
    Failed,
    Shed,
    Cancelled,
}

/// How one arrival ended, for per-request comparisons. Carries the principal's class, never
/// its ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrivalOutcome {
    pub ordinal: u64,
    pub at_ms: u64,
    /// The principal's position in the manifest: an anonymous ordinal, never its ID.
    pub principal_index: usize,
    pub principal_class: PrincipalClass,
    pub provider_id: String,
    pub tokens: u64,
    pub ending: Ending,
    /// The admission reason of a shed or cancelled arrival's last attempt (none for a call
    /// cancelled while running or backing off).
    pub reason: Option<Reason>,
    /// At least one attempt was admitted.
    pub admitted: bool,
    pub attempts: u32,
    pub settled_at_ms: u64,
}

/// An arrival in flight; finished arrivals are dropped, so memory follows concurrency, not the
/// window.
struct Live {
    arrival: Arrival,
    phase: Phase,
    attempts: u32,
    /// The deadline of the current attempt.
    deadline: u64,
    admitted_once: bool,
    reason: Option<Reason>,
}

#[derive(Default)]
struct ClassCounts {
    arrivals: u64,
    admitted: u64,
}

/// How a run is set up beyond the manifest.
#[derive(Debug)]
pub struct RunOptions {
    /// The core's deadline-aware refusals (`Registry::set_deadline_refusals`); on by default.
    pub deadline_refusals: bool,
    /// Keep the fair-share tally (`observations.fairShare`).
    pub fair_share: bool,
    /// Keep how every arrival ended.
    pub trace: bool,
    /// Keep the workspace's totals at the end of every virtual second.
    pub sample: bool,
    /// The attempts another run refused, to see whether this one admits them in time.
    pub watch: Option<RefusalWatch>,
    /// How long after `cancelAtMs` a cancellation reaches the controller (ms); 0 for records.
    /// The observed cancellation latency is that delay for every arrival still live then.
    pub cancel_delay_ms: u64,
}

impl RunOptions {
    /// The record's run of `manifest`: refusals on, the tally when the manifest shapes the
    /// order, nothing kept per arrival.
    pub fn new(manifest: &Manifest) -> Self {
        RunOptions {
            deadline_refusals: true,
            fair_share: manifest.shapes_order(),
            trace: false,
            sample: false,
            watch: None,
            cancel_delay_ms: 0,
        }
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct Run {
    pub observations: Observations,
    /// How every arrival ended, in settling order (traced runs only).
    pub outcomes: Vec<ArrivalOutcome>,
    /// `samples[s]` is the workspace's totals at `(s + 1) * 1000` ms, before the events of that
    /// instant (sampled runs only).
    pub samples: Vec<Counts>,
    /// The attempts refused `deadline-unreachable`, in refusal order.
    pub deadline_refused: Vec<AttemptKey>,
    /// The watch of [`RunOptions::watch`], with what this run saw.
    pub watch: Option<RefusalWatch>,
}

/// Runs the admission-controller target over `arrivals` (in `atMs` order, already cut to the
/// window) as `options` say. `progress` is called now and then with the virtual instant
/// reached (ms).
pub fn run(
    manifest: &Manifest,
    arrivals: impl Iterator<Item = Arrival>,
    window_ms: u64,
    options: RunOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<Run, RegistryError> {
    let mut harness = Harness::new(manifest, arrivals.peekable())?;
    harness
        .registry
        .set_deadline_refusals(options.deadline_refusals);
    harness.outcomes = options.trace.then(Vec::new);
    harness.samples = options.sample.then(Vec::new);
    harness.fair_share = options.fair_share.then(|| FairShareTally::new(manifest));
    harness.watch = options.watch;
    harness.cancel_delay_ms = options.cancel_delay_ms;
    harness.run(window_ms, progress)
}

/// The record's run of the admission-controller target ([`RunOptions::new`]), observations
/// only.
pub fn run_admission_controller(
    manifest: &Manifest,
    arrivals: impl Iterator<Item = Arrival>,
    window_ms: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<Observations, RegistryError> {
    let options = RunOptions::new(manifest);
    Ok(run(manifest, arrivals, window_ms, options, progress)?.observations)
}

/// [`run_admission_controller`], also returning how every arrival ended, in settling order.
pub fn run_admission_controller_traced(
    manifest: &Manifest,
    arrivals: impl Iterator<Item = Arrival>,
    window_ms: u64,
) -> Result<(Observations, Vec<ArrivalOutcome>), RegistryError> {
    let options = RunOptions {
        trace: true,
        ..RunOptions::new(manifest)
    };
    let run = run(manifest, arrivals, window_ms, options, &mut |_| {})?;
    Ok((run.observations, run.outcomes))
}

struct Harness<'a, I: Iterator<Item = Arrival>> {
    manifest: &'a Manifest,
    arrivals: Peekable<I>,
    registry: Registry,
    /// (instant, class, rank): class 0 orders cancellations with the arrivals of the same
    /// instant by ordinal (arrival 2·o, its cancellation 2·o + 1), as if both had been scheduled
    /// up front; class 1 is everything scheduled while running, in scheduling order.
    events: BinaryHeap<Reverse<(u64, u8, u64, Event)>>,
    sequence: u64,
    live: FxHashMap<u64, Live>,
    waiting: FxHashMap<WaiterId, u64>,
    quiet: ClassCounts,
    noisy: ClassCounts,
    observations: Observations,
    now: u64,
    /// Per-arrival endings, kept only by a traced run.
    outcomes: Option<Vec<ArrivalOutcome>>,
    /// Totals at the end of every virtual second, kept only by a sampled run.
    samples: Option<Vec<Counts>>,
    fair_share: Option<FairShareTally>,
    watch: Option<RefusalWatch>,
    deadline_refused: Vec<AttemptKey>,
    cancel_delay_ms: u64,
}

impl<'a, I: Iterator<Item = Arrival>> Harness<'a, I> {
    fn new(manifest: &'a Manifest, arrivals: Peekable<I>) -> Result<Self, RegistryError> {
        let mut registry = Registry::new();
        registry.register(WORKSPACE, &manifest.profile_version, manifest.profile(), 0)?;
        Ok(Harness {
            manifest,
            arrivals,
            registry,
            events: BinaryHeap::new(),
            sequence: 0,
            live: FxHashMap::default(),
            waiting: FxHashMap::default(),
            quiet: ClassCounts::default(),
            noisy: ClassCounts::default(),
            observations: Observations::default(),
            now: 0,
            outcomes: None,
            samples: None,
            fair_share: None,
            watch: None,
            deadline_refused: Vec::new(),
            cancel_delay_ms: 0,
        })
    }

    fn schedule(&mut self, at: u64, event: Event) {
        let (class, rank) = match event {
            Event::Cancel(ordinal) => (0, 2 * ordinal + 1),
            _ => {
                self.sequence += 1;
                (1, self.sequence)
            }
        };
        self.events.push(Reverse((at, class, rank, event)));
    }

    /// The next thing due at or before `now`: an arrival or an event, whichever orders first.
    fn next_due(&mut self) -> Option<Result<Arrival, Event>> {
        let arrival_key = self
            .arrivals
            .peek()
            .filter(|a| a.at_ms <= self.now)
            .map(|a| (a.at_ms, 0u8, 2 * a.ordinal));
        let event_key = self
            .events
            .peek()
            .filter(|Reverse((at, ..))| *at <= self.now)
            .map(|Reverse((at, class, rank, _))| (*at, *class, *rank));
        match (arrival_key, event_key) {
            (Some(a), Some(e)) if a < e => self.arrivals.next().map(Ok),
            (Some(_), None) => self.arrivals.next().map(Ok),
            (_, Some(_)) => self.events.pop().map(|Reverse((.., event))| Err(event)),
            (None, None) => None,
        }
    }

    fn principal(&self, index: usize) -> Option<&'a ManifestPrincipal> {
        self.manifest.principals.get(index)
    }

    fn run(mut self, window_ms: u64, progress: &mut dyn FnMut(u64)) -> Result<Run, RegistryError> {
        let mut steps = 0u64;
        let mut next_sample = 1000u64;
        loop {
            steps += 1;
            if steps.is_multiple_of(PROGRESS_EVERY) {
                progress(self.now);
            }
            let next_arrival = self.arrivals.peek().map(|a| a.at_ms);
            let next_event = self.events.peek().map(|Reverse((at, ..))| *at);
            let next_timer = self.registry.poll_timeout();
            let Some(at) = [next_arrival, next_event, next_timer]
                .into_iter()
                .flatten()
                .min()
            else {
                break;
            };
            if let Some(samples) = self.samples.as_mut() {
                while next_sample <= at && next_sample <= window_ms {
                    samples.push(self.registry.totals(WORKSPACE).unwrap_or_default());
                    next_sample += 1000;
                }
            }
            self.now = self.now.max(at);
            if next_timer.is_some_and(|t| t <= self.now) {
                self.registry.handle_timeout(WORKSPACE, self.now)?;
                self.drain_resolutions()?;
            }
            while let Some(due) = self.next_due() {
                match due {
                    Ok(arrival) => self.arrive(arrival)?,
                    Err(event) => self.handle(event)?,
                }
            }
        }
        let observations = &mut self.observations;
        observations.retry_amplification_ratio =
            ratio(observations.attempts, observations.arrivals);
        observations.quiet_principal_admission_ratio =
            ratio(self.quiet.admitted, self.quiet.arrivals);
        observations.noisy_principal_admission_ratio =
            ratio(self.noisy.admitted, self.noisy.arrivals);
        observations.virtual_duration_ms = self.now.max(window_ms);
        if let Some(samples) = self.samples.as_mut() {
            while next_sample <= window_ms {
                samples.push(self.registry.totals(WORKSPACE).unwrap_or_default());
                next_sample += 1000;
            }
        }
        self.observations.fair_share = self.fair_share.map(FairShareTally::finish);
        Ok(Run {
            observations: self.observations,
            outcomes: self.outcomes.unwrap_or_default(),
            samples: self.samples.unwrap_or_default(),
            deadline_refused: self.deadline_refused,
            watch: self.watch,
        })
    }

    fn class(&mut self, class: PrincipalClass) -> &mut ClassCounts {
        match class {
            PrincipalClass::Quiet => &mut self.quiet,
            PrincipalClass::Noisy => &mut self.noisy,
        }
    }

    fn arrive(&mut self, arrival: Arrival) -> Result<(), RegistryError> {
        self.observations.arrivals += 1;
        self.class(arrival.principal_class).arrivals += 1;
        let ordinal = arrival.ordinal;
        if let Some(at) = arrival.cancel_at_ms {
            self.schedule(
                at.saturating_add(self.cancel_delay_ms),
                Event::Cancel(ordinal),
            );
        }
        self.live.insert(
            ordinal,
            Live {
                arrival,
                phase: Phase::BackingOff,
                attempts: 0,
                deadline: 0,
                admitted_once: false,
                reason: None,
            },
        );
        self.attempt(ordinal)
    }

    fn handle(&mut self, event: Event) -> Result<(), RegistryError> {
        match event {
            Event::Retry(ordinal) => {
                if self
                    .live
                    .get(&ordinal)
                    .is_some_and(|l| l.phase == Phase::BackingOff)
                {
                    self.attempt(ordinal)?;
                }
            }
            Event::Cancel(ordinal) => self.cancel(ordinal)?,
            Event::CallEnds { arrival, lease } => {
                let Some(live) = self.live.get(&arrival) else {
                    return Ok(()); // already finished (cancelled)
                };
                if live.phase != Phase::Calling(lease) {
                    return Ok(()); // aborted by a cancellation
                }
                let fails = live.arrival.fails_first_attempt && live.attempts == 1;
                let may_retry = live.attempts <= self.manifest.arrival_model.max_retries;
                let usage = self
                    .principal(live.arrival.principal_index)
                    .and_then(|p| p.actual_tokens)
                    .map(|tokens| ActualUsage::none().tokens(tokens));
                if fails {
                    self.finish_call(lease, Outcome::Failure, usage)?;
                    if may_retry {
                        if let Some(live) = self.live.get_mut(&arrival) {
                            live.phase = Phase::BackingOff;
                        }
                        let at = self.now + self.manifest.arrival_model.retry_backoff_ms;
                        self.schedule(at, Event::Retry(arrival));
                    } else {
                        self.finish(arrival, Ending::Failed)?;
                    }
                } else {
                    self.finish_call(lease, Outcome::Success, usage)?;
                    self.finish(arrival, Ending::Completed)?;
                }
                self.drain_resolutions()?;
            }
        }
        Ok(())
    }

    /// Releases a call that ran to its end, with what it used when the principal reports it.
    fn finish_call(
        &mut self,
        lease: LeaseId,
        outcome: Outcome,
        usage: Option<ActualUsage>,
    ) -> Result<(), RegistryError> {
        match usage {
            Some(usage) => self
                .registry
                .release_with_usage(WORKSPACE, lease, outcome, usage, self.now)?,
            None => self.registry.release(WORKSPACE, lease, outcome, self.now)?,
        };
        Ok(())
    }

    fn attempt(&mut self, ordinal: u64) -> Result<(), RegistryError> {
        let now = self.now;
        let Some(live) = self.live.get_mut(&ordinal) else {
            return Ok(());
        };
        live.attempts += 1;
        let arrival = &live.arrival;
        live.deadline = arrival.attempt_deadline(now);
        let request = AdmissionRequest::new(
            arrival.principal_id.as_str(),
            arrival.provider_id.as_str(),
            ordinal.to_string(),
        )
        .with_estimate(
            Estimate::new()
                .tokens(arrival.tokens)
                .attempts(1)
                .batch_size(1)
                .items(1)
                .cost_usd(0.0)
                .retained_work(1),
        )
        .with_deadline(live.deadline);
        self.observations.attempts += 1;
        match self.registry.acquire(WORKSPACE, request, self.now)? {
            Acquired::Admitted(lease) => self.start_call(ordinal, lease.id, 0),
            Acquired::Queued { waiter, .. } => {
                if let Some(live) = self.live.get_mut(&ordinal) {
                    live.phase = Phase::Queued(waiter);
                    if let Some(tally) = self.fair_share.as_mut() {
                        let arrival = &live.arrival;
                        tally.enqueued(&arrival.provider_id, arrival.principal_index);
                    }
                }
                self.waiting.insert(waiter, ordinal);
            }
            Acquired::Rejected(rejection) => self.rejected(ordinal, rejection.reason)?,
        }
        self.drain_resolutions()
    }

    fn start_call(&mut self, ordinal: u64, lease: LeaseId, queue_delay_ms: u64) {
        let manifest = self.manifest;
        let Some(live) = self.live.get_mut(&ordinal) else {
            return;
        };
        let was_queued = matches!(live.phase, Phase::Queued(_));
        live.phase = Phase::Calling(lease);
        live.admitted_once = true;
        let arrival = &live.arrival;
        if let Some(tally) = self.fair_share.as_mut() {
            let tokens = manifest
                .principals
                .get(arrival.principal_index)
                .map_or(arrival.tokens, |p| p.actual_tokens_of(arrival.tokens));
            let (provider, principal) = (&arrival.provider_id, arrival.principal_index);
            tally.granted(provider, principal, tokens, queue_delay_ms);
            if was_queued {
                tally.dequeued(provider, principal);
            }
        }
        if let Some(watch) = self.watch.as_mut() {
            watch.admitted((ordinal, live.attempts), self.now, live.deadline);
        }
        let at = self.now + live.arrival.service_ms;
        let observations = &mut self.observations;
        observations.maximum_eligible_lane_wait_ms = observations
            .maximum_eligible_lane_wait_ms
            .max(queue_delay_ms);
        self.schedule(
            at,
            Event::CallEnds {
                arrival: ordinal,
                lease,
            },
        );
    }

    fn rejected(&mut self, ordinal: u64, reason: Reason) -> Result<(), RegistryError> {
        if let Some(live) = self.live.get_mut(&ordinal) {
            live.reason = Some(reason);
            if let (Some(tally), Phase::Queued(_)) = (self.fair_share.as_mut(), live.phase) {
                tally.dequeued(&live.arrival.provider_id, live.arrival.principal_index);
            }
            if reason == Reason::DeadlineUnreachable {
                self.deadline_refused.push((ordinal, live.attempts));
            }
        }
        if reason == Reason::Cancelled {
            self.finish(ordinal, Ending::Cancelled)
        } else {
            *self
                .observations
                .shed_reasons
                .entry(reason.as_str().to_owned())
                .or_default() += 1;
            self.finish(ordinal, Ending::Shed)
        }
    }

    fn cancel(&mut self, ordinal: u64) -> Result<(), RegistryError> {
        let Some(live) = self.live.get(&ordinal) else {
            return Ok(()); // already finished
        };
        let requested_at = live.arrival.cancel_at_ms.unwrap_or(self.now);
        match live.phase {
            Phase::Queued(waiter) => {
                self.waiting.remove(&waiter);
                self.registry.cancel(WORKSPACE, waiter, self.now)?;
                if let Some(tally) = self.fair_share.as_mut() {
                    tally.dequeued(&live.arrival.provider_id, live.arrival.principal_index);
                }
            }
            Phase::Calling(lease) => {
                self.registry
                    .release(WORKSPACE, lease, Outcome::None, self.now)?;
            }
            Phase::BackingOff => {}
        }
        self.finish(ordinal, Ending::Cancelled)?;
        // Cancellation takes effect at the instant it is requested on virtual time.
        let latency = self.now.saturating_sub(requested_at);
        self.observations.maximum_cancellation_latency_ms = self
            .observations
            .maximum_cancellation_latency_ms
            .max(latency);
        self.drain_resolutions()
    }

    fn finish(&mut self, ordinal: u64, ending: Ending) -> Result<(), RegistryError> {
        let Some(live) = self.live.remove(&ordinal) else {
            return Ok(());
        };
        if live.admitted_once {
            self.class(live.arrival.principal_class).admitted += 1;
        }
        if let Some(outcomes) = &mut self.outcomes {
            outcomes.push(ArrivalOutcome {
                ordinal,
                at_ms: live.arrival.at_ms,
                principal_index: live.arrival.principal_index,
                principal_class: live.arrival.principal_class,
                provider_id: live.arrival.provider_id.clone(),
                tokens: live.arrival.tokens,
                ending,
                reason: live.reason,
                admitted: live.admitted_once,
                attempts: live.attempts,
                settled_at_ms: self.now,
            });
        }
        let observations = &mut self.observations;
        match ending {
            Ending::Completed => observations.completed += 1,
            Ending::Failed => observations.failed += 1,
            Ending::Shed => observations.shed += 1,
            Ending::Cancelled => observations.cancelled += 1,
        }
        self.registry
            .release_budget(WORKSPACE, &ordinal.to_string(), self.now)?;
        Ok(())
    }

    fn drain_resolutions(&mut self) -> Result<(), RegistryError> {
        while let Some(resolution) = self.registry.poll_resolution(WORKSPACE) {
            let Some(ordinal) = self.waiting.remove(&resolution.waiter) else {
                continue;
            };
            match resolution.outcome {
                Ok(lease) => self.start_call(ordinal, lease.id, lease.evidence.queue_delay_ms),
                Err(rejection) => self.rejected(ordinal, rejection.reason)?,
            }
        }
        if let Some(Counts { active, queued }) = self.registry.totals(WORKSPACE) {
            let observations = &mut self.observations;
            observations.maximum_active_calls = observations.maximum_active_calls.max(active);
            observations.maximum_queued_calls = observations.maximum_queued_calls.max(queued);
        }
        Ok(())
    }
}
