//! The eight behaviours of SEMANTIC.md "Behaviours that must hold", one test each, and the
//! rule ADR 0119 states after them: once every pending generation has rolling-hour coverage,
//! the priority policy resumes.

mod common;

use common::{ScriptedReader, MINUTE, SECOND, T20};
use turnstile_semantic::eligibility::call_eligible;
use turnstile_semantic::pass_due::pass_due;
use turnstile_semantic::rate_cap::rate_cap;
use turnstile_semantic::selection::select_pending;
use turnstile_semantic::time::format_utc;
use turnstile_semantic::{
    Band, CallLimit, CallOutcome, CallReceipt, GenerationEvidence, ManualClock, NeverStop,
    PassSettings, PassStep, PendingItem, Policy, RateCap, ReasonCode, RecordKind, Roster,
};
use turnstile_store::{MemoryRosterStore, RosterStore, SqliteRosterStore};

const POLICY: Policy = Policy::ADR_0119;

fn item(id: &str, band: Band, since: u64) -> PendingItem {
    PendingItem {
        generation_id: id.to_owned(),
        evidence_digest: format!("sha256:{id}"),
        band,
        pending_since: since,
    }
}

fn call(id: &str, at: u64) -> CallReceipt {
    CallReceipt {
        id: 0,
        generation_id: id.to_owned(),
        started_at: at,
        outcome: Some(CallOutcome::Accepted),
        usage: None,
        duration_ms: None,
    }
}

fn hard() -> CallLimit {
    CallLimit::hard(&POLICY)
}

#[test]
fn semantic_behaviour_1_band1_round_robin() {
    let pending = [
        item("d", Band::Routine, T20 - 60 * SECOND),
        item("c", Band::Priority, T20 + 2 * SECOND),
        item("a", Band::Priority, T20),
        item("b", Band::Priority, T20 + SECOND),
    ];
    let pick = |last: Option<&str>| {
        select_pending(&pending, last, &[], true)
            .map(|item| item.generation_id.clone())
            .unwrap()
    };
    assert_eq!(pick(None), "a");
    assert_eq!(pick(Some("a")), "b");
    assert_eq!(pick(Some("b")), "c");
    assert_eq!(pick(Some("c")), "a");
    assert_eq!(pick(Some("unknown")), "a");
    for last in [None, Some("a"), Some("b"), Some("c"), Some("d"), Some("zz")] {
        assert_ne!(
            pick(last),
            "d",
            "band 2 chosen while band 1 exists (after {last:?})"
        );
    }
}

#[test]
fn semantic_behaviour_2_coverage_first() {
    let pending = [
        item("hot", Band::Priority, T20 + 40 * SECOND),
        item("waiting", Band::Routine, T20 + 50 * SECOND),
    ];
    let history = [call("hot", T20 + 30 * SECOND)];
    let chosen = select_pending(&pending, Some("hot"), &history, true).unwrap();
    assert_eq!(chosen.generation_id, "waiting");
    // Without the coverage rule (the legacy policy) priority always won: the incident.
    let legacy = select_pending(&pending, Some("hot"), &history, false).unwrap();
    assert_eq!(legacy.generation_id, "hot");
}

#[test]
fn semantic_adr_0119_priority_resumes_once_every_pending_generation_is_covered() {
    let pending = [
        item("old-routine", Band::Routine, T20 - 60 * SECOND),
        item("hot-a", Band::Priority, T20 + 40 * SECOND),
        item("hot-b", Band::Priority, T20 + 45 * SECOND),
        item("new-routine", Band::Routine, T20 + 50 * SECOND),
    ];
    let pick = |last: Option<&str>, history: &[CallReceipt]| {
        select_pending(&pending, last, history, true)
            .map(|item| item.generation_id.clone())
            .unwrap()
    };
    // Coverage first: while a routine generation has no call in the hour, it wins over the
    // priority ones that were read, oldest pending first.
    let mut history = vec![
        call("hot-a", T20 + 50 * SECOND),
        call("hot-b", T20 + 51 * SECOND),
    ];
    assert_eq!(pick(Some("hot-b"), &history), "old-routine");
    history.push(call("old-routine", T20 + 52 * SECOND));
    assert_eq!(pick(Some("hot-b"), &history), "new-routine");
    // Every pending generation is covered: the priority policy resumes, band 1 round robin
    // from the cursor, and no routine generation while band 1 waits.
    history.push(call("new-routine", T20 + 53 * SECOND));
    assert_eq!(pick(Some("hot-b"), &history), "hot-a");
    assert_eq!(pick(Some("hot-a"), &history), "hot-b");
    assert_eq!(pick(None, &history), "hot-a");
    // Without band 1 pending, the oldest routine generation.
    let routine_only = [&pending[0], &pending[3]].map(|i| i.clone());
    let chosen = select_pending(&routine_only, Some("hot-b"), &history, true).unwrap();
    assert_eq!(chosen.generation_id, "old-routine");
    // A call that left the rolling hour no longer covers: its generation is uncovered again,
    // and within the uncovered set band 1 and its round robin still apply.
    let at = T20 + 60 * MINUTE + 50 * SECOND + 500; // only hot-a's call has left the hour
    let active = turnstile_semantic::history::active_history(&history, at);
    assert_eq!(active.len(), 3);
    assert_eq!(pick(Some("hot-a"), &active), "hot-a");
    let at = T20 + 60 * MINUTE + 52 * SECOND + 500; // hot-a, hot-b, old-routine uncovered
    let active = turnstile_semantic::history::active_history(&history, at);
    assert_eq!(active.len(), 1);
    assert_eq!(pick(Some("hot-a"), &active), "hot-b");
}

#[test]
fn semantic_behaviour_3_hard_cap() {
    let history: Vec<CallReceipt> = (0..120).map(|i| call(&format!("g{i}"), T20)).collect();
    let limit = CallLimit::from_configured(Some(10_000.0), &POLICY);
    assert_eq!(limit.get(), 120);
    let cap = rate_cap(&history, limit);
    let eligible_after = T20 + 60 * MINUTE;
    assert_eq!(
        cap,
        RateCap::Exhausted {
            available: 0,
            eligible_after
        }
    );
    assert_eq!(format_utc(eligible_after), "2026-08-24T21:00:00.000Z");
    let at_half_past = turnstile_semantic::history::active_history(&history, T20 + 30 * MINUTE);
    assert_eq!(rate_cap(&at_half_past, limit), cap);
    assert_eq!(
        serde_json::to_value(cap).unwrap(),
        serde_json::json!({"available": 0, "eligibleAfter": eligible_after})
    );
}

#[test]
fn semantic_behaviour_4_band1_interval() {
    let history = [call("read", T20)];
    let at = |ms: u64| T20 + ms;
    assert!(!call_eligible(
        "read",
        Band::Priority,
        &history,
        at(2 * MINUTE - 1),
        &POLICY
    ));
    assert!(call_eligible(
        "read",
        Band::Priority,
        &history,
        at(2 * MINUTE),
        &POLICY
    ));
    assert!(call_eligible(
        "peer",
        Band::Priority,
        &history,
        T20,
        &POLICY
    ));
}

#[test]
fn semantic_behaviour_5_band2_pacing_and_debounce() {
    let history = [call("read", T20)];
    let alone = [item("read", Band::Routine, T20)];
    let debounce = 5 * SECOND;
    assert!(!pass_due(
        &alone,
        &history,
        T20 + 5 * MINUTE - 1,
        debounce,
        hard(),
        &POLICY
    ));
    assert!(pass_due(
        &alone,
        &history,
        T20 + 5 * MINUTE,
        debounce,
        hard(),
        &POLICY
    ));
    let with_peer = [
        item("read", Band::Routine, T20),
        item("peer", Band::Routine, T20),
    ];
    assert!(pass_due(
        &with_peer,
        &history,
        T20 + 5 * MINUTE,
        debounce,
        hard(),
        &POLICY
    ));
    // The never-read peer does not have to wait for the 5 minutes at all.
    assert!(pass_due(
        &with_peer,
        &history,
        T20 + 5 * MINUTE - 1,
        debounce,
        hard(),
        &POLICY
    ));
}

#[test]
fn semantic_behaviour_6_debounce() {
    let pending = [item("fresh", Band::Priority, T20 + 8 * SECOND)];
    assert!(!pass_due(
        &pending,
        &[],
        T20 + 10 * SECOND,
        5 * SECOND,
        hard(),
        &POLICY
    ));
    assert!(pass_due(
        &pending,
        &[],
        T20 + 13 * SECOND,
        5 * SECOND,
        hard(),
        &POLICY
    ));
}

#[test]
fn semantic_behaviour_7_cap_defers() {
    let store = MemoryRosterStore::new();
    let clock = ManualClock::new(T20);
    let settings = PassSettings {
        limit: CallLimit::from_configured(Some(2.0), &POLICY),
        ..PassSettings::default()
    };
    let mut roster = Roster::new(store.clone(), settings);
    let mut reader = ScriptedReader::instant(clock.clone(), store.clone());
    for id in ["a", "b"] {
        roster
            .enqueue(&GenerationEvidence::active(id, "x"), T20)
            .unwrap();
    }
    clock.set(T20 + 10 * SECOND);
    assert_eq!(
        roster
            .run_pass(Some(&mut reader), &clock, &NeverStop)
            .unwrap()
            .calls(),
        2
    );

    clock.set(T20 + 20 * SECOND);
    roster
        .enqueue(
            &GenerationEvidence::active("waiting", "y"),
            T20 + 20 * SECOND,
        )
        .unwrap();
    let now = T20 + 30 * SECOND;
    clock.set(now);
    assert!(roster.pass_due(now).unwrap(), "a pass is due at the cap");
    let report = roster
        .run_pass(Some(&mut reader), &clock, &NeverStop)
        .unwrap();
    let eligible_after = T20 + 10 * SECOND + 60 * MINUTE;
    assert_eq!(
        report.steps,
        vec![PassStep::Deferred {
            generation_id: "waiting".to_owned(),
            eligible_after
        }]
    );
    let record = store.record("waiting").unwrap().unwrap();
    assert_eq!(record.kind, RecordKind::Deferred);
    assert_eq!(record.reason_code, Some(ReasonCode::RateCap));
    assert_eq!(record.eligible_after, Some(eligible_after));
    assert_eq!(
        store.pending().unwrap().len(),
        1,
        "deferred work stays pending"
    );
    assert_eq!(reader.calls().len(), 2, "no call at the cap");
}

#[test]
fn semantic_behaviour_8_cap_survives_restart_and_reset() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T20);
    {
        let store = SqliteRosterStore::open_dir(dir.path()).unwrap();
        let mut roster = Roster::new(store, PassSettings::default());
        let mut reader = ScriptedReader::instant(clock.clone(), MemoryRosterStore::new());
        for id in ["a", "b"] {
            roster
                .enqueue(&GenerationEvidence::active(id, "x"), T20)
                .unwrap();
        }
        clock.set(T20 + 10 * SECOND);
        let report = roster
            .run_pass(Some(&mut reader), &clock, &NeverStop)
            .unwrap();
        assert_eq!(report.calls(), 2);
    } // the process "exits"
    let store = SqliteRosterStore::open_dir(dir.path()).unwrap();
    let mut roster = Roster::new(store, PassSettings::default());
    roster.reset().unwrap();
    let status = roster.status(T20 + 20 * MINUTE).unwrap();
    assert_eq!(status.rolling_calls.used, 2);
    assert_eq!(status.rolling_calls.limit, 120);
    assert_eq!(status.rolling_calls.available, 118);
    assert_eq!(status.pending, 0);
}
