//! Crash recovery with real processes on one SQLite receipt file.
//!
//! The test re-executes its own binary as the child process (`crash_child_entry`, inert unless
//! `TURNSTILE_CRASH_CHILD` is set). Child 1 evaluates with an adapter that appends a line to a
//! marker file and then hangs; the parent SIGKILLs it while that call is in flight. Child 2 runs
//! the same invocation: it waits `totalTimeoutMs + 1 s` for a terminal state, records
//! `execution-uncertain`, and never calls the adapter (the marker file keeps one line).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use turnstile_decision::adapter::BoxFuture;
use turnstile_decision::{
    evaluate, Adapter, AdapterRequest, AdapterSet, Capabilities, Clock, Observation, ReceiptRun,
    ResultReason,
};
use turnstile_store::{ReceiptKey, ReceiptState, ReceiptStore, SqliteReceiptStore};

use common::*;

const TOTAL_TIMEOUT_MS: u64 = 1_500;

/// Appends `call <alias>` to the marker file, then never answers.
struct MarkerAdapter {
    marker: PathBuf,
    capabilities: Capabilities,
}

impl Adapter for MarkerAdapter {
    fn id(&self) -> &str {
        "jev"
    }
    fn version(&self) -> &str {
        "1.0.0"
    }
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }
    fn invoke<'a>(&'a self, request: AdapterRequest<'a>) -> BoxFuture<'a, Observation> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.marker)
            .unwrap();
        writeln!(file, "call {} pid {}", request.alias, std::process::id()).unwrap();
        file.sync_all().unwrap();
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(3_600)).await;
            Observation::success(json!("documentation"))
        })
    }
}

#[test]
fn crash_child_entry() {
    let Ok(spec) = std::env::var("TURNSTILE_CRASH_CHILD") else {
        return;
    };
    let (db, marker) = spec.split_once('|').unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store: Arc<dyn ReceiptStore> = Arc::new(SqliteReceiptStore::open(db).unwrap());
        let adapter = MarkerAdapter {
            marker: PathBuf::from(marker),
            capabilities: Capabilities::all_kinds(),
        };
        let mut request = request(
            "binding-jev.json",
            AdapterSet::new().with(Arc::new(adapter)),
        )
        .with_ids("crash-run", "crash-invocation")
        .with_receipts(ReceiptRun::new(store, "crash-project"))
        .with_clock(Clock::system());
        request.binding["spec"]["totalTimeoutMs"] = json!(TOTAL_TIMEOUT_MS);
        let started = Instant::now();
        let result = evaluate(request).await;
        println!(
            "RESULT {} {}",
            started.elapsed().as_millis(),
            serde_json::to_string(&result).unwrap()
        );
    });
}

fn child(db: &Path, marker: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "crash_child_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "TURNSTILE_CRASH_CHILD",
            format!("{}|{}", db.display(), marker.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn marker_lines(marker: &Path) -> Vec<String> {
    std::fs::read_to_string(marker)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_child_killed_in_flight_leaves_a_receipt_that_the_next_process_records_as_uncertain() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("receipts.sqlite3");
    let marker = dir.path().join("adapter-calls.txt");

    // Child 1: killed while its adapter call is in flight.
    let mut first = child(&db, &marker);
    let deadline = Instant::now() + Duration::from_secs(60);
    while marker_lines(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the first child never called");
        std::thread::sleep(Duration::from_millis(5));
    }
    first.kill().unwrap(); // SIGKILL
    let status = first.wait().unwrap();
    assert!(!status.success());
    assert_eq!(marker_lines(&marker).len(), 1);
    let store = SqliteReceiptStore::open(&db).unwrap();
    let k = ReceiptKey::new("crash-project", "crash-invocation");
    let left = store.read(&k).unwrap().unwrap();
    assert_eq!(left.state, ReceiptState::Dispatched);
    assert_eq!(left.pending.as_ref().unwrap().alias, "category");

    // Child 2: same invocation.
    let second = child(&db, &marker).wait_with_output().unwrap();
    assert!(second.status.success());
    let stdout = String::from_utf8_lossy(&second.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, rest)| rest))
        .unwrap_or_else(|| {
            panic!(
                "the second child printed no result: {stdout}\n{}",
                String::from_utf8_lossy(&second.stderr)
            )
        });
    let (elapsed, result) = line.split_once(' ').unwrap();
    let elapsed: u64 = elapsed.parse().unwrap();
    let result: serde_json::Value = serde_json::from_str(result).unwrap();
    assert_eq!(result["spec"]["reason"], json!("execution-uncertain"));
    assert_eq!(
        serde_json::from_value::<ResultReason>(result["spec"]["reason"].clone()).unwrap(),
        ResultReason::ExecutionUncertain
    );
    assert!(
        elapsed >= TOTAL_TIMEOUT_MS + 1_000 - 50,
        "it waited for the owner first ({elapsed} ms)"
    );
    assert_eq!(
        marker_lines(&marker).len(),
        1,
        "the adapter is never called a second time"
    );
    let receipt = store.read(&k).unwrap().unwrap();
    assert_eq!(receipt.state, ReceiptState::ExecutionUncertain);
    assert_eq!(receipt.revision, left.revision + 1);
}
