//! Budgets over HTTP (issue 34, items 2 and 3): one principal at its own cap of open budgets
//! never refuses another principal `too-many-budgets`, and a budget whose spend a limit counts
//! is still refused after `budgets.idle_ms`, retried or not, and across a restart; only
//! `POST /v1/budgets/{id}/release` forgets it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use turnstile_testkit::{test_profile, TestServer};

fn admission(budget: &str, cost: f64) -> Value {
    json!({"providerId": "wide", "budgetId": budget, "estimate": {"tokens": 1, "costUsd": cost}})
}

/// Opens `budget` with one admission and releases the lease (the budget stays open).
fn open(server: &TestServer, key: &str, budget: &str, cost: f64) {
    let response = server.acquire(key, &admission(budget, cost));
    assert_eq!(response.status(), 200, "{budget}");
    let lease: Value = response.json().unwrap();
    server.assert_released(key, lease["leaseId"].as_str().unwrap(), "success");
}

#[test]
fn cnc_admit_budget_cap_one_principal_at_its_cap_leaves_the_others_admitted() {
    let server = TestServer::start_fresh(|c| {
        c.budgets.max_open_per_workspace = 5;
        c.budgets.max_open_per_principal = Some(3);
    });
    let put = server.put_profile(&server.admin(), "t", "v1", &test_profile());
    assert_eq!(put.status(), 201);
    let (bob, alice) = (server.new_key("t", "bob"), server.new_key("t", "alice"));
    for i in 0..3 {
        open(&server, &bob, &format!("bob-{i}"), 0.0);
    }
    let refused = server.acquire(&bob, &admission("bob-3", 0.0));
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().unwrap();
    assert_eq!(body["reason"], "too-many-budgets", "{body}");
    assert_eq!(body["evidence"]["budgetCap"], "principal", "{body}");
    for i in 0..2 {
        open(&server, &alice, &format!("alice-{i}"), 0.01);
    }
    // The workspace is full now (5): its own cap, named as such.
    let refused: Value = server
        .acquire(&alice, &admission("alice-2", 0.01))
        .json()
        .unwrap();
    assert_eq!(refused["evidence"]["budgetCap"], "workspace", "{refused}");
}

#[test]
fn a_principal_cap_at_or_above_the_workspace_cap_is_a_typed_config_error() {
    let mut config = turnstile_server::Config::default();
    config.budgets.max_open_per_principal = Some(config.budgets.max_open_per_workspace);
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("budgets.max_open_per_principal"), "{error}");
    config.budgets.max_open_per_principal = Some(0);
    assert!(config.validate().is_err());
}

#[test]
fn an_unset_principal_cap_follows_a_lowered_workspace_cap() {
    let mut config = turnstile_server::Config::default();
    assert_eq!(config.budgets.principal_cap(), 10_000);
    config.budgets.max_open_per_workspace = 8;
    config.validate().unwrap();
    assert_eq!(config.budgets.principal_cap(), 4);
    config.budgets.max_open_per_workspace = 1;
    config.validate().unwrap();
    assert_eq!(config.budgets.principal_cap(), 1);
}

/// Retries `budget` every 50 ms for `for_ms`: every answer is 422 `cost`.
fn refused_throughout(server: &TestServer, key: &str, budget: &str, for_ms: u64) {
    let until = Instant::now() + Duration::from_millis(for_ms);
    loop {
        let response = server.acquire(key, &admission(budget, 0.6));
        assert_eq!(response.status(), 422, "{}", response.text().unwrap());
        let body: Value = response.json().unwrap();
        assert_eq!(body["reason"], "cost", "{body}");
        if Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn cnc_admit_budget_an_exhausted_budget_outlives_idle_ms_and_a_restart_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), |c| c.budgets.idle_ms = 200);
    let put = server.put_profile(&server.admin(), "t", "v1", &test_profile());
    assert_eq!(put.status(), 201);
    // alice: maxCostUsd 1.
    let alice = server.new_key("t", "alice");
    open(&server, &alice, "inv", 0.6);
    // Retried past idle_ms, then left alone past it: still refused.
    refused_throughout(&server, &alice, "inv", 600);
    std::thread::sleep(Duration::from_millis(500));
    refused_throughout(&server, &alice, "inv", 0);
    assert_eq!(server.snapshot("t")["openBudgets"], 1);
    server.stop();
    // A restart keeps it.
    let server = TestServer::start(dir.path(), |c| c.budgets.idle_ms = 200);
    refused_throughout(&server, &alice, "inv", 0);
    std::thread::sleep(Duration::from_millis(400));
    refused_throughout(&server, &alice, "inv", 0);
    // Released: forgotten.
    let released = server
        .post("/v1/budgets/inv/release", &alice)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(released.status(), 200);
    let again: Value = server
        .acquire(&alice, &admission("inv", 0.6))
        .json()
        .unwrap();
    assert_eq!(again["evidence"]["budgetOpened"], true, "{again}");
}
