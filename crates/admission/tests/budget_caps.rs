//! Budgets one principal cannot use to lock out the others, and spend idleness never forgets
//! (issue 34, items 2 and 3), on virtual time.
//!
//! - A principal at its own cap of open budgets (`maxOpenBudgets`, else the server's default)
//!   is refused `too-many-budgets` with `budgetCap: principal`; every other principal of the
//!   workspace still opens budgets, and call budgets (`~…`) count against no cap.
//! - A budget holding spend a limit counts (`maxCostUsd`, `maxAttempts`) is still refused after
//!   `idle_ms`, retried or not; only `releaseBudget` forgets it.

mod common;

use common::{limits, same_profile, WORKSPACE};
use turnstile_admission::{
    Acquired, AdmissionRequest, BudgetBounds, BudgetCap, Estimate, Limits, Outcome, Reason,
    Registry,
};

const HOG: &str = "hog";
const OTHER: &str = "other";

fn registry(principal: Limits, bounds: BudgetBounds) -> Registry {
    let mut profile = same_profile(&limits(4, 8, 10_000), &[HOG, OTHER]);
    for limits in profile.principals.values_mut() {
        *limits = principal.clone();
    }
    let mut registry = Registry::new();
    registry.set_budget_bounds(bounds);
    registry.register(WORKSPACE, "v1", profile, 0).unwrap();
    registry
}

fn open_and_leave(registry: &mut Registry, principal: &str, budget: &str, now: u64) -> Acquired {
    let request = AdmissionRequest::new(principal, "jev", budget)
        .with_estimate(Estimate::new().cost_usd(0.4));
    let acquired = registry.acquire(WORKSPACE, request, now).unwrap();
    if let Acquired::Admitted(lease) = &acquired {
        registry
            .release(WORKSPACE, lease.id, Outcome::Success, now)
            .unwrap();
    }
    acquired
}

#[test]
fn cnc_admit_budget_cap_one_principal_at_its_cap_never_refuses_another() {
    let bounds = BudgetBounds {
        idle_ms: Some(3_600_000),
        max_open: Some(10),
        max_open_per_principal: Some(4),
    };
    let mut registry = registry(Limits::with_concurrency(4), bounds);
    for i in 0..4 {
        let acquired = open_and_leave(&mut registry, HOG, &format!("hog-{i}"), i);
        assert!(matches!(acquired, Acquired::Admitted(_)), "{acquired:?}");
    }
    let Acquired::Rejected(refused) = open_and_leave(&mut registry, HOG, "hog-4", 10) else {
        panic!("the hog is at its cap")
    };
    assert_eq!(refused.reason, Reason::TooManyBudgets);
    assert!(refused.retryable);
    assert_eq!(refused.evidence.budget_cap, Some(BudgetCap::Principal));
    let json = serde_json::to_value(&refused.evidence).unwrap();
    assert_eq!(json["budgetCap"], "principal");
    // Its open budgets still take attempts; the other principal opens its own.
    assert!(matches!(
        open_and_leave(&mut registry, HOG, "hog-0", 11),
        Acquired::Admitted(_)
    ));
    for i in 0..4 {
        let acquired = open_and_leave(&mut registry, OTHER, &format!("other-{i}"), 20 + i);
        assert!(matches!(acquired, Acquired::Admitted(_)), "{acquired:?}");
    }
    // Call budgets count against neither cap, however many.
    for i in 0..50 {
        let acquired = open_and_leave(&mut registry, HOG, &format!("~call-{i}"), 30 + i);
        assert!(matches!(acquired, Acquired::Admitted(_)), "{acquired:?}");
        registry
            .release_budget(WORKSPACE, &format!("~call-{i}"), 30 + i)
            .unwrap();
    }
    // Released: the hog's place frees.
    assert!(registry.release_budget(WORKSPACE, "hog-1", 100).unwrap());
    assert!(matches!(
        open_and_leave(&mut registry, HOG, "hog-4", 101),
        Acquired::Admitted(_)
    ));
}

#[test]
fn cnc_admit_budget_cap_a_profile_cap_wins_and_stays_below_the_workspace_cap() {
    let bounds = BudgetBounds {
        idle_ms: None,
        max_open: Some(5),
        max_open_per_principal: Some(2),
    };
    // The principal's own maxOpenBudgets (above the workspace cap) acts as the workspace cap
    // minus one: the other principal still opens one.
    let own = Limits {
        max_open_budgets: Some(1_000),
        ..Limits::with_concurrency(4)
    };
    let mut registry = registry(own, bounds);
    for i in 0..4 {
        let acquired = open_and_leave(&mut registry, HOG, &format!("hog-{i}"), i);
        assert!(matches!(acquired, Acquired::Admitted(_)), "{acquired:?}");
    }
    let Acquired::Rejected(refused) = open_and_leave(&mut registry, HOG, "hog-4", 10) else {
        panic!("refused")
    };
    assert_eq!(refused.evidence.budget_cap, Some(BudgetCap::Principal));
    assert!(matches!(
        open_and_leave(&mut registry, OTHER, "other-0", 11),
        Acquired::Admitted(_)
    ));
    let Acquired::Rejected(refused) = open_and_leave(&mut registry, OTHER, "other-1", 12) else {
        panic!("refused")
    };
    assert_eq!(refused.evidence.budget_cap, Some(BudgetCap::Workspace));
    // Bad values are typed errors.
    let zero = Limits {
        max_open_budgets: Some(0),
        ..Limits::with_concurrency(1)
    };
    let error = zero
        .validate(turnstile_admission::ScopeKind::Principal)
        .unwrap_err();
    assert_eq!(error.field(), "maxOpenBudgets");
    let on_provider = Limits {
        max_open_budgets: Some(3),
        ..Limits::with_concurrency(1)
    };
    let error = on_provider
        .validate(turnstile_admission::ScopeKind::Provider)
        .unwrap_err();
    assert_eq!(error.field(), "maxOpenBudgets");
}

fn exhausted(principal: Limits) {
    let bounds = BudgetBounds {
        idle_ms: Some(2_000),
        max_open: Some(100),
        max_open_per_principal: Some(10),
    };
    let mut registry = registry(principal, bounds);
    assert!(matches!(
        open_and_leave(&mut registry, HOG, "inv", 0),
        Acquired::Admitted(_)
    ));
    assert!(matches!(
        open_and_leave(&mut registry, HOG, "inv", 1),
        Acquired::Admitted(_)
    ));
    let refused = |registry: &mut Registry, now| match open_and_leave(registry, HOG, "inv", now) {
        Acquired::Rejected(rejection) => rejection.reason,
        other => panic!("admitted again at {now}: {other:?}"),
    };
    let first = refused(&mut registry, 2);
    assert!(
        matches!(first, Reason::Cost | Reason::Attempts),
        "{first:?}"
    );
    // Retried every 200 ms for 10 s: never admitted.
    for now in (200..10_000).step_by(200) {
        assert_eq!(refused(&mut registry, now), first);
    }
    // Left alone far past idle_ms: still refused, and still open (compactly).
    registry.handle_due(1_000_000);
    assert_eq!(refused(&mut registry, 1_000_001), first);
    assert_eq!(registry.budgets_evicted(), 0);
    assert_eq!(registry.snapshot(WORKSPACE).unwrap().open_budgets, 1);
    // Released: forgotten, a new budget.
    assert!(registry
        .release_budget(WORKSPACE, "inv", 1_000_002)
        .unwrap());
    let Acquired::Admitted(lease) = open_and_leave(&mut registry, HOG, "inv", 1_000_003) else {
        panic!("a new budget")
    };
    assert!(lease.evidence.budget_opened);
}

#[test]
fn cnc_admit_budget_an_exhausted_cost_budget_is_never_forgotten_for_idleness() {
    exhausted(Limits {
        max_cost_usd: Some(1.0),
        ..Limits::with_concurrency(4)
    });
}

#[test]
fn cnc_admit_budget_an_exhausted_attempt_budget_is_never_forgotten_for_idleness() {
    exhausted(Limits {
        max_attempts: Some(2),
        allow_unknown_cost: Some(true),
        ..Limits::with_concurrency(4)
    });
}

#[test]
fn cnc_admit_budget_a_partly_spent_budget_comes_back_whole_after_idleness() {
    let bounds = BudgetBounds {
        idle_ms: Some(1_000),
        max_open: None,
        max_open_per_principal: None,
    };
    let principal = Limits {
        max_cost_usd: Some(1.0),
        ..Limits::with_concurrency(4)
    };
    let mut registry = registry(principal, bounds);
    let Acquired::Admitted(first) = open_and_leave(&mut registry, HOG, "inv", 0) else {
        panic!("admitted")
    };
    assert!(first.evidence.budget_opened);
    registry.handle_due(5_000);
    // Compact, not forgotten: the next attempt spends on the same budget (0.4 + 0.4), not a
    // new one; the third (1.2 > 1.0) is refused.
    let Acquired::Admitted(second) = open_and_leave(&mut registry, HOG, "inv", 5_001) else {
        panic!("admitted")
    };
    assert!(!second.evidence.budget_opened);
    registry.handle_due(10_000);
    assert!(matches!(
        open_and_leave(&mut registry, HOG, "inv", 10_001),
        Acquired::Rejected(r) if r.reason == Reason::Cost
    ));
}
