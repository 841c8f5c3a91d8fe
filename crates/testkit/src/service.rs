//! A real service on an ephemeral loopback port, on its own runtime thread ([`TestServer`]):
//! the code `turnstile serve` runs, started in the test process, with test-friendly defaults
//! (a 2 s shutdown grace and default wait), and the calls most tests make through it.
//!
//! Invariants: the service stops (and its runtime thread is joined) when the [`TestServer`]
//! drops, also when a test panics; a fresh data directory ([`TestServer::start_fresh`]) is
//! removed only after the service stopped.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::{json, Value};
use turnstile_server::{BootstrapKeys, Config};

use crate::fixtures::{test_profile, WORKSPACE};

/// A running service in this process; stopped on drop.
pub struct TestServer {
    /// The bound loopback address.
    pub addr: SocketAddr,
    /// `http://ADDR`.
    pub base: String,
    /// The keys of the first start on its data directory (`None` on a restart).
    pub keys: Option<BootstrapKeys>,
    /// A blocking client with a 10 s timeout.
    pub client: Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// The data directory of [`TestServer::start_fresh`], removed after the service stopped
    /// (fields drop after [`Drop::drop`]).
    fresh_dir: Option<tempfile::TempDir>,
}

impl TestServer {
    /// [`TestServer::start`] on a fresh temporary data directory that lives as long as the
    /// service (for tests that never restart on the same directory).
    pub fn start_fresh(tweak: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut server = Self::start(dir.path(), tweak);
        server.fresh_dir = Some(dir);
        server
    }

    /// Starts a service on `dir` with test-friendly defaults, adjusted by `tweak`.
    pub fn start(dir: &Path, tweak: impl FnOnce(&mut Config)) -> Self {
        Self::start_with_telemetry(dir, tweak, turnstile_shell::Telemetry::global())
    }

    /// [`TestServer::start`] with the given telemetry handle.
    pub fn start_with_telemetry(
        dir: &Path,
        tweak: impl FnOnce(&mut Config),
        telemetry: turnstile_shell::Telemetry,
    ) -> Self {
        let mut config = Config {
            listen: "127.0.0.1:0".parse().expect("a loopback address"),
            data_dir: dir.to_path_buf(),
            ..Config::default()
        };
        config.http.shutdown_grace_ms = 2_000;
        config.admission.default_wait_ms = 2_000;
        tweak(&mut config);
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async move {
                let server = turnstile_server::start_with_telemetry(config, telemetry)
                    .await
                    .expect("the service starts");
                ready_tx
                    .send((server.local_addr(), server.bootstrap_keys().cloned()))
                    .expect("the test waits for the start");
                let _ = stop_rx.await;
                server.shutdown().await.expect("the service stops cleanly");
            });
        });
        let (addr, keys) = ready_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the service starts within 20 s");
        TestServer {
            addr,
            base: format!("http://{addr}"),
            keys,
            client: Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("an HTTP client"),
            stop: Some(stop_tx),
            thread: Some(thread),
            fresh_dir: None,
        }
    }

    /// The admin key of the first start.
    pub fn admin(&self) -> String {
        self.keys
            .as_ref()
            .expect("the first start's admin key")
            .admin_key
            .clone()
    }

    /// The URL of `path` on this service.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `POST path` with `key` as the bearer.
    pub fn post(&self, path: &str, key: &str) -> RequestBuilder {
        self.client.post(self.url(path)).bearer_auth(key)
    }

    /// `GET path` with `key` as the bearer.
    pub fn get(&self, path: &str, key: &str) -> RequestBuilder {
        self.client.get(self.url(path)).bearer_auth(key)
    }

    /// `PUT` of `profile` as revision `version` of `workspace`.
    pub fn put_profile(
        &self,
        key: &str,
        workspace: &str,
        version: &str,
        profile: &Value,
    ) -> Response {
        self.client
            .put(self.url(&format!("/v1/workspaces/{workspace}/profiles/{version}")))
            .bearer_auth(key)
            .json(profile)
            .send()
            .expect("the service answers")
    }

    /// A new key of `principal` in `workspace`, made with the admin key (asserts 201).
    pub fn new_key(&self, workspace: &str, principal: &str) -> String {
        let response = self
            .post(&format!("/v1/workspaces/{workspace}/keys"), &self.admin())
            .json(&json!({ "principalId": principal }))
            .send()
            .expect("the service answers");
        assert_eq!(response.status(), 201);
        response.json::<Value>().expect("a JSON answer")["key"]
            .as_str()
            .expect("a key")
            .to_owned()
    }

    /// Registers [`test_profile`] as revision `v1` of [`WORKSPACE`] with the admin key.
    pub fn register_test_profile(&self) {
        let response = self.put_profile(&self.admin(), WORKSPACE, "v1", &test_profile());
        assert_eq!(response.status(), 201);
    }

    /// [`TestServer::register_test_profile`], then the keys of principals `alice` and `bob`
    /// of [`WORKSPACE`].
    pub fn register_test_profile_with_keys(&self) -> (String, String) {
        self.register_test_profile();
        (
            self.new_key(WORKSPACE, "alice"),
            self.new_key(WORKSPACE, "bob"),
        )
    }

    /// The lease ID of an admission that must be granted (200).
    pub fn granted_lease(&self, key: &str, body: &Value) -> String {
        let granted = self.acquire(key, body);
        assert_eq!(granted.status(), 200);
        granted.json::<Value>().expect("a JSON answer")["leaseId"]
            .as_str()
            .expect("a lease ID")
            .to_owned()
    }

    /// `POST /v1/admissions` with `body`.
    pub fn acquire(&self, key: &str, body: &Value) -> Response {
        self.post("/v1/admissions", key)
            .json(body)
            .send()
            .expect("the service answers")
    }

    /// `POST /v1/leases/{lease}/release` with `outcome`.
    pub fn release(&self, key: &str, lease: &str, outcome: &Value) -> Response {
        self.post(&format!("/v1/leases/{lease}/release"), key)
            .json(outcome)
            .send()
            .expect("the service answers")
    }

    /// Releases `lease` with `{"outcome": outcome}` and asserts the release answered 200.
    pub fn assert_released(&self, key: &str, lease: &str, outcome: &str) {
        let response = self.release(key, lease, &json!({ "outcome": outcome }));
        assert_eq!(response.status(), 200, "release {lease} ({outcome})");
    }

    /// The status of an unauthenticated `GET path` (`/healthz`, `/readyz`, ...).
    pub fn status_of_get(&self, path: &str) -> u16 {
        self.client
            .get(self.url(path))
            .send()
            .expect("the service answers")
            .status()
            .as_u16()
    }

    /// The JSON answer of `GET path` with `key`.
    pub fn get_json(&self, path: &str, key: &str) -> Value {
        self.get(path, key)
            .send()
            .expect("the service answers")
            .json()
            .expect("a JSON answer")
    }

    /// The `/metrics` exposition as text.
    pub fn metrics_text(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .expect("the service answers")
            .text()
            .expect("the /metrics text")
    }

    /// The value of the first sample of family `name` in `/metrics` (0 when absent).
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.metrics_text();
        text.lines()
            .find(|l| l.split([' ', '{']).next() == Some(name) && !l.starts_with('#'))
            .and_then(|l| l.rsplit(' ').next())
            .map(|v| v.parse().expect("a numeric sample"))
            .unwrap_or(0.0)
    }

    /// The admin snapshot of `workspace`.
    pub fn snapshot(&self, workspace: &str) -> Value {
        self.get_json(
            &format!("/v1/workspaces/{workspace}/snapshot"),
            &self.admin(),
        )
    }

    /// Stops the service and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread
                .join()
                .expect("the service thread ends without a panic");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}
