//! CNC-ADMIT-001 … 011 and 013 … 021: controller ceilings, queues, Retry-After and breaker.
//! Every test drives the controller with explicit `now` values; nothing sleeps.

mod common;

use common::*;
use turnstile_admission::{
    AdmissionRequest, BreakerState, CircuitBreakerConfig, Counts, Decision, Estimate, Limits,
    Outcome, Reason, UnknownProvider,
};

#[test]
fn cnc_admit_001_concurrency_counts_per_principal_and_release_admits_the_waiter() {
    let names = [
        "principal-1",
        "principal-2",
        "principal-3",
        "principal-4",
        "principal-5",
    ];
    let mut c = controller(&limits(4, 8, 1000), &names, 0);
    let leases: Vec<_> = names[..4]
        .iter()
        .map(|p| admitted(c.acquire(request(p, 0), 0)))
        .collect();
    for lease in &leases {
        assert_eq!(lease.evidence.active, 1);
    }
    let fifth = queued(c.acquire(request("principal-5", 0), 0));
    assert!(
        drain(&mut c).is_empty(),
        "the fifth request must not settle"
    );
    c.release(leases[0].id, Outcome::Success, 1).unwrap();
    let lease = resolution_of(&drain(&mut c), fifth).unwrap();
    assert_eq!(lease.evidence.decision, Decision::Admit);
    assert_eq!(lease.evidence.reason, Reason::Admitted);
}

#[test]
fn cnc_admit_002_quiet_principal_is_not_starved_by_a_noisy_lane() {
    let mut c = controller(&limits(1, 64, 10_000), &["noisy", "quiet"], 0);
    let first = admitted(c.acquire(request("noisy", 0), 0));
    let mut waiters = Vec::new();
    for i in 0..12 {
        let mut r = request("noisy", 0);
        r.budget_id = format!("noisy-{i}");
        waiters.push(("noisy", queued(c.acquire(r, 0))));
    }
    let quiet = queued(c.acquire(request("quiet", 0), 0));
    let mut order = Vec::new();
    let mut current = first;
    for step in 1..=13 {
        c.release(current.id, Outcome::Success, step).unwrap();
        let resolutions = drain(&mut c);
        assert_eq!(resolutions.len(), 1);
        let resolution = &resolutions[0];
        order.push(resolution.waiter);
        current = resolution.outcome.clone().unwrap();
    }
    let position = order.iter().position(|w| *w == quiet).unwrap();
    assert!(position <= 1, "quiet was admitted at position {position}");
}

#[test]
fn cnc_admit_003_cancelled_waiter_leaks_no_permit() {
    let mut c = controller(&default_limits(), &[PRINCIPAL], 0);
    let held = admitted(c.acquire(request(PRINCIPAL, 0), 0));
    let waiter = queued(c.acquire(request(PRINCIPAL, 0), 0));
    let rejection = c.cancel(waiter, 1).unwrap();
    assert_eq!(rejection.reason, Reason::Cancelled);
    assert_eq!(rejection.evidence.reason, Reason::Cancelled);
    c.release(held.id, Outcome::Success, 2).unwrap();
    let lease = admitted(c.acquire(request(PRINCIPAL, 2), 2));
    assert_eq!(
        (lease.evidence.decision, lease.evidence.reason),
        (Decision::Admit, Reason::Admitted)
    );
}

#[test]
fn cnc_admit_004_unknown_cost_and_batch_size() {
    let l = Limits {
        max_cost_usd: Some(1.0),
        allow_unknown_cost: Some(false),
        max_batch_size: Some(2),
        ..default_limits()
    };
    let mut c = controller(&l, &[PRINCIPAL], 0);
    let mut unknown = request(PRINCIPAL, 0);
    unknown.estimate.cost_usd = None;
    assert_eq!(rejected(c.acquire(unknown, 0)).reason, Reason::UnknownCost);
    let batch = request(PRINCIPAL, 0).with_estimate(Estimate::new().cost_usd(0.1).batch_size(3));
    assert_eq!(rejected(c.acquire(batch, 0)).reason, Reason::BatchSize);
}

#[test]
fn cnc_admit_005_per_request_bounds_reject_before_queueing() {
    let cases = [
        (
            Limits {
                max_request_bytes: Some(8),
                ..default_limits()
            },
            Estimate::new().request_bytes(9),
            Reason::RequestTooLarge,
        ),
        (
            Limits {
                max_items: Some(2),
                ..default_limits()
            },
            Estimate::new().items(3),
            Reason::TooManyItems,
        ),
        (
            Limits {
                max_retained_work: Some(2),
                ..default_limits()
            },
            Estimate::new(),
            Reason::UnknownRetainedWork,
        ),
        (
            Limits {
                max_retained_work: Some(2),
                ..default_limits()
            },
            Estimate::new().retained_work(3),
            Reason::RetainedWork,
        ),
    ];
    for (l, estimate, reason) in cases {
        let mut c = controller(&l, &[PRINCIPAL], 0);
        let rejection = rejected(c.acquire(request(PRINCIPAL, 0).with_estimate(estimate), 0));
        assert_eq!(rejection.reason, reason);
        assert!(!rejection.retryable);
        assert_eq!(rejection.evidence.decision, Decision::Reject);
        assert_eq!(c.snapshot().queued, 0);
    }
}

#[test]
fn cnc_admit_006_depleted_buckets_defer_and_cancel() {
    let cases = [
        (
            Limits {
                requests_per_minute: Some(1),
                ..default_limits()
            },
            Estimate::new(),
            Reason::RequestsPerMinute,
        ),
        (
            Limits {
                tokens_per_second: Some(1),
                ..default_limits()
            },
            Estimate::new().tokens(1),
            Reason::TokensPerSecond,
        ),
    ];
    for (l, estimate, reason) in cases {
        let mut c = controller(&l, &[PRINCIPAL], 0);
        let first = admitted(c.acquire(request(PRINCIPAL, 0).with_estimate(estimate.clone()), 0));
        c.release(first.id, Outcome::Success, 0).unwrap();
        let result = c.acquire(request(PRINCIPAL, 0).with_estimate(estimate), 0);
        let turnstile_admission::Acquired::Queued { waiter, evidence } = result else {
            panic!("expected a deferral, got {result:?}");
        };
        assert_eq!(evidence.decision, Decision::Defer);
        assert_eq!(evidence.reason, reason);
        assert!(evidence.retry_after_ms.is_some_and(|ms| ms >= 1));
        assert!(drain(&mut c).is_empty());
        assert_eq!(c.cancel(waiter, 0).unwrap().reason, Reason::Cancelled);
    }
}

#[test]
fn cnc_admit_007_requests_that_can_never_fit_are_rejected_at_once() {
    let cases = [
        (
            Limits {
                tokens_per_second: Some(4),
                ..default_limits()
            },
            Estimate::new().tokens(5),
            Reason::TokensPerSecond,
        ),
        (
            Limits {
                requests_per_minute: Some(0),
                ..default_limits()
            },
            Estimate::new(),
            Reason::RequestsPerMinute,
        ),
    ];
    for (l, estimate, reason) in cases {
        let mut c = controller(&l, &[PRINCIPAL], 0);
        let rejection = rejected(c.acquire(request(PRINCIPAL, 0).with_estimate(estimate), 0));
        assert_eq!(rejection.reason, reason);
        assert!(!rejection.retryable);
        assert_eq!(rejection.evidence.decision, Decision::Reject);
        assert_eq!(rejection.evidence.queued, 0);
        assert_eq!(c.snapshot().queued, 0, "no waiter is kept");
    }
}

#[test]
fn cnc_admit_008_tightened_token_rate_rejects_queued_work_that_can_never_fit() {
    let l = Limits {
        tokens_per_second: Some(20),
        ..default_limits()
    };
    let mut c = controller(&l, &[PRINCIPAL], 0);
    let held = admitted(c.acquire(request(PRINCIPAL, 0), 0));
    let waiter = queued(c.acquire(
        request(PRINCIPAL, 0).with_estimate(Estimate::new().tokens(10)),
        0,
    ));
    let tightened = Limits {
        tokens_per_second: Some(5),
        ..default_limits()
    };
    c.set_profile(same_profile(&tightened, &[PRINCIPAL]), 1)
        .unwrap();
    c.release(held.id, Outcome::Success, 2).unwrap();
    let rejection = resolution_of(&drain(&mut c), waiter).unwrap_err();
    assert_eq!(rejection.reason, Reason::TokensPerSecond);
    assert!(!rejection.retryable);
    assert_eq!(c.snapshot().active, 0, "the waiter was never dispatched");
}

#[test]
fn cnc_admit_009_attempt_and_cost_budgets_accumulate_per_budget_id() {
    let l = Limits {
        max_attempts: Some(1),
        ..default_limits()
    };
    let mut c = controller(&l, &[PRINCIPAL], 0);
    let one = request(PRINCIPAL, 0).with_estimate(Estimate::new().attempts(1));
    let lease = admitted(c.acquire(one.clone(), 0));
    c.release(lease.id, Outcome::Success, 0).unwrap();
    assert_eq!(rejected(c.acquire(one, 0)).reason, Reason::Attempts);

    let l = Limits {
        max_cost_usd: Some(0.1),
        allow_unknown_cost: Some(false),
        ..default_limits()
    };
    let mut c = controller(&l, &[PRINCIPAL], 0);
    let cost = request(PRINCIPAL, 0).with_estimate(Estimate::new().cost_usd(0.06));
    let lease = admitted(c.acquire(cost.clone(), 0));
    c.release(lease.id, Outcome::Success, 0).unwrap();
    assert_eq!(rejected(c.acquire(cost, 0)).reason, Reason::Cost);
}

#[test]
fn cnc_admit_010_malformed_estimates_fail_closed_without_leaking_values() {
    let l = Limits {
        max_cost_usd: Some(1.0),
        ..default_limits()
    };
    let malformed: Vec<Estimate> = vec![
        Estimate {
            tokens: Some(-1.0),
            cost_usd: Some(0.1),
            ..Estimate::default()
        },
        Estimate {
            tokens: Some(f64::NAN),
            cost_usd: Some(0.1),
            ..Estimate::default()
        },
        Estimate {
            tokens: Some(f64::INFINITY),
            cost_usd: Some(0.1),
            ..Estimate::default()
        },
        Estimate {
            request_bytes: Some(1.5),
            cost_usd: Some(0.1),
            ..Estimate::default()
        },
        Estimate {
            items: Some(-1.0),
            cost_usd: Some(0.1),
            ..Estimate::default()
        },
        Estimate {
            attempts: Some(f64::NAN),
            cost_usd: Some(0.1),
            ..Estimate::default()
        },
        Estimate {
            batch_size: Some(f64::INFINITY),
            cost_usd: Some(0.1),
            ..Estimate::default()
        },
        Estimate {
            retained_work: Some(-1.0),
            cost_usd: Some(0.1),
            ..Estimate::default()
        },
        Estimate {
            cost_usd: Some(-0.01),
            ..Estimate::default()
        },
        Estimate {
            cost_usd: Some(f64::NAN),
            ..Estimate::default()
        },
        Estimate {
            cost_usd: Some(f64::INFINITY),
            ..Estimate::default()
        },
    ];
    assert_eq!(malformed.len(), 11);
    let mut c = controller(&l, &[PRINCIPAL], 0);
    for estimate in malformed {
        let rejection = rejected(c.acquire(request(PRINCIPAL, 0).with_estimate(estimate), 0));
        assert_eq!(rejection.reason, Reason::InvalidEstimate);
        assert!(!rejection.retryable);
        let e = &rejection.evidence;
        assert_eq!(e.decision, Decision::Reject);
        assert_eq!((e.estimated_tokens, e.estimated_cost_usd), (None, None));
        assert_eq!((e.active, e.queued), (0, 0));
    }
    let safe = request(PRINCIPAL, 0).with_estimate(Estimate::new().cost_usd(0.1).tokens(1));
    admitted(c.acquire(safe, 0));
}

#[test]
fn cnc_admit_011_queued_work_is_revalidated_against_the_current_profile() {
    let l = Limits {
        max_request_bytes: Some(1000),
        ..default_limits()
    };
    let mut c = controller(&l, &[PRINCIPAL], 0);
    let held = admitted(c.acquire(request(PRINCIPAL, 0), 0));
    let waiter = queued(c.acquire(
        request(PRINCIPAL, 0).with_estimate(Estimate::new().request_bytes(100)),
        0,
    ));
    let tightened = Limits {
        max_request_bytes: Some(50),
        ..default_limits()
    };
    c.set_profile(same_profile(&tightened, &[PRINCIPAL]), 1)
        .unwrap();
    c.release(held.id, Outcome::Success, 2).unwrap();
    let resolutions = drain(&mut c);
    assert_eq!(resolutions.len(), 1, "the waiter is never dispatched");
    assert_eq!(
        resolution_of(&resolutions, waiter).unwrap_err().reason,
        Reason::RequestTooLarge
    );
    admitted(c.acquire(
        request(PRINCIPAL, 2).with_estimate(Estimate::new().request_bytes(10)),
        2,
    ));
}

#[test]
fn cnc_admit_013_queue_dwell_expiry_and_capacity_recovery() {
    let mut c = controller(&limits(1, 2, 40), &[PRINCIPAL], 0);
    let held = admitted(c.acquire(
        AdmissionRequest::new(PRINCIPAL, "jev", "held").with_deadline(500),
        0,
    ));
    let slow_a = queued(c.acquire(request(PRINCIPAL, 0), 0));
    let slow_b = queued(c.acquire(request(PRINCIPAL, 0), 0));
    let overflow = rejected(c.acquire(request(PRINCIPAL, 0), 0));
    assert_eq!(overflow.reason, Reason::QueueFull);
    assert_eq!(overflow.evidence.queued, 2);
    assert_eq!(
        c.poll_timeout(),
        Some(40),
        "the controller wakes exactly at the dwell bound"
    );
    c.handle_timeout(39);
    assert!(drain(&mut c).is_empty());
    c.handle_timeout(40);
    let resolutions = drain(&mut c);
    for waiter in [slow_a, slow_b] {
        assert_eq!(
            resolution_of(&resolutions, waiter).unwrap_err().reason,
            Reason::QueueTimeout
        );
    }
    c.release(held.id, Outcome::Success, 41).unwrap();
    let lease = admitted(c.acquire(request(PRINCIPAL, 41), 41));
    assert_eq!(lease.evidence.queued, 0);
}

#[test]
fn cnc_admit_014_rollback_after_tightening_does_not_revive_rejected_waiters() {
    let l = Limits {
        max_request_bytes: Some(200),
        ..default_limits()
    };
    let mut c = controller(&l, &[PRINCIPAL], 0);
    let held = admitted(c.acquire(request(PRINCIPAL, 0), 0));
    let bytes = |n| Estimate::new().request_bytes(n);
    let waiter = queued(c.acquire(request(PRINCIPAL, 0).with_estimate(bytes(100)), 0));
    let tightened = Limits {
        max_request_bytes: Some(50),
        ..default_limits()
    };
    c.set_profile(same_profile(&tightened, &[PRINCIPAL]), 1)
        .unwrap();
    assert_eq!(
        resolution_of(&drain(&mut c), waiter).unwrap_err().reason,
        Reason::RequestTooLarge
    );
    c.set_profile(same_profile(&l, &[PRINCIPAL]), 2).unwrap();
    c.release(held.id, Outcome::Success, 3).unwrap();
    assert!(
        drain(&mut c).is_empty(),
        "the rejected waiter is not revived"
    );
    let lease = admitted(c.acquire(request(PRINCIPAL, 3).with_estimate(bytes(100)), 3));
    assert_eq!(lease.evidence.reason, Reason::Admitted);
}

#[test]
fn cnc_admit_015_attempt_budget_grants_exactly_max_attempts() {
    let l = Limits {
        max_attempts: Some(2),
        ..default_limits()
    };
    let mut c = controller(&l, &[PRINCIPAL], 0);
    let mut granted = 0;
    for step in 0..8 {
        match c.acquire(request(PRINCIPAL, step), step) {
            turnstile_admission::Acquired::Admitted(lease) => {
                granted += 1;
                c.release(lease.id, Outcome::Failure, step).unwrap();
            }
            other => assert_eq!(rejected(other).reason, Reason::Attempts),
        }
    }
    assert_eq!(granted, 2);
}

#[test]
fn cnc_admit_016_noisy_queue_overflow_does_not_touch_a_quiet_principal() {
    let principal = Limits {
        max_request_bytes: Some(64),
        tokens_per_second: Some(4),
        ..limits(1, 8, 1000)
    };
    let shared = limits(2, 16, 1000);
    let mut profile = same_profile(&shared, &[]);
    profile.principals.insert("noisy".into(), principal.clone());
    profile.principals.insert("quiet".into(), principal);
    let mut c = turnstile_admission::Controller::new(profile, 0).unwrap();
    let small = || Estimate::new().request_bytes(1).tokens(1);
    let held = admitted(c.acquire(request("noisy", 0).with_estimate(small()), 0));
    let waiters: Vec<_> = (0..8)
        .map(|_| queued(c.acquire(request("noisy", 0).with_estimate(small()), 0)))
        .collect();
    for _ in 0..16 {
        let rejection = rejected(c.acquire(request("noisy", 0).with_estimate(small()), 0));
        assert_eq!(rejection.reason, Reason::QueueFull);
    }
    let quiet = admitted(c.acquire(request("quiet", 0).with_estimate(small()), 0));
    assert_eq!(quiet.evidence.queued, 0, "quiet never sees noisy's queue");
    for waiter in waiters {
        c.cancel(waiter, 1).unwrap();
    }
    c.release(held.id, Outcome::Success, 1).unwrap();
    for (estimate, reason) in [
        (
            Estimate::new().request_bytes(65).tokens(1),
            Reason::RequestTooLarge,
        ),
        (
            Estimate::new().request_bytes(1).tokens(5),
            Reason::TokensPerSecond,
        ),
    ] {
        let rejection = rejected(c.acquire(request("noisy", 1).with_estimate(estimate), 1));
        assert_eq!(rejection.reason, reason);
        assert!(!rejection.retryable);
        assert_eq!(rejection.evidence.decision, Decision::Reject);
        assert_eq!(rejection.evidence.queued, 0);
    }
}

#[test]
fn cnc_admit_017_queue_full_error_carries_no_principal_id() {
    let mut c = controller(&limits(1, 1, 1000), &[PRINCIPAL], 0);
    admitted(c.acquire(request(PRINCIPAL, 0), 0));
    queued(c.acquire(request(PRINCIPAL, 0), 0));
    let rejection = rejected(c.acquire(request(PRINCIPAL, 0), 0));
    assert_eq!(rejection.reason, Reason::QueueFull);
    let json = serde_json::to_value(&rejection.evidence).unwrap();
    assert!(json.get("principalId").is_none());
    let text = serde_json::to_string(&rejection).unwrap();
    assert!(!text.contains(PRINCIPAL) && !text.contains(WORKSPACE));
}

#[test]
fn cnc_admit_018_retry_after_pauses_only_its_provider_lane() {
    let mut c = controller(&limits(2, 8, 1000), &[PRINCIPAL], 0);
    assert_eq!(c.coordinate_retry_after("jev", 100, 0), Ok(100));
    let mut other = request(PRINCIPAL, 0);
    other.provider_id = "llm-subagent".into();
    admitted(c.acquire(other, 0));
    let paused = c.acquire(request(PRINCIPAL, 0), 0);
    let turnstile_admission::Acquired::Queued { waiter, evidence } = paused else {
        panic!("expected the jev request to wait, got {paused:?}");
    };
    assert_eq!(evidence.reason, Reason::RetryAfter);
    assert_eq!(
        evidence.retry_after_ms,
        Some(100),
        "the hint is the real remaining pause"
    );
    assert_eq!(evidence.retry_pressure, 1);
    assert_eq!(c.cancel(waiter, 10).unwrap().reason, Reason::Cancelled);
}

/// Changed deliberately: a request whose deadline comes before the pause ends is no longer
/// queued until that deadline; it is refused at once with `retry-after` and the real remaining
/// pause (the core's "blocking condition outlasts the deadline" rule, `docs/admission.md`).
#[test]
fn cnc_admit_019_wakes_exactly_at_pause_end_and_refuses_an_earlier_deadline_at_once() {
    let mut c = controller(&limits(2, 8, 1000), &[PRINCIPAL], 0);
    assert_eq!(c.coordinate_retry_after("jev", 100, 0), Ok(100));
    let waiter = queued(c.acquire(request(PRINCIPAL, 0).with_deadline(500), 0));
    assert_eq!(c.poll_timeout(), Some(100));
    c.handle_timeout(99);
    assert!(drain(&mut c).is_empty(), "unsettled at 99 ms");
    c.handle_timeout(100);
    let lease = resolution_of(&drain(&mut c), waiter).unwrap();
    assert_eq!(lease.evidence.queue_delay_ms, 100);

    assert_eq!(c.coordinate_retry_after("jev", 100, 100), Ok(200));
    let late = rejected(c.acquire(request(PRINCIPAL, 100).with_deadline(120), 100));
    assert_eq!(late.reason, Reason::RetryAfter);
    assert!(late.retryable);
    assert_eq!(
        late.evidence.retry_after_ms,
        Some(100),
        "the real remaining pause"
    );
    assert_eq!(
        c.snapshot().queued,
        0,
        "nothing waits for a deadline it cannot meet"
    );
}

fn breaker_limits() -> Limits {
    Limits {
        circuit_breaker: Some(CircuitBreakerConfig {
            failure_threshold: 1,
            open_ms: Some(100),
            half_open_max_calls: Some(1),
        }),
        ..default_limits()
    }
}

/// CNC-ADMIT-020/021 up to the probe's admission: returns (controller, probe lease, follower).
fn open_breaker_with_probe_and_follower() -> (
    turnstile_admission::Controller,
    turnstile_admission::Lease,
    turnstile_admission::WaiterId,
) {
    let mut c = controller(&breaker_limits(), &[PRINCIPAL], 0);
    let failed = admitted(c.acquire(request(PRINCIPAL, 0), 0));
    c.release(failed.id, Outcome::Failure, 0).unwrap();
    assert_eq!(
        c.snapshot().providers["jev"].breaker_state,
        BreakerState::Open
    );
    let probe = queued(c.acquire(
        AdmissionRequest::new(PRINCIPAL, "jev", "probe").with_deadline(10_000),
        0,
    ));
    assert_eq!(
        c.poll_timeout(),
        Some(100),
        "wakes when the open period ends"
    );
    let follower = queued(c.acquire(
        AdmissionRequest::new(PRINCIPAL, "jev", "follower").with_deadline(10_000),
        101,
    ));
    let resolutions = drain(&mut c);
    let probe_lease = resolution_of(&resolutions, probe).unwrap();
    assert_eq!(probe_lease.evidence.breaker_state, BreakerState::HalfOpen);
    assert!(
        resolutions.iter().all(|r| r.waiter != follower),
        "the follower stays pending"
    );
    (c, probe_lease, follower)
}

#[test]
fn cnc_admit_020_failed_half_open_probe_reopens_the_breaker() {
    let (mut c, probe, follower) = open_breaker_with_probe_and_follower();
    c.release(probe.id, Outcome::Failure, 102).unwrap();
    assert_eq!(
        c.snapshot().providers["jev"].breaker_state,
        BreakerState::Open
    );
    assert!(drain(&mut c).is_empty(), "the follower is still pending");
    assert_eq!(c.cancel(follower, 103).unwrap().reason, Reason::Cancelled);
}

#[test]
fn cnc_admit_021_successful_half_open_probe_closes_the_breaker() {
    let (mut c, probe, follower) = open_breaker_with_probe_and_follower();
    c.release(probe.id, Outcome::Success, 102).unwrap();
    let lease = resolution_of(&drain(&mut c), follower).unwrap();
    assert_eq!(lease.evidence.breaker_state, BreakerState::Closed);
}

#[test]
fn zero_queue_wait_times_out_at_once_and_is_not_retryable() {
    // Reference behaviour (RECEIPT-001's queue-timeout case): a zero dwell bound times out even
    // with free capacity. It can never succeed, so unlike other queue timeouts it is permanent.
    let mut c = controller(&limits(4, 8, 0), &[PRINCIPAL], 0);
    let rejection = rejected(c.acquire(request(PRINCIPAL, 0), 0));
    assert_eq!(rejection.reason, Reason::QueueTimeout);
    assert!(!rejection.retryable);
    assert_eq!(c.lane_count(), 0);
}

#[test]
fn handoff_looks_at_a_constant_number_of_lanes_whatever_their_count() {
    // Every one of 20,000 lanes holds a waiter behind a workspace ceiling of 1. Each release
    // hands the permit to one waiter; the pump must not scan the other lanes. (The benchmark
    // `handoff/lanes/100000` measures the time; this counts the work.)
    let names: Vec<String> = (0..20_000).map(|i| format!("p{i}")).collect();
    let mut profile = turnstile_admission::Profile {
        workspace: Limits::with_concurrency(1),
        ..turnstile_admission::Profile::default()
    };
    profile
        .providers
        .insert("jev".into(), Limits::with_concurrency(1));
    for name in &names {
        profile
            .principals
            .insert(name.clone(), Limits::with_concurrency(1));
    }
    let mut c = turnstile_admission::Controller::new(profile, 0).unwrap();
    let mut lease = admitted(c.acquire(AdmissionRequest::new("p0", "jev", "b"), 0));
    for name in &names[1..] {
        queued(c.acquire(AdmissionRequest::new(name.as_str(), "jev", "b"), 0));
    }
    let (_, visited_before) = c.pump_stats();
    for round in 0..1000u64 {
        c.release(lease.id, Outcome::Success, round).unwrap();
        lease = drain(&mut c).pop().unwrap().outcome.unwrap();
    }
    let (_, visited_after) = c.pump_stats();
    let per_handoff = (visited_after - visited_before) as f64 / 1000.0;
    assert!(
        per_handoff <= 2.0,
        "{per_handoff} lanes looked at per handoff"
    );
}

#[test]
fn unknown_providers_and_principals_are_refused_without_keeping_state() {
    let mut c = controller(&default_limits(), &[PRINCIPAL], 0);
    for i in 0..100 {
        let mut r = request(PRINCIPAL, 0);
        r.provider_id = format!("random-provider-{i}");
        assert_eq!(
            rejected(c.acquire(r, 0)).reason,
            Reason::UnconfiguredProvider
        );
        let stranger = request(&format!("stranger-{i}"), 0);
        let rejection = rejected(c.acquire(stranger, 0));
        assert_eq!(rejection.reason, Reason::Disabled);
        assert!(!rejection.retryable);
        assert_eq!(
            c.coordinate_retry_after(&format!("random-provider-{i}"), 10, 0),
            Err(UnknownProvider)
        );
    }
    let snapshot = c.snapshot();
    assert_eq!(
        snapshot.providers.keys().collect::<Vec<_>>(),
        ["jev", "llm-subagent"],
        "no state for providers the profile never named"
    );
    assert_eq!(snapshot.retry_pressure, 0);
    assert_eq!(c.lane_count(), 0);
    assert_eq!(
        c.scope_count(),
        3,
        "two providers and one principal, as profiled"
    );
}

// ----- try now (zero wait) ---------------------------------------------------------------------

#[test]
fn try_now_on_a_free_lane_admits_at_once() {
    let mut c = controller(&limits(2, 8, 1000), &[PRINCIPAL], 0);
    let lease = c
        .try_acquire(request(PRINCIPAL, 0), 0)
        .expect("a free lane admits at once");
    assert_eq!(lease.evidence.decision, Decision::Admit);
    assert_eq!(lease.evidence.queue_delay_ms, 0);
    assert_eq!(c.snapshot().active, 1);
}

#[test]
fn try_now_on_a_busy_lane_refuses_at_once_with_concurrency_and_leaves_nothing_queued() {
    let mut c = controller(&limits(1, 8, 1000), &[PRINCIPAL], 0);
    admitted(c.acquire(request(PRINCIPAL, 0), 0));
    let refusal = c
        .try_acquire(AdmissionRequest::new(PRINCIPAL, "jev", "b"), 5)
        .expect_err("busy: refused");
    assert_eq!(refusal.reason, Reason::Concurrency, "the real reason");
    assert_ne!(refusal.reason, Reason::DeadlineExceeded);
    assert!(refusal.retryable, "free again once a lease is released");
    assert_eq!(refusal.evidence.decision, Decision::Reject);
    assert_eq!(refusal.evidence.retry_after_ms, None, "no known end");
    let snapshot = c.snapshot();
    assert_eq!((snapshot.active, snapshot.queued), (1, 0));
    assert_eq!(snapshot.peak_queued, 0, "it never counted as queued");
    assert_eq!(c.poll_timeout(), None, "nothing left to wake for");
    assert!(drain(&mut c).is_empty());
}

#[test]
fn try_now_on_a_paused_provider_refuses_with_retry_after_and_the_remaining_pause() {
    let mut c = controller(&limits(1, 8, 1000), &[PRINCIPAL], 0);
    assert_eq!(c.coordinate_retry_after("jev", 300, 0), Ok(300));
    let refusal = c
        .try_acquire(AdmissionRequest::new(PRINCIPAL, "jev", "b"), 100)
        .unwrap_err();
    assert_eq!(refusal.reason, Reason::RetryAfter);
    assert!(refusal.retryable);
    assert_eq!(refusal.evidence.retry_after_ms, Some(200));
    assert_eq!(c.snapshot().queued, 0);
}

#[test]
fn try_now_on_an_open_breaker_refuses_with_circuit_open_and_the_rest_of_the_open_period() {
    let mut c = controller(&breaker_limits(), &[PRINCIPAL], 0);
    let failed = admitted(c.acquire(request(PRINCIPAL, 0), 0));
    c.release(failed.id, Outcome::Failure, 0).unwrap();
    let refusal = c
        .try_acquire(AdmissionRequest::new(PRINCIPAL, "jev", "b"), 40)
        .unwrap_err();
    assert_eq!(refusal.reason, Reason::CircuitOpen);
    assert!(refusal.retryable);
    assert_eq!(refusal.evidence.retry_after_ms, Some(60));
    assert_eq!(c.snapshot().queued, 0);
}

#[test]
fn try_now_on_an_empty_token_bucket_refuses_with_tokens_per_second_and_the_refill_time() {
    let rated = Limits {
        tokens_per_second: Some(1000),
        ..limits(4, 8, 1000)
    };
    let mut c = controller(&rated, &[PRINCIPAL], 0);
    let big =
        AdmissionRequest::new(PRINCIPAL, "jev", "b").with_estimate(Estimate::new().tokens(1000));
    c.try_acquire(big.clone(), 0).expect("a full bucket admits");
    let refusal = c.try_acquire(big, 0).unwrap_err();
    assert_eq!(refusal.reason, Reason::TokensPerSecond);
    assert!(refusal.retryable);
    assert_eq!(
        refusal.evidence.retry_after_ms,
        Some(1000),
        "the bucket holds 1000 tokens again after a second"
    );
    assert_eq!(c.snapshot().queued, 0);
}

/// Fairness: at the instant the lane's queued head can go, a try-now request arriving behind it
/// does not take its place; the head is admitted and the newcomer refused with what it would
/// wait for.
#[test]
fn try_now_behind_a_waiter_of_its_lane_does_not_jump_the_queue() {
    let rated = Limits {
        requests_per_minute: Some(1),
        ..limits(4, 8, 120_000)
    };
    let mut c = controller(&rated, &[PRINCIPAL], 0);
    let first = admitted(c.acquire(request(PRINCIPAL, 0), 0));
    c.release(first.id, Outcome::Success, 0).unwrap();
    let head = queued(c.acquire(
        AdmissionRequest::new(PRINCIPAL, "jev", "head").with_deadline(100_000),
        0,
    ));
    assert_eq!(c.poll_timeout(), Some(60_000));
    // The request token is back at 60 s; the host has not handled its timer yet.
    let refusal = c
        .try_acquire(AdmissionRequest::new(PRINCIPAL, "jev", "newcomer"), 60_000)
        .unwrap_err();
    assert_eq!(refusal.reason, Reason::RequestsPerMinute);
    assert!(refusal.retryable);
    assert_eq!(refusal.evidence.retry_after_ms, Some(60_000));
    resolution_of(&drain(&mut c), head).expect("the head went first");
    assert_eq!(c.snapshot().queued, 0);
}

#[test]
fn try_now_still_refuses_permanently_what_can_never_fit() {
    let mut c = controller(&limits(1, 8, 1000), &[PRINCIPAL], 0);
    let unknown = AdmissionRequest::new(PRINCIPAL, "unknown-provider", "b");
    assert_eq!(
        c.try_acquire(unknown, 0).unwrap_err().reason,
        Reason::UnconfiguredProvider
    );
    let refusal = c
        .try_acquire(AdmissionRequest::new("stranger", "jev", "b"), 0)
        .unwrap_err();
    assert_eq!(refusal.reason, Reason::Disabled);
    assert!(!refusal.retryable);
}

// ----- a blocking condition that outlasts the deadline ----------------------------------------

#[test]
fn an_open_breaker_that_outlasts_the_deadline_refuses_at_acquire_with_circuit_open() {
    let mut c = controller(&breaker_limits(), &[PRINCIPAL], 0);
    let failed = admitted(c.acquire(request(PRINCIPAL, 0), 0));
    c.release(failed.id, Outcome::Failure, 0).unwrap();
    let refusal = rejected(c.acquire(
        AdmissionRequest::new(PRINCIPAL, "jev", "b").with_deadline(100),
        30,
    ));
    assert_eq!(refusal.reason, Reason::CircuitOpen);
    assert!(refusal.retryable);
    assert_eq!(refusal.evidence.retry_after_ms, Some(70), "open until 100");
    // A deadline after the open period waits for the probe slot as before.
    queued(c.acquire(
        AdmissionRequest::new(PRINCIPAL, "jev", "b").with_deadline(101),
        30,
    ));
}

#[test]
fn a_queued_head_is_refused_at_once_when_a_pause_outlasting_its_deadline_arrives() {
    let principal = Limits {
        concurrency: 1,
        ..limits(4, 8, 60_000)
    };
    let mut profile = same_profile(&limits(4, 8, 60_000), &[]);
    profile.principals.insert(PRINCIPAL.into(), principal);
    let mut c = turnstile_admission::Controller::new(profile, 0).unwrap();
    admitted(c.acquire(request(PRINCIPAL, 0), 0));
    let short = queued(c.acquire(
        AdmissionRequest::new(PRINCIPAL, "jev", "b").with_deadline(1000),
        0,
    ));
    let long = queued(c.acquire(
        AdmissionRequest::new(PRINCIPAL, "jev", "b").with_deadline(20_000),
        0,
    ));
    assert_eq!(c.coordinate_retry_after("jev", 5000, 10), Ok(5010));
    let resolutions = drain(&mut c);
    let refusal = resolution_of(&resolutions, short).unwrap_err();
    assert_eq!(refusal.reason, Reason::RetryAfter);
    assert!(refusal.retryable);
    assert_eq!(refusal.evidence.retry_after_ms, Some(5000));
    assert_eq!(refusal.evidence.queue_delay_ms, 10);
    assert!(
        resolutions.iter().all(|r| r.waiter != long),
        "a deadline after the pause keeps waiting"
    );
    assert_eq!(c.snapshot().queued, 1);
}

// ----- peaks -------------------------------------------------------------------------------------

#[test]
fn peak_totals_are_the_high_water_marks_of_workspace_active_and_queued() {
    let mut c = controller(&limits(2, 8, 60_000), &[PRINCIPAL], 0);
    assert_eq!(c.peak_totals(), Counts::default());
    let leases = [
        admitted(c.acquire(request(PRINCIPAL, 0), 0)),
        admitted(c.acquire(request(PRINCIPAL, 0), 0)),
    ];
    for _ in 0..3 {
        queued(c.acquire(request(PRINCIPAL, 0), 0));
    }
    assert_eq!(
        c.peak_totals(),
        Counts {
            active: 2,
            queued: 3
        }
    );
    let mut held: Vec<_> = leases.into_iter().collect();
    while let Some(lease) = held.pop() {
        c.release(lease.id, Outcome::Success, 1).unwrap();
        held.extend(drain(&mut c).into_iter().map(|r| r.outcome.unwrap()));
    }
    let snapshot = c.snapshot();
    assert_eq!((snapshot.active, snapshot.queued), (0, 0));
    assert_eq!(
        (snapshot.peak_active, snapshot.peak_queued),
        (2, 3),
        "marks never go down"
    );
    assert_eq!(c.totals(), Counts::default());
}

/// The rule replaces a `deadline-exceeded` ending only: when the queue dwell bound comes before
/// the deadline, the request waits for that bound and ends as `queue-timeout`, as the reference
/// specifies (TESTS.md TELEMETRY-001: breaker open 60 s, `maxQueueWaitMs` 20).
#[test]
fn a_dwell_bound_before_the_deadline_keeps_the_reference_queue_timeout_behind_an_open_breaker() {
    let short_wait = Limits {
        circuit_breaker: Some(CircuitBreakerConfig {
            failure_threshold: 1,
            open_ms: Some(60_000),
            half_open_max_calls: Some(1),
        }),
        ..limits(1, 8, 20)
    };
    let mut c = controller(&short_wait, &[PRINCIPAL], 0);
    let failed = admitted(c.acquire(request(PRINCIPAL, 0), 0));
    c.release(failed.id, Outcome::Failure, 0).unwrap();
    let waiter = queued(c.acquire(
        AdmissionRequest::new(PRINCIPAL, "jev", "b").with_deadline(15_000),
        0,
    ));
    assert_eq!(c.poll_timeout(), Some(20));
    c.handle_timeout(20);
    let rejection = resolution_of(&drain(&mut c), waiter).unwrap_err();
    assert_eq!(rejection.reason, Reason::QueueTimeout);
    assert_eq!(rejection.evidence.breaker_state, BreakerState::Open);
}
