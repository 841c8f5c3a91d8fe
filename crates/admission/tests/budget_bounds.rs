//! Bounded budget state (issue 17): idle invocations are forgotten and counted, the next attempt
//! on such a `budgetId` says in its evidence that it opened a new budget, and past the cap on
//! open budgets an attempt that would open one more is refused `too-many-budgets` (retryable),
//! at acquire and when a queued waiter is tried.

mod common;

use common::{limits, same_profile, PRINCIPAL, WORKSPACE};
use turnstile_admission::{Acquired, AdmissionRequest, BudgetBounds, Outcome, Reason, Registry};

fn registry(bounds: BudgetBounds) -> Registry {
    let mut registry = Registry::new();
    registry.set_budget_bounds(bounds);
    registry
        .register(
            WORKSPACE,
            "v1",
            same_profile(&limits(1, 8, 10_000), &[PRINCIPAL]),
            0,
        )
        .expect("profile");
    registry
}

fn request(budget: &str) -> AdmissionRequest {
    AdmissionRequest::new(PRINCIPAL, "jev", budget)
}

#[test]
fn an_idle_budget_is_forgotten_counted_and_its_next_attempt_opens_a_new_one() {
    let mut registry = registry(BudgetBounds {
        idle_ms: Some(60_000),
        max_open: None,
        max_open_per_principal: None,
    });
    let Acquired::Admitted(first) = registry.acquire(WORKSPACE, request("inv"), 0).unwrap() else {
        panic!("admitted")
    };
    assert!(first.evidence.budget_opened);
    let json = serde_json::to_value(&first.evidence).unwrap();
    assert_eq!(json["budgetOpened"], true);
    registry
        .release(WORKSPACE, first.id, Outcome::Success, 1_000)
        .unwrap();
    let Acquired::Admitted(second) = registry.acquire(WORKSPACE, request("inv"), 2_000).unwrap()
    else {
        panic!("admitted")
    };
    assert!(!second.evidence.budget_opened);
    let json = serde_json::to_value(&second.evidence).unwrap();
    assert!(json.get("budgetOpened").is_none(), "absent when false");
    // Held by a lease: never idle, however long.
    registry.handle_due(500_000);
    assert_eq!(registry.snapshot(WORKSPACE).unwrap().open_budgets, 1);
    registry
        .release(WORKSPACE, second.id, Outcome::Success, 500_000)
        .unwrap();
    // Untouched for 60 s after its last settlement: forgotten by the next operation.
    assert!(!registry
        .release_budget(WORKSPACE, "other", 560_000)
        .unwrap());
    assert_eq!(registry.snapshot(WORKSPACE).unwrap().open_budgets, 0);
    assert_eq!(registry.budgets_evicted(), 1);
    let Acquired::Admitted(third) = registry
        .acquire(WORKSPACE, request("inv"), 560_001)
        .unwrap()
    else {
        panic!("admitted")
    };
    assert!(third.evidence.budget_opened, "a new invocation");
}

#[test]
fn past_the_cap_an_attempt_that_would_open_a_budget_is_refused_retryable() {
    let mut registry = registry(BudgetBounds {
        idle_ms: None,
        max_open: Some(1),
        max_open_per_principal: None,
    });
    let Acquired::Admitted(lease) = registry.acquire(WORKSPACE, request("a"), 0).unwrap() else {
        panic!("admitted")
    };
    // At acquire.
    let Acquired::Rejected(refused) = registry.acquire(WORKSPACE, request("b"), 1).unwrap() else {
        panic!("refused")
    };
    assert_eq!(refused.reason, Reason::TooManyBudgets);
    assert!(refused.retryable);
    assert_eq!(
        serde_json::to_value(refused.reason).unwrap(),
        "too-many-budgets"
    );
    // An attempt on the open budget is never refused for the cap.
    registry
        .release(WORKSPACE, lease.id, Outcome::Success, 2)
        .unwrap();
    let Acquired::Admitted(_) = registry.acquire(WORKSPACE, request("a"), 3).unwrap() else {
        panic!("admitted")
    };
}

#[test]
fn a_queued_waiter_whose_budget_would_now_open_past_the_cap_is_refused_when_tried() {
    let mut profile = same_profile(&limits(2, 8, 10_000), &[PRINCIPAL]);
    for provider in profile.providers.values_mut() {
        provider.concurrency = 1;
    }
    let mut registry = Registry::new();
    registry.set_budget_bounds(BudgetBounds {
        idle_ms: None,
        max_open: Some(1),
        max_open_per_principal: None,
    });
    registry.register(WORKSPACE, "v1", profile, 0).unwrap();
    let Acquired::Admitted(held) = registry.acquire(WORKSPACE, request("a"), 0).unwrap() else {
        panic!("admitted")
    };
    let Acquired::Queued { waiter, .. } = registry.acquire(WORKSPACE, request("a"), 1).unwrap()
    else {
        panic!("queued behind the held lease")
    };
    // The host forgets "a"; another budget takes the only open place.
    assert!(registry.release_budget(WORKSPACE, "a", 2).unwrap());
    let other = AdmissionRequest::new(PRINCIPAL, "llm-subagent", "c");
    let Acquired::Admitted(_) = registry.acquire(WORKSPACE, other, 3).unwrap() else {
        panic!("admitted on the other provider")
    };
    registry
        .release(WORKSPACE, held.id, Outcome::Success, 4)
        .unwrap();
    let resolution = registry
        .poll_resolution(WORKSPACE)
        .expect("the waiter was tried");
    assert_eq!(resolution.waiter, waiter);
    let rejection = resolution.outcome.expect_err("refused");
    assert_eq!(rejection.reason, Reason::TooManyBudgets);
    assert!(rejection.retryable);
}

/// Resident set size of this process, in bytes (Linux).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("resident pages");
    pages * 4096
}

/// Opens and leaves budgets `from..to`, one per millisecond of virtual time.
fn open_and_leave(registry: &mut Registry, from: u64, to: u64) {
    for i in from..to {
        let Acquired::Admitted(lease) = registry
            .acquire(WORKSPACE, request(&format!("budget-{i:08}")), i)
            .unwrap()
        else {
            panic!("admitted {i}")
        };
        registry
            .release(WORKSPACE, lease.id, Outcome::Success, i)
            .unwrap();
        // A host drains the evicted IDs after each operation (the service's driver forgets
        // their stored spend).
        while let Some((workspace, budget)) = registry.poll_evicted_budget() {
            assert_eq!(workspace, WORKSPACE);
            assert!(budget.starts_with("budget-"));
        }
    }
}

#[test]
fn memory_stays_flat_while_100000_distinct_budgets_are_opened_and_left() {
    let mut registry = registry(BudgetBounds {
        idle_ms: Some(1_000),
        max_open: Some(100_000),
        max_open_per_principal: None,
    });
    open_and_leave(&mut registry, 0, 10_000);
    let warm = rss_bytes();
    open_and_leave(&mut registry, 10_000, 100_000);
    let grown = rss_bytes().saturating_sub(warm);
    let open = registry.snapshot(WORKSPACE).unwrap().open_budgets;
    assert!(open <= 1_001, "open budgets {open}");
    assert_eq!(registry.budgets_evicted() + open, 100_000);
    // Unbounded, the 90,000 later budgets would hold 30-50 MB (330-550 bytes each).
    assert!(grown < 4 * 1024 * 1024, "RSS grew by {grown} bytes");
}
