//! CNC-ADMIT-RESERVE / SHARE / TOKEN / BREAKER / AUDIT / DRILL and the registry validation case.
//! Shared pools use the controls-test defaults: concurrency 4, queue 64, wait 60 s.

mod common;

use common::*;
use turnstile_admission::{
    Acquired, ActualUsage, AdmissionRequest, BreakerState, BreakerTransition, CircuitBreakerConfig,
    Controller, Estimate, Lease, Limits, Outcome, Profile, ProfileChangeKind, Reason, Registry,
    RegistryError,
};

fn pool() -> Limits {
    limits(4, 64, 60_000)
}

fn principal_limits(concurrency: u32, reserved: Option<u32>) -> Limits {
    Limits {
        reserved_concurrency: reserved,
        ..limits(concurrency, 64, 60_000)
    }
}

/// A bare controller: each principal has its own limits over shared workspace and provider
/// pools; the full principal table is known up front.
fn controls(workspace: Limits, provider: Limits, principals: &[(&str, Limits)]) -> Controller {
    let mut profile = Profile {
        workspace,
        ..Profile::default()
    };
    profile.providers.insert("jev".into(), provider);
    for (id, l) in principals {
        profile.principals.insert((*id).into(), l.clone());
    }
    Controller::new(profile, 0).expect("valid profile")
}

fn ask(principal: &str) -> AdmissionRequest {
    AdmissionRequest::new(principal, "jev", "invocation").with_deadline(600_000)
}

/// Acquires `n` times; returns the leases granted at once.
fn acquire_many(c: &mut Controller, principal: &str, n: usize) -> Vec<Lease> {
    (0..n)
        .filter_map(|_| match c.acquire(ask(principal), 0) {
            Acquired::Admitted(lease) => Some(lease),
            _ => None,
        })
        .collect()
}

#[test]
fn cnc_admit_reserve_001_idle_reservation_is_held_back_from_others() {
    let mut c = controls(
        pool(),
        pool(),
        &[
            ("noisy", principal_limits(8, None)),
            ("quiet", principal_limits(2, Some(1))),
        ],
    );
    let mut noisy = acquire_many(&mut c, "noisy", 6);
    assert_eq!(noisy.len(), 3, "4 - 1 held for the idle quiet principal");
    let quiet = admitted(c.acquire(ask("quiet"), 0));
    assert_eq!(quiet.evidence.queued, 0);
    c.release(noisy[0].id, Outcome::Success, 1).unwrap();
    for resolution in drain(&mut c) {
        noisy.push(resolution.outcome.unwrap());
    }
    assert_eq!(
        noisy.len(),
        4,
        "quiet uses its reservation, nothing is held back any more"
    );
}

#[test]
fn cnc_admit_reserve_002_without_reservation_noisy_takes_the_pool() {
    let mut c = controls(
        pool(),
        pool(),
        &[
            ("noisy", principal_limits(8, None)),
            ("quiet", principal_limits(2, None)),
        ],
    );
    assert_eq!(acquire_many(&mut c, "noisy", 6).len(), 4);
}

#[test]
fn cnc_admit_share_001_share_caps_bound_one_principal_per_pool() {
    let shared_workspace = Limits {
        max_principal_share: Some(0.5),
        ..pool()
    };
    let principals = [
        ("noisy", principal_limits(8, None)),
        ("quiet", principal_limits(4, None)),
    ];
    let mut c = controls(shared_workspace, pool(), &principals);
    assert_eq!(acquire_many(&mut c, "noisy", 6).len(), 2);
    assert_eq!(acquire_many(&mut c, "quiet", 2).len(), 2);

    let shared_provider = Limits {
        max_principal_share: Some(0.75),
        ..pool()
    };
    let mut c = controls(pool(), shared_provider, &principals);
    assert_eq!(acquire_many(&mut c, "noisy", 6).len(), 3);
}

#[test]
fn cnc_admit_share_002_queue_share_rejects_only_the_noisy_principal() {
    let workspace = Limits {
        max_principal_share: Some(0.5),
        ..limits(1, 4, 60_000)
    };
    let principals = [
        ("noisy", principal_limits(8, None)),
        ("quiet", principal_limits(8, None)),
    ];
    let mut c = controls(workspace, pool(), &principals);
    let held = admitted(c.acquire(ask("noisy"), 0));
    let mut waiters = vec![
        queued(c.acquire(ask("noisy"), 0)),
        queued(c.acquire(ask("noisy"), 0)),
    ];
    let third = rejected(c.acquire(ask("noisy"), 0));
    assert_eq!(third.reason, Reason::QueueFull);
    assert!(third.retryable);
    waiters.push(queued(c.acquire(ask("quiet"), 0)));
    let snapshot = c.snapshot();
    assert_eq!((snapshot.active, snapshot.queued), (1, 3));
    // Everything drains: each admitted lease is released in turn.
    let mut current = held;
    let mut admitted_waiters = Vec::new();
    for step in 1..=3 {
        c.release(current.id, Outcome::Success, step).unwrap();
        let resolution = drain(&mut c).pop().expect("one admission per release");
        admitted_waiters.push(resolution.waiter);
        current = resolution.outcome.unwrap();
    }
    c.release(current.id, Outcome::Success, 4).unwrap();
    admitted_waiters.sort();
    waiters.sort();
    assert_eq!(admitted_waiters, waiters);
    let snapshot = c.snapshot();
    assert_eq!((snapshot.active, snapshot.queued), (0, 0));
}

#[test]
fn cnc_admit_registry_validation_refuses_impossible_reservations_and_shares() {
    let mut registry = Registry::new();
    let mut profile = Profile {
        workspace: pool(),
        ..Profile::default()
    };
    profile
        .providers
        .insert("jev".into(), limits(2, 64, 60_000));
    for id in ["a", "b"] {
        profile
            .principals
            .insert(id.into(), principal_limits(2, Some(1)));
    }
    registry
        .register("validation", "v1", profile.clone(), 0)
        .unwrap();

    let mut with_c = profile.clone();
    with_c.principals = [("c".to_owned(), principal_limits(2, Some(1)))].into();
    let err = registry
        .register("validation", "v1", with_c, 0)
        .unwrap_err();
    assert!(err.to_string().contains("reservations exceed"), "{err}");

    let mut with_d = profile.clone();
    with_d.principals = [("d".to_owned(), principal_limits(1, Some(2)))].into();
    let err = registry
        .register("validation", "v1", with_d, 0)
        .unwrap_err();
    assert!(
        err.to_string().contains("within the principal concurrency"),
        "{err}"
    );

    let mut bad_share = profile;
    bad_share.workspace.max_principal_share = Some(1.5);
    let err = registry
        .register("validation", "v2", bad_share, 0)
        .unwrap_err();
    assert!(err.to_string().contains("share"), "{err}");
    assert!(matches!(err, RegistryError::InvalidProfile(_)));
}

#[test]
fn cnc_admit_token_001_large_request_holds_the_token_bucket_reservation() {
    let wide = limits(64, 64, 60_000);
    let provider = Limits {
        tokens_per_second: Some(1000),
        ..wide.clone()
    };
    let mut c = controls(
        wide.clone(),
        provider,
        &[("small", wide.clone()), ("huge", wide)],
    );
    let tokens = |principal: &str, n: u64| ask(principal).with_estimate(Estimate::new().tokens(n));
    for _ in 0..9 {
        let lease = admitted(c.acquire(tokens("small", 100), 0));
        c.release(lease.id, Outcome::Success, 0).unwrap();
    }
    let huge = queued(c.acquire(tokens("huge", 900), 0));
    // (instant, whether it was the huge request)
    let mut admissions: Vec<(u64, bool)> = Vec::new();
    let record = |c: &mut Controller, admissions: &mut Vec<(u64, bool)>, now: u64| {
        for resolution in drain(c) {
            let lease = resolution.outcome.expect("admitted");
            admissions.push((now, resolution.waiter == huge));
            c.release(lease.id, Outcome::Success, now).unwrap();
        }
    };
    let arrivals: Vec<u64> = (1..=20).map(|i| i * 100).collect();
    let end = 2000 + 5000;
    let mut next_arrival = 0;
    let mut now = 0;
    loop {
        let arrival = arrivals.get(next_arrival).copied();
        let timer = c.poll_timeout();
        let Some(at) = [arrival, timer].into_iter().flatten().min() else {
            break;
        };
        if at > end {
            break;
        }
        now = at;
        if arrival == Some(at) {
            next_arrival += 1;
            match c.acquire(tokens("small", 100), now) {
                Acquired::Admitted(lease) => {
                    c.release(lease.id, Outcome::Success, now).unwrap();
                    admissions.push((now, false));
                }
                Acquired::Queued { .. } => {}
                Acquired::Rejected(r) => panic!("small request rejected: {r:?}"),
            }
        } else {
            c.handle_timeout(now);
        }
        record(&mut c, &mut admissions, now);
    }
    assert!(now <= end);
    let (first_at, first_is_huge) = admissions[0];
    assert!(first_is_huge, "the huge request is admitted first");
    assert!((800..1000).contains(&first_at), "admitted at {first_at}");
    assert_eq!(
        admissions.len(),
        21,
        "all 20 small requests are admitted eventually"
    );
}

fn breaker_profile(threshold: u32, open_ms: u64) -> Profile {
    let provider = Limits {
        circuit_breaker: Some(CircuitBreakerConfig {
            failure_threshold: threshold,
            open_ms: Some(open_ms),
            half_open_max_calls: Some(1),
        }),
        ..pool()
    };
    let mut profile = Profile {
        workspace: pool(),
        ..Profile::default()
    };
    profile.providers.insert("jev".into(), provider);
    profile.principals.insert(PRINCIPAL.into(), pool());
    profile
}

/// Drains the registry's tagged transition outbox.
fn poll_transitions(registry: &mut Registry) -> Vec<(String, BreakerTransition)> {
    std::iter::from_fn(|| registry.poll_transition()).collect()
}

fn acquire_lease(registry: &mut Registry, now: u64) -> Lease {
    admitted(registry.acquire(WORKSPACE, ask(PRINCIPAL), now).unwrap())
}

#[test]
fn cnc_admit_breaker_001_transitions_are_on_evidence_history_and_the_outbox() {
    let mut registry = Registry::new();
    registry
        .register(WORKSPACE, "v1", breaker_profile(3, 500), 1000)
        .unwrap();
    for _ in 0..2 {
        let lease = acquire_lease(&mut registry, 1000);
        assert!(lease.evidence.breaker_transitions.is_empty());
        let released = registry
            .release(WORKSPACE, lease.id, Outcome::Failure, 1000)
            .unwrap()
            .unwrap();
        assert!(released.breaker_transitions.is_empty());
    }
    assert!(registry.breaker_transitions(WORKSPACE).is_empty());
    let lease = acquire_lease(&mut registry, 1000);
    let released = registry
        .release(WORKSPACE, lease.id, Outcome::Failure, 1000)
        .unwrap()
        .unwrap();
    let states: Vec<_> = released
        .breaker_transitions
        .iter()
        .map(|t| (t.from, t.to))
        .collect();
    assert_eq!(states, vec![(BreakerState::Closed, BreakerState::Open)]);

    let waiter = queued(registry.acquire(WORKSPACE, ask(PRINCIPAL), 1000).unwrap());
    let snapshot = registry.snapshot(WORKSPACE).unwrap();
    assert_eq!((snapshot.active, snapshot.queued), (0, 1));
    let cancelled = registry.cancel(WORKSPACE, waiter, 1000).unwrap().unwrap();
    assert_eq!(cancelled.reason, Reason::Cancelled);
    assert_eq!(cancelled.evidence.breaker_state, BreakerState::Open);

    let probe = acquire_lease(&mut registry, 1500);
    let released = registry
        .release(WORKSPACE, probe.id, Outcome::Success, 1500)
        .unwrap()
        .unwrap();
    let mut evidence_transitions = probe.evidence.breaker_transitions.clone();
    evidence_transitions.extend(released.breaker_transitions);
    let states: Vec<_> = evidence_transitions
        .iter()
        .map(|t| (t.from, t.to))
        .collect();
    assert_eq!(
        states,
        vec![
            (BreakerState::Open, BreakerState::HalfOpen),
            (BreakerState::HalfOpen, BreakerState::Closed)
        ]
    );

    let polled = poll_transitions(&mut registry);
    assert!(polled.iter().all(|(workspace, _)| workspace == WORKSPACE));
    let seen: Vec<BreakerTransition> = polled.into_iter().map(|(_, t)| t).collect();
    let states: Vec<_> = seen.iter().map(|t| (t.from, t.to)).collect();
    assert_eq!(
        states,
        vec![
            (BreakerState::Closed, BreakerState::Open),
            (BreakerState::Open, BreakerState::HalfOpen),
            (BreakerState::HalfOpen, BreakerState::Closed)
        ]
    );
    assert_eq!(seen[0].provider_id, "jev");
    assert_eq!(seen[0].at_epoch_ms, 1000);
    assert_eq!(seen[0].failures, 3);
    assert_eq!(registry.breaker_transitions(WORKSPACE), seen);
    assert!(!serde_json::to_string(&seen).unwrap().contains("principal"));
    assert_eq!(
        registry.poll_transition(),
        None,
        "each transition is polled once"
    );
}

fn audit_profile(concurrency: u32) -> Profile {
    let mut profile = Profile {
        workspace: limits(concurrency, 64, 60_000),
        ..Profile::default()
    };
    profile.providers.insert("jev".into(), pool());
    profile
}

#[test]
fn cnc_admit_audit_001_profile_changes_are_recorded_with_reproducible_digests() {
    let mut registry = Registry::new();

    let initial = registry
        .register("audit", "v1", audit_profile(4), 10)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            initial.kind,
            initial.previous_profile_version.as_deref(),
            initial.profile_version.as_str(),
            initial.at_epoch_ms
        ),
        (ProfileChangeKind::Initial, None, "v1", 10)
    );
    assert_eq!(
        registry
            .register("audit", "v1", audit_profile(4), 15)
            .unwrap(),
        None
    );
    let change = registry
        .register("audit", "v2", audit_profile(2), 20)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            change.kind,
            change.previous_profile_version.as_deref(),
            change.profile_version.as_str(),
            change.at_epoch_ms
        ),
        (ProfileChangeKind::Change, Some("v1"), "v2", 20)
    );
    let conflict = registry
        .register("audit", "v2", audit_profile(3), 25)
        .unwrap_err();
    assert!(conflict.to_string().contains("conflicts"), "{conflict}");
    let rollback = registry
        .register("audit", "v1", audit_profile(4), 30)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            rollback.kind,
            rollback.previous_profile_version.as_deref(),
            rollback.profile_version.as_str(),
            rollback.at_epoch_ms
        ),
        (ProfileChangeKind::Rollback, Some("v2"), "v1", 30)
    );
    assert_eq!(rollback.digest, initial.digest);
    for digest in [&initial.digest, &rollback.digest] {
        assert!(digest.starts_with("sha256:") && digest.len() == 71);
        assert!(digest[7..]
            .chars()
            .all(|ch| matches!(ch, '0'..='9' | 'a'..='f')));
    }
    let latest = registry
        .register("audit", "v3", audit_profile(1), 40)
        .unwrap()
        .unwrap();
    assert_eq!(latest.kind, ProfileChangeKind::Change);

    let history = registry.profile_history("audit");
    let versions: Vec<_> = history.iter().map(|r| r.profile_version.as_str()).collect();
    assert_eq!(versions, ["v1", "v2", "v1", "v3"]);
    let json = serde_json::to_string(&history).unwrap();
    assert!(!json.contains("\"concurrency\""));
    assert!(history
        .iter()
        .all(|r| r.schema == "decision-admission-profile-change/v1"));
}

fn storm_profile(workspace_concurrency: u32, workspace_queue: u64) -> Profile {
    let provider = Limits {
        circuit_breaker: Some(CircuitBreakerConfig {
            failure_threshold: 2,
            open_ms: Some(1000),
            half_open_max_calls: Some(1),
        }),
        ..limits(4, 64, 60_000)
    };
    let mut profile = Profile {
        workspace: limits(workspace_concurrency, workspace_queue, 60_000),
        ..Profile::default()
    };
    profile.providers.insert("jev".into(), provider);
    profile
        .principals
        .insert(PRINCIPAL.into(), limits(4, 8, 60_000));
    profile
}

/// The drill's steps, in order; each must appear as a row of the runbook's table.
const DRILL_STEPS: [&str; 6] = [
    "provider-failures",
    "load-shed",
    "approved-profile-change",
    "evidence-retained",
    "previous-profile-restored",
    "capacity-restored",
];

#[test]
fn cnc_admit_drill_001_admission_storm_tabletop() {
    let mut registry = Registry::new();
    let mut report = Vec::new();
    let mut clock = 1000;
    let initial = registry
        .register(WORKSPACE, "storm-v1", storm_profile(2, 2), clock)
        .unwrap()
        .unwrap();

    // 1. provider-failures
    let mut transitions = Vec::new();
    for _ in 0..2 {
        let lease = acquire_lease(&mut registry, clock);
        let released = registry
            .release(WORKSPACE, lease.id, Outcome::Failure, clock)
            .unwrap()
            .unwrap();
        transitions.extend(released.breaker_transitions);
    }
    assert_eq!(transitions.len(), 1);
    assert_eq!(transitions[0].to, BreakerState::Open);
    report.push(format!(
        "provider-failures: pass ({} transition to open)",
        transitions.len()
    ));

    // 2. load-shed
    clock += 1000;
    let probe = acquire_lease(&mut registry, clock);
    let waiting: Vec<_> = (0..2)
        .map(|_| queued(registry.acquire(WORKSPACE, ask(PRINCIPAL), clock).unwrap()))
        .collect();
    let shed = rejected(registry.acquire(WORKSPACE, ask(PRINCIPAL), clock).unwrap());
    assert_eq!(shed.reason, Reason::QueueFull);
    assert!(shed.retryable);
    let hint = shed.evidence.retry_after_ms.expect("a retry hint");
    assert!((1..=30_000).contains(&hint), "hint {hint}");
    for waiter in waiting {
        registry.cancel(WORKSPACE, waiter, clock).unwrap().unwrap();
    }
    registry
        .release(WORKSPACE, probe.id, Outcome::Success, clock)
        .unwrap()
        .unwrap();
    report.push(format!("load-shed: pass (queue-full, retryAfterMs {hint})"));

    // 3. approved-profile-change
    let change = registry
        .register(WORKSPACE, "storm-v2", storm_profile(1, 1), clock)
        .unwrap()
        .unwrap();
    assert_eq!(change.kind, ProfileChangeKind::Change);
    assert_eq!(change.previous_profile_version.as_deref(), Some("storm-v1"));
    let results: Vec<_> = (0..2)
        .map(|_| registry.acquire(WORKSPACE, ask(PRINCIPAL), clock).unwrap())
        .collect();
    let leases: Vec<Lease> = results
        .iter()
        .filter_map(|r| match r {
            Acquired::Admitted(lease) => Some(lease.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(leases.len(), 1, "only one of two acquires is admitted");
    report.push("approved-profile-change: pass (1 of 2 admitted)".to_owned());

    // 4. evidence-retained
    let history = registry.breaker_transitions(WORKSPACE);
    assert!(history.len() >= 3);
    assert_eq!(history.first().unwrap().to, BreakerState::Open);
    assert_eq!(history.last().unwrap().to, BreakerState::Closed);
    report.push(format!(
        "evidence-retained: pass ({} breaker transitions)",
        history.len()
    ));

    // 5. previous-profile-restored
    let rollback = registry
        .register(WORKSPACE, "storm-v1", storm_profile(2, 2), clock)
        .unwrap()
        .unwrap();
    assert_eq!(rollback.kind, ProfileChangeKind::Rollback);
    assert_eq!(rollback.digest, initial.digest);
    report.push("previous-profile-restored: pass (rollback digest equals initial)".to_owned());

    // 6. capacity-restored: release the step-3 work, then two concurrent acquires.
    registry
        .release(WORKSPACE, leases[0].id, Outcome::Success, clock)
        .unwrap();
    while let Some(resolution) = registry.poll_resolution(WORKSPACE) {
        let lease = resolution.outcome.unwrap();
        registry
            .release(WORKSPACE, lease.id, Outcome::Success, clock)
            .unwrap();
    }
    let _a = acquire_lease(&mut registry, clock);
    let _b = acquire_lease(&mut registry, clock);
    assert_eq!(registry.snapshot(WORKSPACE).unwrap().active, 2);
    report.push("capacity-restored: pass (active 2)".to_owned());

    let report = report.join("\n");
    assert!(!report.contains(PRINCIPAL) && !report.contains(WORKSPACE));
    for (step, line) in DRILL_STEPS.iter().zip(report.lines()) {
        assert!(line.starts_with(step));
    }

    // Read at compile time, not from the working tree while tests run: a run once failed here
    // with NotFound while the tree was being rewritten by a concurrent git operation.
    let runbook = include_str!("../../../docs/operations/admission.md");
    assert!(runbook.contains("RUN-JEV-ADMISSION-v1"));
    assert!(runbook.contains("DRILL-ADMISSION-STORM-v1"));
    for step in DRILL_STEPS {
        assert!(
            runbook.contains(&format!("| {step} |")),
            "runbook row for {step}"
        );
    }
    let index = include_str!("../../../docs/operations/README.md");
    assert!(index.contains("admission.md"));
}

#[test]
fn registry_files_each_workspace_timeout_and_handles_only_the_due_ones() {
    let mut registry = Registry::new();
    for (workspace, wait) in [("fast", 40), ("slow", 90)] {
        let mut profile = same_profile(&limits(1, 8, wait), &[PRINCIPAL]);
        profile
            .principals
            .insert(PRINCIPAL.into(), limits(1, 8, wait));
        registry.register(workspace, "v1", profile, 0).unwrap();
        admitted(registry.acquire(workspace, ask(PRINCIPAL), 0).unwrap());
        queued(registry.acquire(workspace, ask(PRINCIPAL), 0).unwrap());
    }
    assert_eq!(registry.poll_timeout(), Some(40));
    assert_eq!(registry.poll_timeout_of("slow"), Some(90));
    assert!(registry.handle_due(39).is_empty());
    assert_eq!(registry.handle_due(40), vec!["fast".to_owned()]);
    let expired = registry.poll_resolution("fast").unwrap();
    assert_eq!(expired.outcome.unwrap_err().reason, Reason::QueueTimeout);
    assert!(registry.poll_resolution("slow").is_none());
    assert_eq!(registry.poll_timeout(), Some(90));
    assert_eq!(registry.handle_due(1000), vec!["slow".to_owned()]);
    assert_eq!(registry.poll_timeout(), None);
}

#[test]
fn actual_usage_on_release_corrects_the_invocation_budget_in_every_scope() {
    // Principal budget: 1,000 tokens and $1 per invocation.
    let budgeted = Limits {
        max_tokens: Some(1_000),
        max_cost_usd: Some(1.0),
        ..pool()
    };
    let mut c = controls(pool(), pool(), &[("p", budgeted)]);
    let ask = |tokens: u64, cost: f64| {
        AdmissionRequest::new("p", "jev", "inv-1")
            .with_estimate(Estimate::new().tokens(tokens).cost_usd(cost))
            .with_deadline(600_000)
    };
    let Acquired::Admitted(first) = c.acquire(ask(100, 0.1), 0) else {
        panic!("the first attempt fits")
    };
    // The call overran its estimate: 950 tokens.
    let usage = ActualUsage::none().tokens(950);
    assert!(c
        .release_with_usage(first.id, Outcome::Success, usage, 10)
        .is_some());
    // 950 + 100 > 1,000: the next attempt of this invocation fails closed.
    match c.acquire(ask(100, 0.1), 20) {
        Acquired::Rejected(rejection) => assert_eq!(rejection.reason, Reason::Tokens),
        other => panic!("expected a tokens rejection, got {other:?}"),
    }
    // A conservative estimate is given back: estimated 40 tokens and $0.9, used 0 and $0.05.
    let Acquired::Admitted(second) = c.acquire(ask(40, 0.9), 30) else {
        panic!("40 more tokens fit")
    };
    let used = ActualUsage::none()
        .tokens(0)
        .with_cost_usd(0.05)
        .expect("a valid cost");
    c.release_with_usage(second.id, Outcome::Success, used, 40);
    // Now 950 tokens and $0.15 are spent: $0.8 fits again, 60 tokens do not.
    assert!(matches!(c.acquire(ask(50, 0.8), 50), Acquired::Admitted(_)));
    match c.acquire(ask(60, 0.0), 60) {
        Acquired::Rejected(rejection) => assert_eq!(rejection.reason, Reason::Tokens),
        other => panic!("expected a tokens rejection, got {other:?}"),
    }
    // A lease released twice corrects nothing the second time.
    assert!(c
        .release_with_usage(
            first.id,
            Outcome::Success,
            ActualUsage::none().tokens(0),
            70
        )
        .is_none());
}

// ----- events leave through poll_transition, tagged with their workspace -----------------------

/// Two workspaces whose breakers leave the open state at the same `handle_due` tick: each
/// transition comes out of the outbox under its own workspace (the server used to label a
/// shared list with whichever workspace it drained first).
#[test]
fn two_workspaces_tripping_breakers_at_the_same_handle_due_tick_are_polled_under_their_own_workspace(
) {
    let mut registry = Registry::new();
    for workspace in ["ws-a", "ws-b"] {
        registry
            .register(workspace, "v1", breaker_profile(1, 500), 0)
            .unwrap();
        let lease = admitted(registry.acquire(workspace, ask(PRINCIPAL), 0).unwrap());
        registry
            .release(workspace, lease.id, Outcome::Failure, 0)
            .unwrap();
        queued(registry.acquire(workspace, ask(PRINCIPAL), 0).unwrap());
    }
    let opened = poll_transitions(&mut registry);
    let tagged: Vec<_> = opened.iter().map(|(w, t)| (w.as_str(), t.to)).collect();
    assert_eq!(
        tagged,
        [("ws-a", BreakerState::Open), ("ws-b", BreakerState::Open)]
    );

    let mut due = registry.handle_due(500);
    due.sort();
    assert_eq!(due, ["ws-a", "ws-b"], "both are due at the same tick");
    let mut half_open: Vec<_> = poll_transitions(&mut registry)
        .into_iter()
        .map(|(w, t)| (w, t.from, t.to, t.at_epoch_ms))
        .collect();
    half_open.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        half_open,
        [
            (
                "ws-a".to_owned(),
                BreakerState::Open,
                BreakerState::HalfOpen,
                500
            ),
            (
                "ws-b".to_owned(),
                BreakerState::Open,
                BreakerState::HalfOpen,
                500
            ),
        ]
    );
    assert_eq!(registry.transitions_dropped(), 0);
}

/// One close → open → half-open → closed cycle of a threshold-1 breaker; three transitions.
fn breaker_cycle(
    acquire: &mut dyn FnMut(u64) -> Lease,
    release: &mut dyn FnMut(Lease, Outcome, u64),
    at: u64,
) {
    let lease = acquire(at);
    release(lease, Outcome::Failure, at);
    let probe = acquire(at + 10);
    release(probe, Outcome::Success, at + 10);
}

#[test]
fn the_registry_transition_outbox_is_bounded_and_counts_what_it_drops() {
    let registry = std::cell::RefCell::new(Registry::new());
    registry
        .borrow_mut()
        .register(WORKSPACE, "v1", breaker_profile(1, 10), 0)
        .unwrap();
    let cycles = 1400u64; // 4200 transitions, never polled
    for i in 0..cycles {
        breaker_cycle(
            &mut |at| {
                admitted(
                    registry
                        .borrow_mut()
                        .acquire(WORKSPACE, ask(PRINCIPAL), at)
                        .unwrap(),
                )
            },
            &mut |lease, outcome, at| {
                registry
                    .borrow_mut()
                    .release(WORKSPACE, lease.id, outcome, at)
                    .unwrap();
            },
            i * 100,
        );
    }
    let mut registry = registry.into_inner();
    let total = 3 * cycles;
    let limit = turnstile_admission::TRANSITION_OUTBOX_LIMIT as u64;
    assert_eq!(registry.transitions_dropped(), total - limit);
    let kept = poll_transitions(&mut registry);
    assert_eq!(kept.len() as u64, limit);
    let last = &kept.last().unwrap().1;
    assert_eq!(
        (last.to, last.at_epoch_ms),
        (BreakerState::Closed, (cycles - 1) * 100 + 10),
        "the newest transitions are kept, the oldest dropped"
    );
}

#[test]
fn the_controller_transition_outbox_is_bounded_for_a_host_that_never_polls() {
    let c =
        std::cell::RefCell::new(Controller::new(breaker_profile(1, 10), 0).expect("valid profile"));
    for i in 0..1400u64 {
        breaker_cycle(
            &mut |at| admitted(c.borrow_mut().acquire(ask(PRINCIPAL), at)),
            &mut |lease, outcome, at| {
                c.borrow_mut().release(lease.id, outcome, at).unwrap();
            },
            i * 100,
        );
    }
    let mut c = c.into_inner();
    let limit = turnstile_admission::TRANSITION_OUTBOX_LIMIT;
    assert_eq!(c.transitions_dropped(), (3 * 1400 - limit) as u64);
    assert_eq!(std::iter::from_fn(|| c.poll_transition()).count(), limit);
    assert_eq!(
        c.breaker_transitions().len(),
        64,
        "the history stays bounded too"
    );
}

// ----- typed errors and narrow queries ----------------------------------------------------------

#[test]
fn a_pause_for_an_unknown_workspace_or_an_unconfigured_provider_is_a_typed_error_that_changes_nothing(
) {
    let mut registry = Registry::new();
    assert_eq!(
        registry.coordinate_retry_after("nowhere", "jev", 100, 0),
        Err(RegistryError::UnknownWorkspace)
    );
    registry
        .register(WORKSPACE, "v1", breaker_profile(1, 500), 0)
        .unwrap();
    let before = registry.snapshot(WORKSPACE).unwrap();
    assert_eq!(
        registry.coordinate_retry_after(WORKSPACE, "random-provider", 100, 0),
        Err(RegistryError::UnconfiguredProvider)
    );
    assert_eq!(
        registry.snapshot(WORKSPACE).unwrap(),
        before,
        "no pause, no retry pressure, no provider state"
    );
    assert_eq!(
        registry.coordinate_retry_after(WORKSPACE, "jev", 100, 5),
        Ok(105)
    );
    assert_eq!(registry.snapshot(WORKSPACE).unwrap().retry_pressure, 1);
}

#[test]
fn registry_queries_answer_without_reaching_into_the_controller() {
    let mut registry = Registry::new();
    assert!(!registry.has_workspace(WORKSPACE));
    assert_eq!(registry.now_of(WORKSPACE), None);
    assert_eq!(registry.peak_totals(WORKSPACE), None);
    registry
        .register(WORKSPACE, "v1", breaker_profile(1, 500), 10)
        .unwrap();
    assert!(registry.has_workspace(WORKSPACE));
    let lease = admitted(registry.acquire(WORKSPACE, ask(PRINCIPAL), 25).unwrap());
    assert_eq!(registry.now_of(WORKSPACE), Some(25));
    assert_eq!(
        registry.peak_totals(WORKSPACE),
        Some(turnstile_admission::Counts {
            active: 1,
            queued: 0
        })
    );
    assert!(registry
        .profile(WORKSPACE)
        .is_some_and(|p| p.providers.contains_key("jev")));
    let second = registry
        .try_acquire(WORKSPACE, ask(PRINCIPAL), 30)
        .unwrap()
        .expect("a free lane admits a try-now request");
    assert_eq!(registry.peak_totals(WORKSPACE).map(|p| p.active), Some(2));
    for lease in [lease, second] {
        registry
            .release(WORKSPACE, lease.id, Outcome::Success, 40)
            .unwrap();
    }
    assert_eq!(
        registry.totals(WORKSPACE),
        Some(turnstile_admission::Counts::default())
    );
}
