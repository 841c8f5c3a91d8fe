//! What the `turnstile-bench` tests add to the test kit (`turnstile_testkit`): the binary, and
//! the kit's in-process service set up for load.
//!
//! The service runs in the test process ([`TestServer`], the code `turnstile serve` runs) on an
//! ephemeral loopback port with a fresh data directory: the tool under test is the separate
//! process, and a crate's tests can only name its own binaries
//! (`CARGO_BIN_EXE_turnstile-bench`), not the `turnstile` one.
#![allow(dead_code)]

use std::process::{Command, Output};

use serde_json::Value;
use turnstile_testkit::TestServer;

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

/// A turnstile service in this process, fresh (no demo profile), with the service's own
/// defaults; stopped (and its data directory removed) on drop.
pub fn service() -> TestServer {
    TestServer::start_fresh(|config| {
        let defaults = turnstile_server::Config::default();
        config.demo = false;
        config.http.shutdown_grace_ms = defaults.http.shutdown_grace_ms;
        config.admission.default_wait_ms = defaults.admission.default_wait_ms;
    })
}

/// Registers `profile` as revision `bench-v1` of workspace `bench` on `service`; a new key of
/// principal `bench`.
pub fn bench_key(service: &TestServer, profile: &Value) -> String {
    let response = service.put_profile(&service.admin(), "bench", "bench-v1", profile);
    assert_eq!(response.status(), 201, "{:?}", response.text());
    service.new_key("bench", "bench")
}
