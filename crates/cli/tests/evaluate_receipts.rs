//! `turnstile evaluate --receipts DIR` with real processes: a chat-completions adapter against a
//! real loopback provider that counts its calls. A rerun of a completed invocation replays it
//! (no new call); a CLI killed (SIGKILL) while its call is in flight leaves an uncertain receipt,
//! and the rerun answers `execution-uncertain` without calling the provider again (issue 36,
//! "Tests": a rerun pays for no call twice; EVALUATOR.md "Durable receipt"), also when the
//! evaluation is admitted by a running `turnstile serve` (`--service`).

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use turnstile_testkit::{get_text, http, metric_total, repo_file, Recorded, StubAnswer, StubHttp};

mod common;

const CALLS: &str = "/v1/chat/completions";

/// The provider: a valid answer for each fixture definition's kind (read from the adapter's
/// instructions), after `delay`.
fn provider(delay: Duration) -> StubHttp {
    StubHttp::start(move |request: &Recorded| -> StubAnswer {
        std::thread::sleep(delay);
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let instructions = body["messages"][0]["content"].as_str().unwrap_or("");
        let value = if instructions.contains("option ids") {
            json!("documentation")
        } else if instructions.contains("number from 0 to") {
            json!(0)
        } else {
            json!(0.05)
        };
        let content = json!({"value": value, "confidence": 0.9}).to_string();
        let answer = json!({"id": "req", "model": "stub-model",
            "choices": [{"message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 8}});
        (200, answer.to_string())
    })
}

/// The invocation's files in `dir`: the llm-subagent binding with a short total timeout (so a
/// rerun waits at most 3 s + 1 s for a dead owner) and one chat-completions adapter on
/// `provider` running the fixture worker.
fn inputs(dir: &Path, provider: &StubHttp) -> (PathBuf, PathBuf) {
    let fixtures = repo_file("examples/fixtures");
    let mut binding: Value = read(&fixtures.join("binding-llm-subagent.json"));
    binding["spec"]["totalTimeoutMs"] = json!(3000);
    let shipped: Value = read(&repo_file("examples/adapters.scripted.json"));
    let worker = shipped["adapters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "llm-subagent")
        .unwrap()["worker"]
        .clone();
    let adapters = json!({"adapters": [{"kind": "chat-completions", "id": "llm-subagent",
        "version": "1.0.0", "baseUrl": format!("{}/v1", provider.base()), "worker": worker,
        "maxTokens": 64, "prices": {"inputUsdPerMtok": 3.0, "outputUsdPerMtok": 15.0}}]});
    let (binding_path, adapters_path) = (dir.join("binding.json"), dir.join("adapters.json"));
    std::fs::write(&binding_path, binding.to_string()).unwrap();
    std::fs::write(&adapters_path, adapters.to_string()).unwrap();
    (binding_path, adapters_path)
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `turnstile evaluate` of the fixtures with `binding`, `adapters` and `--receipts receipts`.
fn evaluate(binding: &Path, adapters: &Path, receipts: &Path) -> Command {
    let fixtures = repo_file("examples/fixtures");
    let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .arg("evaluate")
        .arg("--ruleset")
        .arg(fixtures.join("ruleset.json"))
        .arg("--binding")
        .arg(binding)
        .arg("--definitions")
        .arg(&fixtures)
        .arg("--input")
        .arg(fixtures.join("input.json"))
        .arg("--adapters")
        .arg(adapters)
        .arg("--receipts")
        .arg(receipts)
        .args(["--invocation-id", "inv-receipts"])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    command
}

fn result_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("no result: {}", String::from_utf8_lossy(&output.stderr)))
}

#[test]
fn a_completed_invocation_rerun_replays_without_calling_the_provider() {
    let dir = tempfile::tempdir().unwrap();
    let provider = provider(Duration::ZERO);
    let (binding, adapters) = inputs(dir.path(), &provider);
    let receipts = dir.path().join("receipts");

    let first = evaluate(&binding, &adapters, &receipts).output().unwrap();
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first_result = result_of(&first);
    assert_eq!(
        first_result["spec"]["outcome"], "docs-review",
        "{first_result}"
    );
    assert_eq!(provider.count(CALLS), 3, "one call per alias");
    assert!(receipts.join("receipts.sqlite3").is_file());

    let rerun = evaluate(&binding, &adapters, &receipts).output().unwrap();
    assert_eq!(
        rerun.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert_eq!(
        result_of(&rerun),
        first_result,
        "the stored result, replayed"
    );
    assert_eq!(provider.count(CALLS), 3, "the rerun called nothing");
    // Every call carried the adapter's maxTokens.
    for request in provider.received() {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["max_tokens"], 64);
    }
}

/// Kills the CLI (SIGKILL) once `provider` saw its first call, then reruns it twice: each rerun
/// answers `error` / `execution-uncertain` (exit 3) and the provider saw one call in all.
fn kill_mid_call_then_rerun(provider: &StubHttp, mut evaluate: impl FnMut() -> Command) {
    let mut child = evaluate()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        provider.wait_for(CALLS, 1, Duration::from_secs(30)),
        "the provider never saw the first call"
    );
    child.kill().unwrap(); // SIGKILL: no clean-up runs
    child.wait().unwrap();
    assert_eq!(provider.count(CALLS), 1);

    // The rerun finds the receipt dispatched, waits out the dead owner (totalTimeoutMs + 1 s)
    // and answers execution-uncertain: never a second call.
    for round in ["rerun", "second rerun"] {
        let rerun = evaluate().output().unwrap();
        let result = result_of(&rerun);
        assert_eq!(
            rerun.status.code(),
            Some(3),
            "{round}: exit 3 (an error result)"
        );
        assert_eq!(result["spec"]["status"], "error", "{round}: {result}");
        assert_eq!(result["spec"]["reason"], "execution-uncertain", "{round}");
        assert_eq!(provider.count(CALLS), 1, "{round}: no call was paid twice");
    }
}

#[test]
fn a_cli_killed_mid_call_then_rerun_pays_for_no_call_twice() {
    let dir = tempfile::tempdir().unwrap();
    // Slow enough that the call is surely in flight when the CLI is killed.
    let provider = provider(Duration::from_secs(30));
    let (binding, adapters) = inputs(dir.path(), &provider);
    let receipts = dir.path().join("receipts");
    kill_mid_call_then_rerun(&provider, || evaluate(&binding, &adapters, &receipts));
}

/// The same with the evaluation admitted by a real `turnstile serve` process and its shipped
/// demo workspace (its principal `demo` caps cost without admitting unknown cost: the adapters
/// file's estimate is what lets the first attempt in): the service admitted one attempt in all,
/// and the reruns asked it for nothing.
#[test]
fn a_cli_killed_mid_call_under_service_admission_then_rerun_pays_for_no_call_twice() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Embedded defaults: the demo workspace with examples/profile.json.
    let config = turnstile_testkit::config_file(&data, "");
    let serve = common::start(&data, &config, true);
    let admin = serve.admin_key.clone().expect("first start");
    let (status, answer) = http(
        &serve.addr,
        "POST",
        "/v1/workspaces/demo/keys",
        &admin,
        Some(&json!({"principalId": "demo"})),
    )
    .expect("the service answers");
    assert_eq!(status, 201, "{answer}");
    let key = answer["key"].as_str().expect("a key").to_owned();
    let base = format!("http://{}", serve.addr);
    let admitted = || {
        metric_total(
            &get_text(&serve.addr, "/metrics"),
            "turnstile_admission_decisions_total",
            &[("decision", "admit")],
        )
    };
    let before = admitted();

    let provider = provider(Duration::from_secs(30));
    let (binding, adapters) = inputs(dir.path(), &provider);
    let receipts = dir.path().join("receipts");
    kill_mid_call_then_rerun(&provider, || {
        let mut command = evaluate(&binding, &adapters, &receipts);
        command.args(["--service", &base, "--key", &key]);
        command
    });
    assert_eq!(admitted() - before, 1.0, "one admission in all");
}

#[test]
fn a_receipts_path_that_cannot_be_a_directory_is_an_error_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let provider = provider(Duration::ZERO);
    let (binding, adapters) = inputs(dir.path(), &provider);
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, "x").unwrap();

    let output = evaluate(&binding, &adapters, &file).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("receipts directory"), "{stderr}");
    assert!(stderr.contains("hint:"), "{stderr}");
    assert_eq!(provider.count(CALLS), 0);
}
