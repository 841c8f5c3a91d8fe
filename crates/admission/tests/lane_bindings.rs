//! Which limit binds a queued lane (issue 35, the console's lanes view): for each kind of
//! limit, a queued head's lane view names that binding, and the deferral's evidence carries
//! the binding's reason. On virtual time; the views never name a principal or workspace.

mod common;

use common::{limits, queued};
use turnstile_admission::{
    Acquired, AdmissionRequest, Binding, BindingCount, Controller, Estimate, Limits, Profile,
};

/// A profile: workspace, provider `jev` and principals `a`, `b` as given (queue 8, wait 60 s).
fn profile(workspace: Limits, provider: Limits, principal: Limits) -> Profile {
    let mut profile = Profile {
        workspace,
        ..Profile::default()
    };
    profile.providers.insert("jev".into(), provider);
    for name in ["a", "b"] {
        profile.principals.insert(name.into(), principal.clone());
    }
    profile
}

fn wide() -> Limits {
    limits(8, 8, 60_000)
}

fn with(mut base: Limits, f: impl FnOnce(&mut Limits)) -> Limits {
    f(&mut base);
    base
}

fn ask(controller: &mut Controller, principal: &str, tokens: Option<f64>, now: u64) -> Acquired {
    let estimate = Estimate {
        tokens,
        ..Estimate::default()
    };
    controller.acquire(
        AdmissionRequest::new(principal, "jev", format!("inv-{principal}-{now}"))
            .with_estimate(estimate)
            .with_deadline(now + 60_000),
        now,
    )
}

/// The bindings of `jev` at `now`.
fn bindings(controller: &Controller, now: u64) -> Vec<BindingCount> {
    controller.lane_views(now)[0].bindings.clone()
}

#[track_caller]
fn only(controller: &Controller, now: u64, binding: Binding, lanes: u64) {
    assert_eq!(
        bindings(controller, now),
        [BindingCount { binding, lanes }],
        "{binding:?}"
    );
}

#[test]
fn a_queued_lane_names_the_concurrency_scope_that_binds_it() {
    // Principal concurrency 1: a's second request waits for a's own lease.
    let mut c = Controller::new(profile(wide(), wide(), limits(1, 8, 60_000)), 0).unwrap();
    assert!(matches!(ask(&mut c, "a", None, 0), Acquired::Admitted(_)));
    queued(ask(&mut c, "a", None, 1));
    only(&c, 2, Binding::PrincipalConcurrency, 1);

    // Workspace concurrency 1: b waits for the workspace.
    let mut c = Controller::new(profile(limits(1, 8, 60_000), wide(), wide()), 0).unwrap();
    assert!(matches!(ask(&mut c, "a", None, 0), Acquired::Admitted(_)));
    queued(ask(&mut c, "b", None, 1));
    only(&c, 2, Binding::WorkspaceConcurrency, 1);

    // Provider concurrency 1: both a's and b's lanes wait for the provider lane.
    let mut c = Controller::new(profile(wide(), limits(1, 8, 60_000), wide()), 0).unwrap();
    assert!(matches!(ask(&mut c, "a", None, 0), Acquired::Admitted(_)));
    queued(ask(&mut c, "a", None, 1));
    queued(ask(&mut c, "b", None, 2));
    only(&c, 3, Binding::ProviderConcurrency, 2);
}

#[test]
fn a_queued_lane_names_the_rate_limit_that_binds_it() {
    // Workspace requests: one per minute.
    let workspace = with(wide(), |l| l.requests_per_minute = Some(1));
    let mut c = Controller::new(profile(workspace, wide(), wide()), 0).unwrap();
    assert!(matches!(ask(&mut c, "a", None, 0), Acquired::Admitted(_)));
    let waiter = ask(&mut c, "b", None, 1);
    let Acquired::Queued { evidence, .. } = &waiter else {
        panic!("queued: {waiter:?}");
    };
    assert_eq!(evidence.reason, Binding::WorkspaceRequests.reason());
    only(&c, 2, Binding::WorkspaceRequests, 1);

    // Principal tokens: 100 per second, a asks for 100 twice.
    let principal = with(wide(), |l| l.tokens_per_second = Some(100));
    let mut c = Controller::new(profile(wide(), wide(), principal), 0).unwrap();
    assert!(matches!(
        ask(&mut c, "a", Some(100.0), 0),
        Acquired::Admitted(_)
    ));
    queued(ask(&mut c, "a", Some(100.0), 1));
    only(&c, 2, Binding::PrincipalTokens, 1);
}

#[test]
fn a_queued_lane_names_a_provider_pause_or_open_breaker() {
    let provider = with(wide(), |l| {
        l.circuit_breaker = Some(turnstile_admission::CircuitBreakerConfig {
            failure_threshold: 1,
            open_ms: Some(10_000),
            half_open_max_calls: None,
        });
    });
    let mut c = Controller::new(profile(wide(), provider, wide()), 0).unwrap();
    c.coordinate_retry_after("jev", 5_000, 0).unwrap();
    queued(ask(&mut c, "a", None, 1));
    only(&c, 2, Binding::ProviderPause, 1);

    // The pause ends, a is admitted and fails: the breaker opens and b's lane waits for it.
    c.handle_timeout(5_000);
    let lease = common::drain(&mut c)
        .into_iter()
        .next()
        .and_then(|r| r.outcome.ok())
        .expect("a admitted when the pause ended");
    c.release(lease.id, turnstile_admission::Outcome::Failure, 5_100);
    queued(ask(&mut c, "b", None, 5_200));
    only(&c, 5_300, Binding::ProviderBreaker, 1);
    let json = serde_json::to_string(&c.lane_views(5_300)).unwrap();
    assert!(json.contains("\"binding\":\"provider-breaker\""), "{json}");
    assert!(!json.contains("\"b\""), "no principal in a view: {json}");
}
