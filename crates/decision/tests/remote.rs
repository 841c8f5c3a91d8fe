//! The evaluator governed by a running service (`Governor::Remote`): the service's profile
//! admits every attempt, refuses an evaluation whose adapters are not its lanes, forgets a
//! waiter the caller cancelled, caps long attempt deadlines at its `max_wait_ms`, and pauses
//! a lane on a provider's Retry-After. A real service (testkit's `TestServer`) on loopback.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use turnstile_client::{Client, WorkspaceSnapshot};
use turnstile_decision::{
    AdapterSet, AttemptReason, DispatchCertainty, EvaluationRequest, Observation, RemoteGovernor,
    ResultReason, RulesetStatus, SchedulerRun, ScriptedAdapter, Status, Step,
};
use turnstile_testkit::{metric_total, TestServer, WORKSPACE};

use common::{policy, request, shipped_adapters, success_for};

const DECISIONS: &str = "turnstile_admission_decisions_total";

/// The service's `admit` decisions so far.
fn admitted(server: &TestServer) -> f64 {
    metric_total(&server.metrics_text(), DECISIONS, &[("decision", "admit")])
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A service with `profile` as revision `v1` of the test workspace; the key of principal
/// `evaluator` and of principal `agent`.
fn service(
    profile: Value,
    tweak: impl FnOnce(&mut turnstile_server::Config),
) -> (TestServer, String, String) {
    let server = TestServer::start_fresh(tweak);
    let put = server.put_profile(&server.admin(), WORKSPACE, "v1", &profile);
    assert_eq!(put.status(), 201);
    let evaluator = server.new_key(WORKSPACE, "evaluator");
    let agent = server.new_key(WORKSPACE, "agent");
    (server, evaluator, agent)
}

fn profile(jev_concurrency: u32) -> Value {
    json!({
        "workspace": {"concurrency": 8, "maxQueueLength": 8, "maxQueueWaitMs": 30000},
        "providers": {"jev": {"concurrency": jev_concurrency}, "llm-subagent": {"concurrency": 2}},
        "principals": {"evaluator": {"concurrency": 4}, "agent": {"concurrency": 4}}
    })
}

fn governed(server: &TestServer, key: &str, adapters: AdapterSet) -> EvaluationRequest {
    let client = Client::new(&server.base, key).expect("a client");
    // The policy's IDs and limits are not sent: the service's profile governs.
    let run = SchedulerRun::governed(
        policy("ignored", "ignored", "ignored"),
        RemoteGovernor::new(client),
    );
    request("binding-jev.json", adapters).with_scheduler(run)
}

async fn until(client: &Client, done: impl Fn(&WorkspaceSnapshot) -> bool) -> WorkspaceSnapshot {
    for _ in 0..400 {
        let snapshot = client.snapshot(WORKSPACE).await.expect("a snapshot");
        if done(&snapshot) {
            return snapshot;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the service's snapshot never settled");
}

fn attempts(result: &turnstile_decision::RulesetResult) -> Vec<Value> {
    let value = serde_json::to_value(result).expect("a result");
    ["category", "severity", "core_unavailable"]
        .iter()
        .flat_map(|alias| {
            value["spec"]["evaluations"][alias]["spec"]["attempts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn every_attempt_is_admitted_by_the_service_and_the_budget_is_released() {
    let (server, evaluator, _) = service(profile(2), |_| {});
    let decisions_before = admitted(&server);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let result = runtime().block_on(async {
        let mut request = governed(&server, &evaluator, shipped_adapters(0, 0));
        let log = Arc::clone(&seen);
        request.scheduler = request.scheduler.map(|run| {
            run.with_on_evidence(Arc::new(move |event| {
                log.lock().unwrap().push(event.evidence.decision);
            }))
        });
        turnstile_decision::evaluate(request).await
    });
    assert_eq!(
        result.spec.status,
        RulesetStatus::Completed,
        "{:?}",
        result.spec.detail
    );
    let attempts = attempts(&result);
    assert_eq!(attempts.len(), 3);
    for attempt in &attempts {
        assert_eq!(attempt["admission"]["decision"], "admit", "{attempt}");
    }
    assert_eq!(seen.lock().unwrap().len(), 3);
    let after = server.snapshot(WORKSPACE);
    assert_eq!(
        (after["leases"].as_u64(), after["openBudgets"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(admitted(&server) - decisions_before, 3.0);
}

#[test]
fn an_adapter_that_is_not_a_lane_of_the_profile_refuses_the_evaluation_naming_it() {
    let mut without_jev = profile(2);
    without_jev["providers"]
        .as_object_mut()
        .unwrap()
        .remove("jev");
    let (server, evaluator, _) = service(without_jev, |_| {});
    let empty = server.new_key("empty", "evaluator");
    runtime().block_on(async {
        let result =
            turnstile_decision::evaluate(governed(&server, &evaluator, shipped_adapters(0, 0)))
                .await;
        assert_eq!(result.spec.status, RulesetStatus::Error);
        assert_eq!(result.spec.reason, ResultReason::InvalidDefinition);
        let detail = result.spec.detail.clone().unwrap_or_default();
        assert!(
            detail.contains("\"jev\"") && detail.contains("llm-subagent"),
            "{detail}"
        );
        assert!(attempts(&result).is_empty());

        let result =
            turnstile_decision::evaluate(governed(&server, &empty, shipped_adapters(0, 0))).await;
        assert_eq!(result.spec.reason, ResultReason::InvalidDefinition);
        assert!(result
            .spec
            .detail
            .unwrap_or_default()
            .contains("no admission profile"));
    });
    assert_eq!(metric_total(&server.metrics_text(), DECISIONS, &[]), 0.0);
}

#[test]
fn a_cancelled_evaluation_leaves_no_waiter_on_the_service() {
    let (server, evaluator, agent) = service(profile(1), |_| {});
    // The agent holds jev's one permit: the evaluation's first attempt queues behind it.
    let held = server.granted_lease(
        &agent,
        &json!({"providerId": "jev", "budgetId": "agent-1", "estimate": {}, "deadlineMs": 1000}),
    );
    runtime().block_on(async {
        let client = Client::new(&server.base, &evaluator).expect("a client");
        let signal = CancellationToken::new();
        let request =
            governed(&server, &evaluator, shipped_adapters(0, 0)).with_signal(signal.clone());
        let evaluation = tokio::spawn(turnstile_decision::evaluate(request));
        until(&client, |s| {
            s.waiters == 1 && s.core.providers["jev"].queued == 1
        })
        .await;
        signal.cancel();
        let result = evaluation.await.expect("the evaluation ends");
        assert_eq!(result.spec.status, RulesetStatus::Cancelled);
        let first = &attempts(&result)[0];
        assert_eq!(first["termination"], "caller-cancelled", "{first}");
        assert_eq!(first["admission"]["reason"], "cancelled", "{first}");
        let settled = until(&client, |s| s.waiters == 0).await;
        assert_eq!(
            (settled.core.queued, settled.core.providers["jev"].queued),
            (0, 0)
        );
        assert_eq!(settled.leases, 1, "only the agent's lease is held");
    });
    server.assert_released(&agent, &held, "success");
}

#[test]
fn an_attempt_deadline_above_the_services_max_wait_is_capped_not_failed() {
    // Each attempt of binding-jev may take 15 s; the service lets a request wait 1 s at most.
    let (server, evaluator, _) = service(profile(2), |config| {
        config.admission.max_wait_ms = 1_000;
        config.admission.default_wait_ms = 1_000;
    });
    let result = runtime().block_on(turnstile_decision::evaluate(governed(
        &server,
        &evaluator,
        shipped_adapters(0, 0),
    )));
    assert_eq!(
        result.spec.status,
        RulesetStatus::Completed,
        "{:?}",
        result.spec.detail
    );
    assert!(attempts(&result)
        .iter()
        .all(|a| a["admission"]["decision"] == "admit"));
}

#[test]
fn a_provider_retry_after_pauses_the_lane_on_the_service() {
    let (server, evaluator, _) = service(profile(2), |_| {});
    let limited = Observation::error(
        AttemptReason::RateLimited,
        DispatchCertainty::TerminalResponse,
    )
    .with_retry_after(60_000);
    let mut jev =
        ScriptedAdapter::new("jev", "1.0.0-design").script("category", [Step::new(0, limited)]);
    for alias in ["severity", "core_unavailable"] {
        jev = jev.script(alias, [Step::new(0, success_for(alias))]);
    }
    let mut adapters = AdapterSet::new();
    adapters.insert(Arc::new(jev));
    runtime().block_on(async {
        let result = turnstile_decision::evaluate(governed(&server, &evaluator, adapters)).await;
        let first = &attempts(&result)[0];
        assert_eq!(
            first["status"],
            serde_json::to_value(Status::Error).unwrap()
        );
        let client = Client::new(&server.base, &evaluator).expect("a client");
        let snapshot = client.snapshot(WORKSPACE).await.expect("a snapshot");
        assert!(
            snapshot.core.providers["jev"].paused_until.is_some(),
            "{snapshot:?}"
        );
    });
}
