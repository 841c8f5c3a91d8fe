//! Bucket capacities (`requestsBurst`, `tokensBurst`) and the worked bucket and budget examples of
//! `docs/profiles.md`, and the property that a profile without bursts behaves exactly as one that
//! spells out the default (capacity = rate), i.e. exactly as before bursts existed.

use proptest::prelude::*;
use turnstile_admission::{
    ActualUsage, AdmissionRequest, Estimate, LeaseId, Limits, Outcome, Profile, Reason, Registry,
};

const WS: &str = "w";

fn registry(provider: Limits) -> Registry {
    let mut profile = Profile {
        workspace: Limits::with_concurrency(1_000),
        ..Profile::default()
    };
    profile.providers.insert("jev".into(), provider);
    profile
        .principals
        .insert("p".into(), Limits::with_concurrency(1_000));
    let mut registry = Registry::new();
    registry.register(WS, "v1", profile, 0).unwrap();
    registry
}

fn request(tokens: Option<u64>) -> AdmissionRequest {
    let estimate = match tokens {
        Some(t) => Estimate::new().tokens(t),
        None => Estimate::new(),
    };
    AdmissionRequest::new("p", "jev", "b").with_estimate(estimate)
}

/// Tries one request now: `Ok(lease)` or the refusal's reason.
fn try_now(registry: &mut Registry, tokens: Option<u64>, now: u64) -> Result<LeaseId, Reason> {
    match registry.try_acquire(WS, request(tokens), now).unwrap() {
        Ok(lease) => Ok(lease.id),
        Err(rejection) => Err(rejection.reason),
    }
}

/// `requestsPerMinute: 3` without a burst: 3 at once, then one every 20 s, so 2N = 6 within the
/// first 60 s (inclusive).
#[test]
fn requests_per_minute_starts_full_so_up_to_two_n_pass_in_the_first_minute() {
    let mut limits = Limits::with_concurrency(100);
    limits.requests_per_minute = Some(3);
    let mut registry = registry(limits);
    let mut admitted = Vec::new();
    for now in [0, 0, 0, 0, 19_999, 20_000, 40_000, 59_999, 60_000, 60_000] {
        admitted.push((now, try_now(&mut registry, None, now).is_ok()));
    }
    assert_eq!(
        admitted,
        vec![
            (0, true),
            (0, true),
            (0, true),
            (0, false),
            (19_999, false),
            (20_000, true),
            (40_000, true),
            (59_999, false),
            (60_000, true),
            (60_000, false),
        ]
    );
}

/// "At most 600 per minute, at most 10 at once": `requestsPerMinute: 600, requestsBurst: 10`.
#[test]
fn a_request_burst_caps_what_passes_at_once() {
    let mut limits = Limits::with_concurrency(100);
    limits.requests_per_minute = Some(600);
    limits.requests_burst = Some(10);
    let mut registry = registry(limits);
    for _ in 0..10 {
        try_now(&mut registry, None, 0).unwrap();
    }
    assert_eq!(
        try_now(&mut registry, None, 0),
        Err(Reason::RequestsPerMinute)
    );
    assert_eq!(
        try_now(&mut registry, None, 99),
        Err(Reason::RequestsPerMinute)
    );
    try_now(&mut registry, None, 100).unwrap();
    // Idle for a minute: the bucket holds 10 again, not 600.
    for _ in 0..10 {
        try_now(&mut registry, None, 70_000).unwrap();
    }
    assert_eq!(
        try_now(&mut registry, None, 70_000),
        Err(Reason::RequestsPerMinute)
    );
}

/// `tokensPerSecond: 100, tokensBurst: 1000`: a 1,000-token call fits (it could not with the
/// default capacity of 100), then the bucket refills at 100 per second.
#[test]
fn a_token_burst_above_the_rate_lets_a_large_call_through_and_bounds_what_never_fits() {
    let mut limits = Limits::with_concurrency(100);
    limits.tokens_per_second = Some(100);
    limits.tokens_burst = Some(1_000);
    let mut bursty = registry(limits.clone());
    try_now(&mut bursty, Some(1_000), 0).unwrap();
    assert_eq!(
        try_now(&mut bursty, Some(100), 999),
        Err(Reason::TokensPerSecond)
    );
    try_now(&mut bursty, Some(100), 1_000).unwrap();

    limits.tokens_burst = None;
    let mut default = registry(limits);
    let refused = default.acquire(WS, request(Some(101)), 0).unwrap();
    assert!(
        matches!(&refused, turnstile_admission::Acquired::Rejected(r) if r.reason == Reason::TokensPerSecond),
        "above the default capacity it can never fit: {refused:?}"
    );
}

#[derive(Debug, Clone)]
enum Op {
    Acquire { at: u64, tokens: Option<u64> },
    ReleaseOldest { at: u64 },
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            4 => (0u64..5_000, prop::option::of(0u64..300))
                .prop_map(|(at, tokens)| Op::Acquire { at, tokens }),
            1 => (0u64..5_000).prop_map(|at| Op::ReleaseOldest { at }),
        ],
        1..60,
    )
}

/// Runs `ops` (with non-decreasing times) and returns every answer.
fn run(limits: Limits, ops: &[Op]) -> Vec<Result<(), Reason>> {
    let mut registry = registry(limits);
    let mut now = 0;
    let mut held = std::collections::VecDeque::new();
    let mut answers = Vec::new();
    for op in ops {
        match *op {
            Op::Acquire { at, tokens } => {
                now += at;
                let answer = try_now(&mut registry, tokens, now);
                if let Ok(lease) = answer {
                    held.push_back(lease);
                }
                answers.push(answer.map(|_| ()));
            }
            Op::ReleaseOldest { at } => {
                now += at;
                if let Some(lease) = held.pop_front() {
                    registry.release(WS, lease, Outcome::Success, now).unwrap();
                }
            }
        }
    }
    answers
}

proptest! {
    /// The defaults keep today's behaviour: absent bursts decide exactly like bursts equal to
    /// the rates, on every sequence of requests and releases.
    #[test]
    fn absent_bursts_decide_like_bursts_equal_to_the_rates(
        rpm in prop::option::of(prop_oneof![Just(0u64), 1u64..=120]),
        tps in prop::option::of(prop_oneof![Just(0u64), 1u64..=400]),
        concurrency in 1u32..=8,
        ops in ops(),
    ) {
        let mut absent = Limits::with_concurrency(concurrency);
        absent.requests_per_minute = rpm;
        absent.tokens_per_second = tps;
        let mut spelled = absent.clone();
        spelled.requests_burst = rpm.filter(|&r| r > 0);
        spelled.tokens_burst = tps.filter(|&t| t > 0);
        prop_assert_eq!(run(absent, &ops), run(spelled, &ops));
    }
}

fn ask(registry: &mut Registry, budget: &str, cost: f64) -> Result<LeaseId, Reason> {
    let request =
        AdmissionRequest::new("p", "jev", budget).with_estimate(Estimate::new().cost_usd(cost));
    match registry.try_acquire(WS, request, 0).unwrap() {
        Ok(lease) => Ok(lease.id),
        Err(rejection) => Err(rejection.reason),
    }
}

/// The budget example of `docs/profiles.md`: principal `maxAttempts: 3, maxCostUsd: 1`; budgets
/// count per `budgetId`, the actual cost replaces the estimate, a total equal to the limit
/// passes, releasing the budget forgets it.
#[test]
fn the_budget_example_of_the_profile_reference() {
    let mut principal = Limits::with_concurrency(10);
    principal.max_attempts = Some(3);
    principal.max_cost_usd = Some(1.0);
    let mut profile = Profile {
        workspace: Limits::with_concurrency(10),
        ..Profile::default()
    };
    profile
        .providers
        .insert("jev".into(), Limits::with_concurrency(10));
    profile.principals.insert("p".into(), principal);
    let mut registry = Registry::new();
    registry.register(WS, "v1", profile, 0).unwrap();

    let first = ask(&mut registry, "task-1", 0.5).unwrap();
    let actual = ActualUsage::none().with_cost_usd(0.75).unwrap();
    registry
        .release_with_usage(WS, first, Outcome::Success, actual, 0)
        .unwrap();
    ask(&mut registry, "task-1", 0.25).unwrap();
    assert_eq!(ask(&mut registry, "task-1", 0.25), Err(Reason::Cost));
    ask(&mut registry, "task-1", 0.0).unwrap();
    assert_eq!(ask(&mut registry, "task-1", 0.0), Err(Reason::Attempts));
    ask(&mut registry, "task-2", 0.5).unwrap();
    registry.release_budget(WS, "task-1", 0).unwrap();
    ask(&mut registry, "task-1", 0.5).unwrap();
}
