//! `turnstile serve`'s logs (docs/server.md, "Logs"): a scripted session (a refusal, a breaker
//! opened by failures, a Retry-After pause) against a real process logging JSON at `debug`;
//! every line is one JSON object, the events are there with their lane, and no key, principal
//! or workspace ID appears anywhere in the log.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

mod common;

/// The first start's banner of `child` (its stdout, drained afterwards on a thread):
/// (base URL, admin key, demo principal key).
fn banner(child: &mut std::process::Child) -> (String, String, String) {
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut base, mut admin, mut key) = (String::new(), String::new(), String::new());
    for line in stdout.by_ref() {
        let line = line.unwrap();
        let last = line
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .to_owned();
        if line.starts_with("turnstile serve: listening on ") {
            base = last;
        } else if line.trim_start().starts_with("admin key:") {
            admin = last;
        } else if line.trim_start().starts_with("demo principal key:") {
            key = last;
        } else if line.starts_with("Lost the admin key?") {
            break;
        }
    }
    std::thread::spawn(move || for _ in stdout {});
    (base, admin, key)
}

#[test]
fn a_scripted_session_logs_its_events_as_json_lines_without_a_secret_or_tenant() {
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .args(["--log-level", "debug", "--data"])
        .arg(data.path())
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (base, admin, key) = banner(&mut child);
    assert!(!base.is_empty() && admin.starts_with("tsa_") && key.starts_with("tsk_"));
    let client = reqwest::blocking::Client::new();
    let post = |path: &str, body: Value| {
        client
            .post(format!("{base}{path}"))
            .bearer_auth(&key)
            .json(&body)
            .send()
            .unwrap()
    };
    // A refusal: a provider the profile does not configure (a caller's arbitrary string).
    let refused = post(
        "/v1/admissions",
        json!({"providerId": "no-such-lane-x7", "budgetId": "b", "estimate": {"costUsd": 0.01}}),
    );
    assert_eq!(refused.status(), 422);
    // Five failed calls open the demo lane's breaker (failureThreshold 5).
    common::open_the_demo_breaker(&base, &key);
    // A Retry-After pause of the lane.
    let paused = post(
        "/v1/providers/llm-subagent/retry-after",
        json!({"retryAfterMs": 1500}),
    );
    assert!(paused.status().is_success(), "{}", paused.status());

    // A graceful stop flushes the non-blocking writer.
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{log}");

    let events: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let find = |message: &str| {
        events
            .iter()
            .filter(|e| e["message"] == message)
            .collect::<Vec<_>>()
    };
    let started = find("started");
    assert_eq!(started.len(), 1, "{log}");
    assert_eq!(started[0]["mode"], "single");
    assert!(started[0]["console"].as_str().unwrap().ends_with("/ui"));
    assert!(
        find("refused")
            .iter()
            .any(|e| e["lane"] == "(unconfigured)" && e["reason"] == "unconfigured-provider"),
        "{log}"
    );
    assert!(
        find("breaker transition")
            .iter()
            .any(|e| e["lane"] == "llm-subagent" && e["to"] == "open"),
        "{log}"
    );
    assert!(
        find("provider lane paused")
            .iter()
            .any(|e| e["lane"] == "llm-subagent"),
        "{log}"
    );
    for secret in [admin.as_str(), key.as_str(), "demo", "no-such-lane-x7"] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}

/// `turnstile serve` logging JSON with the proxy configuration `toml` (in a fresh data
/// directory under `dir`), the upstreams' key variable set to `upstream_key`: the process, its
/// base URL and the demo principal key.
fn serve_proxy(
    dir: &std::path::Path,
    toml: &str,
    upstream_key: &str,
) -> (std::process::Child, String, String) {
    let config = dir.join("proxy.toml");
    std::fs::write(&config, toml).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--config",
        ])
        .arg(&config)
        .arg("--data")
        .arg(dir.join("data"))
        .env("TURNSTILE_TEST_UPSTREAM_KEY", upstream_key)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (base, _, key) = banner(&mut child);
    (child, base, key)
}

/// A proxy configuration of one OpenAI-format upstream `name` at `base_url` (its key in
/// `TURNSTILE_TEST_UPSTREAM_KEY`) serving model `m` on the demo lane, after `proxy` (lines of
/// the `[proxy]` section).
fn one_upstream(proxy: &str, name: &str, base_url: &str) -> String {
    format!(
        "[proxy]\n{proxy}\n\n[proxy.upstreams.{name}]\nformat = \"openai\"\nbase_url = \"{base_url}\"\n\
         api_key_env = \"TURNSTILE_TEST_UPSTREAM_KEY\"\n\n[proxy.models.\"m\"]\nupstream = \"{name}\"\n\
         provider = \"llm-subagent\"\ninput_usd_per_mtok = 1.0\noutput_usd_per_mtok = 1.0\n"
    )
}

/// Stops `child` gracefully (flushing its log) and answers its log's JSON events.
fn stopped_log(mut child: std::process::Child) -> (String, Vec<Value>) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    child.wait().unwrap();
    let events = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .collect();
    (log, events)
}

/// A proxied call to an upstream that cannot be reached is logged with the upstream's name, its
/// lane and the kind of failure, and neither the upstream's key nor the caller's appears.
#[test]
fn an_upstream_failure_is_logged_with_its_upstream_and_no_key() {
    let data = tempfile::tempdir().unwrap();
    let upstream_key = "sk-upstream-secret-5f3a9";
    let (child, base, key) = serve_proxy(
        data.path(),
        &one_upstream("", "dead", "http://127.0.0.1:1/v1"),
        upstream_key,
    );
    let answer = reqwest::blocking::Client::new()
        .post(format!("{base}/openai/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}))
        .send()
        .unwrap();
    assert_eq!(answer.status(), 502);
    let (log, events) = stopped_log(child);
    let failure = events
        .iter()
        .find(|e| e["message"] == "upstream failure")
        .unwrap_or_else(|| panic!("no upstream failure in:\n{log}"));
    assert_eq!(
        (&failure["upstream"], &failure["lane"], &failure["kind"]),
        (
            &json!("dead"),
            &json!("llm-subagent"),
            &json!("unreachable")
        )
    );
    let started = events
        .iter()
        .find(|e| e["message"] == "started")
        .expect("the start-up line");
    assert_eq!(started["models"], "m->dead");
    for secret in [upstream_key, key.as_str(), "demo"] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}

/// A streamed answer that breaks off midway (the fake upstream cuts the connection) and one
/// that stalls past `proxy.idle_timeout_ms` are each logged at warn with the upstream's name,
/// the lane and the kind, after the client's stream began; no key or tenant appears.
#[test]
fn a_proxied_stream_broken_midway_is_logged_with_its_upstream_and_kind() {
    let fake = turnstile_proxy::FakeUpstream::spawn_thread();
    let data = tempfile::tempdir().unwrap();
    let upstream_key = "sk-upstream-secret-9c2e1";
    let (child, base, key) = serve_proxy(
        data.path(),
        &one_upstream("idle_timeout_ms = 400", "flaky", &fake.openai_base()),
        upstream_key,
    );
    for script in ["chunks=5,cut-after=2", "chunks=3,stall-ms=3000"] {
        // A client per call: a cut connection is not one to reuse.
        let mut answer = reqwest::blocking::Client::new()
            .post(format!("{base}/openai/v1/chat/completions"))
            .bearer_auth(&key)
            .header("x-fake-script", script)
            .json(&json!({"model": "m", "stream": true, "max_tokens": 5,
                          "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .unwrap_or_else(|e| panic!("{script}: {e:?}"));
        assert_eq!(answer.status(), 200, "{script}: the stream began");
        let mut bytes = Vec::new();
        let read = answer.read_to_end(&mut bytes);
        let body = String::from_utf8_lossy(&bytes);
        assert!(
            read.is_err(),
            "{script}: the client's stream is cut: {body}"
        );
        assert!(body.contains("tok0"), "{script}: {body}");
        assert!(!body.contains("[DONE]"), "{script}: {body}");
    }
    let (log, events) = stopped_log(child);
    let kinds: Vec<&Value> = events
        .iter()
        .filter(|e| e["message"] == "upstream failure")
        .inspect(|e| {
            assert_eq!(e["level"], "WARN", "{e}");
            assert_eq!(
                (&e["upstream"], &e["lane"]),
                (&json!("flaky"), &json!("llm-subagent"))
            );
        })
        .map(|e| &e["kind"])
        .collect();
    assert_eq!(
        kinds,
        [&json!("stream-broken"), &json!("stream-stalled")],
        "{log}"
    );
    for secret in [upstream_key, key.as_str(), "demo"] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}
