//! Several deployments per model, as a user meets them: `turnstile serve` refuses a bad
//! `deployments` configuration at start with one clear line naming the model and the field, and
//! `turnstile serve --config examples/proxy-deployments.toml` (the example, unchanged) serves
//! `gpt-5.4-mini` on its two OpenAI-format deployments and `claude-sonnet-5`, in front of two
//! scripted fake upstreams, with the demo principal key.

use std::process::Command;

use serde_json::{json, Value};
use turnstile_proxy::FakeUpstream;
use turnstile_testkit::{repo_file, Turnstile};

const TURNSTILE: Turnstile = Turnstile(env!("CARGO_BIN_EXE_turnstile"));

/// `turnstile serve` with a `[proxy]` section of two upstreams and `models`: its stderr, after
/// checking it stopped with status 1.
fn refused_start(models: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("turnstile.toml");
    let text = format!(
        "[proxy.upstreams.a]\nformat = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n\
         [proxy.upstreams.c]\nformat = \"anthropic\"\nbase_url = \"http://127.0.0.1:9\"\n\n{models}"
    );
    std::fs::write(&config, text).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

#[test]
fn serve_refuses_a_bad_deployments_configuration_at_start() {
    let cases = [
        (
            "[proxy.models.\"m\"]\nupstream = \"a\"\nprovider = \"p\"\n\
             deployments = [{ upstream = \"a\", provider = \"q\" }]\n",
            "proxy.models.m: give either upstream and provider, or deployments, not both",
        ),
        (
            "[proxy.models.\"m\"]\ndeployments = [{ upstream = \"a\", provider = \"p\" }, \
             { upstream = \"b\", provider = \"q\" }]\n",
            "proxy.models.m.deployments[1].upstream: upstream b is not in [proxy.upstreams]",
        ),
        (
            "[proxy.models.\"m\"]\ndeployments = [{ upstream = \"a\", provider = \"p\" }, \
             { upstream = \"c\", provider = \"q\" }]\n",
            "proxy.models.m.deployments[1].upstream: upstream format anthropic differs",
        ),
        (
            "[proxy.models.\"m\"]\ndeployments = [{ upstream = \"a\", provider = \"p\", weight = 0 }]\n",
            "proxy.models.m.deployments[0].weight: must be a positive integer",
        ),
        (
            "[proxy.models.\"m\"]\ndeployments = []\n",
            "proxy.models.m.deployments: must list from 1 to 16 deployments",
        ),
    ];
    for (models, expected) in cases {
        let stderr = refused_start(models);
        assert!(stderr.contains(expected), "{expected}\n{stderr}");
    }
    // A negative weight does not even parse.
    let stderr = refused_start(
        "[proxy.models.\"m\"]\ndeployments = [{ upstream = \"a\", provider = \"p\", weight = -2 }]\n",
    );
    assert!(stderr.contains("invalid config file"), "{stderr}");
}

/// `POST /openai/v1/chat/completions` (or `/anthropic/v1/messages`) with the demo key: status,
/// the serving lane and the body.
fn call(base: &str, key: &str, path: &str, body: Value, script: &str) -> (u16, String, Value) {
    let response = reqwest::blocking::Client::new()
        .post(format!("{base}{path}"))
        .bearer_auth(key)
        .header("x-fake-script", script)
        .json(&body)
        .send()
        .unwrap();
    let status = response.status().as_u16();
    let lane = response
        .headers()
        .get(turnstile_proxy::PROVIDER_HEADER)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, lane, response.json().unwrap())
}

#[test]
fn the_deployments_example_serves_both_deployments_and_fails_over() {
    let (primary, secondary) = (FakeUpstream::spawn_thread(), FakeUpstream::spawn_thread());
    // The example's variables, as a user sets them (this test binary's only environment).
    std::env::set_var("TURNSTILE_OPENAI_BASE_URL", primary.openai_base());
    std::env::set_var("TURNSTILE_OPENAI_API_KEY", "sk-primary");
    std::env::set_var(
        "TURNSTILE_OPENAI_SECONDARY_BASE_URL",
        secondary.openai_base(),
    );
    std::env::set_var("TURNSTILE_OPENAI_SECONDARY_API_KEY", "sk-secondary");
    std::env::set_var("TURNSTILE_ANTHROPIC_BASE_URL", secondary.anthropic_base());
    std::env::set_var("TURNSTILE_ANTHROPIC_API_KEY", "sk-ant");
    let dir = tempfile::tempdir().unwrap();
    let (service, banner) = TURNSTILE.serve_reading(
        &dir.path().join("data"),
        &repo_file("examples/proxy-deployments.toml"),
        &[],
        |line| line.contains("demo principal key:"),
    );
    let key = banner
        .iter()
        .find_map(|line| {
            line.split_whitespace()
                .last()
                .filter(|w| w.starts_with("tsk_"))
        })
        .unwrap()
        .to_owned();
    let base = format!("http://{}", service.addr);
    let chat = json!({"model": "gpt-5.4-mini", "max_tokens": 20,
                      "messages": [{"role": "user", "content": "hi"}]});
    let path = "/openai/v1/chat/completions";

    // Weights 2 and 1: primary, secondary, primary.
    let lanes: Vec<String> = (0..3)
        .map(|_| call(&base, &key, path, chat.clone(), "").1)
        .collect();
    assert_eq!(
        lanes,
        ["openai-primary", "openai-secondary", "openai-primary"]
    );
    assert_eq!(
        primary.stats().last_authorization.as_deref(),
        Some("Bearer sk-primary")
    );
    assert_eq!(
        secondary.stats().last_authorization.as_deref(),
        Some("Bearer sk-secondary")
    );

    // The primary answers 429: the call fails over, the client sees the secondary's answer.
    primary.set_script("status=429,retry-after=20");
    let (status, lane, body) = call(&base, &key, path, chat.clone(), "");
    assert_eq!((status, lane.as_str()), (200, "openai-secondary"), "{body}");
    assert_eq!(
        (primary.stats().requests, secondary.stats().requests),
        (3, 2)
    );

    // Claude, on the demo's `llm-subagent` lane.
    let messages = json!({"model": "claude-sonnet-5", "max_tokens": 20,
                          "messages": [{"role": "user", "content": "hi"}]});
    let (status, lane, body) = call(&base, &key, "/anthropic/v1/messages", messages, "");
    assert_eq!((status, lane.as_str()), (200, "llm-subagent"), "{body}");
    assert_eq!(body["type"], "message");
}
