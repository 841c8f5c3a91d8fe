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
//! retainedWork: 1}` and deadline `now + 2000 + serviceMs`. A first attempt that fails releases
//! with failure and retries at most `maxRetries` times after `retryBackoffMs`. A rejection is
//! `shed` (or `cancelled` when its reason is `cancelled`). A cancellation cancels a queued
//! attempt, aborts an active call (released with no outcome) or a pending retry. Every arrival
//! ends with `releaseBudget`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use turnstile_admission::{
    Acquired, AdmissionRequest, Estimate, LeaseId, Outcome, Reason, Registry, RegistryError,
    WaiterId,
};

use crate::arrivals::Arrival;
use crate::manifest::{Manifest, PrincipalClass};
use crate::observations::{ratio, Observations};

const WORKSPACE: &str = "load-harness";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    Cancel(usize),
    CallEnds { arrival: usize, lease: LeaseId },
    Retry(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NotArrived,
    Queued(WaiterId),
    Calling(LeaseId),
    BackingOff,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Completed,
    Failed,
    Shed,
    Cancelled,
}

struct ArrivalState {
    phase: Phase,
    attempts: u32,
    admitted_once: bool,
}

/// Runs the admission-controller target over `arrivals` (already cut to the window).
///
/// `progress` is called now and then with the virtual instant reached (ms).
pub fn run_admission_controller(
    manifest: &Manifest,
    arrivals: &[Arrival],
    window_ms: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<Observations, RegistryError> {
    Harness::new(manifest, arrivals)?.run(window_ms, progress)
}

/// Events between two progress reports.
const PROGRESS_EVERY: u64 = 4096;

struct Harness<'a> {
    manifest: &'a Manifest,
    arrivals: &'a [Arrival],
    registry: Registry,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    sequence: u64,
    states: Vec<ArrivalState>,
    waiting: BTreeMap<WaiterId, usize>,
    observations: Observations,
    now: u64,
}

impl<'a> Harness<'a> {
    fn new(manifest: &'a Manifest, arrivals: &'a [Arrival]) -> Result<Self, RegistryError> {
        let mut registry = Registry::new();
        registry.register(WORKSPACE, &manifest.profile_version, manifest.profile(), 0)?;
        let mut harness = Harness {
            manifest,
            arrivals,
            registry,
            events: BinaryHeap::with_capacity(arrivals.len() * 2),
            sequence: 0,
            states: arrivals
                .iter()
                .map(|_| ArrivalState {
                    phase: Phase::NotArrived,
                    attempts: 0,
                    admitted_once: false,
                })
                .collect(),
            waiting: BTreeMap::new(),
            observations: Observations {
                arrivals: arrivals.len() as u64,
                ..Observations::default()
            },
            now: 0,
        };
        for (index, arrival) in arrivals.iter().enumerate() {
            harness.schedule(arrival.at_ms, Event::Arrive(index));
            if let Some(at) = arrival.cancel_at_ms {
                harness.schedule(at, Event::Cancel(index));
            }
        }
        Ok(harness)
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.sequence += 1;
        self.events.push(Reverse((at, self.sequence, event)));
    }

    fn run(
        mut self,
        window_ms: u64,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Observations, RegistryError> {
        let mut steps = 0u64;
        loop {
            steps += 1;
            if steps % PROGRESS_EVERY == 0 {
                progress(self.now);
            }
            let next_event = self.events.peek().map(|Reverse((at, _, _))| *at);
            let next_timer = self.registry.poll_timeout();
            let at = match (next_event, next_timer) {
                (None, None) => break,
                (Some(e), Some(t)) => e.min(t),
                (e, t) => e.or(t).unwrap_or(self.now),
            };
            self.now = self.now.max(at);
            if next_timer.is_some_and(|t| t <= at) {
                self.registry.handle_timeout(WORKSPACE, self.now)?;
                self.drain_resolutions()?;
            }
            while let Some(Reverse((event_at, _, event))) = self.events.peek().copied() {
                if event_at > self.now {
                    break;
                }
                self.events.pop();
                self.handle(event)?;
            }
        }
        let observations = &mut self.observations;
        observations.retry_amplification_ratio =
            ratio(observations.attempts, observations.arrivals);
        let admitted = |class: PrincipalClass| {
            let of_class = self
                .arrivals
                .iter()
                .zip(&self.states)
                .filter(|(a, _)| a.principal_class == class);
            let total = of_class.clone().count() as u64;
            let admitted = of_class.filter(|(_, s)| s.admitted_once).count() as u64;
            ratio(admitted, total)
        };
        observations.quiet_principal_admission_ratio = admitted(PrincipalClass::Quiet);
        observations.noisy_principal_admission_ratio = admitted(PrincipalClass::Noisy);
        observations.virtual_duration_ms = self.now.max(window_ms);
        Ok(self.observations)
    }

    fn handle(&mut self, event: Event) -> Result<(), RegistryError> {
        match event {
            Event::Arrive(index) | Event::Retry(index) => {
                if matches!(
                    self.states[index].phase,
                    Phase::NotArrived | Phase::BackingOff
                ) {
                    self.attempt(index)?;
                }
            }
            Event::Cancel(index) => self.cancel(index)?,
            Event::CallEnds { arrival, lease } => {
                if self.states[arrival].phase != Phase::Calling(lease) {
                    return Ok(()); // aborted by a cancellation
                }
                let fails = self.arrivals[arrival].fails_first_attempt
                    && self.states[arrival].attempts == 1;
                if fails {
                    self.registry
                        .release(WORKSPACE, lease, Outcome::Failure, self.now)?;
                    if self.states[arrival].attempts <= self.manifest.arrival_model.max_retries {
                        self.states[arrival].phase = Phase::BackingOff;
                        let at = self.now + self.manifest.arrival_model.retry_backoff_ms;
                        self.schedule(at, Event::Retry(arrival));
                    } else {
                        self.finish(arrival, Ending::Failed)?;
                    }
                } else {
                    self.registry
                        .release(WORKSPACE, lease, Outcome::Success, self.now)?;
                    self.finish(arrival, Ending::Completed)?;
                }
                self.drain_resolutions()?;
            }
        }
        Ok(())
    }

    fn attempt(&mut self, index: usize) -> Result<(), RegistryError> {
        let arrival = &self.arrivals[index];
        let request = AdmissionRequest::new(
            arrival.principal_id.as_str(),
            arrival.provider_id.as_str(),
            arrival.ordinal.to_string(),
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
        .with_deadline(self.now + 2000 + arrival.service_ms);
        self.states[index].attempts += 1;
        self.observations.attempts += 1;
        let result = self.registry.acquire(WORKSPACE, request, self.now)?;
        match result {
            Acquired::Admitted(lease) => self.start_call(index, lease.id, 0),
            Acquired::Queued { waiter, .. } => {
                self.states[index].phase = Phase::Queued(waiter);
                self.waiting.insert(waiter, index);
            }
            Acquired::Rejected(rejection) => self.rejected(index, rejection.reason)?,
        }
        self.sample_counts();
        self.drain_resolutions()
    }

    fn start_call(&mut self, index: usize, lease: LeaseId, queue_delay_ms: u64) {
        let state = &mut self.states[index];
        state.phase = Phase::Calling(lease);
        state.admitted_once = true;
        let observations = &mut self.observations;
        observations.maximum_eligible_lane_wait_ms = observations
            .maximum_eligible_lane_wait_ms
            .max(queue_delay_ms);
        let at = self.now + self.arrivals[index].service_ms;
        self.schedule(
            at,
            Event::CallEnds {
                arrival: index,
                lease,
            },
        );
    }

    fn rejected(&mut self, index: usize, reason: Reason) -> Result<(), RegistryError> {
        if reason == Reason::Cancelled {
            self.finish(index, Ending::Cancelled)
        } else {
            *self
                .observations
                .shed_reasons
                .entry(reason.as_str().to_owned())
                .or_default() += 1;
            self.finish(index, Ending::Shed)
        }
    }

    fn cancel(&mut self, index: usize) -> Result<(), RegistryError> {
        match self.states[index].phase {
            Phase::Queued(waiter) => {
                self.waiting.remove(&waiter);
                self.registry.cancel(WORKSPACE, waiter, self.now)?;
                self.finish(index, Ending::Cancelled)?;
            }
            Phase::Calling(lease) => {
                self.registry
                    .release(WORKSPACE, lease, Outcome::None, self.now)?;
                self.finish(index, Ending::Cancelled)?;
            }
            Phase::BackingOff => self.finish(index, Ending::Cancelled)?,
            Phase::NotArrived | Phase::Done => return Ok(()),
        }
        // Cancellation takes effect at the instant it is requested on virtual time.
        let latency = self
            .now
            .saturating_sub(self.arrivals[index].cancel_at_ms.unwrap_or(self.now));
        self.observations.maximum_cancellation_latency_ms = self
            .observations
            .maximum_cancellation_latency_ms
            .max(latency);
        self.drain_resolutions()
    }

    fn finish(&mut self, index: usize, ending: Ending) -> Result<(), RegistryError> {
        self.states[index].phase = Phase::Done;
        let observations = &mut self.observations;
        match ending {
            Ending::Completed => observations.completed += 1,
            Ending::Failed => observations.failed += 1,
            Ending::Shed => observations.shed += 1,
            Ending::Cancelled => observations.cancelled += 1,
        }
        let budget = self.arrivals[index].ordinal.to_string();
        self.registry.release_budget(WORKSPACE, &budget, self.now)?;
        Ok(())
    }

    fn drain_resolutions(&mut self) -> Result<(), RegistryError> {
        while let Some(resolution) = self.registry.poll_resolution(WORKSPACE) {
            let Some(index) = self.waiting.remove(&resolution.waiter) else {
                continue;
            };
            match resolution.outcome {
                Ok(lease) => self.start_call(index, lease.id, lease.evidence.queue_delay_ms),
                Err(rejection) => self.rejected(index, rejection.reason)?,
            }
        }
        self.sample_counts();
        Ok(())
    }

    fn sample_counts(&mut self) {
        if let Some((active, queued)) = self.registry.totals(WORKSPACE) {
            let observations = &mut self.observations;
            observations.maximum_active_calls = observations.maximum_active_calls.max(active);
            observations.maximum_queued_calls = observations.maximum_queued_calls.max(queued);
        }
    }
}
