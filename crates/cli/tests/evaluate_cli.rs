//! `turnstile evaluate` end to end, through the built binary.

mod common;

fn evaluate(binding: &str, extra: &[&str]) -> serde_json::Value {
    let output = common::evaluate_fixtures(binding)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
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
    let policy = dir.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"enabled": true, "profileVersion": "cli-v1",
            "workspace": {"id": "w", "limits": {"concurrency": 2}},
            "principal": {"id": "p", "limits": {"concurrency": 1}},
            "providers": {"jev": {"concurrency": 2}}}"#,
    )
    .unwrap();
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
