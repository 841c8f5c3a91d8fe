//! `turnstile qualify` as a Unix citizen: a reader that stops early ends it quietly.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn qualify_arrivals_into_a_closed_pipe_ends_quietly_and_successfully() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["qualify", "arrivals"])
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the turnstile binary runs");
    let stdout = child.stdout.take().unwrap();
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).unwrap();
    // The reader is gone (like `| head -1`); 20,000 more lines are still to be written.
    let output = child.wait_with_output().unwrap();
    let arrival: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(arrival["ordinal"], 0);
    assert!(output.status.success(), "{:?}", output.status);
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
}

/// `--report FILE.html`: one self-contained page with the charts, the bounds table and both
/// digests; the same run gives the same record (the harness is deterministic).
#[test]
fn qualify_report_writes_a_self_contained_page() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.html");
    let output = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["qualify", "--json", "--report"])
        .arg(&report)
        .output()
        .expect("the turnstile binary runs");
    assert!(output.status.success(), "{:?}", output);
    let record: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("report written to {}", report.display())),
        "says where: {stderr}"
    );
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.starts_with("<!doctype html>"));
    assert_eq!(html.matches(r#"<figure class="chart">"#).count(), 5);
    assert!(html.contains("<polyline"));
    // Each principal of the manifest is one ranked bar (no ID in the page).
    assert!(html.matches("data-ratio=").count() >= 2);
    for digest in [&record["digest"], &record["manifest"]["digest"]] {
        assert!(html.contains(digest.as_str().unwrap()), "{digest}");
    }
    let bounds = record["comparisons"].as_array().unwrap().len();
    assert_eq!(html.matches("<tr data-pass=").count(), bounds);
    // Self-contained: no script, nothing fetched.
    for absent in ["<script", "src=", "href=", "http://", "https://"] {
        assert!(!html.contains(absent), "{absent}");
    }
    // The evaluator alone cannot be charted.
    let refused = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["qualify", "--target", "evaluator", "--report"])
        .arg(dir.path().join("no.html"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
}
