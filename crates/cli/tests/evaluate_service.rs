//! `turnstile evaluate --service URL --key KEY` end to end: a real `turnstile serve` process
//! and the built CLI. The evaluation's attempts are the service's decisions (its `/metrics`
//! decision counter), a provider lane's concurrency is shared with a concurrent HTTP client (the
//! evaluation's attempt queues on the service while the client holds the lane's one permit), a
//! binding whose adapter is not a lane of the profile is refused naming it, and the flags'
//! misuse is a usage error. The key never appears in the output.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use turnstile_testkit::{get_text, http, metric_total, repo_file, ServeProcess};

use common::{evaluate_fixtures, start};

const WORKSPACE: &str = "evals";
const DECISIONS: &str = "turnstile_admission_decisions_total";

/// A service whose workspace `evals` has the lanes of the shipped scripted adapters (the LLM
/// lane with one permit), workspace `narrow` a `jev` lane only; the keys of principal
/// `evaluator` and `agent` of `evals` and `evaluator` of `narrow`.
struct Service {
    _data: tempfile::TempDir,
    process: ServeProcess,
    evaluator: String,
    agent: String,
    narrow: String,
}

fn service() -> Service {
    let data = tempfile::tempdir().unwrap();
    let config = turnstile_testkit::config_file(data.path(), "demo = false\n");
    let process = start(data.path(), &config, true);
    let admin = process.admin_key.clone().expect("first start");
    let principals = json!({"evaluator": {"concurrency": 4}, "agent": {"concurrency": 4}});
    let workspace = json!({"concurrency": 8, "maxQueueLength": 8, "maxQueueWaitMs": 30000});
    let profiles = [
        (
            WORKSPACE,
            json!({"llm-subagent": {"concurrency": 1}, "jev": {"concurrency": 2}}),
        ),
        ("narrow", json!({"jev": {"concurrency": 2}})),
    ];
    for (name, providers) in profiles {
        let profile =
            json!({"workspace": workspace, "providers": providers, "principals": principals});
        let path = format!("/v1/workspaces/{name}/profiles/v1");
        let (status, answer) = http(&process.addr, "PUT", &path, &admin, Some(&profile)).unwrap();
        assert_eq!(status, 201, "{answer}");
    }
    let key = |workspace: &str, principal: &str| {
        let path = format!("/v1/workspaces/{workspace}/keys");
        let body = json!({ "principalId": principal });
        let (status, answer) = http(&process.addr, "POST", &path, &admin, Some(&body)).unwrap();
        assert_eq!(status, 201, "{answer}");
        answer["key"].as_str().expect("a key").to_owned()
    };
    let (evaluator, agent, narrow) = (
        key(WORKSPACE, "evaluator"),
        key(WORKSPACE, "agent"),
        key("narrow", "evaluator"),
    );
    Service {
        _data: data,
        process,
        evaluator,
        agent,
        narrow,
    }
}

impl Service {
    fn url(&self) -> String {
        format!("http://{}", self.process.addr)
    }

    fn admitted(&self) -> f64 {
        metric_total(
            &get_text(&self.process.addr, "/metrics"),
            DECISIONS,
            &[("decision", "admit")],
        )
    }

    fn snapshot(&self) -> Value {
        let path = format!("/v1/workspaces/{WORKSPACE}/snapshot");
        let (status, answer) = http(&self.process.addr, "GET", &path, &self.agent, None).unwrap();
        assert_eq!(status, 200, "{answer}");
        answer
    }
}

/// `turnstile evaluate` of the shipped fixtures with `binding`, the key in `TURNSTILE_KEY`.
fn evaluate(binding: &str, key: &str, extra: &[&str]) -> Command {
    let mut command = evaluate_fixtures(binding);
    command.args(extra).env("TURNSTILE_KEY", key);
    command
}

fn result_of(output: &Output, key: &str) -> Value {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        !stdout.contains(key) && !stderr.contains(key),
        "the key was printed"
    );
    assert!(output.status.success(), "{stderr}");
    serde_json::from_str(&stdout).expect("a result")
}

/// A usage error (exit 2) naming `flag`.
fn usage_error(output: &Output, flag: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(flag), "{stderr}");
}

fn attempts(result: &Value) -> Vec<Value> {
    ["category", "severity", "core_unavailable"]
        .iter()
        .flat_map(|alias| {
            result["spec"]["evaluations"][alias]["spec"]["attempts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn evaluate_service_attempts_are_the_services_decisions() {
    let service = service();
    let before = service.admitted();
    let output = evaluate(
        "binding-llm-subagent.json",
        &service.evaluator,
        &["--service", &service.url()],
    )
    .output()
    .unwrap();
    let result = result_of(&output, &service.evaluator);
    assert_eq!(result["spec"]["status"], "completed");
    assert_eq!(result["spec"]["outcome"], "docs-review");
    let attempts = attempts(&result);
    assert_eq!(attempts.len(), 3);
    assert!(
        attempts
            .iter()
            .all(|a| a["admission"]["decision"] == "admit"),
        "{attempts:?}"
    );
    assert_eq!(service.admitted() - before, 3.0);
    let snapshot = service.snapshot();
    assert_eq!(
        (
            snapshot["leases"].as_u64(),
            snapshot["openBudgets"].as_u64()
        ),
        (Some(0), Some(0))
    );
}

#[test]
fn evaluate_service_shares_a_lane_limit_with_a_concurrent_http_client() {
    let service = service();
    // The agent holds the LLM lane's one permit through the admission API.
    let body = json!({"providerId": "llm-subagent", "budgetId": "agent-1", "estimate": {}, "deadlineMs": 1000});
    let (status, granted) = http(
        &service.process.addr,
        "POST",
        "/v1/admissions",
        &service.agent,
        Some(&body),
    )
    .unwrap();
    assert_eq!(status, 200, "{granted}");
    let lease = granted["leaseId"].as_str().expect("a lease").to_owned();

    let mut child = evaluate(
        "binding-llm-subagent.json",
        &service.evaluator,
        &["--service", &service.url()],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The evaluation's first attempt waits on the service behind the agent's lease.
    let mut waited = false;
    for _ in 0..400 {
        let snapshot = service.snapshot();
        if snapshot["waiters"] == 1 && snapshot["providers"]["llm-subagent"]["queued"] == 1 {
            waited = true;
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the evaluation ended while the lane was held"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(
        waited,
        "the evaluation's attempt never queued on the service"
    );
    assert_eq!(service.snapshot()["providers"]["llm-subagent"]["active"], 1);
    let path = format!("/v1/leases/{lease}/release");
    let (status, answer) = http(
        &service.process.addr,
        "POST",
        &path,
        &service.agent,
        Some(&json!({"outcome": "success"})),
    )
    .unwrap();
    assert_eq!(status, 200, "{answer}");

    let output = child.wait_with_output().unwrap();
    let result = result_of(&output, &service.evaluator);
    assert_eq!(result["spec"]["status"], "completed");
    let attempts = attempts(&result);
    assert!(
        attempts
            .iter()
            .all(|a| a["admission"]["decision"] == "admit"),
        "{attempts:?}"
    );
    let snapshot = service.snapshot();
    assert_eq!(
        (snapshot["waiters"].as_u64(), snapshot["leases"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn evaluate_service_refuses_a_binding_whose_adapter_is_not_a_lane_and_misused_flags() {
    let service = service();
    let output = evaluate(
        "binding-llm-subagent.json",
        &service.narrow,
        &["--service", &service.url()],
    )
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result: Value = serde_json::from_str(&stdout).expect("a printed result");
    assert_eq!(result["spec"]["reason"], "invalid-definition");
    let detail = result["spec"]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("\"llm-subagent\""), "{detail}");
    assert!(!stdout.contains(&service.narrow));
    assert_eq!(service.admitted(), 0.0);

    let policy = repo_file("Cargo.toml");
    let both = evaluate(
        "binding-jev.json",
        &service.evaluator,
        &["--service", &service.url(), "--scheduler"],
    )
    .arg(Path::new(&policy))
    .output()
    .unwrap();
    usage_error(&both, "--scheduler");
    let keyless = evaluate("binding-jev.json", "", &["--service", &service.url()])
        .env_remove("TURNSTILE_KEY")
        .output()
        .unwrap();
    usage_error(&keyless, "--key");
}
