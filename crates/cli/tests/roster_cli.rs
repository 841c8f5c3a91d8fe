//! `turnstile roster` end to end: the built binary against a temporary data directory, and
//! `run --once` against a fake chat-completions server on 127.0.0.1 (no external network).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::thread;
use std::time::Duration;

fn turnstile(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .arg("roster")
        .args(args)
        .arg("--data")
        .arg(data)
        .env_remove("TURNSTILE_READER_BASE_URL")
        .env_remove("TURNSTILE_READER_MODEL")
        .env_remove("TURNSTILE_READER_API_KEY_ENV")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn status_json(data: &Path) -> serde_json::Value {
    let output = turnstile(data, &["status", "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn write_evidence(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("evidence.json");
    std::fs::write(
        &path,
        r#"[{"generationId":"agent-1/gen-3","lifecycle":"waiting","summary":"asks to approve a migration"},
            {"generationId":"agent-2/gen-1","lifecycle":"active","summary":"editing the store"}]"#,
    )
    .unwrap();
    path
}

#[test]
fn status_on_a_fresh_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let output = turnstile(&dir.path().join("data"), &["status"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("rolling calls: 0/120 used, 120 available"),
        "{stdout}"
    );
    assert!(
        stdout.contains("limit 120 calls per rolling hour: the hard ceiling"),
        "the /120 is explained: {stdout}"
    );
    assert!(stdout.contains("pending: 0"), "{stdout}");
    assert!(!dir.path().join("data").exists(), "looking creates nothing");
}

#[test]
fn enqueue_then_status_reports_pending_and_bands() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let evidence = write_evidence(dir.path());
    let output = turnstile(&data, &["enqueue", evidence.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("enqueued agent-1/gen-3 band 1 sha256:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("enqueued agent-2/gen-1 band 2 sha256:"),
        "{stdout}"
    );
    let status = status_json(&data);
    assert_eq!(status["pending"], 2);
    assert_eq!(status["rollingCalls"]["used"], 0);
    assert_eq!(status["rollingCalls"]["limit"], 120);
    assert!(status["nextEligibleAt"].is_u64());
}

#[test]
fn enqueue_refuses_malformed_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(
        &path,
        r#"{"generationId":"g","lifecycle":"active","atention":true}"#,
    )
    .unwrap();
    let output = turnstile(
        &dir.path().join("data"),
        &["enqueue", path.to_str().unwrap()],
    );
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("evidence"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn calls_per_hour_above_the_ceiling_zero_and_non_numbers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for (value, expected) in [
        ("121", "never raise"),
        ("10000", "hard ceiling of 120"),
        ("0", "at least 1"),
        ("-3", "at least 1"),
        ("many", "not a number"),
    ] {
        for command in ["run", "status"] {
            let output = turnstile(&data, &[command, "--calls-per-hour", value]);
            assert!(
                !output.status.success(),
                "{command} --calls-per-hour {value} was accepted"
            );
            let stderr = text(&output.stderr);
            assert!(stderr.contains(expected), "{command} {value}: {stderr}");
        }
    }
    let output = turnstile(&data, &["status", "--calls-per-hour", "60"]);
    assert!(
        text(&output.stdout).contains("0/60 used"),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn run_without_a_reader_explains_how_to_configure_one() {
    let dir = tempfile::tempdir().unwrap();
    let output = turnstile(&dir.path().join("data"), &["run", "--once"]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    for needle in [
        "--base-url",
        "TURNSTILE_READER_BASE_URL",
        "TURNSTILE_READER_MODEL",
        "--api-key-env",
    ] {
        assert!(stderr.contains(needle), "missing {needle}: {stderr}");
    }
}

/// Answers every connection with one valid chat completion, up to `count` connections.
fn fake_endpoint(count: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    thread::spawn(move || {
        for _ in 0..count {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 {
                    break;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let answer = serde_json::json!({
                "choices": [{"message": {"role": "assistant",
                    "content": "{\"headline\":\"Waiting for approval\"}"}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5}
            })
            .to_string();
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            )
            .unwrap();
        }
    });
    base
}

#[test]
fn run_once_reads_through_the_endpoint_and_usage_survives_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let evidence = write_evidence(dir.path());
    assert!(turnstile(&data, &["enqueue", evidence.to_str().unwrap()])
        .status
        .success());
    let base = fake_endpoint(2);
    let output = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args([
            "roster",
            "run",
            "--once",
            "--debounce-ms",
            "0",
            "--calls-per-hour",
            "60",
        ])
        .args([
            "--base-url",
            &base,
            "--model",
            "fake-model",
            "--api-key-env",
            "TURNSTILE_CLI_TEST_KEY",
        ])
        .arg("--data")
        .arg(&data)
        .env("TURNSTILE_CLI_TEST_KEY", "cli-secret-key")
        .output()
        .unwrap();
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("read agent-1/gen-3 (band 1): accepted"),
        "{stdout}"
    );
    assert!(
        stdout.contains("read agent-2/gen-1 (band 2): accepted"),
        "{stdout}"
    );
    assert!(!stdout.contains("cli-secret-key") && !stderr.contains("cli-secret-key"));

    // Each command is a fresh process: the rolling usage and the configured limit persisted.
    let status = status_json(&data);
    assert_eq!(status["rollingCalls"]["used"], 2);
    assert_eq!(status["rollingCalls"]["limit"], 60);
    assert_eq!(status["rollingCalls"]["available"], 58);
    assert_eq!(status["pending"], 0);

    let records = turnstile(&data, &["records"]);
    let records: serde_json::Value = serde_json::from_slice(&records.stdout).unwrap();
    assert_eq!(records[0]["kind"], "accepted");
    assert_eq!(records[0]["headline"], "Waiting for approval");

    // A reset keeps the call history.
    assert!(turnstile(&data, &["reset"]).status.success());
    let status = status_json(&data);
    assert_eq!(status["rollingCalls"]["used"], 2);
}
