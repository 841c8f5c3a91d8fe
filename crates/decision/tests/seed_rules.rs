//! The first seed's rules that had no test of their own (issue 36): evaluation is serial unless
//! the scheduler is enabled; the ceiling is the minimum positive one of binding, caller, graph,
//! principal, workspace and every provider; the caller's signal firing during a retry backoff;
//! and the `CNC-ORDER-*` cases (canonical order: evaluations in ruleset order whatever the
//! completion order, matched rules by priority then id, artifact digests over canonical JSON).
//!
//! The seed names `CNC-ORDER-` as the conformance suite's prefix without listing its cases;
//! the three cases here are the orderings the seed and EVALUATOR.md state.

mod common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use turnstile_decision::{
    evaluate, AdapterSet, AttemptReason, CallLog, DispatchCertainty, EvaluationRequest,
    Observation, RulesetStatus, ScriptedAdapter, Status, Step, Termination,
};

use common::*;

/// Every alias of the fixture ruleset answered by jev after 10 ms, logged in `log`.
fn logged_jev(log: &Arc<CallLog>) -> AdapterSet {
    AdapterSet::new().with(Arc::new(
        succeeding("jev", "1.0.0", 10).with_log(Arc::clone(log)),
    ))
}

/// The fixture request with binding concurrency 4, so only the scheduler can bound it.
fn wide_request(adapters: AdapterSet) -> EvaluationRequest {
    let mut request = request("binding-jev.json", adapters);
    request.binding["spec"]["concurrency"] = json!(4);
    request
}

#[tokio::test(start_paused = true)]
async fn serial_unless_the_scheduler_is_enabled() {
    // No scheduler at all: one call at a time although the binding allows 4.
    let log = CallLog::new();
    let result = evaluate(wide_request(logged_jev(&log))).await;
    assert_eq!(result.spec.status, RulesetStatus::Completed);
    assert_eq!((log.count(), log.peak()), (3, 1), "no scheduler: serial");

    // A scheduler given but not enabled (`enabled: false`): still serial, and not registered.
    let log = CallLog::new();
    let driver = driver();
    let mut disabled = policy("workspace", "principal", "v1");
    disabled.enabled = false;
    let request = wide_request(logged_jev(&log)).with_scheduler(scheduled(disabled, &driver));
    let result = evaluate(request).await;
    assert_eq!(result.spec.status, RulesetStatus::Completed);
    assert_eq!((log.count(), log.peak()), (3, 1), "enabled: false: serial");
    assert!(
        driver.snapshot("workspace").await.is_none(),
        "a disabled policy registers nothing"
    );

    // Enabled, every ceiling 4: the three aliases run at once.
    let log = CallLog::new();
    let driver = common::driver();
    let enabled = policy("workspace", "principal", "v1");
    let request = wide_request(logged_jev(&log)).with_scheduler(scheduled(enabled, &driver));
    let result = evaluate(request).await;
    assert_eq!(result.spec.status, RulesetStatus::Completed);
    assert_eq!((log.count(), log.peak()), (3, 3), "enabled: concurrent");
}

#[test]
fn the_ceiling_is_the_minimum_positive_of_every_declared_one() {
    let mut policy = policy("workspace", "principal", "v1");
    // base() everywhere: 4.
    assert_eq!(policy.ceiling(8), 4);
    assert_eq!(policy.ceiling(3), 3, "the binding's");
    policy.caller_concurrency = Some(0);
    policy.graph_concurrency = Some(0);
    assert_eq!(policy.ceiling(8), 4, "a zero declares no ceiling");
    policy.graph_concurrency = Some(2);
    assert_eq!(policy.ceiling(8), 2, "the graph's");
    policy.caller_concurrency = Some(1);
    assert_eq!(policy.ceiling(8), 1, "the caller's");
    policy.caller_concurrency = None;
    policy.graph_concurrency = None;
    policy.workspace.limits.concurrency = 3;
    assert_eq!(policy.ceiling(8), 3, "the workspace's");
    policy.principal.limits.concurrency = 2;
    assert_eq!(policy.ceiling(8), 2, "the principal's");
    // Every provider counts, also one the binding does not use.
    policy
        .providers
        .get_mut("llm-subagent")
        .unwrap()
        .concurrency = 1;
    assert_eq!(policy.ceiling(8), 1, "a provider's");
    // Nothing positive at all: 1.
    let mut zero = self::policy("workspace", "principal", "v1");
    zero.workspace.limits.concurrency = 0;
    zero.principal.limits.concurrency = 0;
    for limits in zero.providers.values_mut() {
        limits.concurrency = 0;
    }
    assert_eq!(zero.ceiling(0), 1);
}

#[tokio::test(start_paused = true)]
async fn the_evaluator_runs_under_the_minimum_positive_ceiling() {
    // (caller, graph, expected peak): binding, principal, workspace and providers allow 4.
    for (caller, graph, expected) in [
        (Some(0), Some(2), 2),
        (Some(1), Some(0), 1),
        (None, None, 3), // 4 allowed, 3 aliases
        (Some(0), Some(0), 3),
    ] {
        let log = CallLog::new();
        let driver = driver();
        let mut policy = policy("workspace", "principal", "v1");
        policy.caller_concurrency = caller;
        policy.graph_concurrency = graph;
        let request = wide_request(logged_jev(&log)).with_scheduler(scheduled(policy, &driver));
        let result = evaluate(request).await;
        assert_eq!(result.spec.status, RulesetStatus::Completed);
        assert_eq!(log.count(), 3);
        assert_eq!(log.peak(), expected, "caller {caller:?}, graph {graph:?}");
    }
}

fn rate_limited() -> Observation {
    Observation::error(
        AttemptReason::RateLimited,
        DispatchCertainty::TerminalResponse,
    )
}

/// Category is rate-limited at t=10 and may retry 3 times (backoff 1000 ms with `half()`).
fn retrying_category(request: &mut EvaluationRequest) {
    request.binding["spec"]["maxAttempts"] = json!(6);
    request.binding["spec"]["evaluations"]["category"]["targets"][0]["retry"] =
        json!({"maxRetries": 3, "initialDelayMs": 1000, "maxDelayMs": 2000});
}

fn assert_cancelled_in_backoff(result: &turnstile_decision::RulesetResult) {
    assert_eq!(result.spec.status, RulesetStatus::Cancelled);
    let category = &result.spec.evaluations.get("category").unwrap().spec;
    assert_eq!(
        (category.status, category.reason),
        (Status::Cancelled, AttemptReason::Cancelled)
    );
    assert_eq!(category.attempts.len(), 1, "no attempt after the signal");
    let first = &category.attempts[0];
    assert_eq!(first.reason, AttemptReason::RateLimited);
    assert_eq!(first.retry_delay_ms, Some(1000));
    assert_eq!(first.termination, None, "the attempt itself ended normally");
}

#[tokio::test(start_paused = true)]
async fn cancellation_during_a_serial_retry_backoff_ends_at_once() {
    let log = CallLog::new();
    let jev = ScriptedAdapter::new("jev", "1.0.0")
        .script(
            "category",
            [
                Step::new(10, rate_limited()),
                Step::new(10, success_for("category")),
            ],
        )
        .with_log(Arc::clone(&log));
    let signal = CancellationToken::new();
    let mut request = request("binding-jev.json", AdapterSet::new().with(Arc::new(jev)))
        .with_signal(signal.clone())
        .with_random(half());
    retrying_category(&mut request);
    let started = Instant::now();
    let run = tokio::spawn(evaluate(request));
    tokio::time::sleep(Duration::from_millis(60)).await; // 50 ms into the 1000 ms backoff
    assert_eq!(log.calls(), ["jev:category"]);
    signal.cancel();
    let result = run.await.unwrap();
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(60),
        "the backoff ends with the signal, not after its 1000 ms"
    );
    assert_eq!(log.calls(), ["jev:category"], "no further attempt");
    assert_cancelled_in_backoff(&result);
    for alias in ["severity", "core_unavailable"] {
        let spec = &result.spec.evaluations.get(alias).unwrap().spec;
        assert_eq!(spec.status, Status::Cancelled);
        assert!(spec.attempts.is_empty(), "{alias} never started");
    }
}

#[tokio::test(start_paused = true)]
async fn cancellation_during_a_scheduled_retry_backoff_ends_at_once() {
    // Ceiling 1: category gives its permit back during its backoff and severity (another
    // lane) takes it for a 5 s call. The signal fires while category sleeps: the run must end
    // at that instant, not when severity would have given the permit back.
    let log = CallLog::new();
    let driver = driver();
    let mut policy = policy("workspace", "principal", "v1");
    policy.principal.limits.concurrency = 1;
    let jev = ScriptedAdapter::new("jev", "1.0.0")
        .script(
            "category",
            [
                Step::new(10, rate_limited()),
                Step::new(10, success_for("category")),
            ],
        )
        .with_default(Step::new(10, success_for("core_unavailable")))
        .with_log(Arc::clone(&log));
    let llm = ScriptedAdapter::new("llm-subagent", "1.0.0")
        .script("severity", [Step::new(5000, success_for("severity"))])
        .with_log(Arc::clone(&log));
    let signal = CancellationToken::new();
    let mut request = request(
        "binding-jev.json",
        AdapterSet::new().with(Arc::new(jev)).with(Arc::new(llm)),
    )
    .with_scheduler(scheduled(policy, &driver))
    .with_signal(signal.clone())
    .with_random(half());
    retrying_category(&mut request);
    request.binding["spec"]["evaluations"]["severity"]["targets"][0]["adapter"] =
        json!("llm-subagent");
    let started = Instant::now();
    let run = tokio::spawn(evaluate(request));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(log.calls(), ["jev:category", "llm-subagent:severity"]);
    signal.cancel();
    let result = run.await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(100), "promptly");
    assert_eq!(
        log.calls(),
        ["jev:category", "llm-subagent:severity"],
        "no further attempt, nothing new started"
    );
    assert_cancelled_in_backoff(&result);
    let severity = &result.spec.evaluations.get("severity").unwrap().spec;
    assert_eq!(severity.status, Status::Cancelled);
    assert_eq!(
        severity.attempts[0].termination,
        Some(Termination::CallerCancelled)
    );
    let core = &result
        .spec
        .evaluations
        .get("core_unavailable")
        .unwrap()
        .spec;
    assert_eq!(core.status, Status::Cancelled);
    assert!(core.attempts.is_empty());
    let snapshot = driver.snapshot("workspace").await.unwrap();
    assert_eq!((snapshot.active, snapshot.queued), (0, 0), "nothing leaked");
}

#[tokio::test(start_paused = true)]
async fn cnc_order_001_completion_order_never_changes_the_evaluation_order() {
    // core_unavailable finishes first and category last; the scheduled run's result equals
    // the serial run's except for durations and the admission evidence (which only the
    // scheduled run has).
    let adapter = |log: &Arc<CallLog>| {
        let mut jev = ScriptedAdapter::new("jev", "1.0.0");
        for (alias, delay) in [("category", 30), ("severity", 20), ("core_unavailable", 10)] {
            jev = jev.script(alias, [Step::new(delay, success_for(alias))]);
        }
        AdapterSet::new().with(Arc::new(jev.with_log(Arc::clone(log))))
    };
    let serial_log = CallLog::new();
    let serial = evaluate(wide_request(adapter(&serial_log))).await;
    let log = CallLog::new();
    let driver = driver();
    let request = wide_request(adapter(&log))
        .with_scheduler(scheduled(policy("workspace", "principal", "v1"), &driver));
    let scheduled_result = evaluate(request).await;
    assert_eq!(log.peak(), 3, "all three ran at once");
    for result in [&serial, &scheduled_result] {
        assert_eq!(
            result.spec.evaluations.aliases().collect::<Vec<_>>(),
            ["category", "severity", "core_unavailable"]
        );
    }
    let comparable = |result: &turnstile_decision::RulesetResult| {
        let mut value = serde_json::to_value(result).unwrap();
        strip(&mut value, "durationMs");
        strip(&mut value, "admission");
        value
    };
    assert_eq!(comparable(&serial), comparable(&scheduled_result));
}

fn strip(value: &mut Value, key: &str) {
    match value {
        Value::Object(map) => {
            map.remove(key);
            map.values_mut().for_each(|v| strip(v, key));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| strip(v, key)),
        _ => {}
    }
}

/// The fixture request with `ruleset` (repinned by the binding).
fn with_ruleset(mut ruleset: Value) -> EvaluationRequest {
    let mut request = request("binding-jev.json", shipped_adapters(0, 0));
    ruleset["metadata"]["id"] = json!("order-cases");
    let digest = turnstile_decision::artifact::artifact_digest(&ruleset).unwrap();
    request.binding["spec"]["ruleset"] =
        json!({"id": "order-cases", "version": "1.0.0", "digest": digest});
    request.ruleset = ruleset;
    request
}

fn docs_rule(id: &str, priority: i64, outcome: &str) -> Value {
    json!({
        "id": id,
        "priority": priority,
        "when": {"op": "eq",
                 "left": {"source": "decision", "alias": "category", "pointer": "/value"},
                 "right": "documentation"},
        "outcome": outcome
    })
}

#[tokio::test(start_paused = true)]
async fn cnc_order_002_matched_rules_by_priority_descending_then_id() {
    // Every rule matches; they are declared in no particular order.
    let rules = json!([
        docs_rule("b-docs", 50, "docs-review"),
        docs_rule("z-low", 10, "manual-review"),
        docs_rule("a-docs", 50, "docs-review"),
        docs_rule("m-high", 90, "runtime-review"),
    ]);
    let mut collect = fixture("ruleset-collect.json");
    collect["spec"]["rules"] = rules.clone();
    let result = evaluate(with_ruleset(collect)).await;
    assert_eq!(result.spec.status, RulesetStatus::Completed);
    assert_eq!(
        result.spec.matched_rules,
        ["m-high", "a-docs", "b-docs", "z-low"]
    );
    assert_eq!(
        result.spec.outcome,
        json!([
            "runtime-review",
            "docs-review",
            "docs-review",
            "manual-review"
        ])
    );

    // First match: the top priority's rules, by id, when they agree.
    let mut first_match = fixture("ruleset.json");
    first_match["spec"]["rules"] = json!([
        docs_rule("b-docs", 50, "docs-review"),
        docs_rule("z-low", 10, "manual-review"),
        docs_rule("a-docs", 50, "docs-review"),
    ]);
    let result = evaluate(with_ruleset(first_match)).await;
    assert_eq!(result.spec.status, RulesetStatus::Completed);
    assert_eq!(result.spec.outcome, json!("docs-review"));
    assert_eq!(result.spec.matched_rules, ["a-docs", "b-docs"]);
}

/// `value` as JSON text with every object's keys in reverse order.
fn reversed_text(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!("{}: {}", Value::from(k.as_str()), reversed_text(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(reversed_text).collect();
            format!("[{}]", items.join(", "))
        }
        other => other.to_string(),
    }
}

#[tokio::test(start_paused = true)]
async fn cnc_order_003_pins_digest_canonical_json_whatever_the_key_order() {
    use sha2::{Digest, Sha256};
    let ruleset = fixture("ruleset.json");
    let digest = turnstile_decision::artifact::artifact_digest(&ruleset).unwrap();
    // The digest is sha256 over the canonical form: sorted keys, no whitespace.
    let canonical = serde_json::to_string(&ruleset).unwrap();
    assert!(
        canonical.starts_with(r#"{"apiVersion":"#),
        "sorted, compact"
    );
    let expected = format!(
        "sha256:{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    assert_eq!(digest, expected);
    assert_eq!(
        fixture("binding-jev.json")["spec"]["ruleset"]["digest"],
        json!(digest),
        "the reference's pin"
    );

    // The same artifacts written with other key orders and whitespace: the same digests, and
    // the fixture pins still match them.
    let text = reversed_text(&ruleset);
    assert!(
        text.starts_with(r#"{ "spec": "#),
        "the key order really differs"
    );
    let reparsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        turnstile_decision::artifact::artifact_digest(&reparsed).unwrap(),
        digest
    );
    let mut request = request("binding-jev.json", shipped_adapters(0, 0));
    request.ruleset = reparsed;
    request.definitions = request
        .definitions
        .iter()
        .map(|d| serde_json::from_str(&reversed_text(d)).unwrap())
        .collect();
    let result = evaluate(request).await;
    assert_eq!(result.spec.status, RulesetStatus::Completed);
    assert_eq!(result.spec.outcome, json!("docs-review"));

    // An array's order is content: reordering the evaluations is another artifact.
    let mut swapped = ruleset.clone();
    swapped["spec"]["evaluations"]
        .as_array_mut()
        .unwrap()
        .swap(0, 1);
    assert_ne!(
        turnstile_decision::artifact::artifact_digest(&swapped).unwrap(),
        digest
    );
}
