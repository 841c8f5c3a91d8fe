//! Evidence gaps of issue 36: a breaker an attempt's failure opened is on that attempt's record
//! (`breakerTransitions`) and reaches `onEvidence` as a release event; the evaluator's driver
//! keeps profile-change records and breaker transitions (last 64 each per workspace) and answers
//! them like the service's `GET …/profiles` and `GET …/breakers` (CNC-ADMIT-BREAKER-001,
//! CNC-ADMIT-AUDIT-001 at the evaluator level).

mod common;

use std::sync::{Arc, Mutex};

use turnstile_admission::{
    AdmissionRequest, BreakerState, BreakerTransition, CircuitBreakerConfig, Decision, Estimate,
    Outcome, ProfileChangeKind, Reason,
};
use turnstile_decision::attempt::AttemptRecord;
use turnstile_decision::{
    evaluate, AdapterSet, AdmissionEvidence, AttemptReason, CallLog, EvidenceFn, EvidenceKind,
    RulesetResult, ScriptedAdapter, Step,
};

use common::*;

/// What `onEvidence` saw: (kind, alias, ordinal, decision, transitions).
type Event = (EvidenceKind, String, u32, Decision, Vec<BreakerTransition>);

fn recorder() -> (EvidenceFn, Arc<Mutex<Vec<Event>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let callback: EvidenceFn = Arc::new(move |event: AdmissionEvidence<'_>| {
        sink.lock().unwrap().push((
            event.kind,
            event.alias.to_owned(),
            event.ordinal,
            event.evidence.decision,
            event.breaker_transitions.to_vec(),
        ));
    });
    (callback, seen)
}

/// The attempts of one alias's evaluation.
fn attempts<'r>(result: &'r RulesetResult, alias: &str) -> &'r [AttemptRecord] {
    let (_, evaluation) = result
        .spec
        .evaluations
        .0
        .iter()
        .find(|(name, _)| name == alias)
        .expect("the alias is evaluated");
    &evaluation.spec.attempts
}

fn breaker(failure_threshold: u32, open_ms: u64) -> Option<CircuitBreakerConfig> {
    Some(CircuitBreakerConfig {
        failure_threshold,
        open_ms: Some(open_ms),
        half_open_max_calls: Some(1),
    })
}

#[tokio::test(start_paused = true)]
async fn cnc_admit_breaker_001_a_breaker_opened_by_a_failure_is_on_the_failing_attempt_and_in_on_evidence(
) {
    // category fails (service-error) and opens jev's breaker (threshold 1, open 60 s); the
    // other aliases then wait 20 ms at most and are refused `queue-timeout` with the breaker open.
    let log = CallLog::new();
    let jev = ScriptedAdapter::new("jev", "1.0.0")
        .script("category", [Step::new(5, service_error())])
        .with_default(Step::new(5, success_for("severity")))
        .with_log(Arc::clone(&log));
    let driver = driver();
    let mut policy = policy("ws-breaker", "p-breaker", "v1");
    policy.principal.limits.max_queue_wait_ms = Some(20);
    policy.providers.get_mut("jev").unwrap().circuit_breaker = breaker(1, 60_000);
    let (callback, seen) = recorder();
    let request = request("binding-jev.json", AdapterSet::new().with(Arc::new(jev)))
        .with_scheduler(scheduled(policy, &driver).with_on_evidence(callback));
    let result = evaluate(request).await;
    assert_eq!(log.count(), 1, "only category's call is made");

    let category_attempts = attempts(&result, "category");
    assert_eq!(category_attempts.len(), 1);
    let failing = &category_attempts[0];
    assert_eq!(failing.reason, AttemptReason::ServiceError);
    assert_eq!(failing.breaker_transitions.len(), 1, "{failing:?}");
    let opened = &failing.breaker_transitions[0];
    assert_eq!(
        (
            opened.provider_id.as_str(),
            opened.from,
            opened.to,
            opened.failures
        ),
        ("jev", BreakerState::Closed, BreakerState::Open, 1)
    );
    // In the result JSON beside `admission`, never naming a tenant.
    let json = serde_json::to_value(failing).unwrap();
    assert_eq!(json["breakerTransitions"][0]["to"], "open");
    assert_eq!(json["breakerTransitions"][0]["providerId"], "jev");
    assert_eq!(json["admission"]["decision"], "admit");
    let text = serde_json::to_string(&result).unwrap();
    assert!(!text.contains("ws-breaker") && !text.contains("p-breaker"));
    // Refused attempts caused nothing at release.
    for alias in ["severity", "core_unavailable"] {
        for attempt in attempts(&result, alias) {
            assert_eq!(
                attempt.admission.as_ref().unwrap().reason,
                Reason::QueueTimeout
            );
            assert!(attempt.breaker_transitions.is_empty());
            assert!(!serde_json::to_value(attempt)
                .unwrap()
                .as_object()
                .unwrap()
                .contains_key("breakerTransitions"));
        }
    }

    // onEvidence: category's admission, then its release event with the transition; the
    // admission events are unchanged (no transitions of their own).
    let seen = seen.lock().unwrap().clone();
    let category: Vec<&Event> = seen.iter().filter(|e| e.1 == "category").collect();
    assert_eq!(category.len(), 2, "{seen:?}");
    assert_eq!(
        (category[0].0, category[0].3, category[0].4.len()),
        (EvidenceKind::Admission, Decision::Admit, 0)
    );
    assert_eq!(
        (category[1].0, category[1].2, category[1].3),
        (EvidenceKind::Release, 1, Decision::Admit)
    );
    assert_eq!(category[1].4, failing.breaker_transitions);
    let releases = seen.iter().filter(|e| e.0 == EvidenceKind::Release).count();
    assert_eq!(
        releases, 1,
        "only the release that moved the breaker: {seen:?}"
    );
    assert_eq!(EvidenceKind::Release.as_str(), "release");

    // The driver's breaker history has it, like the service's `GET …/breakers`.
    assert_eq!(
        driver.breaker_history("ws-breaker").await,
        failing.breaker_transitions
    );
}

#[tokio::test(start_paused = true)]
async fn cnc_admit_audit_001_revisions_registered_through_the_evaluator_are_profile_records() {
    // Two evaluations on one driver, the second with a new revision: two records, `initial`
    // then `change`; a third run with the same revision adds none.
    let driver = driver();
    let run = |version: &'static str, concurrency: u32| {
        let driver = driver.clone();
        async move {
            let mut policy = policy("ws-audit", "p-audit", version);
            policy.workspace.limits.concurrency = concurrency;
            let adapters = AdapterSet::new().with(Arc::new(succeeding("jev", "1.0.0", 5)));
            let request =
                request("binding-jev.json", adapters).with_scheduler(scheduled(policy, &driver));
            evaluate(request).await
        }
    };
    run("v1", 4).await;
    tokio::time::advance(std::time::Duration::from_millis(10)).await;
    run("v2", 2).await;
    run("v2", 2).await;

    let history = driver.profile_history("ws-audit").await;
    let kinds: Vec<(ProfileChangeKind, Option<&str>, &str)> = history
        .iter()
        .map(|r| {
            (
                r.kind,
                r.previous_profile_version.as_deref(),
                r.profile_version.as_str(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (ProfileChangeKind::Initial, None, "v1"),
            (ProfileChangeKind::Change, Some("v1"), "v2"),
        ]
    );
    assert!(history[1].at_epoch_ms > history[0].at_epoch_ms);
    for record in &history {
        assert!(record.digest.starts_with("sha256:"));
        let json = serde_json::to_string(record).unwrap();
        assert!(
            !json.contains("concurrency"),
            "records carry no limits: {json}"
        );
    }
    assert!(driver.profile_history("ws-unknown").await.is_empty());
    assert!(driver.breaker_history("ws-audit").await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn profile_and_breaker_history_keep_the_last_64_like_the_service() {
    let driver = driver();
    let mut policy = policy("ws-bounded", "p-bounded", "r0");
    policy.providers.get_mut("jev").unwrap().circuit_breaker = breaker(1, 1);
    for revision in 0..70 {
        policy.profile_version = format!("r{revision}");
        let record = driver
            .register("ws-bounded", &policy.profile_version, policy.profile())
            .await
            .unwrap();
        assert!(record.is_some());
    }
    let profiles = driver.profile_history("ws-bounded").await;
    assert_eq!(profiles.len(), 64);
    assert_eq!(profiles[0].profile_version, "r6", "the oldest six are gone");
    assert_eq!(profiles[63].profile_version, "r69");

    // Each failure opens the breaker; after 1 ms the next admission moves it to half-open:
    // 40 failures make 1 + 39 × 2 = 79 transitions.
    let request = || AdmissionRequest {
        principal_id: "p-bounded".into(),
        provider_id: "jev".into(),
        budget_id: "budget".into(),
        estimate: Estimate::default(),
        deadline: None,
    };
    let mut caused = Vec::new();
    for _ in 0..40 {
        let lease = driver.acquire("ws-bounded", request()).await.unwrap();
        caused.extend(lease.evidence().breaker_transitions.iter().cloned());
        caused.extend(
            lease
                .release(Outcome::Failure, Default::default())
                .await
                .unwrap(),
        );
        tokio::time::advance(std::time::Duration::from_millis(2)).await;
    }
    assert_eq!(caused.len(), 79);
    let breakers = driver.breaker_history("ws-bounded").await;
    assert_eq!(breakers.len(), 64);
    assert_eq!(breakers, caused[15..], "the last 64, oldest first");
}
