//! Verification of a binding target's `subagent` pin (EVALUATOR.md: a pin that does not match is
//! `digest-mismatch`; validation fails before any call). The pin is checked against the worker
//! the target's adapter reports (`Adapter::worker`), before any adapter call, before the
//! scheduler policy is registered and before any admission request. TESTS.md has no ID for it.

mod common;

use std::sync::{Arc, Mutex};

use serde_json::json;
use turnstile_decision::artifact::{worker_pin, Pin};
use turnstile_decision::{
    evaluate, AdapterSet, AdaptersFile, AttemptReason, CallLog, ResultReason, RulesetResult,
    RulesetStatus, ScriptedAdapter, Step,
};
use turnstile_decision::{AdmissionEvidence, EvidenceFn};

use common::*;

/// Runs `binding` with jev answering and llm-subagent reporting `worker`, with the scheduler
/// enabled; returns the result, the adapter calls and the number of admission decisions.
async fn run(binding: &str, worker: Option<Pin>) -> (RulesetResult, Vec<String>, usize) {
    let log = CallLog::new();
    let jev = ScriptedAdapter::new("jev", "1.0.0")
        .with_default(Step::new(5, service_error()))
        .with_log(Arc::clone(&log));
    let mut llm = succeeding("llm-subagent", "1.0.0", 5).with_log(Arc::clone(&log));
    if let Some(worker) = worker {
        llm = llm.with_worker(worker);
    }
    let decisions = Arc::new(Mutex::new(0usize));
    let counter = Arc::clone(&decisions);
    let on_evidence: EvidenceFn = Arc::new(move |_: AdmissionEvidence<'_>| {
        *counter.lock().unwrap() += 1;
    });
    let driver = driver();
    let scheduler =
        scheduled(policy("ws-pins", "p-pins", "v1"), &driver).with_on_evidence(on_evidence);
    let adapters = AdapterSet::new().with(Arc::new(jev)).with(Arc::new(llm));
    let result = evaluate(request(binding, adapters).with_scheduler(scheduler)).await;
    let decisions = *decisions.lock().unwrap();
    (result, log.calls(), decisions)
}

fn assert_refused_before_anything(result: &RulesetResult, calls: &[String], decisions: usize) {
    assert_eq!(result.spec.status, RulesetStatus::Error);
    assert_eq!(result.spec.reason, ResultReason::DigestMismatch);
    assert!(result.spec.evaluations.0.is_empty(), "no evaluation ran");
    assert!(calls.is_empty(), "no adapter call: {calls:?}");
    assert_eq!(decisions, 0, "no admission was asked for");
    let detail = result.spec.detail.as_deref().unwrap_or_default();
    assert!(detail.contains("example-decision-worker"), "{detail}");
    assert!(
        !detail.contains("ws-pins") && !detail.contains("p-pins"),
        "{detail}"
    );
}

/// The example worker with its task changed: same id and version, another digest.
fn tampered_worker() -> Pin {
    let mut worker = fixture("worker-fixture.json");
    worker["task"] = json!("Return one structured decision; you may call tools.");
    worker_pin(&worker).unwrap()
}

#[test]
fn the_example_worker_digest_is_the_one_the_fixture_bindings_pin() {
    let binding = fixture("binding-llm-subagent.json");
    let pinned: Pin = serde_json::from_value(
        binding["spec"]["evaluations"]["category"]["targets"][0]["subagent"].clone(),
    )
    .unwrap();
    assert_eq!(example_worker(), pinned);
    assert_ne!(tampered_worker().digest, pinned.digest);
}

#[tokio::test(start_paused = true)]
async fn a_subagent_pin_matching_the_adapters_worker_is_dispatched() {
    let (result, calls, decisions) = run("binding-llm-subagent.json", Some(example_worker())).await;
    assert_eq!(result.spec.status, RulesetStatus::Completed);
    assert_eq!(calls.len(), 3);
    assert_eq!(decisions, 3);
    for (_, evaluation) in &result.spec.evaluations.0 {
        assert_eq!(evaluation.spec.attempts[0].subagent, Some(example_worker()));
    }
}

#[tokio::test(start_paused = true)]
async fn a_subagent_digest_that_differs_from_the_adapters_worker_is_digest_mismatch_before_any_call(
) {
    let (result, calls, decisions) =
        run("binding-llm-subagent.json", Some(tampered_worker())).await;
    assert_refused_before_anything(&result, &calls, decisions);
}

#[tokio::test(start_paused = true)]
async fn a_subagent_version_the_adapter_does_not_run_is_digest_mismatch_before_any_call() {
    let mut worker = fixture("worker-fixture.json");
    worker["metadata"]["version"] = json!("1.0.1");
    let (result, calls, decisions) = run(
        "binding-llm-subagent.json",
        Some(worker_pin(&worker).unwrap()),
    )
    .await;
    assert_refused_before_anything(&result, &calls, decisions);
}

#[tokio::test(start_paused = true)]
async fn an_adapter_reporting_no_worker_cannot_serve_a_pinned_target() {
    let (result, calls, decisions) = run("binding-llm-subagent.json", None).await;
    assert_refused_before_anything(&result, &calls, decisions);
}

#[tokio::test(start_paused = true)]
async fn a_mismatching_fallback_target_refuses_the_run_before_its_first_target_is_called() {
    // binding-fallback: jev first (no pin), llm-subagent as the pinned fallback.
    let (result, calls, decisions) = run("binding-fallback.json", Some(tampered_worker())).await;
    assert_refused_before_anything(&result, &calls, decisions);
}

#[tokio::test(start_paused = true)]
async fn a_pinned_target_whose_adapter_is_absent_is_left_to_the_capability_check() {
    // Without an llm-subagent adapter the pinned fallback can never run: no digest verdict, the
    // target is reached and reported as executor-unavailable, as before.
    let jev = ScriptedAdapter::new("jev", "1.0.0").with_default(Step::new(5, service_error()));
    let adapters = AdapterSet::new().with(Arc::new(jev));
    let result = evaluate(request("binding-fallback.json", adapters)).await;
    assert_eq!(result.spec.reason, ResultReason::EvaluationFailed);
    for (_, evaluation) in &result.spec.evaluations.0 {
        assert_eq!(
            evaluation.spec.attempts[1].reason,
            AttemptReason::ExecutorUnavailable
        );
    }
}

#[test]
fn an_adapters_file_worker_is_pinned_as_given() {
    let worker = fixture("worker-fixture.json");
    let file: AdaptersFile = serde_json::from_value(json!({"adapters": [
        {"kind": "scripted", "id": "llm-subagent", "version": "1.0.0", "worker": worker},
        {"kind": "chat-completions", "id": "other", "version": "1.0.0",
         "baseUrl": "http://127.0.0.1:9/v1", "worker": worker},
        {"kind": "scripted", "id": "jev", "version": "1.0.0"}
    ]}))
    .unwrap();
    let adapters = file.build().unwrap();
    let worker_of = |id: &str| adapters.get(id).and_then(|a| a.worker().cloned());
    assert_eq!(worker_of("llm-subagent"), Some(example_worker()));
    assert_eq!(worker_of("other"), Some(example_worker()));
    assert_eq!(worker_of("jev"), None);

    let nameless: AdaptersFile = serde_json::from_value(json!({"adapters": [
        {"kind": "scripted", "id": "llm-subagent", "version": "1.0.0",
         "worker": {"task": "no metadata"}}
    ]}))
    .unwrap();
    assert!(nameless.build().is_err());
}
