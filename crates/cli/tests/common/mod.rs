//! What the `turnstile` crate's tests add to the test kit (`turnstile_testkit`): the path of
//! the `turnstile` binary, which only this crate's tests can name, handed to the kit's
//! process helpers.
#![allow(dead_code)]

use std::path::Path;

use turnstile_testkit::{ServeProcess, Turnstile};

/// The `turnstile` binary cargo built for these tests.
pub const TURNSTILE: Turnstile = Turnstile(env!("CARGO_BIN_EXE_turnstile"));

/// `turnstile serve` on `data` with `config` ([`Turnstile::serve`]).
pub fn start(data: &Path, config: &Path, first: bool) -> ServeProcess {
    TURNSTILE.serve(data, config, first)
}

/// `turnstile serve` with extra arguments, e.g. `--redis-url` ([`Turnstile::serve_with`]).
pub fn start_with(data: &Path, config: &Path, first: bool, extra: &[&str]) -> ServeProcess {
    TURNSTILE.serve_with(data, config, first, extra)
}

/// Five admissions on the demo lane `llm-subagent` of the service at `base`, each released as a
/// failure with the demo principal `key`: the lane's breaker (failureThreshold 5) opens.
pub fn open_the_demo_breaker(base: &str, key: &str) {
    let client = reqwest::blocking::Client::new();
    for i in 0..5 {
        let granted: serde_json::Value = client
            .post(format!("{base}/v1/admissions"))
            .bearer_auth(key)
            .json(
                &serde_json::json!({"providerId": "llm-subagent", "budgetId": format!("fail-{i}"),
                "estimate": {"tokens": 10, "costUsd": 0.01}, "deadlineMs": 5000}),
            )
            .send()
            .unwrap()
            .json()
            .unwrap();
        let lease = granted["leaseId"].as_str().expect("granted");
        let released = client
            .post(format!("{base}/v1/leases/{lease}/release"))
            .bearer_auth(key)
            .json(&serde_json::json!({"outcome": "failure"}))
            .send()
            .unwrap();
        assert_eq!(released.status(), 200);
    }
}

/// `turnstile evaluate` of the shipped fixtures (`examples/fixtures`: `ruleset.json`, its
/// definitions, `input.json`) with `binding` and the shipped scripted adapters; add flags to it.
pub fn evaluate_fixtures(binding: &str) -> std::process::Command {
    let fixtures = turnstile_testkit::repo_file("examples/fixtures");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .arg("evaluate")
        .arg("--ruleset")
        .arg(fixtures.join("ruleset.json"))
        .arg("--binding")
        .arg(fixtures.join(binding))
        .arg("--definitions")
        .arg(&fixtures)
        .arg("--input")
        .arg(fixtures.join("input.json"))
        .arg("--adapters")
        .arg(turnstile_testkit::repo_file(
            "examples/adapters.scripted.json",
        ));
    command
}
