//! A lease log that does not cover its own history is refused at open, naming the file and
//! the recovery command (issue 34, item 4): the snapshot deleted, a segment between two others
//! deleted, the last
//! segment truncated to 0 bytes. Accepting the loss opens what is there and says so, and the
//! next open is clean. A log written by the previous version (`fixtures/lease-log-v1`, written
//! by main's code before this check existed) opens unchanged.

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use turnstile_store::{
    DamageKind, LeaseChange, LeaseDurability, LeaseLog, LeaseLogError, OnDamage, Recovered,
    StoredLease, LEASE_LOG_DIR,
};

const SEGMENT_BYTES: u64 = 600;

fn lease(token: &str) -> StoredLease {
    StoredLease {
        token: token.into(),
        workspace_id: "w".into(),
        principal_id: "p".into(),
        provider_id: "jev".into(),
        budget_id: None,
        attempts: 1,
        tokens: Some(1),
        cost_usd: None,
        admitted_at_ms: 10,
        expires_at_ms: Some(4_000_000_000_000),
    }
}

fn open(dir: &Path, on_damage: OnDamage) -> Result<(LeaseLog, Recovered), LeaseLogError> {
    LeaseLog::open_checked(dir, LeaseDurability::Process, SEGMENT_BYTES, on_damage)
}

/// Grants `count` leases named `prefix-i`, one batch each, and waits for the compactions.
fn grant(log: &mut LeaseLog, prefix: &str, count: usize) {
    for i in 0..count {
        let (tx, rx) = mpsc::channel();
        log.append(
            [LeaseChange::Granted(lease(&format!("{prefix}-{i}")))],
            Box::new(move |result| tx.send(result).unwrap()),
        );
        rx.recv().unwrap().unwrap();
    }
    log.wait_for_compaction();
}

/// A log of two processes: the first granted 6 leases (the log rotated and compacted), the
/// second 2 more. Returns the leases directory.
fn two_starts(dir: &Path) -> PathBuf {
    {
        let (mut log, _) = open(dir, OnDamage::Refuse).unwrap();
        grant(&mut log, "first", 6);
    }
    let (mut log, recovered) = open(dir, OnDamage::Refuse).unwrap();
    assert_eq!(recovered.leases.len(), 6);
    grant(&mut log, "second", 2);
    dir.join(LEASE_LOG_DIR)
}

fn segments(leases: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(leases)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("segment-")
        })
        .collect();
    found.sort();
    found
}

/// Opening is refused with `kind`, naming `file`; accepting the loss opens the log with
/// `held` leases and the damage reported, and the next open is clean.
fn refused_then_accepted(dir: &Path, kind: DamageKind, file: &Path, held: usize) {
    let error = open(dir, OnDamage::Refuse)
        .err()
        .expect("a damaged log is refused");
    match &error {
        LeaseLogError::Damaged(damage) => {
            assert_eq!(damage.kind, kind, "{error}");
            assert_eq!(damage.path, file, "{error}");
        }
        other => panic!("expected Damaged, got {other}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&file.display().to_string())
            && message.contains("turnstile serve --accept-lease-log-loss"),
        "the message names the file and the recovery command: {message}"
    );
    let (_, recovered) = open(dir, OnDamage::Accept).unwrap();
    assert_eq!(recovered.damage.map(|d| d.kind), Some(kind));
    assert_eq!(recovered.leases.len(), held);
    let (_, again) = open(dir, OnDamage::Refuse).expect("the accepted log is whole again");
    assert_eq!((again.damage, again.leases.len()), (None, held));
}

#[test]
fn issue_34_a_deleted_snapshot_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let leases = two_starts(dir.path());
    let snapshot = leases.join("snapshot.jsonl");
    std::fs::remove_file(&snapshot).unwrap();
    refused_then_accepted(dir.path(), DamageKind::MissingSnapshot, &snapshot, 2);
}

#[test]
fn issue_34_a_last_segment_truncated_to_nothing_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let leases = two_starts(dir.path());
    let last = segments(&leases).pop().unwrap();
    std::fs::File::create(&last).unwrap();
    refused_then_accepted(dir.path(), DamageKind::Headerless, &last, 6);
}

#[test]
fn issue_34_a_missing_segment_is_refused_naming_it() {
    // A segment between two others: a later one (whole, with its header) after a gap.
    let dir = tempfile::tempdir().unwrap();
    let leases = two_starts(dir.path());
    let number = |path: &Path| -> u64 {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        name["segment-".len()..name.len() - ".jsonl".len()]
            .parse()
            .unwrap()
    };
    let current = number(segments(&leases).last().unwrap());
    let after_gap = leases.join(format!("segment-{:020}.jsonl", current + 2));
    std::fs::write(
        &after_gap,
        format!(
            "{{\"leaseLog\":1,\"kind\":\"segment\",\"segment\":{}}}\n",
            current + 2
        ),
    )
    .unwrap();
    let missing = leases.join(format!("segment-{:020}.jsonl", current + 1));
    refused_then_accepted(dir.path(), DamageKind::MissingSegment, &missing, 8);
}

#[test]
fn issue_34_a_log_written_by_the_previous_version_opens_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lease-log-v1/leases");
    let leases = dir.path().join(LEASE_LOG_DIR);
    std::fs::create_dir(&leases).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), leases.join(entry.file_name())).unwrap();
    }
    let (_, recovered) = open(dir.path(), OnDamage::Refuse).unwrap();
    let mut held: Vec<String> = recovered.leases.iter().map(|l| l.token.clone()).collect();
    held.sort();
    let mut expected: Vec<String> = (1..6)
        .map(|i| format!("first-{i}"))
        .chain((1..6).map(|i| format!("second-{i}")))
        .collect();
    expected.sort();
    assert_eq!((held, recovered.damage), (expected, None));
}
