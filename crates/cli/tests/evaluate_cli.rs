//! `turnstile evaluate` end to end, through the built binary.

mod common;

fn evaluate(binding: &str, extra: &[&str]) -> serde_json::Value {
    let output = evaluate_output(binding, extra);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `turnstile evaluate` of the fixtures with `binding`, the shipped scripted adapters and
/// `extra` arguments, whatever its exit status.
fn evaluate_output(binding: &str, extra: &[&str]) -> std::process::Output {
    common::evaluate_fixtures(binding)
        .args(extra)
        .output()
        .unwrap()
}

/// The scheduler policy `body` as a file in `dir`.
fn policy_file(dir: &std::path::Path, body: &serde_json::Value) -> std::path::PathBuf {
    let policy = dir.join("policy.json");
    std::fs::write(&policy, body.to_string()).unwrap();
    policy
}

/// A policy of workspace `workspace` and principal `principal` (concurrency 2 and 1) on the
/// `jev` lane.
fn jev_policy(dir: &std::path::Path, workspace: &str, principal: &str) -> std::path::PathBuf {
    policy_file(
        dir,
        &serde_json::json!({"enabled": true, "profileVersion": "cli-v1",
            "workspace": {"id": workspace, "limits": {"concurrency": 2}},
            "principal": {"id": principal, "limits": {"concurrency": 1}},
            "providers": {"jev": {"concurrency": 2}}}),
    )
}

#[test]
fn evaluate_fixtures_with_the_shipped_scripted_adapters_gives_docs_review() {
    for binding in [
        "binding-jev.json",
        "binding-llm-subagent.json",
        "binding-fallback.json",
    ] {
        let result = evaluate(
            binding,
            &[
                "--run-id",
                "example-design-run",
                "--invocation-id",
                "example-invocation",
            ],
        );
        assert_eq!(result["kind"], "RulesetResult");
        assert_eq!(result["spec"]["status"], "completed", "{binding}");
        assert_eq!(result["spec"]["outcome"], "docs-review", "{binding}");
        assert_eq!(result["spec"]["matchedRules"], serde_json::json!(["docs"]));
        assert_eq!(result["spec"]["runId"], "example-design-run");
    }
}

#[test]
fn evaluate_with_a_scheduler_policy_records_admission() {
    let dir = tempfile::tempdir().unwrap();
    let policy = jev_policy(dir.path(), "w", "p");
    let result = evaluate(
        "binding-jev.json",
        &["--scheduler", policy.to_str().unwrap()],
    );
    assert_eq!(result["spec"]["outcome"], "docs-review");
    let attempt = &result["spec"]["evaluations"]["category"]["spec"]["attempts"][0];
    assert_eq!(attempt["admission"]["decision"], "admit");
    let text = result.to_string();
    assert!(!text.contains("\"w\"") && !text.contains("\"p\""));
}

/// A scheduler policy file in `dir` whose principal caps cost at `max_cost_usd` without
/// admitting unknown cost (like the shipped demo workspace's principal).
fn cost_capped_policy(dir: &std::path::Path, max_cost_usd: f64) -> std::path::PathBuf {
    policy_file(
        dir,
        &serde_json::json!({"enabled": true, "profileVersion": "cli-v1",
            "workspace": {"id": "w", "limits": {"concurrency": 8}},
            "principal": {"id": "p", "limits": {"concurrency": 4, "maxCostUsd": max_cost_usd,
                "allowUnknownCost": false}},
            "providers": {"llm-subagent": {"concurrency": 4}}}),
    )
}

/// Issue 36 (item 2): each attempt's estimate comes from the adapters file (`maxTokens`,
/// `prices` of `llm-subagent` in examples/adapters.scripted.json), so a principal that caps
/// cost without admitting unknown cost admits every attempt that fits instead of refusing all.
#[test]
fn evaluate_estimates_from_the_adapters_file_admit_under_a_cost_cap() {
    let dir = tempfile::tempdir().unwrap();
    let policy = cost_capped_policy(dir.path(), 5.0);
    let result = evaluate(
        "binding-llm-subagent.json",
        &["--scheduler", policy.to_str().unwrap()],
    );
    assert_eq!(result["spec"]["status"], "completed", "{result}");
    assert_eq!(result["spec"]["outcome"], "docs-review");
    for alias in ["category", "severity", "core_unavailable"] {
        let attempt = &result["spec"]["evaluations"][alias]["spec"]["attempts"][0];
        assert_eq!(
            attempt["admission"]["decision"], "admit",
            "{alias}: {attempt}"
        );
        let cost = attempt["admission"]["estimatedCostUsd"].as_f64().unwrap();
        assert!(cost > 0.0038 && cost < 0.0045, "{alias}: {cost}");
    }
}

/// The estimate is charged: with a cap that fits one attempt (256 output tokens at $15 per
/// million ≈ $0.0039 each) the second attempt of the invocation is refused as `cost`.
#[test]
fn evaluate_estimates_from_the_adapters_file_are_charged_against_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let policy = cost_capped_policy(dir.path(), 0.005);
    let output = evaluate_output(
        "binding-llm-subagent.json",
        &["--scheduler", policy.to_str().unwrap()],
    );
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let attempts = |alias: &str| result["spec"]["evaluations"][alias]["spec"]["attempts"].clone();
    assert_eq!(attempts("category")[0]["admission"]["decision"], "admit");
    let refused = &attempts("severity")[0];
    assert_eq!(refused["admission"]["decision"], "reject", "{result}");
    assert_eq!(refused["admission"]["reason"], "cost", "{refused}");
    assert_eq!(refused["reason"], "budget-exhausted");
}

/// Issue 36 (item 2): `--otlp-endpoint` exports the evaluation's admission spans and metrics to
/// a real OTLP/HTTP receiver, flushed before the command exits, without a tenant ID.
#[test]
fn evaluate_exports_admission_spans_and_metrics_over_otlp_before_it_exits() {
    let receiver = turnstile_testkit::StubHttp::start(|_| (200, String::new()));
    let dir = tempfile::tempdir().unwrap();
    let policy = jev_policy(dir.path(), "secret-workspace-id", "secret-principal-id");
    let result = evaluate(
        "binding-jev.json",
        &[
            "--scheduler",
            policy.to_str().unwrap(),
            "--otlp-endpoint",
            receiver.base(),
        ],
    );
    assert_eq!(result["spec"]["outcome"], "docs-review");
    // The process has exited: whatever it exported is already here.
    let exported = |path: &str| -> Vec<u8> {
        receiver
            .received()
            .into_iter()
            .filter(|r| r.path == path)
            .flat_map(|r| r.body)
            .collect()
    };
    let contains = |haystack: &[u8], needle: &str| {
        haystack
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    };
    let (spans, metrics) = (exported("/v1/traces"), exported("/v1/metrics"));
    assert!(contains(&spans, "decision.admit"), "the admit spans");
    assert!(contains(&spans, "jev"), "with their provider lane");
    assert!(
        contains(&metrics, "decision.admission"),
        "the decisions counted"
    );
    for secret in ["secret-workspace-id", "secret-principal-id"] {
        assert!(
            !contains(&spans, secret) && !contains(&metrics, secret),
            "{secret}"
        );
    }
}

/// Issue 36 (items 1 and 2): `binding-llm-subagent.json` with the shipped adapters runs against
/// a service whose workspace has the shipped demo profile (`examples/profile.json`: principal
/// `demo` caps cost at $5 and refuses unknown cost): the adapters file's estimate admits every
/// attempt, and the service counts them.
#[test]
fn evaluate_with_service_admits_the_shipped_llm_binding_under_the_demo_cost_cap() {
    use turnstile_testkit::{metric_total, TestServer, WORKSPACE};
    let server = TestServer::start_fresh(|_| {});
    let profile: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(turnstile_testkit::repo_file("examples/profile.json")).unwrap(),
    )
    .unwrap();
    let put = server.put_profile(&server.admin(), WORKSPACE, "v1", &profile);
    assert!(put.status().is_success(), "{:?}", put.text());
    let key = server.new_key(WORKSPACE, "demo");
    let result = evaluate(
        "binding-llm-subagent.json",
        &["--service", &server.base, "--key", &key],
    );
    assert_eq!(result["spec"]["status"], "completed", "{result}");
    assert_eq!(result["spec"]["outcome"], "docs-review");
    let admitted = metric_total(
        &server.metrics_text(),
        "turnstile_admission_decisions_total",
        &[("decision", "admit")],
    );
    assert_eq!(admitted, 3.0, "one admission per alias");
}
