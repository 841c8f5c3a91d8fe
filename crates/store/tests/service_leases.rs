//! The lease log (issue 14: leases survive a crash of the process): the rules of held leases
//! and spend, replay after reopening at either durability, torn tails, compaction across
//! segments, corruption, the one-time import of the interim SQLite lease file, and the lanes'
//! latest pauses and breaker transitions.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc;

use turnstile_store::{
    LeaseChange, LeaseDurability, LeaseLog, LeaseState, Recovered, StoredBreaker, StoredLease,
    StoredPause, StoredSpend, DEFAULT_SEGMENT_BYTES, LEASE_LOG_DIR,
};

fn lease(token: &str, budget: &str, tokens: u64) -> StoredLease {
    StoredLease {
        token: token.into(),
        workspace_id: "w".into(),
        principal_id: "p".into(),
        provider_id: "jev".into(),
        budget_id: Some(budget.into()),
        attempts: 1,
        tokens: Some(tokens),
        cost_usd: Some(0.5),
        admitted_at_ms: 10,
        expires_at_ms: Some(30_010),
    }
}

fn released(token: &str, tokens: Option<u64>) -> LeaseChange {
    LeaseChange::Released {
        token: token.into(),
        actual_tokens: tokens,
        actual_cost_usd: None,
    }
}

fn spend<'a>(state: &'a LeaseState, budget: &str) -> Option<&'a StoredSpend> {
    state.spend().into_iter().find(|s| s.budget_id == budget)
}

fn tokens(state: &LeaseState) -> Vec<String> {
    state.held_leases().map(|l| l.token.clone()).collect()
}

#[test]
fn held_leases_and_spend_follow_the_rules() {
    let mut state = LeaseState::default();
    for change in [
        LeaseChange::Granted(lease("a", "b1", 100)),
        LeaseChange::Granted(lease("b", "b1", 50)),
        LeaseChange::Granted(lease("c", "b2", 7)),
    ] {
        state.apply(change);
    }
    assert_eq!(tokens(&state), ["a", "b", "c"], "grant order");
    assert_eq!(state.held_leases().next(), Some(&lease("a", "b1", 100)));
    let b1 = spend(&state, "b1").unwrap();
    assert_eq!((b1.attempts, b1.tokens), (2, 150));
    assert!((b1.cost_usd - 1.0).abs() < 1e-9);

    // A release with actual usage corrects the spend line: 150 − 100 + 30.
    state.apply(released("a", Some(30)));
    state.apply(released("unknown", Some(1)));
    let b1 = spend(&state, "b1").unwrap();
    assert_eq!(
        (b1.attempts, b1.tokens),
        (2, 80),
        "attempts are never corrected"
    );
    assert_eq!(state.lease_count(), 2);

    // Releasing the budget forgets its spend and detaches its held lease.
    state.apply(LeaseChange::BudgetReleased {
        workspace_id: "w".into(),
        budget_id: "b1".into(),
    });
    assert!(spend(&state, "b1").is_none());
    let first = state.held_leases().next().unwrap();
    assert_eq!((first.token.as_str(), first.budget_id.clone()), ("b", None));
    // A reopened b1 is never corrected by the older lease.
    state.apply(LeaseChange::Granted(lease("d", "b1", 5)));
    state.apply(released("b", Some(0)));
    assert_eq!(spend(&state, "b1").unwrap().tokens, 5);
    // A release without usage keeps the estimate charged.
    state.apply(released("c", None));
    assert_eq!(spend(&state, "b2").unwrap().tokens, 7);
    assert_eq!(tokens(&state), ["d"]);
}

/// Appends one batch and waits until it is durable.
fn append(log: &mut LeaseLog, changes: &[LeaseChange]) {
    let (tx, rx) = mpsc::channel();
    log.append(
        changes,
        Box::new(move |result| {
            tx.send(result).unwrap();
        }),
    );
    rx.recv().unwrap().unwrap();
}

fn open(dir: &Path, durability: LeaseDurability, segment_bytes: u64) -> (LeaseLog, Recovered) {
    LeaseLog::open(dir, durability, segment_bytes).unwrap()
}

#[test]
fn leases_and_spend_survive_reopening_at_either_durability() {
    for durability in [LeaseDurability::Process, LeaseDurability::Machine] {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, recovered) = open(dir.path(), durability, DEFAULT_SEGMENT_BYTES);
            assert_eq!(recovered, Recovered::default());
            append(
                &mut log,
                &[
                    LeaseChange::Granted(lease("a", "b", 3)),
                    LeaseChange::Granted(lease("b", "b", 4)),
                ],
            );
            append(&mut log, &[released("a", None)]);
            // Dropped without any shutdown step, as a killed process leaves it.
        }
        let (_log, recovered) = open(dir.path(), durability, DEFAULT_SEGMENT_BYTES);
        assert_eq!(recovered.leases, vec![lease("b", "b", 4)]);
        assert_eq!(recovered.spend.len(), 1);
        assert_eq!(recovered.spend[0].tokens, 7, "{}", durability.as_str());
        assert_eq!(recovered.spend[0].attempts, 2);
    }
}

#[test]
fn many_segments_compact_into_the_snapshot_without_losing_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = LeaseState::default();
    {
        // Tiny segments: nearly every batch rotates and asks for a compaction.
        let (mut log, _) = open(dir.path(), LeaseDurability::Process, 512);
        for i in 0..400u64 {
            let mut batch = vec![LeaseChange::Granted(lease(
                &format!("t{i}"),
                &format!("b{}", i % 7),
                i,
            ))];
            if i % 3 == 0 && i > 0 {
                batch.push(released(&format!("t{}", i - 1), Some(i % 5)));
            }
            if i % 50 == 49 {
                batch.push(LeaseChange::BudgetReleased {
                    workspace_id: "w".into(),
                    budget_id: "b3".into(),
                });
            }
            for change in &batch {
                model.apply(change.clone());
            }
            append(&mut log, &batch);
        }
        assert!(log.current_segment() > 50, "rotated");
        log.wait_for_compaction();
        let stats = log.stats();
        assert!(stats.compactions.load(std::sync::atomic::Ordering::Relaxed) > 0);
        assert_eq!(
            stats
                .compaction_failures
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        let files = std::fs::read_dir(dir.path().join(LEASE_LOG_DIR))
            .unwrap()
            .count();
        assert!(files <= 3, "compacted segments are deleted: {files} files");
    }
    let (_log, recovered) = open(dir.path(), LeaseDurability::Process, 512);
    let expected: Vec<StoredLease> = model.held_leases().cloned().collect();
    assert_eq!(recovered.leases, expected);
    let expected: Vec<StoredSpend> = model.spend().into_iter().cloned().collect();
    assert_eq!(recovered.spend, expected);
}

fn granted_at(token: &str, at: u64) -> LeaseChange {
    let mut granted = lease(token, "b", 1);
    granted.admitted_at_ms = at;
    LeaseChange::Granted(granted)
}

/// The rate buckets restart as if empty at the last grant: its instant survives the release of
/// its lease, compaction into the snapshot and any number of reopenings.
#[test]
fn the_last_grant_instant_outlives_its_released_lease_compaction_and_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, recovered) = open(dir.path(), LeaseDurability::Process, 512);
        assert_eq!(recovered.last_grant_at_ms, None, "a log that never granted");
        for i in 0..60u64 {
            append(&mut log, &[granted_at(&format!("t{i}"), 1_000 + i)]);
            append(&mut log, &[released(&format!("t{i}"), None)]);
        }
        // An older grant recorded later (a queued grant) does not move it back.
        append(&mut log, &[granted_at("late", 500), released("late", None)]);
        log.wait_for_compaction();
    }
    let (_log, recovered) = open(dir.path(), LeaseDurability::Process, 512);
    assert!(recovered.leases.is_empty());
    assert_eq!(recovered.last_grant_at_ms, Some(1_059));
    drop(_log);
    let (_log, recovered) = open(dir.path(), LeaseDurability::Process, 512);
    assert_eq!(
        recovered.last_grant_at_ms,
        Some(1_059),
        "kept by the snapshot"
    );
}

/// Far in the future: a pause that has not ended.
const LATER: u64 = 1 << 60;

fn paused(provider: &str, until: u64) -> LeaseChange {
    LeaseChange::Paused {
        workspace_id: "w".into(),
        provider_id: provider.into(),
        until_epoch_ms: until,
    }
}

fn breaker(provider: &str, from: &str, to: &str, at: u64) -> StoredBreaker {
    StoredBreaker {
        workspace_id: "w".into(),
        provider_id: provider.into(),
        from: from.into(),
        to: to.into(),
        at_epoch_ms: at,
        failures: 3,
    }
}

fn stored_pause(provider: &str, until: u64) -> StoredPause {
    StoredPause {
        workspace_id: "w".into(),
        provider_id: provider.into(),
        until_epoch_ms: until,
    }
}

/// A restart pauses lanes again and reopens breakers from the log: each lane's latest pause
/// that has not ended and latest transition that is not to closed survive compaction and
/// reopening; ended pauses and closed breakers are dropped.
#[test]
fn the_latest_pause_and_open_breaker_of_each_lane_survive_compaction_and_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, recovered) = open(dir.path(), LeaseDurability::Process, 512);
        assert!(recovered.pauses.is_empty() && recovered.breakers.is_empty());
        append(&mut log, &[paused("a", LATER), paused("a", LATER + 5)]);
        append(&mut log, &[paused("ended", 1)]);
        append(
            &mut log,
            &[
                LeaseChange::Breaker(breaker("a", "closed", "open", 10)),
                LeaseChange::Breaker(breaker("b", "closed", "open", 11)),
                LeaseChange::Breaker(breaker("b", "open", "half-open", 12)),
                LeaseChange::Breaker(breaker("c", "closed", "open", 13)),
                LeaseChange::Breaker(breaker("c", "half-open", "closed", 14)),
            ],
        );
        // Enough grants and releases to rotate and compact many times.
        for i in 0..40u64 {
            append(&mut log, &[granted_at(&format!("t{i}"), 1_000 + i)]);
            append(&mut log, &[released(&format!("t{i}"), None)]);
        }
        log.wait_for_compaction();
        assert!(log.current_segment() > 5, "rotated");
    }
    let expected_pauses = vec![stored_pause("a", LATER + 5)];
    let expected_breakers = vec![
        breaker("a", "closed", "open", 10),
        breaker("b", "open", "half-open", 12),
    ];
    for _ in 0..2 {
        let (_log, recovered) = open(dir.path(), LeaseDurability::Process, 512);
        assert_eq!(recovered.pauses, expected_pauses);
        assert_eq!(recovered.breakers, expected_breakers);
    }
    // The last records of a segment that was never compacted are replayed too.
    {
        let (mut log, _) = open(dir.path(), LeaseDurability::Process, 1 << 20);
        append(
            &mut log,
            &[
                paused("b", LATER),
                LeaseChange::Breaker(breaker("a", "half-open", "closed", 20)),
            ],
        );
    }
    let (_log, recovered) = open(dir.path(), LeaseDurability::Process, 1 << 20);
    assert_eq!(
        recovered.pauses,
        vec![stored_pause("a", LATER + 5), stored_pause("b", LATER)]
    );
    assert_eq!(
        recovered.breakers,
        vec![breaker("b", "open", "half-open", 12)]
    );
}

/// A log written before pauses and breakers were kept (no such records) still opens.
#[test]
fn a_log_without_pause_or_breaker_records_opens() {
    let dir = tempfile::tempdir().unwrap();
    let leases = dir.path().join(LEASE_LOG_DIR);
    std::fs::create_dir_all(&leases).unwrap();
    std::fs::write(
        leases.join("snapshot.jsonl"),
        concat!(
            r#"{"leaseLog":1,"kind":"snapshot","segment":1,"lastGrantAtMs":7}"#,
            "\n",
            r#"{"spend":{"workspaceId":"w","budgetId":"b","principalId":"p","providerId":"llm","attempts":1,"tokens":2,"costUsd":0.5}}"#,
            "\n"
        ),
    )
    .unwrap();
    let (_log, recovered) = open(dir.path(), LeaseDurability::Process, 1 << 20);
    assert_eq!(recovered.last_grant_at_ms, Some(7));
    assert_eq!(recovered.spend.len(), 1);
    assert!(recovered.pauses.is_empty() && recovered.breakers.is_empty());
}

fn only_segment(dir: &Path) -> std::path::PathBuf {
    let mut segments: Vec<_> = std::fs::read_dir(dir.join(LEASE_LOG_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("segment-")
        })
        .collect();
    segments.sort();
    segments.pop().unwrap()
}

#[test]
fn a_torn_last_line_is_ignored_and_a_corrupt_line_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = open(dir.path(), LeaseDurability::Process, DEFAULT_SEGMENT_BYTES);
        append(&mut log, &[LeaseChange::Granted(lease("a", "b", 1))]);
    }
    // A crash in the middle of a write: half a line, never acknowledged.
    let segment = only_segment(dir.path());
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap();
    file.write_all(br#"{"granted":{"token":"x","work"#).unwrap();
    drop(file);
    let (_log, recovered) = open(dir.path(), LeaseDurability::Process, DEFAULT_SEGMENT_BYTES);
    assert_eq!(recovered.leases, vec![lease("a", "b", 1)]);
    drop(_log);

    // A complete line that does not parse is corruption, named with its file and line.
    let segment = only_segment(dir.path());
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap();
    file.write_all(b"{\"granted\":{\"nonsense\":1}}\n").unwrap();
    drop(file);
    let error = LeaseLog::open(dir.path(), LeaseDurability::Process, DEFAULT_SEGMENT_BYTES)
        .err()
        .expect("corrupt log refused");
    let message = error.to_string();
    assert!(message.contains("line 2"), "{message}");
    assert!(message.contains("segment-"), "{message}");
}

#[test]
fn the_interim_sqlite_lease_file_is_imported_once_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("service.leases.sqlite3");
    {
        let conn = rusqlite::Connection::open(&legacy).unwrap();
        conn.execute_batch(
            "CREATE TABLE leases (seq INTEGER PRIMARY KEY, token TEXT NOT NULL UNIQUE,
               workspace_id TEXT NOT NULL, principal_id TEXT NOT NULL, provider_id TEXT NOT NULL,
               budget_id TEXT, attempts INTEGER NOT NULL, tokens INTEGER, cost_usd REAL,
               admitted_at_ms INTEGER NOT NULL, expires_at_ms INTEGER);
             CREATE TABLE budget_spend (workspace_id TEXT NOT NULL, budget_id TEXT NOT NULL,
               principal_id TEXT NOT NULL, provider_id TEXT NOT NULL, attempts INTEGER NOT NULL,
               tokens INTEGER NOT NULL, cost_usd REAL NOT NULL,
               PRIMARY KEY (workspace_id, budget_id, principal_id, provider_id));
             INSERT INTO leases VALUES (1, 'a', 'w', 'p', 'jev', 'b', 1, 3, 0.5, 10, 30010);
             INSERT INTO budget_spend VALUES ('w', 'b', 'p', 'jev', 1, 3, 0.5);",
        )
        .unwrap();
    }
    let (log, recovered) = open(dir.path(), LeaseDurability::Process, DEFAULT_SEGMENT_BYTES);
    assert_eq!(recovered.leases, vec![lease("a", "b", 3)]);
    assert_eq!(recovered.spend[0].tokens, 3);
    assert!(!legacy.exists(), "imported, then removed");
    drop(log);
    let (_log, again) = open(dir.path(), LeaseDurability::Process, DEFAULT_SEGMENT_BYTES);
    assert_eq!(again, recovered, "the snapshot holds what was imported");
}
