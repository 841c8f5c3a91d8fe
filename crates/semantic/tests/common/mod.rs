//! Test support: a scripted reader on virtual time and a discrete-event driver that replays
//! evidence streams through the real pass loop.
#![allow(dead_code)]

use std::cell::RefCell;
use std::rc::Rc;

use turnstile_semantic::{
    Band, CallOutcome, CallReceipt, GenerationEvidence, ManualClock, PassSettings, PendingItem,
    ReadOutcome, ReadRequest, Reader, ReaderConfiguration, Reading, Roster, TimeSource,
};
use turnstile_store::{MemoryRosterStore, RosterStore};

/// 2026-08-24T20:00:00.000Z
pub const T20: u64 = 1_787_601_600_000;
pub const SECOND: u64 = 1_000;
pub const MINUTE: u64 = 60_000;

/// What a scripted reader saw at the moment it was invoked.
#[derive(Debug, Clone)]
pub struct ObservedCall {
    pub generation_id: String,
    pub band: Band,
    pub started_at: u64,
    pub outcome: CallOutcome,
    /// The store's pending list at invocation time.
    pub pending: Vec<PendingItem>,
    /// The store's call history at invocation time (includes this call's receipt).
    pub history: Vec<CallReceipt>,
}

/// Decides each read: (call index, generation) -> (duration ms, outcome).
pub type Script = Box<dyn FnMut(usize, &str) -> (u64, CallOutcome)>;

/// A reader on virtual time: each read advances the clock by a scripted duration and returns a
/// scripted outcome; it records what the store looked like when it was invoked.
pub struct ScriptedReader {
    pub clock: ManualClock,
    pub observer: MemoryRosterStore,
    pub calls: Rc<RefCell<Vec<ObservedCall>>>,
    configuration: ReaderConfiguration,
    /// (call index, generation) -> (duration ms, outcome)
    script: Script,
}

impl ScriptedReader {
    pub fn new(
        clock: ManualClock,
        observer: MemoryRosterStore,
        script: impl FnMut(usize, &str) -> (u64, CallOutcome) + 'static,
    ) -> Self {
        ScriptedReader {
            clock,
            observer,
            calls: Rc::new(RefCell::new(Vec::new())),
            configuration: ReaderConfiguration {
                endpoint: "http://scripted.invalid/v1".to_owned(),
                model: "scripted".to_owned(),
                contract_version: 1,
            },
            script: Box::new(script),
        }
    }

    /// A reader whose reads all succeed instantly.
    pub fn instant(clock: ManualClock, observer: MemoryRosterStore) -> Self {
        Self::new(clock, observer, |_, _| (0, CallOutcome::Accepted))
    }

    pub fn calls(&self) -> Vec<ObservedCall> {
        self.calls.borrow().clone()
    }
}

impl Reader for ScriptedReader {
    fn configuration(&self) -> &ReaderConfiguration {
        &self.configuration
    }

    fn read(&mut self, request: &ReadRequest<'_>) -> ReadOutcome {
        let index = self.calls.borrow().len();
        let (duration, outcome) = (self.script)(index, request.generation_id);
        self.calls.borrow_mut().push(ObservedCall {
            generation_id: request.generation_id.to_owned(),
            band: request.band,
            started_at: self.clock.now_ms(),
            outcome,
            pending: self.observer.pending().unwrap(),
            history: self.observer.history().unwrap(),
        });
        self.clock.advance(duration);
        match outcome {
            CallOutcome::Accepted => ReadOutcome::Accepted {
                reading: Reading {
                    headline: format!("reading of {}", request.generation_id),
                    detail: None,
                },
                usage: None,
            },
            CallOutcome::Invalid => ReadOutcome::Invalid {
                reason: "scripted invalid".to_owned(),
                usage: None,
            },
            CallOutcome::Unavailable => ReadOutcome::Unavailable {
                reason: "scripted unavailable".to_owned(),
            },
        }
    }
}

/// One evidence document arriving at an instant.
#[derive(Debug, Clone)]
pub struct Emission {
    pub at: u64,
    pub evidence: GenerationEvidence,
}

/// Evidence for `generation` with a distinct summary; priority evidence asks for attention.
pub fn evidence(generation: &str, priority: bool, summary: &str) -> GenerationEvidence {
    let mut evidence = GenerationEvidence::active(generation, summary);
    evidence.attention = priority;
    evidence
}

/// Replays `emissions` (any order) from `start` until `end` through the real pass loop, the way
/// a long-running `roster run` would: evidence is enqueued as of its arrival (between calls — a
/// pass is stopped when new evidence is due), a pass runs whenever one is due, and otherwise
/// time jumps to the next arrival or the scheduler's next wake-up.
pub fn simulate(
    settings: PassSettings,
    mut emissions: Vec<Emission>,
    start: u64,
    end: u64,
    reader: &mut ScriptedReader,
) -> Roster<MemoryRosterStore> {
    emissions.sort_by_key(|emission| emission.at);
    let clock = reader.clock.clone();
    clock.set(start);
    let mut roster = Roster::new(reader.observer.clone(), settings);
    let mut next = 0;
    let mut guard = 0u64;
    loop {
        guard += 1;
        assert!(guard < 10_000_000, "simulation does not make progress");
        let now = clock.now_ms();
        if now >= end {
            break;
        }
        while next < emissions.len() && emissions[next].at <= now {
            // Enqueued at its arrival time: in a live system enqueue runs concurrently with a
            // call, so evidence that arrived mid-call is pending since it arrived.
            let emission = &emissions[next];
            roster.enqueue(&emission.evidence, emission.at).unwrap();
            next += 1;
        }
        let next_arrival = emissions.get(next).map(|emission| emission.at);
        let mut progressed = false;
        if roster.pass_due(now).unwrap() {
            let stop_clock = clock.clone();
            let stop = move || {
                let t = stop_clock.now_ms();
                t >= end || next_arrival.is_some_and(|arrival| t >= arrival)
            };
            let report = roster.run_pass(Some(reader), &clock, &stop).unwrap();
            progressed = report.steps.iter().any(|step| {
                !matches!(
                    step,
                    turnstile_semantic::PassStep::Held { .. }
                        | turnstile_semantic::PassStep::Deferred { .. }
                )
            });
        }
        let now = clock.now_ms();
        if progressed || next_arrival.is_some_and(|arrival| arrival <= now) {
            continue;
        }
        let wake = roster.next_wake(now).unwrap().filter(|wake| *wake > now);
        let target = [wake, next_arrival, Some(end)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(end);
        clock.set(target.max(now + 1));
    }
    roster
}
