//! The pass loop with an admission gate (`crates/semantic/src/gate.rs`): a refused read is a
//! read not made (no receipt, no record, still pending, the pass ends); an admitted read is made
//! and settled once with its outcome, after the gate's wait.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{evidence, ScriptedReader, SECOND, T20};
use turnstile_semantic::estimate::DEFAULT_OUTPUT_TOKENS;
use turnstile_semantic::{
    AdmittedRead, CallOutcome, GateDecision, GateRefusal, ManualClock, NeverStop, PassSettings,
    PassStep, ReadEstimate, ReadGate, ReadOutcome, ReadRequest, Roster,
};
use turnstile_store::{MemoryRosterStore, RosterStore};

/// What the gate saw: admissions (generation, estimate) and settlements (outcome kind).
#[derive(Default)]
struct Seen {
    admitted: Vec<(String, ReadEstimate)>,
    settled: Vec<&'static str>,
}

/// Admits the first `admit` reads (each after `wait_ms` of virtual time), refuses the rest.
struct CountingGate {
    admit: usize,
    wait_ms: u64,
    clock: ManualClock,
    seen: Rc<RefCell<Seen>>,
}

struct Held(Rc<RefCell<Seen>>);

impl AdmittedRead for Held {
    fn settle(self: Box<Self>, outcome: &ReadOutcome) -> Result<(), String> {
        let kind = match outcome {
            ReadOutcome::Accepted { .. } => "accepted",
            ReadOutcome::Invalid { .. } => "invalid",
            ReadOutcome::Unavailable { .. } => "unavailable",
            ReadOutcome::RateLimited { .. } => "rate-limited",
        };
        self.0.borrow_mut().settled.push(kind);
        Ok(())
    }
}

impl ReadGate for CountingGate {
    fn admit(&mut self, request: &ReadRequest<'_>, estimate: &ReadEstimate) -> GateDecision {
        if self.seen.borrow().admitted.len() == self.admit {
            return GateDecision::Refused(GateRefusal {
                reason: "queue-timeout".to_owned(),
                retryable: true,
                retry_after_ms: Some(500),
            });
        }
        self.clock.advance(self.wait_ms);
        self.seen
            .borrow_mut()
            .admitted
            .push((request.generation_id.to_owned(), *estimate));
        GateDecision::Admitted(Box::new(Held(self.seen.clone())))
    }
}

#[test]
fn a_refused_read_leaves_no_receipt_no_record_and_ends_the_pass() {
    let store = MemoryRosterStore::new();
    let clock = ManualClock::new(T20);
    let mut roster = Roster::new(store.clone(), PassSettings::default());
    for id in ["a", "b", "c"] {
        roster.enqueue(&evidence(id, true, "x"), T20).unwrap();
    }
    clock.set(T20 + 10 * SECOND);
    let mut reader = ScriptedReader::new(clock.clone(), store.clone(), |_, _| {
        (SECOND, CallOutcome::Invalid)
    });
    let seen = Rc::new(RefCell::new(Seen::default()));
    let mut gate = CountingGate {
        admit: 1,
        wait_ms: 2 * SECOND,
        clock: clock.clone(),
        seen: seen.clone(),
    };
    let report = roster
        .run_gated_pass(Some(&mut reader), &mut gate, &clock, &NeverStop)
        .unwrap();

    // One read made and settled with its outcome; the receipt starts after the gate's wait.
    assert_eq!(report.calls(), 1);
    assert_eq!(seen.borrow().settled, ["invalid"]);
    let history = store.history().unwrap();
    assert_eq!(history.len(), 1, "only the admitted read has a receipt");
    assert_eq!(history[0].started_at, T20 + 12 * SECOND);
    let estimate = seen.borrow().admitted[0].1;
    assert!(estimate.tokens > DEFAULT_OUTPUT_TOKENS, "{estimate:?}");
    assert_eq!(estimate.cost_usd, None);

    // The refused read: the pass ended there, nothing written, still pending.
    let (refused, refusal) = report.not_admitted.clone().expect("a refusal");
    assert_eq!(refusal.reason, "queue-timeout");
    assert!(report.steps.iter().all(|step| match step {
        PassStep::Called { generation_id, .. } => generation_id != &refused,
        _ => true,
    }));
    assert!(
        store.record(&refused).unwrap().is_none(),
        "not a failed read"
    );
    assert_eq!(store.pending().unwrap().len(), 3);
    assert_eq!(
        roster.status(T20 + 13 * SECOND).unwrap().rolling_calls.used,
        1
    );
    assert!(report.settle_errors.is_empty());
}

#[test]
fn without_a_gate_the_pass_is_unchanged() {
    let store = MemoryRosterStore::new();
    let clock = ManualClock::new(T20);
    let mut roster = Roster::new(store.clone(), PassSettings::default());
    roster.enqueue(&evidence("a", true, "x"), T20).unwrap();
    clock.set(T20 + 10 * SECOND);
    let mut reader = ScriptedReader::instant(clock.clone(), store.clone());
    let report = roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    assert_eq!(report.calls(), 1);
    assert_eq!(report.not_admitted, None);
}
