//! `turnstile serve --otlp-endpoint`: the service's spans reach an OTLP/HTTP receiver, flushed
//! on a graceful stop, and carry no tenant ID.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use turnstile_testkit::StubHttp;

mod common;

/// A minimal OTLP/HTTP receiver: answers every POST with 200 and keeps path and body.
fn receiver() -> (String, StubHttp) {
    let stub = StubHttp::start(|_| (200, String::new()));
    (stub.base().to_owned(), stub)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `turnstile serve` on a fresh data directory exporting to `endpoint`: the process, its base
/// URL and the demo principal key.
fn serve(endpoint: &str, data: &std::path::Path) -> (std::process::Child, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .args(["--otlp-endpoint", endpoint])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut base = None;
    let mut demo_key = None;
    while demo_key.is_none() {
        let line = lines.next().expect("the banner").unwrap();
        if let Some(url) = line.strip_prefix("turnstile serve: listening on ") {
            base = Some(url.to_owned());
        }
        if line.contains("demo principal key") {
            demo_key = line.split_whitespace().last().map(str::to_owned);
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (child, base.unwrap(), demo_key.unwrap())
}

/// Stops `child` gracefully (the exporters flush) and answers the bodies the receiver got on
/// `path` (waiting up to 10 s for the first).
fn stop_and_collect(mut child: std::process::Child, received: &StubHttp, path: &str) -> Vec<u8> {
    let stopped = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let bodies: Vec<Vec<u8>> = received
            .received()
            .into_iter()
            .filter(|r| r.path == path)
            .map(|r| r.body)
            .collect();
        if !bodies.is_empty() || std::time::Instant::now() > deadline {
            return bodies.concat();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_exports_admission_spans_over_otlp_and_flushes_them_on_stop() {
    let (endpoint, received) = receiver();
    let data = tempfile::tempdir().unwrap();
    let (child, base, key) = serve(&endpoint, data.path());
    let client = reqwest::blocking::Client::new();
    let lease: serde_json::Value = client
        .post(format!("{base}/v1/admissions"))
        .bearer_auth(&key)
        .json(
            &serde_json::json!({"providerId": "llm-subagent", "budgetId": "inv-otlp",
            "estimate": {"tokens": 10, "costUsd": 0.01}}),
        )
        .send()
        .unwrap()
        .json()
        .unwrap();
    let lease_id = lease["leaseId"].as_str().expect("admitted");
    let released = client
        .post(format!("{base}/v1/leases/{lease_id}/release"))
        .bearer_auth(&key)
        .json(&serde_json::json!({"outcome": "success"}))
        .send()
        .unwrap();
    assert_eq!(released.status(), 200);

    // A graceful stop flushes the batch exporter.
    let all = stop_and_collect(child, &received, "/v1/traces");
    assert!(!all.is_empty(), "no OTLP trace export arrived");
    assert!(
        contains(&all, b"decision.admit"),
        "the admit span was exported"
    );
    assert!(contains(&all, b"llm-subagent"), "with its provider lane");
    for secret in [&b"demo"[..], b"inv-otlp"] {
        assert!(!contains(&all, secret), "a tenant ID reached the collector");
    }
}

/// The metric names of the admission runbook (`docs/operations/admission.md`): each backticked
/// `decision.*` or `turnstile_*` name (a Prometheus selector's name without its labels).
fn runbook_metric_names() -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/operations/admission.md"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut names: Vec<String> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|quoted| {
            quoted
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.'))
                .collect::<String>()
        })
        .filter(|name| name.starts_with("decision.") || name.starts_with("turnstile_"))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Issue 33 (item 6): every metric the runbook names is exported by a running service: the
/// `turnstile_*` series at `/metrics`, the specification's `decision.*` instruments (with
/// their `breaker_status` dimension) over OTLP to a real receiver, after an admission, a
/// refusal and a breaker that opened.
#[test]
fn every_metric_the_admission_runbook_names_is_exported_by_a_running_service() {
    let names = runbook_metric_names();
    for expected in [
        "decision.admission",
        "decision.throttles",
        "decision.breaker_transitions",
        "turnstile_admission_decisions_total",
        "turnstile_breaker_transitions_total",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    let (endpoint, received) = receiver();
    let data = tempfile::tempdir().unwrap();
    let (child, base, key) = serve(&endpoint, data.path());
    // The demo lane's breaker opens (five failures); then a refusal.
    common::open_the_demo_breaker(&base, &key);
    let client = reqwest::blocking::Client::new();
    let refused = client
        .post(format!("{base}/v1/admissions"))
        .bearer_auth(&key)
        .json(
            &serde_json::json!({"providerId": "llm-subagent", "budgetId": "rb-open",
            "estimate": {"tokens": 10, "costUsd": 0.01}, "deadlineMs": 0}),
        )
        .send()
        .unwrap();
    assert!(!refused.status().is_success(), "{}", refused.status());
    let scraped = client
        .get(format!("{base}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let metrics = stop_and_collect(child, &received, "/v1/metrics");
    for name in &names {
        let exported = if name.starts_with("turnstile_") {
            scraped.lines().any(|line| {
                line.strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with(['{', ' ']))
            })
        } else {
            contains(&metrics, name.as_bytes())
        };
        assert!(exported, "the runbook names {name}, which is not exported");
    }
    assert!(
        contains(&metrics, b"breaker_status"),
        "the breaker-state dimension"
    );
    for secret in [&b"demo"[..], b"rb-open"] {
        assert!(
            !contains(&metrics, secret),
            "a tenant ID reached the collector"
        );
    }
}
