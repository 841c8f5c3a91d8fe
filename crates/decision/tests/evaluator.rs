//! The evaluator end to end: fixtures, fallback, cancellation and timeouts in a queued wait,
//! CNC-SCHED-BACKOFF-003 and CNC-ADMIT-SCOPE-001..003.

mod common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use turnstile_admission::{AdmissionRequest, Decision, Reason};
use turnstile_decision::{
    evaluate, AdapterSet, AttemptReason, CallLog, DispatchCertainty, Observation, ResultNaming,
    ResultReason, RulesetStatus, ScriptedAdapter, Status, Step, Termination,
};

use common::*;

fn naming(prefix: &str) -> ResultNaming {
    ResultNaming {
        id_prefix: prefix.into(),
        description_prefix: "example".into(),
        version: "1.0.0".into(),
    }
}

fn to_json(result: &turnstile_decision::RulesetResult) -> Value {
    serde_json::to_value(result).unwrap()
}

#[tokio::test(start_paused = true)]
async fn fixture_ruleset_reproduces_the_expected_jev_result() {
    let request = request("binding-jev.json", shipped_adapters(560, 10))
        .with_ids("example-design-run", "example-invocation")
        .with_naming(naming("example-"));
    let result = evaluate(request).await;
    assert_eq!(to_json(&result), fixture("ruleset-result.json"));
    let text = serde_json::to_string(&result).unwrap();
    let order: Vec<usize> = ["\"category\":{", "\"severity\":{", "\"core_unavailable\":{"]
        .iter()
        .map(|k| text.find(k).unwrap())
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "canonical alias order"
    );
}

#[tokio::test(start_paused = true)]
async fn fixture_ruleset_reproduces_the_expected_llm_result() {
    let request = request("binding-llm-subagent.json", shipped_adapters(560, 10))
        .with_ids("example-design-run", "example-invocation")
        .with_naming(naming("example-llm-"));
    let result = evaluate(request).await;
    assert_eq!(to_json(&result), fixture("llm-ruleset-result.json"));
}

#[tokio::test(start_paused = true)]
async fn collect_ruleset_gathers_every_matched_outcome() {
    let mut request = request("binding-jev.json", shipped_adapters(0, 0));
    request.ruleset = fixture("ruleset-collect.json");
    // The jev binding pins example-triage, so repin it to the collect ruleset.
    let digest = turnstile_decision::artifact::artifact_digest(&request.ruleset).unwrap();
    request.binding["spec"]["ruleset"] =
        json!({"id": "example-collect", "version": "1.0.0", "digest": digest});
    let result = evaluate(request).await;
    assert_eq!(result.spec.status, RulesetStatus::Completed);
    assert_eq!(result.spec.outcome, json!(["docs-review"]));
    assert_eq!(result.spec.matched_rules, ["docs"]);
}

#[tokio::test(start_paused = true)]
async fn validation_failures_call_no_adapter() {
    let log = CallLog::new();
    let adapters = || {
        AdapterSet::new().with(Arc::new(
            succeeding("jev", "1.0.0", 0).with_log(Arc::clone(&log)),
        ))
    };
    let mut bad_digest = request("binding-jev.json", adapters());
    bad_digest.binding["spec"]["ruleset"]["digest"] = json!("sha256:00");
    let result = evaluate(bad_digest).await;
    assert_eq!(result.spec.status, RulesetStatus::Error);
    assert_eq!(result.spec.reason, ResultReason::DigestMismatch);

    let mut bad_input = request("binding-jev.json", adapters());
    bad_input.input = json!({"message": ""});
    let result = evaluate(bad_input).await;
    assert_eq!(result.spec.reason, ResultReason::InvalidInput);

    let mut missing_alias = request("binding-jev.json", adapters());
    missing_alias.binding["spec"]["evaluations"]
        .as_object_mut()
        .unwrap()
        .remove("severity");
    let result = evaluate(missing_alias).await;
    // Editing the binding changes its own digest, which nothing pins: the failure is the
    // unbound alias.
    assert_eq!(result.spec.reason, ResultReason::InvalidDefinition);
    assert_eq!(log.count(), 0);
}

#[tokio::test(start_paused = true)]
async fn fallback_binding_falls_back_from_jev_to_llm_on_service_error() {
    let log = CallLog::new();
    let jev = ScriptedAdapter::new("jev", "1.0.0")
        .with_default(Step::new(5, service_error()))
        .with_log(Arc::clone(&log));
    // The fallback targets pin the example subagent worker, so the adapter must run it
    // (pins are verified before any call since `plan::verify_subagents`).
    let llm = succeeding("llm-subagent", "1.0.0", 10)
        .with_worker(example_worker())
        .with_log(Arc::clone(&log));
    let adapters = AdapterSet::new().with(Arc::new(jev)).with(Arc::new(llm));
    let result = evaluate(request("binding-fallback.json", adapters)).await;
    assert_eq!(result.spec.status, RulesetStatus::Completed);
    assert_eq!(result.spec.outcome, json!("docs-review"));
    for (alias, evaluation) in &result.spec.evaluations.0 {
        let attempts = &evaluation.spec.attempts;
        assert_eq!(attempts.len(), 2, "{alias}");
        assert_eq!(attempts[0].adapter, "jev");
        assert_eq!(attempts[0].reason, AttemptReason::ServiceError);
        assert_eq!(attempts[1].adapter, "llm-subagent");
        assert_eq!(attempts[1].ordinal, 2);
        assert_eq!(attempts[1].status, Status::Success);
        assert!(attempts[1].subagent.is_some());
    }
    assert_eq!(log.count(), 6);
}

#[tokio::test(start_paused = true)]
async fn without_fallback_on_the_failure_is_reviewed() {
    let jev = ScriptedAdapter::new("jev", "1.0.0").with_default(Step::new(5, service_error()));
    let adapters = AdapterSet::new().with(Arc::new(jev));
    let result = evaluate(request("binding-jev.json", adapters)).await;
    assert_eq!(result.spec.status, RulesetStatus::Review);
    assert_eq!(result.spec.reason, ResultReason::EvaluationFailed);
    assert_eq!(result.spec.outcome, json!("manual-review"));
}

#[tokio::test(start_paused = true)]
async fn the_attempt_budget_spans_retries_and_aliases() {
    // maxAttempts 3 with a retrying category: category uses all three, the rest get none.
    let mut request = request(
        "binding-jev.json",
        AdapterSet::new().with(Arc::new(
            ScriptedAdapter::new("jev", "1.0.0").with_default(Step::new(1, service_error())),
        )),
    );
    request.binding["spec"]["evaluations"]["category"]["targets"][0]["retry"]["maxRetries"] =
        json!(5);
    let request = request.with_random(half());
    let result = evaluate(request).await;
    let category = &result.spec.evaluations.get("category").unwrap().spec;
    assert_eq!(category.attempts.len(), 3);
    assert_eq!(category.attempts[0].retry_delay_ms, Some(250));
    assert_eq!(category.attempts[1].retry_delay_ms, Some(500));
    let severity = &result.spec.evaluations.get("severity").unwrap().spec;
    assert_eq!(severity.reason, AttemptReason::BudgetExhausted);
    assert!(severity.attempts.is_empty());
}

/// Holds the only principal permit for `hold` through an admission lease.
async fn hold_permit(
    driver: &turnstile_decision::AdmissionDriver,
    workspace: &str,
    principal: &str,
) -> turnstile_decision::AdmissionLease {
    driver
        .acquire(
            workspace,
            AdmissionRequest::new(principal, "jev", "blocker"),
        )
        .await
        .expect("blocker admitted")
}

fn one_permit_policy() -> turnstile_decision::SchedulerPolicy {
    let mut policy = policy("workspace", "principal", "v1");
    policy.principal.limits = limits(1, 8, 60_000);
    policy
}

#[tokio::test(start_paused = true)]
async fn caller_cancellation_during_a_queued_wait() {
    let driver = driver();
    let policy = one_permit_policy();
    driver
        .register("workspace", "v1", policy.profile())
        .unwrap();
    let blocker = hold_permit(&driver, "workspace", "principal").await;

    let log = CallLog::new();
    let adapters = AdapterSet::new().with(Arc::new(
        succeeding("jev", "1.0.0", 0).with_log(Arc::clone(&log)),
    ));
    let signal = CancellationToken::new();
    let request = request("binding-jev.json", adapters)
        .with_scheduler(scheduled(policy, &driver))
        .with_signal(signal.clone());
    let run = tokio::spawn(evaluate(request));
    settle().await;
    assert_eq!(driver.snapshot("workspace").unwrap().queued, 1);
    tokio::time::advance(Duration::from_millis(100)).await;
    signal.cancel();
    let result = run.await.unwrap();
    assert_eq!(log.count(), 0, "adapter never called");
    assert_eq!(result.spec.status, RulesetStatus::Cancelled);
    let category = &result.spec.evaluations.get("category").unwrap().spec;
    assert_eq!(category.status, Status::Cancelled);
    let attempt = &category.attempts[0];
    assert_eq!(attempt.status, Status::Cancelled);
    assert_eq!(attempt.termination, Some(Termination::CallerCancelled));
    assert_eq!(attempt.dispatch_certainty, Some(DispatchCertainty::NotSent));
    assert_eq!(
        attempt.admission.as_ref().unwrap().reason,
        Reason::Cancelled
    );
    for alias in ["severity", "core_unavailable"] {
        let spec = &result.spec.evaluations.get(alias).unwrap().spec;
        assert_eq!(spec.status, Status::Cancelled);
        assert!(spec.attempts.is_empty());
    }
    let snapshot = driver.snapshot("workspace").unwrap();
    assert_eq!(
        (snapshot.active, snapshot.queued),
        (1, 0),
        "no leaked waiter"
    );
    drop(blocker);
    assert_eq!(driver.snapshot("workspace").unwrap().active, 0);
}

#[tokio::test(start_paused = true)]
async fn target_timeout_during_a_queued_wait() {
    let driver = driver();
    let policy = one_permit_policy();
    driver
        .register("workspace", "v1", policy.profile())
        .unwrap();
    let _blocker = hold_permit(&driver, "workspace", "principal").await;

    let log = CallLog::new();
    let adapters = AdapterSet::new().with(Arc::new(
        succeeding("jev", "1.0.0", 0).with_log(Arc::clone(&log)),
    ));
    let mut request =
        request("binding-jev.json", adapters).with_scheduler(scheduled(policy, &driver));
    for alias in ["category", "severity", "core_unavailable"] {
        request.binding["spec"]["evaluations"][alias]["targets"][0]["timeoutMs"] = json!(20);
    }
    let result = evaluate(request).await;
    assert_eq!(log.count(), 0, "adapter never called");
    assert_eq!(result.spec.status, RulesetStatus::Review);
    for (_, evaluation) in &result.spec.evaluations.0 {
        let spec = &evaluation.spec;
        assert_eq!(
            (spec.status, spec.reason),
            (Status::Error, AttemptReason::Timeout)
        );
        let attempt = &spec.attempts[0];
        assert_eq!(attempt.reason, AttemptReason::Timeout);
        assert_eq!(attempt.termination, Some(Termination::TargetTimeout));
        assert_ne!(attempt.status, Status::Cancelled);
        let admission = attempt.admission.as_ref().unwrap();
        assert!(matches!(
            admission.reason,
            Reason::DeadlineExceeded | Reason::Cancelled
        ));
        assert_eq!(attempt.duration_ms, 20);
    }
    assert_eq!(driver.snapshot("workspace").unwrap().queued, 0);
}

#[tokio::test(start_paused = true)]
async fn cnc_sched_backoff_003_evaluator_gives_the_permit_back_during_backoff() {
    let driver = driver();
    let mut policy = policy("workspace", "principal", "v1");
    policy.principal.limits.concurrency = 1;
    let log = CallLog::new();
    let rate_limited = Observation::error(
        AttemptReason::RateLimited,
        DispatchCertainty::TerminalResponse,
    );
    let jev = ScriptedAdapter::new("jev", "1.0.0")
        .script(
            "category",
            [
                Step::new(10, rate_limited),
                Step::new(10, success_for("category")),
            ],
        )
        .script(
            "core_unavailable",
            [Step::new(10, success_for("core_unavailable"))],
        )
        .with_log(Arc::clone(&log));
    let llm = ScriptedAdapter::new("llm-subagent", "1.0.0")
        .script("severity", [Step::new(1000, success_for("severity"))])
        .with_log(Arc::clone(&log));
    let adapters = AdapterSet::new().with(Arc::new(jev)).with(Arc::new(llm));
    let mut request = request("binding-jev.json", adapters)
        .with_scheduler(scheduled(policy, &driver))
        .with_random(half());
    request.binding["spec"]["maxAttempts"] = json!(4);
    request.binding["spec"]["evaluations"]["category"]["targets"][0]["retry"]["maxRetries"] =
        json!(1);
    let severity = &mut request.binding["spec"]["evaluations"]["severity"]["targets"][0];
    severity["adapter"] = json!("llm-subagent");
    let run = tokio::spawn(evaluate(request));

    // Category is rate-limited at t=10 and backs off 250 ms; severity starts meanwhile.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(log.calls(), ["jev:category", "llm-subagent:severity"]);
    // The backoff ends at t=260, but severity holds the only permit until t=1010.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(log.calls(), ["jev:category", "llm-subagent:severity"]);
    let result = run.await.unwrap();
    assert_eq!(
        log.calls(),
        [
            "jev:category",
            "llm-subagent:severity",
            "jev:category",
            "jev:core_unavailable"
        ]
    );
    assert_eq!(log.peak(), 1);
    let category = &result.spec.evaluations.get("category").unwrap().spec;
    let reasons: Vec<_> = category.attempts.iter().map(|a| a.reason).collect();
    assert_eq!(reasons, [AttemptReason::RateLimited, AttemptReason::None]);
    assert_eq!(
        result.spec.evaluations.aliases().collect::<Vec<_>>(),
        ["category", "severity", "core_unavailable"]
    );
    assert_eq!(result.spec.status, RulesetStatus::Completed);
}

async fn scope_case(policies: [turnstile_decision::SchedulerPolicy; 2]) {
    let driver = driver();
    let log = CallLog::new();
    let runs: Vec<_> = policies
        .into_iter()
        .enumerate()
        .map(|(i, policy)| {
            let adapters = AdapterSet::new().with(Arc::new(
                succeeding("jev", "1.0.0", 5).with_log(Arc::clone(&log)),
            ));
            let request = request("binding-jev.json", adapters)
                .with_ids("run", format!("invocation-{i}"))
                .with_scheduler(scheduled(policy, &driver));
            tokio::spawn(evaluate(request))
        })
        .collect();
    for run in runs {
        let result = run.await.unwrap();
        assert_eq!(result.spec.status, RulesetStatus::Completed);
    }
    assert_eq!(log.count(), 6);
    assert_eq!(log.peak(), 1);
}

#[tokio::test(start_paused = true)]
async fn cnc_admit_scope_001_equal_policies_share_every_ceiling() {
    // Principal concurrency 1, both invocations by the same principal.
    let mut a = policy("workspace", "same", "v1");
    a.principal.limits.concurrency = 1;
    scope_case([a.clone(), a]).await;
    // Workspace concurrency 1, two principals.
    let mut first = policy("workspace", "first", "v1");
    first.workspace.limits.concurrency = 1;
    let mut second = first.clone();
    second.principal.id = "second".into();
    scope_case([first, second]).await;
    // Provider jev concurrency 1, two principals.
    let mut first = policy("workspace", "first", "v1");
    first.providers.get_mut("jev").unwrap().concurrency = 1;
    let mut second = first.clone();
    second.principal.id = "second".into();
    scope_case([first, second]).await;
}

#[tokio::test(start_paused = true)]
async fn cnc_admit_scope_002_principals_never_share_their_own_quota() {
    let driver = driver();
    let principal_limits = {
        let mut l = limits(1, 8, 50);
        l.requests_per_minute = Some(3);
        l
    };
    let make = |principal: &str| {
        let mut p = policy("workspace", principal, "v1");
        p.principal.limits = principal_limits.clone();
        p
    };
    let logs = [CallLog::new(), CallLog::new()];
    let runs: Vec<_> = ["first", "second"]
        .iter()
        .zip(logs.iter())
        .map(|(principal, log)| {
            // One adapter per invocation (own log) plus a shared log for the total peak.
            let shared = Arc::new(succeeding("jev", "1.0.0", 5).with_log(Arc::clone(log)));
            let request = request("binding-jev.json", AdapterSet::new().with(shared))
                .with_ids("run", format!("invocation-{principal}"))
                .with_scheduler(scheduled(make(principal), &driver));
            tokio::spawn(evaluate(request))
        })
        .collect();
    let mut peak_total = 0;
    let mut finished = Vec::new();
    for run in runs {
        finished.push(run);
    }
    // Sample the combined in-flight count while both run.
    for _ in 0..10 {
        peak_total = peak_total.max(logs[0].active() + logs[1].active());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for run in finished {
        assert_eq!(run.await.unwrap().spec.status, RulesetStatus::Completed);
    }
    for log in &logs {
        assert_eq!(log.count(), 3);
        assert_eq!(log.peak(), 1);
    }
    assert_eq!(peak_total, 2);

    // A fresh policy object for `first` cannot reset its exhausted RPM bucket.
    let again = CallLog::new();
    let request = request(
        "binding-jev.json",
        AdapterSet::new().with(Arc::new(
            succeeding("jev", "1.0.0", 5).with_log(Arc::clone(&again)),
        )),
    )
    .with_ids("run", "invocation-first-2")
    .with_scheduler(scheduled(make("first"), &driver));
    let result = evaluate(request).await;
    assert_eq!(again.count(), 0);
    let category = &result.spec.evaluations.get("category").unwrap().spec;
    assert_eq!(
        category.attempts[0].admission.as_ref().unwrap().reason,
        Reason::QueueTimeout
    );
}

#[tokio::test(start_paused = true)]
async fn cnc_admit_scope_003_a_revision_is_immutable() {
    let driver = driver();
    let log = CallLog::new();
    let run = |version: &str, concurrency: u32| {
        let mut p = policy("revision", "principal", version);
        p.workspace.limits.concurrency = concurrency;
        let adapters = AdapterSet::new().with(Arc::new(
            succeeding("jev", "1.0.0", 1).with_log(Arc::clone(&log)),
        ));
        evaluate(request("binding-jev.json", adapters).with_scheduler(scheduled(p, &driver)))
    };
    let first = run("offline-v1", 2).await;
    assert_eq!(first.spec.status, RulesetStatus::Completed);
    assert_eq!(log.count(), 3);
    let conflict = run("offline-v1", 3).await;
    assert_eq!(conflict.spec.status, RulesetStatus::Error);
    assert_eq!(conflict.spec.reason, ResultReason::InvalidDefinition);
    assert_eq!(log.count(), 3, "no new calls");
    let next = run("offline-v2", 3).await;
    assert_eq!(next.spec.status, RulesetStatus::Completed);
    assert_eq!(log.count(), 6);
}

type Tweak = Box<dyn Fn(&mut turnstile_decision::SchedulerPolicy)>;

#[tokio::test(start_paused = true)]
async fn admission_rejections_map_to_attempt_reasons() {
    let cases: Vec<(&str, Tweak, Reason, AttemptReason)> = vec![
        (
            "requests-per-minute",
            Box::new(|p| p.providers.get_mut("jev").unwrap().requests_per_minute = Some(0)),
            Reason::RequestsPerMinute,
            AttemptReason::RateLimited,
        ),
        (
            "attempts",
            Box::new(|p| p.principal.limits.max_attempts = Some(0)),
            Reason::Attempts,
            AttemptReason::BudgetExhausted,
        ),
        (
            "batch-size",
            Box::new(|p| p.providers.get_mut("jev").unwrap().max_batch_size = Some(0)),
            Reason::BatchSize,
            AttemptReason::Overloaded,
        ),
        (
            "queue-timeout",
            Box::new(|p| p.principal.limits.max_queue_wait_ms = Some(0)),
            Reason::QueueTimeout,
            AttemptReason::Timeout,
        ),
        (
            "unconfigured-provider",
            Box::new(|p| {
                p.providers.remove("jev");
            }),
            Reason::UnconfiguredProvider,
            AttemptReason::Overloaded,
        ),
    ];
    for (name, tweak, admission, expected) in cases {
        let driver = driver();
        let mut p = policy(&format!("ws-{name}"), "principal", "v1");
        tweak(&mut p);
        let log = CallLog::new();
        let adapters = AdapterSet::new().with(Arc::new(
            succeeding("jev", "1.0.0", 1).with_log(Arc::clone(&log)),
        ));
        let result =
            evaluate(request("binding-jev.json", adapters).with_scheduler(scheduled(p, &driver)))
                .await;
        assert_eq!(log.count(), 0, "{name}");
        for (_, evaluation) in &result.spec.evaluations.0 {
            assert_eq!(evaluation.spec.reason, expected, "{name}");
            assert_eq!(evaluation.spec.attempts.len(), 1, "{name}");
            let evidence = evaluation.spec.attempts[0].admission.as_ref().unwrap();
            assert_eq!(
                (evidence.decision, evidence.reason),
                (Decision::Reject, admission),
                "{name}"
            );
        }
        assert_eq!(
            result.spec.evaluations.aliases().collect::<Vec<_>>(),
            ["category", "severity", "core_unavailable"]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn total_deadline_ends_the_invocation_as_a_timeout() {
    let jev = ScriptedAdapter::new("jev", "1.0.0")
        .with_default(Step::new(60_000, success_for("category")));
    let mut request = request("binding-jev.json", AdapterSet::new().with(Arc::new(jev)));
    request.binding["spec"]["totalTimeoutMs"] = json!(100);
    let result = evaluate(request).await;
    assert_eq!(result.spec.status, RulesetStatus::Error);
    assert_eq!(result.spec.reason, ResultReason::Timeout);
    let category = &result.spec.evaluations.get("category").unwrap().spec;
    assert_eq!(
        category.attempts[0].termination,
        Some(Termination::TotalDeadline)
    );
    let severity = &result.spec.evaluations.get("severity").unwrap().spec;
    assert_eq!(
        (severity.status, severity.reason),
        (Status::Error, AttemptReason::Timeout)
    );
    assert!(severity.attempts.is_empty());
}

#[tokio::test(start_paused = true)]
async fn capability_checks_use_one_attempt() {
    let old = succeeding("jev", "0.9.0", 0);
    let result = evaluate(request(
        "binding-jev.json",
        AdapterSet::new().with(Arc::new(old)),
    ))
    .await;
    let category = &result.spec.evaluations.get("category").unwrap().spec;
    assert_eq!(category.reason, AttemptReason::ExecutorUnavailable);
    assert_eq!(category.attempts.len(), 1);
    assert_eq!(category.attempts[0].status, Status::Unsupported);
}
