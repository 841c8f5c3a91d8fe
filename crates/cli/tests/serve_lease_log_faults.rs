//! Faults of the lease log with real `turnstile serve` processes (issue 34):
//!
//! - item 4: a start on a log that does not cover its history (the snapshot deleted, the last
//!   segment truncated to 0 bytes) exits non-zero naming the file and
//!   `--accept-lease-log-loss`; with that flag it starts, every lane waiting one lease TTL
//!   before it grants (refused `retry-after`);
//! - item 7: a lease log write the kernel refuses (a file size limit set on the running
//!   process with `prlimit`, so the write fails with `EFBIG`) makes `/readyz` answer 503 with
//!   `"journal":"failing"` while grants are refused, and once writes succeed again the journal
//!   recovers by itself: ready, granting, and a later start finds the log whole.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
use common::{start, start_with, TURNSTILE};
use turnstile_testkit::{get_text, http, test_profile, ServeProcess, WORKSPACE};

const TTL_MS: u64 = 3_000;

fn config(dir: &Path, ttl_ms: u64) -> PathBuf {
    turnstile_testkit::config_file(
        dir,
        &format!("demo = false\n\n[leases]\nttl_ms = {ttl_ms}\n"),
    )
}

/// Registers the test profile and answers a key of principal `alice`.
fn set_up(service: &ServeProcess) -> String {
    let admin = service.admin_key.as_deref().expect("first start");
    let path = format!("/v1/workspaces/{WORKSPACE}/profiles/v1");
    let (status, answer) = http(&service.addr, "PUT", &path, admin, Some(&test_profile())).unwrap();
    assert_eq!(status, 201, "{answer}");
    let path = format!("/v1/workspaces/{WORKSPACE}/keys");
    let body = json!({"principalId": "alice"});
    let (status, answer) = http(&service.addr, "POST", &path, admin, Some(&body)).unwrap();
    assert_eq!(status, 201, "{answer}");
    answer["key"].as_str().unwrap().to_owned()
}

/// One admission on lane `wide`, answered at once.
fn acquire(service: &ServeProcess, key: &str) -> (u16, Value) {
    let body =
        json!({"providerId": "wide", "budgetId": "b", "estimate": {"tokens": 1}, "deadlineMs": 0});
    http(&service.addr, "POST", "/v1/admissions", key, Some(&body)).unwrap()
}

fn kill(mut service: ServeProcess) {
    service.child.kill().unwrap();
    service.child.wait().unwrap();
}

/// `turnstile serve` on `data` that must refuse to start: its stderr.
fn refused(data: &Path, config: &Path) -> String {
    let output = Command::new(TURNSTILE.0)
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "the start must be refused: {stderr}"
    );
    stderr
}

fn segments(data: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(data.join("leases"))
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

/// Two starts, each granting two leases, then killed: the log has a snapshot through the
/// first start's segment and the second's segment.
fn log_of_two_starts(data: &Path, config: &Path) -> String {
    let first = start(data, config, true);
    let key = set_up(&first);
    for _ in 0..2 {
        assert_eq!(acquire(&first, &key).0, 200);
    }
    kill(first);
    let second = start(data, config, false);
    assert_eq!(acquire(&second, &key).0, 200);
    kill(second);
    key
}

/// With `--accept-lease-log-loss` the service starts, refuses every grant for about one
/// lease TTL (the lane is paused), then grants.
fn accepted_start_waits_one_ttl(data: &Path, config: &Path, key: &str) -> ServeProcess {
    let started = Instant::now();
    let service = start_with(data, config, false, &["--accept-lease-log-loss"]);
    let (status, answer) = acquire(&service, key);
    assert_eq!(
        (status, answer["reason"].as_str()),
        (503, Some("retry-after")),
        "paused after an accepted loss: {answer}"
    );
    loop {
        let (status, answer) = acquire(&service, key);
        if status == 200 {
            break;
        }
        assert_eq!(answer["reason"], "retry-after", "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never granted: {answer}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        started.elapsed() >= Duration::from_millis(TTL_MS - 200),
        "granted after {:?}, before one lease TTL",
        started.elapsed()
    );
    service
}

#[test]
fn issue_34_a_start_on_a_lease_log_without_its_snapshot_or_with_a_truncated_segment_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let config = config(data.path(), TTL_MS);
    let key = log_of_two_starts(data.path(), &config);

    // The snapshot deleted: refused, naming it and the recovery command.
    let snapshot = data.path().join("leases/snapshot.jsonl");
    std::fs::remove_file(&snapshot).unwrap();
    let stderr = refused(data.path(), &config);
    assert!(
        stderr.contains(&snapshot.display().to_string())
            && stderr.contains("turnstile serve --accept-lease-log-loss"),
        "names the file and the recovery command: {stderr}"
    );
    let service = accepted_start_waits_one_ttl(data.path(), &config, &key);
    kill(service);

    // The last segment truncated to 0 bytes: refused, naming it.
    let last = segments(data.path()).pop().unwrap();
    std::fs::File::create(&last).unwrap();
    let stderr = refused(data.path(), &config);
    assert!(
        stderr.contains(&last.display().to_string()) && stderr.contains("--accept-lease-log-loss"),
        "names the segment: {stderr}"
    );
    let service = accepted_start_waits_one_ttl(data.path(), &config, &key);
    kill(service);
    // Accepted once: the log is whole again.
    kill(start(data.path(), &config, false));
}

fn readyz(service: &ServeProcess) -> String {
    get_text(&service.addr, "/readyz")
}

fn prlimit_fsize(pid: u32, soft: &str) {
    let status = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--fsize={soft}:")])
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit --fsize={soft}");
}

#[test]
fn issue_34_readyz_says_not_ready_while_the_journal_cannot_write_and_it_recovers_by_itself() {
    let data = tempfile::tempdir().unwrap();
    // Leases outlive the test: the restart at its end still finds them held.
    let config = config(data.path(), 600_000);
    let service = start(data.path(), &config, true);
    let key = set_up(&service);
    let (status, first) = acquire(&service, &key);
    assert_eq!(status, 200, "{first}");
    assert!(readyz(&service).starts_with("HTTP/1.1 200"));

    // Every later write to the segment exceeds the process's file size limit.
    let segment = segments(data.path()).pop().unwrap();
    let size = std::fs::metadata(&segment).unwrap().len();
    prlimit_fsize(service.child.id(), &size.to_string());
    let (status, answer) = acquire(&service, &key);
    assert!(
        status == 503 && answer.to_string().contains("storage-error"),
        "{status} {answer}"
    );
    let answer = readyz(&service);
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains(r#""journal":"failing""#),
        "not ready while grants cannot be journaled: {answer}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        readyz(&service).starts_with("HTTP/1.1 503"),
        "still failing"
    );

    // Writes succeed again: ready and granting, without a restart.
    prlimit_fsize(service.child.id(), "unlimited");
    let give_up = Instant::now() + Duration::from_secs(15);
    while !readyz(&service).starts_with("HTTP/1.1 200") {
        assert!(
            Instant::now() < give_up,
            "never ready again: {}",
            readyz(&service)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, second) = acquire(&service, &key);
    assert_eq!(status, 200, "{second}");
    let pid = service.child.id();
    kill(service);

    // The log is whole: the next start opens it and holds both granted leases (the lane
    // `wide` has 4 slots: 2 left).
    let service = start(data.path(), &config, false);
    assert_ne!(service.child.id(), pid);
    let granted = (0..3).filter(|_| acquire(&service, &key).0 == 200).count();
    assert_eq!(
        granted, 2,
        "two of four slots are still held by the journaled leases"
    );
}
