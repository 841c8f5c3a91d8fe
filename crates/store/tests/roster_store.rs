//! Shared behaviour of the roster stores: the SQLite store and its in-memory twin must agree.

use turnstile_store::{
    meta_keys, Band, CallOutcome, CallUsage, PendingItem, ReasonCode, RecordKind, SemanticRecord,
    StoredEvidence,
};
use turnstile_store::{MemoryRosterStore, RosterStore, SqliteRosterStore};

fn evidence(generation: &str, digest: &str) -> StoredEvidence {
    StoredEvidence {
        generation_id: generation.to_owned(),
        evidence_digest: digest.to_owned(),
        canonical_json: format!("{{\"generationId\":\"{generation}\"}}"),
    }
}

fn item(generation: &str, digest: &str, band: Band, since: u64) -> PendingItem {
    PendingItem {
        generation_id: generation.to_owned(),
        evidence_digest: digest.to_owned(),
        band,
        pending_since: since,
    }
}

fn record(generation: &str, kind: RecordKind, at: u64) -> SemanticRecord {
    SemanticRecord {
        generation_id: generation.to_owned(),
        kind,
        evidence_digest: "sha256:e".to_owned(),
        configuration_digest: Some("sha256:c".to_owned()),
        band: Band::Routine,
        written_at: at,
        headline: Some("reading".to_owned()),
        detail: None,
        reason_code: (kind == RecordKind::Deferred).then_some(ReasonCode::RateCap),
        eligible_after: (kind == RecordKind::Deferred).then_some(at + 1),
        from_cache: false,
        usage: None,
    }
}

fn exercise(store: &mut dyn RosterStore) {
    // Enqueue order, replacement moves to the end.
    store
        .enqueue(&evidence("a", "d1"), &item("a", "d1", Band::Priority, 10))
        .unwrap();
    store
        .enqueue(&evidence("b", "d2"), &item("b", "d2", Band::Routine, 11))
        .unwrap();
    store
        .enqueue(&evidence("a", "d3"), &item("a", "d3", Band::Routine, 12))
        .unwrap();
    let pending = store.pending().unwrap();
    assert_eq!(
        pending
            .iter()
            .map(|p| p.generation_id.as_str())
            .collect::<Vec<_>>(),
        ["b", "a"]
    );
    assert_eq!(pending[1], item("a", "d3", Band::Routine, 12));
    assert_eq!(store.evidence("a").unwrap().unwrap().evidence_digest, "d3");
    assert!(store.evidence("zz").unwrap().is_none());

    // Removal only with the matching digest.
    assert!(!store.remove_pending("a", "d1").unwrap());
    assert!(store.remove_pending("a", "d3").unwrap());
    assert_eq!(store.pending().unwrap().len(), 1);

    // Call receipts: begun without outcome, finished later, pruned by cutoff.
    let first = store.begin_call("a", 1_000).unwrap();
    let second = store.begin_call("b", 2_000).unwrap();
    store
        .finish_call(
            first,
            CallOutcome::Accepted,
            Some(CallUsage {
                input_tokens: 5,
                ..CallUsage::default()
            }),
            40,
        )
        .unwrap();
    let history = store.history().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].outcome, Some(CallOutcome::Accepted));
    assert_eq!(history[0].usage.unwrap().input_tokens, 5);
    assert_eq!(history[0].duration_ms, Some(40));
    assert_eq!(history[1].id, second);
    assert_eq!(history[1].outcome, None);
    assert!(store
        .finish_call(9_999, CallOutcome::Invalid, None, 1)
        .is_err());
    assert_eq!(store.prune_history(1_000).unwrap(), 1);
    assert_eq!(store.history().unwrap().len(), 1);

    // Records replace older meaning; cache is keyed by the full tuple.
    store
        .put_record(&record("a", RecordKind::Accepted, 5))
        .unwrap();
    store
        .put_record(&record("a", RecordKind::Deferred, 6))
        .unwrap();
    assert_eq!(
        store.record("a").unwrap().unwrap().kind,
        RecordKind::Deferred
    );
    assert_eq!(store.records().unwrap().len(), 1);
    store
        .put_cached(&record("a", RecordKind::Accepted, 5))
        .unwrap();
    assert!(store.cached("sha256:e", "sha256:c").unwrap().is_some());
    assert!(store.cached("sha256:e", "sha256:other").unwrap().is_none());

    store
        .set_meta(meta_keys::LAST_BAND1_GENERATION, "a")
        .unwrap();
    assert_eq!(
        store
            .meta(meta_keys::LAST_BAND1_GENERATION)
            .unwrap()
            .as_deref(),
        Some("a")
    );

    // Reset clears everything but the call history.
    store.reset().unwrap();
    assert!(store.pending().unwrap().is_empty());
    assert!(store.evidence("b").unwrap().is_none());
    assert!(store.records().unwrap().is_empty());
    assert!(store.cached("sha256:e", "sha256:c").unwrap().is_none());
    assert!(store
        .meta(meta_keys::LAST_BAND1_GENERATION)
        .unwrap()
        .is_none());
    assert_eq!(store.history().unwrap().len(), 1);
}

#[test]
fn memory_store_behaviour() {
    exercise(&mut MemoryRosterStore::new());
}

#[test]
fn sqlite_store_behaviour() {
    exercise(&mut SqliteRosterStore::open_in_memory().unwrap());
}

#[test]
fn sqlite_file_store_behaviour() {
    let dir = tempfile::tempdir().unwrap();
    exercise(&mut SqliteRosterStore::open_dir(dir.path().join("nested")).unwrap());
}

#[test]
fn memory_store_clones_share_state() {
    let mut store = MemoryRosterStore::new();
    let observer = store.clone();
    store.begin_call("a", 1).unwrap();
    assert_eq!(observer.history().unwrap().len(), 1);
}

#[test]
fn sqlite_call_history_survives_restart_and_reset() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = SqliteRosterStore::open_dir(dir.path()).unwrap();
        store
            .enqueue(&evidence("a", "d1"), &item("a", "d1", Band::Priority, 1))
            .unwrap();
        let id = store.begin_call("a", 100).unwrap();
        store
            .finish_call(id, CallOutcome::Accepted, None, 3)
            .unwrap();
        // A call that never reported back (the process "died" mid-call) still counts.
        store.begin_call("b", 200).unwrap();
    }
    let mut reopened = SqliteRosterStore::open_dir(dir.path()).unwrap();
    assert_eq!(reopened.pending().unwrap().len(), 1);
    reopened.reset().unwrap();
    let history = reopened.history().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].outcome, None);
    let mode: String = rusqlite::Connection::open(dir.path().join(turnstile_store::ROSTER_DB_FILE))
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn sqlite_rejects_out_of_vocabulary_band() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.sqlite3");
    let store = SqliteRosterStore::open(&path).unwrap();
    drop(store);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("INSERT INTO roster_pending VALUES ('x', 'd', 3, 1, 1)", [])
        .unwrap();
    let store = SqliteRosterStore::open(&path).unwrap();
    assert!(store.pending().is_err());
}
