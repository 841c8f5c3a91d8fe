//! What the `turnstile-bench` tests share: the binary, and a turnstile service to load.
//!
//! The service runs in the test process (`turnstile_server::start`, the code `turnstile serve`
//! runs) on an ephemeral loopback port with a fresh data directory: the tool under test is the
//! separate process, and a crate's tests can only name its own binaries
//! (`CARGO_BIN_EXE_turnstile-bench`), not the `turnstile` one.
#![allow(dead_code)]

use std::process::{Command, Output};

use serde_json::{json, Value};

/// `turnstile-bench ARGS`, run to its end.
pub fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_turnstile-bench"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("the turnstile-bench binary runs")
}

/// The JSON report of a run that succeeded (`--json`), or a panic with its stderr.
pub fn json_report(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("--json prints one JSON document")
}

/// A turnstile service in this process; stopped (and its data directory removed) on drop.
pub struct Service {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The admin key of its first start.
    pub admin_key: String,
    running: Option<turnstile_server::RunningServer>,
    runtime: tokio::runtime::Runtime,
    _data: tempfile::TempDir,
}

impl Service {
    /// A fresh service (no demo profile).
    pub fn start() -> Service {
        let data = tempfile::tempdir().expect("a temporary directory");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let config = turnstile_server::Config {
            listen: "127.0.0.1:0".parse().expect("an address"),
            data_dir: data.path().join("data"),
            demo: false,
            ..turnstile_server::Config::default()
        };
        let running = runtime
            .block_on(turnstile_server::start(config))
            .expect("the service starts");
        let admin_key = running
            .bootstrap_keys()
            .expect("a fresh data directory yields an admin key")
            .admin_key
            .clone();
        Service {
            url: format!("http://{}", running.local_addr()),
            admin_key,
            running: Some(running),
            runtime,
            _data: data,
        }
    }

    /// `METHOD path` with the admin key and a JSON body: the status and the JSON answer.
    pub fn admin(&self, method: reqwest::Method, path: &str, body: &Value) -> (u16, Value) {
        let response = reqwest::blocking::Client::new()
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.admin_key)
            .json(body)
            .send()
            .expect("the service answers");
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// Registers `profile` as revision `bench-v1` of workspace `bench`; a new key of principal
    /// `bench`.
    pub fn bench_key(&self, profile: &Value) -> String {
        let (status, answer) = self.admin(
            reqwest::Method::PUT,
            "/v1/workspaces/bench/profiles/bench-v1",
            profile,
        );
        assert_eq!(status, 201, "{answer}");
        let (status, answer) = self.admin(
            reqwest::Method::POST,
            "/v1/workspaces/bench/keys",
            &json!({"principalId": "bench"}),
        );
        assert_eq!(status, 201, "{answer}");
        answer["key"].as_str().expect("a key").to_owned()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = self.runtime.block_on(running.shutdown());
        }
    }
}
