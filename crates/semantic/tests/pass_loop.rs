//! The pass loop against the in-memory store: receipts before calls, cache hits, stop, retry
//! cool-down, missing reader, stale entries.

mod common;

use common::{evidence, ScriptedReader, MINUTE, SECOND, T20};
use turnstile_semantic::{
    CallOutcome, GenerationEvidence, ManualClock, NeverStop, PassSettings, PassStep, ReasonCode,
    RecordKind, Roster, StopFlag,
};
use turnstile_store::{MemoryRosterStore, RosterStore};
use turnstile_store::{PendingItem, StoredEvidence};

fn setup() -> (MemoryRosterStore, ManualClock, Roster<MemoryRosterStore>) {
    let store = MemoryRosterStore::new();
    let roster = Roster::new(store.clone(), PassSettings::default());
    (store, ManualClock::new(T20), roster)
}

#[test]
fn call_receipt_is_committed_before_the_reader_is_invoked() {
    let (store, clock, mut roster) = setup();
    let mut reader = ScriptedReader::new(clock.clone(), store.clone(), |_, _| {
        (3 * SECOND, CallOutcome::Accepted)
    });
    roster.enqueue(&evidence("a", true, "x"), T20).unwrap();
    clock.set(T20 + 10 * SECOND);
    roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    let seen = reader.calls();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].history.len(),
        1,
        "receipt visible to the reader's observer"
    );
    assert_eq!(
        seen[0].history[0].outcome, None,
        "receipt written before the outcome"
    );
    let history = store.history().unwrap();
    assert_eq!(history[0].outcome, Some(CallOutcome::Accepted));
    assert_eq!(history[0].duration_ms, Some(3 * SECOND));
    let record = store.record("a").unwrap().unwrap();
    assert_eq!(record.kind, RecordKind::Accepted);
    assert_eq!(record.headline.as_deref(), Some("reading of a"));
}

#[test]
fn a_call_that_never_reports_back_still_counts() {
    let (mut store, _clock, roster) = setup();
    store.begin_call("crashed", T20).unwrap();
    let status = roster.status(T20 + MINUTE).unwrap();
    assert_eq!(status.rolling_calls.used, 1);
    assert_eq!(status.rolling_calls.available, 119);
}

#[test]
fn cache_hit_on_the_full_tuple_writes_the_cached_record_without_a_call() {
    let (store, clock, mut roster) = setup();
    let mut reader = ScriptedReader::instant(clock.clone(), store.clone());
    let first = evidence("a", false, "compiling");
    let second = evidence("a", false, "testing");
    roster.enqueue(&first, T20).unwrap();
    clock.set(T20 + 10 * SECOND);
    roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    roster.enqueue(&second, T20 + 6 * MINUTE).unwrap();
    clock.set(T20 + 7 * MINUTE);
    roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    assert_eq!(reader.calls().len(), 2);

    // The evidence goes back to the first document: same (evidence, configuration) tuple.
    roster.enqueue(&first, T20 + 8 * MINUTE).unwrap();
    clock.set(T20 + 9 * MINUTE);
    let report = roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    assert_eq!(
        report.steps,
        vec![PassStep::CacheHit {
            generation_id: "a".to_owned()
        }]
    );
    assert_eq!(reader.calls().len(), 2, "no call for a cache hit");
    let record = store.record("a").unwrap().unwrap();
    assert!(record.from_cache);
    assert_eq!(record.written_at, T20 + 9 * MINUTE);
    assert!(store.pending().unwrap().is_empty());
}

#[test]
fn a_different_configuration_is_a_cache_miss() {
    let (store, clock, mut roster) = setup();
    let mut reader = ScriptedReader::instant(clock.clone(), store.clone());
    let doc = evidence("a", false, "compiling");
    roster.enqueue(&doc, T20).unwrap();
    clock.set(T20 + 10 * SECOND);
    roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    let record = store.record("a").unwrap().unwrap();
    assert!(store
        .cached(&record.evidence_digest, "sha256:another-configuration")
        .unwrap()
        .is_none());
    assert!(store
        .cached(
            &record.evidence_digest,
            record.configuration_digest.as_deref().unwrap()
        )
        .unwrap()
        .is_some());
}

#[test]
fn stop_between_calls_leaves_the_rest_pending() {
    let (store, clock, mut roster) = setup();
    let stop = StopFlag::new();
    let stop_in_reader = stop.clone();
    let mut reader = ScriptedReader::new(clock.clone(), store.clone(), move |_, _| {
        stop_in_reader.request();
        (SECOND, CallOutcome::Accepted)
    });
    for id in ["a", "b", "c"] {
        roster
            .enqueue(&GenerationEvidence::active(id, "x"), T20)
            .unwrap();
    }
    clock.set(T20 + 10 * SECOND);
    let report = roster.run_pass(Some(&mut reader), &clock, &stop).unwrap();
    assert!(report.stopped);
    assert_eq!(report.calls(), 1);
    let pending: Vec<String> = store
        .pending()
        .unwrap()
        .into_iter()
        .map(|item| item.generation_id)
        .collect();
    assert_eq!(pending, ["b", "c"]);
}

#[test]
fn invalid_and_unavailable_reads_cool_down_for_five_minutes() {
    for failure in [CallOutcome::Invalid, CallOutcome::Unavailable] {
        let (store, clock, mut roster) = setup();
        let mut reader = ScriptedReader::new(clock.clone(), store.clone(), move |index, _| {
            (
                0,
                if index == 0 {
                    failure
                } else {
                    CallOutcome::Accepted
                },
            )
        });
        roster.enqueue(&evidence("a", true, "error!"), T20).unwrap();
        clock.set(T20 + 10 * SECOND);
        roster
            .run_pass(Some(&mut reader), &clock, &NeverStop)
            .unwrap();
        let record = store.record("a").unwrap().unwrap();
        assert_eq!(
            record.reason_code,
            Some(if failure == CallOutcome::Invalid {
                ReasonCode::InvalidAnswer
            } else {
                ReasonCode::ReaderUnavailable
            })
        );
        assert_eq!(
            store.pending().unwrap().len(),
            1,
            "failed reads stay pending"
        );

        // Band 1 would allow a read after 2 minutes; the cool-down holds it to 5.
        let at = T20 + 10 * SECOND + 5 * MINUTE;
        clock.set(at - 1);
        assert!(!roster.pass_due(at - 1).unwrap());
        let report = roster
            .run_pass(Some(&mut reader), &clock, &NeverStop)
            .unwrap();
        assert_eq!(report.calls(), 0);
        assert_eq!(roster.next_wake(at - 1).unwrap(), Some(at));
        clock.set(at);
        assert!(roster.pass_due(at).unwrap());
        let report = roster
            .run_pass(Some(&mut reader), &clock, &NeverStop)
            .unwrap();
        assert_eq!(report.calls(), 1);
        assert_eq!(
            store.record("a").unwrap().unwrap().kind,
            RecordKind::Accepted
        );
        assert!(store.pending().unwrap().is_empty());
    }
}

#[test]
fn without_a_reader_an_unavailable_record_is_written() {
    let (store, clock, mut roster) = setup();
    roster
        .enqueue(&GenerationEvidence::active("a", "x"), T20)
        .unwrap();
    clock.set(T20 + 10 * SECOND);
    let report = roster.run_pass(None, &clock, &NeverStop).unwrap();
    assert_eq!(
        report.steps,
        vec![PassStep::NoReader {
            generation_id: "a".to_owned()
        }]
    );
    let record = store.record("a").unwrap().unwrap();
    assert_eq!(record.kind, RecordKind::Unavailable);
    assert_eq!(record.reason_code, Some(ReasonCode::NoReader));
    assert!(store.history().unwrap().is_empty(), "no call was made");
}

#[test]
fn an_entry_whose_digest_no_longer_matches_is_dropped() {
    let (mut store, clock, mut roster) = setup();
    let mut reader = ScriptedReader::instant(clock.clone(), store.clone());
    store
        .enqueue(
            &StoredEvidence {
                generation_id: "a".to_owned(),
                evidence_digest: "sha256:new".to_owned(),
                canonical_json: "{}".to_owned(),
            },
            &PendingItem {
                generation_id: "a".to_owned(),
                evidence_digest: "sha256:old".to_owned(),
                band: turnstile_semantic::Band::Routine,
                pending_since: T20,
            },
        )
        .unwrap();
    clock.set(T20 + 10 * SECOND);
    let report = roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    assert_eq!(
        report.steps,
        vec![PassStep::Dropped {
            generation_id: "a".to_owned()
        }]
    );
    assert!(reader.calls().is_empty());
}

#[test]
fn held_generations_are_skipped_and_the_band1_cursor_persists() {
    let (store, clock, mut roster) = setup();
    let mut reader = ScriptedReader::instant(clock.clone(), store.clone());
    roster.enqueue(&evidence("a", true, "1"), T20).unwrap();
    roster.enqueue(&evidence("b", true, "1"), T20).unwrap();
    clock.set(T20 + 10 * SECOND);
    roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    // Both re-emit at +1 min; a is within its 2-minute interval at +1:10, so is b.
    roster
        .enqueue(&evidence("a", true, "2"), T20 + MINUTE)
        .unwrap();
    roster
        .enqueue(&evidence("b", true, "2"), T20 + MINUTE)
        .unwrap();
    clock.set(T20 + MINUTE + 10 * SECOND);
    let report = roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    assert_eq!(report.calls(), 0);
    assert_eq!(report.steps.len(), 2);
    // A fresh roster over the same store continues the round robin after b.
    let mut roster = Roster::new(store.clone(), PassSettings::default());
    clock.set(T20 + 3 * MINUTE);
    roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    let order: Vec<String> = reader
        .calls()
        .into_iter()
        .map(|c| c.generation_id)
        .collect();
    assert_eq!(order, ["a", "b", "a", "b"]);
}
