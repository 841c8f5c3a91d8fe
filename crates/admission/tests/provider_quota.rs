//! The provider's announced quota (issue 32, item 1) on virtual time: a lane told how many
//! requests and tokens the account has left holds its callers until the provider's reset and
//! not a millisecond longer; a later observation replaces the earlier one; the profile's own
//! limits still apply on top; a waiter whose deadline falls before the reset is refused at once.

use turnstile_admission::{
    Acquired, AdmissionRequest, Controller, Estimate, Limits, Outcome, ProviderQuota, QuotaWindow,
    Reason, Registry, RegistryError,
};

mod common;

/// Every scope at concurrency 64 (`common`'s lanes `jev` and `llm-subagent`), principals a, b.
fn controller() -> Controller {
    common::controller(&Limits::with_concurrency(64), &["a", "b"], 0)
}

fn window(remaining: u64, resets_in_ms: u64) -> Option<QuotaWindow> {
    Some(QuotaWindow {
        remaining,
        resets_in_ms,
        limit: None,
    })
}

fn requests(remaining: u64, resets_in_ms: u64) -> ProviderQuota {
    ProviderQuota {
        requests: window(remaining, resets_in_ms),
        tokens: None,
    }
}

fn tokens(remaining: u64, resets_in_ms: u64) -> ProviderQuota {
    ProviderQuota {
        requests: None,
        tokens: window(remaining, resets_in_ms),
    }
}

fn ask(principal: &str) -> AdmissionRequest {
    AdmissionRequest::new(principal, "jev", principal)
}

#[test]
fn a_spent_request_window_holds_the_lane_until_the_reset_and_not_before() {
    let mut c = controller();
    c.observe_provider_quota("jev", &requests(1, 2_000), 1_000)
        .unwrap();
    // One request left: the first passes (and evidence of it says nothing of the quota).
    let first = common::admitted(c.acquire(ask("a"), 1_000));
    assert!(!first.evidence.provider_quota);
    // The window is spent: the next waits, with the reset as its wake-up.
    let Acquired::Queued { waiter, evidence } = c.acquire(ask("b"), 1_100) else {
        panic!("queued");
    };
    assert_eq!(evidence.reason, Reason::RequestsPerMinute);
    assert_eq!(evidence.retry_after_ms, Some(1_900));
    assert!(evidence.provider_quota);
    assert_eq!(
        c.poll_timeout(),
        Some(3_000),
        "the lane wakes exactly at the reset"
    );
    // A release frees concurrency, not the provider's window.
    c.release(first.id, Outcome::Success, 1_500).unwrap();
    c.handle_timeout(2_999);
    assert!(
        c.poll_resolution().is_none(),
        "nothing passes before the reset"
    );
    c.handle_timeout(3_000);
    let resolution = c.poll_resolution().expect("admitted at the reset");
    assert_eq!(resolution.waiter, waiter);
    let lease = resolution.outcome.expect("admitted");
    assert!(
        lease.evidence.provider_quota,
        "the admission says it was held"
    );
    assert_eq!(lease.evidence.queue_delay_ms, 1_900);
    // The window lapsed: the lane is back to the profile's limits alone.
    for _ in 0..10 {
        common::admitted(c.acquire(ask("a"), 3_000));
    }
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn a_token_window_holds_a_head_it_cannot_hold_until_the_reset() {
    let mut c = controller();
    c.observe_provider_quota("jev", &tokens(1_000, 60_000), 0)
        .unwrap();
    let est = |t| ask("a").with_estimate(Estimate::new().tokens(t));
    common::admitted(c.acquire(est(600), 0));
    // 400 left: a call of 500 waits for the reset; the reason stays the vocabulary's.
    let Acquired::Queued { evidence, .. } = c.acquire(est(500), 10) else {
        panic!("queued");
    };
    assert_eq!(evidence.reason, Reason::TokensPerSecond);
    assert!(evidence.provider_quota);
    assert_eq!(evidence.retry_after_ms, Some(59_990));
    // Another principal's call that fits what is left passes meanwhile.
    let small = common::admitted(c.acquire(
        AdmissionRequest::new("b", "jev", "b").with_estimate(Estimate::new().tokens(400)),
        20,
    ));
    assert!(!small.evidence.provider_quota);
    c.handle_timeout(59_999);
    assert!(c.poll_resolution().is_none());
    c.handle_timeout(60_000);
    assert!(c.poll_resolution().expect("at the reset").outcome.is_ok());
}

#[test]
fn a_later_observation_replaces_the_earlier_one() {
    let mut c = controller();
    c.observe_provider_quota("jev", &requests(0, 10_000), 0)
        .unwrap();
    let Acquired::Queued { waiter, .. } = c.acquire(ask("a"), 0) else {
        panic!("queued");
    };
    assert_eq!(c.poll_timeout(), Some(10_000));
    // A newer answer says two are left (the provider's count is authoritative): the waiter
    // goes at once, and one more after it.
    c.observe_provider_quota("jev", &requests(2, 10_000), 500)
        .unwrap();
    let resolution = c.poll_resolution().expect("freed by the newer observation");
    assert_eq!(resolution.waiter, waiter);
    assert!(
        resolution
            .outcome
            .expect("admitted")
            .evidence
            .provider_quota
    );
    common::admitted(c.acquire(ask("b"), 600));
    assert!(matches!(c.acquire(ask("b"), 700), Acquired::Queued { .. }));
    assert_eq!(c.poll_timeout(), Some(10_500), "the newer window's reset");
    // A newer one can also tighten: zero left for longer.
    c.observe_provider_quota("jev", &requests(0, 20_000), 800)
        .unwrap();
    assert_eq!(c.poll_timeout(), Some(20_800));
}

#[test]
fn the_profiles_limits_still_apply_on_top_of_a_generous_window() {
    // The profile allows 2 requests per minute (burst 2); the provider says 1000 are left.
    let limits = Limits {
        requests_per_minute: Some(2),
        ..Limits::with_concurrency(64)
    };
    let mut c = common::controller(&limits, &["a", "b"], 0);
    c.observe_provider_quota("jev", &requests(1_000, 60_000), 0)
        .unwrap();
    common::admitted(c.acquire(ask("a"), 0));
    common::admitted(c.acquire(ask("a"), 0));
    let Acquired::Queued { evidence, .. } = c.acquire(ask("a"), 0) else {
        panic!("the profile's bucket holds it");
    };
    assert_eq!(evidence.reason, Reason::RequestsPerMinute);
    assert!(
        !evidence.provider_quota,
        "held by the profile, not the provider"
    );
    assert_eq!(evidence.retry_after_ms, Some(30_000));
}

#[test]
fn a_waiter_whose_deadline_falls_before_the_reset_is_refused_at_once() {
    let mut c = controller();
    c.observe_provider_quota("jev", &requests(0, 5_000), 0)
        .unwrap();
    let Acquired::Rejected(refusal) = c.acquire(ask("a").with_deadline(3_000), 0) else {
        panic!("refused at once");
    };
    assert_eq!(refusal.reason, Reason::DeadlineUnreachable);
    assert!(refusal.retryable);
    assert!(refusal.evidence.provider_quota);
    assert_eq!(refusal.evidence.retry_after_ms, Some(5_000));
    assert_eq!(c.snapshot().queued, 0);
    // A deadline after the reset waits, and is served at the reset.
    assert!(matches!(
        c.acquire(ask("a").with_deadline(6_000), 0),
        Acquired::Queued { .. }
    ));
    c.handle_timeout(5_000);
    assert!(c.poll_resolution().expect("served").outcome.is_ok());
}

#[test]
fn a_try_now_call_is_refused_with_the_time_to_the_reset() {
    let mut c = controller();
    c.observe_provider_quota("jev", &tokens(10, 4_000), 0)
        .unwrap();
    let refusal = c
        .try_acquire(ask("a").with_estimate(Estimate::new().tokens(11)), 1_000)
        .expect_err("refused");
    assert_eq!(refusal.reason, Reason::TokensPerSecond);
    assert!(refusal.retryable);
    assert!(refusal.evidence.provider_quota);
    assert_eq!(refusal.evidence.retry_after_ms, Some(3_000));
    assert!(c
        .try_acquire(ask("a").with_estimate(Estimate::new().tokens(10)), 1_000)
        .is_ok());
}

#[test]
fn an_unconfigured_provider_is_an_error_and_keeps_nothing() {
    let mut c = controller();
    assert!(c
        .observe_provider_quota("other", &requests(0, 1_000), 0)
        .is_err());
    common::admitted(c.acquire(ask("a"), 0));

    let mut registry = Registry::new();
    registry
        .register(
            "w",
            "v1",
            common::same_profile(&Limits::with_concurrency(4), &["a"]),
            0,
        )
        .unwrap();
    assert_eq!(
        registry.observe_provider_quota("w", "other", &requests(0, 1_000), 0),
        Err(RegistryError::UnconfiguredProvider)
    );
    assert_eq!(
        registry.observe_provider_quota("nowhere", "jev", &requests(0, 1_000), 0),
        Err(RegistryError::UnknownWorkspace)
    );
    registry
        .observe_provider_quota("w", "jev", &requests(0, 1_000), 0)
        .unwrap();
    assert!(matches!(
        registry.acquire("w", ask("a"), 10).unwrap(),
        Acquired::Queued { .. }
    ));
    assert_eq!(registry.poll_timeout_of("w"), Some(1_000));
}
