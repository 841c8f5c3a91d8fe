//! `scheduler.onEvidence` (EVALUATOR.md request): every admission decision of every attempt
//! reaches the host once, at the moment it is made, with exactly the evidence the attempt record
//! keeps; attempts that never ask for admission report nothing; the callback cannot change a
//! result and never sees a tenant ID.

mod common;

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use turnstile_admission::{Decision, Evidence, Reason};
use turnstile_decision::{
    evaluate, AdapterSet, AttemptReason, CallLog, Capabilities, RulesetResult, RulesetStatus,
    ScriptedAdapter, Status, Step,
};
use turnstile_decision::{AdmissionEvidence, EvidenceFn, EvidenceKind};

use common::*;

/// What the callback saw, plus the adapter calls made before it was called.
#[derive(Debug, Clone)]
struct Seen {
    kind: EvidenceKind,
    alias: String,
    target_index: usize,
    adapter: String,
    ordinal: u32,
    evidence: Evidence,
    calls_before: Vec<String>,
}

fn recorder(log: &Arc<CallLog>) -> (EvidenceFn, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let log = Arc::clone(log);
    let callback: EvidenceFn = Arc::new(move |event: AdmissionEvidence<'_>| {
        sink.lock().unwrap().push(Seen {
            kind: event.kind,
            alias: event.alias.to_owned(),
            target_index: event.target_index,
            adapter: event.adapter.to_owned(),
            ordinal: event.ordinal,
            evidence: event.evidence.clone(),
            calls_before: log.calls(),
        });
    });
    (callback, seen)
}

/// Every attempt of the result that asked for admission, as (alias, ordinal, evidence).
fn admission_records(result: &RulesetResult) -> Vec<(String, u32, Evidence)> {
    let mut records = Vec::new();
    for (alias, evaluation) in &result.spec.evaluations.0 {
        for attempt in &evaluation.spec.attempts {
            if let Some(evidence) = &attempt.admission {
                records.push((alias.clone(), attempt.ordinal, evidence.clone()));
            }
        }
    }
    records
}

fn sorted(mut records: Vec<(String, u32, Evidence)>) -> Vec<(String, u32, Evidence)> {
    records.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    records
}

#[tokio::test(start_paused = true)]
async fn on_evidence_receives_each_admission_before_its_call_with_the_attempts_evidence() {
    let log = CallLog::new();
    let jev = succeeding("jev", "1.0.0", 5).with_log(Arc::clone(&log));
    let (callback, seen) = recorder(&log);
    let driver = driver();
    let scheduler = scheduled(policy("ws-a", "p-a", "v1"), &driver).with_on_evidence(callback);
    let request = request("binding-jev.json", AdapterSet::new().with(Arc::new(jev)))
        .with_scheduler(scheduler);
    let result = evaluate(request).await;
    assert_eq!(result.spec.status, RulesetStatus::Completed);

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "one decision per attempt: {seen:?}");
    for event in &seen {
        // Admission events only: no release moved a breaker.
        assert_eq!(event.kind, EvidenceKind::Admission);
        assert_eq!(event.evidence.decision, Decision::Admit);
        assert_eq!(event.evidence.reason, Reason::Admitted);
        assert_eq!((event.adapter.as_str(), event.target_index), ("jev", 0));
        // Reported before the adapter was asked this alias's question.
        let call = format!("jev:{}", event.alias);
        assert!(
            !event.calls_before.contains(&call),
            "{call} was reported after its call"
        );
    }
    let reported: Vec<(String, u32, Evidence)> = seen
        .iter()
        .map(|e| (e.alias.clone(), e.ordinal, e.evidence.clone()))
        .collect();
    assert_eq!(sorted(reported), sorted(admission_records(&result)));
}

#[tokio::test(start_paused = true)]
async fn on_evidence_receives_rejections_and_every_retry_in_order() {
    // Each alias: the first call fails retryably, the retry succeeds; then the attempt budget of
    // the principal (3) refuses whatever is left.
    let log = CallLog::new();
    let mut jev = ScriptedAdapter::new("jev", "1.0.0").with_log(Arc::clone(&log));
    for alias in ["category", "severity", "core_unavailable"] {
        jev = jev.script(
            alias,
            [
                Step::new(5, service_error()),
                Step::new(5, success_for(alias)),
            ],
        );
    }
    let (callback, seen) = recorder(&log);
    let driver = driver();
    let mut policy = policy("ws-b", "p-b", "v1");
    policy.principal.limits.max_attempts = Some(3);
    let scheduler = scheduled(policy, &driver).with_on_evidence(callback);
    let mut request = request("binding-jev.json", AdapterSet::new().with(Arc::new(jev)))
        .with_scheduler(scheduler)
        .with_random(half());
    request.binding["spec"]["maxAttempts"] = json!(6);
    for alias in ["category", "severity", "core_unavailable"] {
        request.binding["spec"]["evaluations"][alias]["targets"][0]["retry"]["maxRetries"] =
            json!(1);
    }
    // Editing the binding changes its own digest, which nothing pins.
    let result = evaluate(request).await;

    let seen = seen.lock().unwrap().clone();
    let records = admission_records(&result);
    assert_eq!(seen.len(), records.len(), "{seen:?}");
    assert_eq!(
        seen.len(),
        6,
        "two tries per alias, each asking for admission"
    );
    let admitted = seen
        .iter()
        .filter(|e| e.evidence.decision == Decision::Admit)
        .count();
    let refused: Vec<&Seen> = seen
        .iter()
        .filter(|e| e.evidence.decision == Decision::Reject)
        .collect();
    assert_eq!(admitted, 3, "the principal's maxAttempts is 3");
    assert_eq!(refused.len(), 3);
    for event in &refused {
        assert_eq!(event.evidence.reason, Reason::Attempts);
    }
    // Per alias, decisions arrive in ordinal order.
    for alias in ["category", "severity", "core_unavailable"] {
        let ordinals: Vec<u32> = seen
            .iter()
            .filter(|e| e.alias == alias)
            .map(|e| e.ordinal)
            .collect();
        assert!(
            ordinals.windows(2).all(|w| w[0] < w[1]),
            "{alias}: {ordinals:?}"
        );
    }
    let reported: Vec<(String, u32, Evidence)> = seen
        .iter()
        .map(|e| (e.alias.clone(), e.ordinal, e.evidence.clone()))
        .collect();
    assert_eq!(sorted(reported), sorted(records));
}

#[tokio::test(start_paused = true)]
async fn attempts_that_never_ask_for_admission_report_nothing() {
    // The adapter cannot answer `choice`: category's capability check fails without admission.
    let log = CallLog::new();
    let jev = succeeding("jev", "1.0.0", 5)
        .with_capabilities(Capabilities {
            answer_kinds: vec![],
            ..Capabilities::all_kinds()
        })
        .with_log(Arc::clone(&log));
    let (callback, seen) = recorder(&log);
    let driver = driver();
    let scheduler = scheduled(policy("ws-c", "p-c", "v1"), &driver).with_on_evidence(callback);
    let request = request("binding-jev.json", AdapterSet::new().with(Arc::new(jev)))
        .with_scheduler(scheduler);
    let result = evaluate(request).await;
    for (_, evaluation) in &result.spec.evaluations.0 {
        assert_eq!(evaluation.spec.attempts[0].status, Status::Unsupported);
        assert_eq!(
            evaluation.spec.attempts[0].reason,
            AttemptReason::UnsupportedCapability
        );
    }
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(log.count(), 0);
}

#[tokio::test(start_paused = true)]
async fn on_evidence_never_sees_a_tenant_id_and_cannot_change_the_result() {
    let run = |callback: Option<EvidenceFn>| async move {
        let jev = succeeding("jev", "1.0.0", 5);
        let driver = driver();
        let mut scheduler = scheduled(
            policy("secret-workspace-id", "secret-principal-id", "v1"),
            &driver,
        );
        scheduler.on_evidence = callback;
        let request = request("binding-jev.json", AdapterSet::new().with(Arc::new(jev)))
            .with_scheduler(scheduler);
        serde_json::to_value(evaluate(request).await).unwrap()
    };
    let texts = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&texts);
    let recording: EvidenceFn = Arc::new(move |event: AdmissionEvidence<'_>| {
        sink.lock().unwrap().push(format!("{event:?}"));
    });
    let panicking: EvidenceFn = Arc::new(|_: AdmissionEvidence<'_>| panic!("host callback bug"));

    let plain: Value = run(None).await;
    assert_eq!(run(Some(recording)).await, plain);
    assert_eq!(run(Some(panicking)).await, plain);
    let texts = texts.lock().unwrap();
    assert_eq!(texts.len(), 3);
    for text in texts.iter() {
        assert!(
            !text.contains("secret"),
            "a tenant ID reached onEvidence: {text}"
        );
    }
}
