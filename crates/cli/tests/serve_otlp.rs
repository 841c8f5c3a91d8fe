//! `turnstile serve --otlp-endpoint`: the service's spans reach an OTLP/HTTP receiver, flushed
//! on a graceful stop, and carry no tenant ID.

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the receiver got: path and body.
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A minimal OTLP/HTTP receiver: answers every POST with 200 and keeps path and body.
fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let received: Received = Arc::default();
    let sink = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let sink = sink.clone();
            std::thread::spawn(move || serve_connection(stream, &sink));
        }
    });
    (endpoint, received)
}

fn serve_connection(stream: TcpStream, sink: &Received) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_owned();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        sink.lock().unwrap().push((path, body));
        let _ = writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn serve_exports_admission_spans_over_otlp_and_flushes_them_on_stop() {
    let (endpoint, received) = receiver();
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data.path())
        .args(["--otlp-endpoint", &endpoint])
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
    let (base, key) = (base.unwrap(), demo_key.unwrap());
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
    let stopped = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");

    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let traces = loop {
        let traces: Vec<Vec<u8>> = received
            .lock()
            .unwrap()
            .iter()
            .filter(|(path, _)| path == "/v1/traces")
            .map(|(_, body)| body.clone())
            .collect();
        if !traces.is_empty() || std::time::Instant::now() > deadline {
            break traces;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!traces.is_empty(), "no OTLP trace export arrived");
    let all: Vec<u8> = traces.concat();
    assert!(
        contains(&all, b"decision.admit"),
        "the admit span was exported"
    );
    assert!(contains(&all, b"llm-subagent"), "with its provider lane");
    for secret in [&b"demo"[..], b"inv-otlp"] {
        assert!(!contains(&all, secret), "a tenant ID reached the collector");
    }
}
