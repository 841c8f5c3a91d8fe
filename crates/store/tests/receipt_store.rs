//! Receipt stores: the in-memory store and the SQLite store obey one rule book; SQLite's chain
//! integrity; group commit; and two processes racing to acquire one invocation.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use turnstile_store::{
    CasWrite, GroupCommitStore, IntegrityKey, MemoryReceiptStore, Pending, ReceiptError,
    ReceiptKey, ReceiptState, ReceiptStore, SqliteReceiptOptions, SqliteReceiptStore,
    RECEIPT_DB_FILE,
};

fn key(invocation: &str) -> ReceiptKey {
    ReceiptKey::new("project", invocation)
}

fn stores(dir: &tempfile::TempDir) -> Vec<(&'static str, Box<dyn ReceiptStore>)> {
    let options = SqliteReceiptOptions {
        integrity: Some(IntegrityKey::new(b"host-key".to_vec())),
        ..SqliteReceiptOptions::default()
    };
    vec![
        ("memory", Box::new(MemoryReceiptStore::new())),
        (
            "memory+hmac",
            Box::new(MemoryReceiptStore::with_integrity(IntegrityKey::new(
                b"host-key".to_vec(),
            ))),
        ),
        (
            "sqlite",
            Box::new(SqliteReceiptStore::open(dir.path().join("plain.sqlite3")).unwrap()),
        ),
        (
            "sqlite+hmac",
            Box::new(
                SqliteReceiptStore::open_with(dir.path().join(RECEIPT_DB_FILE), options).unwrap(),
            ),
        ),
    ]
}

#[test]
fn acquire_has_exactly_one_owner_and_cas_follows_the_state_machine() {
    let dir = tempfile::tempdir().unwrap();
    for (name, store) in stores(&dir) {
        let k = key("inv-1");
        assert!(store.read(&k).unwrap().is_none(), "{name}");
        let first = store.acquire(&k, "sha256:a", 100).unwrap();
        assert!(first.owner, "{name}");
        assert_eq!(first.receipt.state, ReceiptState::Acquired);
        let second = store.acquire(&k, "sha256:b", 200).unwrap();
        assert!(!second.owner, "{name}");
        assert_eq!(second.receipt.fingerprint, "sha256:a", "{name}");

        let mut dispatched = first.receipt.successor(ReceiptState::Dispatched, 110);
        dispatched.pending = Some(Pending {
            alias: "category".into(),
            target_index: 0,
            ordinal: 1,
            attempts: Vec::new(),
        });
        assert!(
            store.compare_and_swap(&k, 1, &dispatched).unwrap(),
            "{name}"
        );
        // Stale: revision 1 is no longer the latest.
        assert!(
            !store.compare_and_swap(&k, 1, &dispatched).unwrap(),
            "{name}"
        );

        // Illegal: dispatched → composed.
        let composed = dispatched.successor(ReceiptState::Composed, 120);
        assert!(
            matches!(
                store.compare_and_swap(&k, 2, &composed),
                Err(ReceiptError::IllegalTransition { .. })
            ),
            "{name}"
        );

        let mut observed = dispatched.successor(ReceiptState::ObservationReceived, 120);
        observed.pending = None;
        observed
            .evaluations
            .insert("category".into(), json!({"status": "success"}));
        assert!(store.compare_and_swap(&k, 2, &observed).unwrap());

        // Evaluations are immutable.
        let mut rewrite = observed.successor(ReceiptState::ObservationReceived, 130);
        rewrite
            .evaluations
            .insert("category".into(), json!({"status": "error"}));
        assert!(matches!(
            store.compare_and_swap(&k, 3, &rewrite),
            Err(ReceiptError::Invariant { .. })
        ));

        let composed = observed.successor(ReceiptState::Composed, 130);
        assert!(store.compare_and_swap(&k, 3, &composed).unwrap());
        let mut completed = composed.successor(ReceiptState::Completed, 140);
        completed.result = Some(json!({"kind": "RulesetResult"}));
        assert!(store.compare_and_swap(&k, 4, &completed).unwrap());
        let latest = store.read(&k).unwrap().unwrap();
        assert_eq!(latest.revision, 5, "{name}");
        assert_eq!(latest.state, ReceiptState::Completed);
        assert_eq!(latest.completed_at_epoch_ms, Some(140));

        // Terminal: nothing follows.
        let mut again = completed.successor(ReceiptState::Failed, 150);
        again.result = None;
        assert!(store.compare_and_swap(&k, 5, &again).is_err(), "{name}");

        // CAS on a key that was never acquired.
        assert!(matches!(
            store.compare_and_swap(&key("never"), 1, &completed),
            Err(ReceiptError::NotFound)
        ));
    }
}

#[test]
fn wait_for_terminal_returns_at_the_terminal_write_or_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    for (name, store) in stores(&dir) {
        let store: Arc<dyn ReceiptStore> = Arc::from(store);
        let k = key("inv-wait");
        let acquired = store.acquire(&k, "sha256:a", 0).unwrap().receipt;
        let started = Instant::now();
        let pending = store
            .wait_for_terminal(&k, Duration::from_millis(60))
            .unwrap()
            .unwrap();
        assert_eq!(pending.state, ReceiptState::Acquired, "{name}");
        assert!(started.elapsed() >= Duration::from_millis(60));

        let writer = {
            let store = Arc::clone(&store);
            let k = k.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                let next = acquired.successor(ReceiptState::ExecutionUncertain, 5);
                store.compare_and_swap(&k, 1, &next).unwrap()
            })
        };
        let started = Instant::now();
        let terminal = store
            .wait_for_terminal(&k, Duration::from_secs(10))
            .unwrap()
            .unwrap();
        assert_eq!(terminal.state, ReceiptState::ExecutionUncertain, "{name}");
        assert!(started.elapsed() < Duration::from_secs(5), "{name}");
        assert!(writer.join().unwrap());
    }
}

fn signed_store(path: &std::path::Path, key: &[u8]) -> SqliteReceiptStore {
    SqliteReceiptStore::open_with(
        path,
        SqliteReceiptOptions {
            integrity: Some(IntegrityKey::new(key.to_vec())),
            ..SqliteReceiptOptions::default()
        },
    )
    .unwrap()
}

fn three_revisions(store: &dyn ReceiptStore, k: &ReceiptKey) {
    let r1 = store.acquire(k, "sha256:a", 0).unwrap().receipt;
    let r2 = r1.successor(ReceiptState::ObservationReceived, 1);
    assert!(store.compare_and_swap(k, 1, &r2).unwrap());
    let r3 = r2.successor(ReceiptState::Composed, 2);
    assert!(store.compare_and_swap(k, 2, &r3).unwrap());
}

#[test]
fn a_tampered_or_gapped_sqlite_chain_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(RECEIPT_DB_FILE);
    let store = signed_store(&path, b"host-key");
    let k = key("inv-tamper");
    three_revisions(&store, &k);
    assert_eq!(store.read(&k).unwrap().unwrap().revision, 3);
    assert_eq!(store.history(&k).unwrap().len(), 3);

    // Another key cannot verify the chain.
    let stranger = signed_store(&path, b"other-key");
    assert!(matches!(
        stranger.read(&k),
        Err(ReceiptError::Tampered { revision: 1 })
    ));

    let raw = rusqlite::Connection::open(&path).unwrap();
    // Alter revision 2's document (its MAC no longer verifies).
    raw.execute(
        "UPDATE receipt_revisions SET document = replace(document, '\"updatedAtEpochMs\":1', \
         '\"updatedAtEpochMs\":9') WHERE revision = 2",
        [],
    )
    .unwrap();
    assert!(matches!(
        store.read(&k),
        Err(ReceiptError::Tampered { revision: 2 })
    ));
    // A write on top of a tampered tail is refused too.
    let r3 = store
        .history(&k)
        .expect_err("history of a tampered chain fails");
    assert!(matches!(r3, ReceiptError::Tampered { revision: 2 }));

    let k2 = key("inv-gap");
    three_revisions(&store, &k2);
    raw.execute(
        "DELETE FROM receipt_revisions WHERE invocation_id = 'inv-gap' AND revision = 2",
        [],
    )
    .unwrap();
    assert!(matches!(
        store.read(&k2),
        Err(ReceiptError::Gap {
            expected: 2,
            found: 3
        })
    ));

    // Removing the MAC of a row is not accepted either.
    let k3 = key("inv-unsigned");
    three_revisions(&store, &k3);
    raw.execute(
        "UPDATE receipt_revisions SET mac = NULL WHERE invocation_id = 'inv-unsigned' \
         AND revision = 3",
        [],
    )
    .unwrap();
    assert!(matches!(
        store.read(&k3),
        Err(ReceiptError::Unsigned { revision: 3 })
    ));
    assert!(store.history(&k2).is_err());
}

#[test]
fn group_commit_batches_concurrent_writers_and_keeps_each_answer() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteReceiptStore::open(dir.path().join(RECEIPT_DB_FILE)).unwrap());
    let group = Arc::new(GroupCommitStore::new(Arc::clone(&sqlite), 64).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let group = Arc::clone(&group);
            std::thread::spawn(move || {
                let k = key(&format!("group-{t}"));
                let mut receipt = group.acquire(&k, "sha256:a", 0).unwrap().receipt;
                for step in 0..20u64 {
                    let next = receipt.successor(ReceiptState::ObservationReceived, step);
                    assert!(group.compare_and_swap(&k, receipt.revision, &next).unwrap());
                    receipt = next;
                }
                // A stale write gets its own `false` without failing the batch.
                let stale = receipt.successor(ReceiptState::ObservationReceived, 99);
                assert!(!group.compare_and_swap(&k, 1, &stale).unwrap());
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    for t in 0..8 {
        assert_eq!(
            sqlite
                .read(&key(&format!("group-{t}")))
                .unwrap()
                .unwrap()
                .revision,
            21
        );
    }
    let stats = group.stats();
    let writes = stats.writes.load(std::sync::atomic::Ordering::Relaxed);
    let batches = stats.batches.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(writes, 8 * 21);
    assert!(batches <= writes);

    // The batch API directly: one stale, one illegal, one good, all in one transaction.
    let k = key("batch");
    let r1 = sqlite.acquire(&k, "sha256:a", 0).unwrap().receipt;
    let good = r1.successor(ReceiptState::Composed, 1);
    let illegal = r1.successor(ReceiptState::Completed, 1);
    let answers = sqlite
        .compare_and_swap_batch(&[
            CasWrite {
                key: k.clone(),
                expected_revision: 1,
                next: illegal,
            },
            CasWrite {
                key: k.clone(),
                expected_revision: 1,
                next: good.clone(),
            },
            CasWrite {
                key: k.clone(),
                expected_revision: 1,
                next: good,
            },
        ])
        .unwrap();
    assert!(answers[0].is_err());
    assert!(matches!(answers[1], Ok(true)));
    assert!(matches!(answers[2], Ok(false)));
}

/// Child entry point for the race test: acquires one key when the start instant comes and
/// prints whether it owns it. Does nothing unless spawned by the test below.
#[test]
fn race_child_entry() {
    let Ok(spec) = std::env::var("TURNSTILE_RACE_CHILD") else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let (path, invocation, start_ms) = (parts[0], parts[1], parts[2].parse::<u128>().unwrap());
    let store = SqliteReceiptStore::open(path).unwrap();
    while std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        < start_ms
    {
        std::hint::spin_loop();
    }
    let acquired = store
        .acquire(
            &key(invocation),
            &format!("sha256:{}", std::process::id()),
            0,
        )
        .unwrap();
    println!("OWNER={}", acquired.owner);
}

#[test]
fn two_processes_racing_to_acquire_one_invocation_on_one_file_yield_exactly_one_owner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(RECEIPT_DB_FILE);
    drop(SqliteReceiptStore::open(&path).unwrap());
    let exe = std::env::current_exe().unwrap();
    for round in 0..5 {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 400;
        let invocation = format!("raced-{round}");
        let children: Vec<_> = (0..2)
            .map(|_| {
                Command::new(&exe)
                    .args([
                        "race_child_entry",
                        "--exact",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(
                        "TURNSTILE_RACE_CHILD",
                        format!("{}|{invocation}|{start}", path.display()),
                    )
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect::<Vec<_>>();
        let mut owners = 0;
        for child in children {
            let output = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(output.status.success(), "{stdout}");
            if stdout.contains("OWNER=true") {
                owners += 1;
            } else {
                assert!(stdout.contains("OWNER=false"), "{stdout}");
            }
        }
        assert_eq!(owners, 1, "round {round}");
        let store = SqliteReceiptStore::open(&path).unwrap();
        assert_eq!(store.history(&key(&invocation)).unwrap().len(), 1);
    }
}
