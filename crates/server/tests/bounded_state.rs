//! Bounded state (issue 17): budget state nobody touches is forgotten and counted, and past the
//! per-workspace cap an admission that would open one more budget is refused `too-many-budgets`
//! (429, retryable).

use std::time::Duration;

use serde_json::{json, Value};
use turnstile_testkit::{test_profile, TestServer};

fn setup(server: &TestServer) -> String {
    let mut profile = test_profile();
    // A lane without rate limits for the bulk test: on `wide` (1,000 tokens per second, a
    // workspace queue of 1) a fast enough service makes four clients wait for tokens and
    // overflow the queue (429), which is not what these tests are about.
    profile["providers"]["bulk"] = json!({"concurrency": 4});
    let response = server.put_profile(&server.admin(), "t", "v1", &profile);
    assert_eq!(response.status(), 201);
    server.new_key("t", "bob")
}

/// Opens and leaves `count` distinct budgets (one acquire + release each), over 4 clients.
fn open_and_leave(server: &TestServer, key: &str, from: u64, count: u64) {
    std::thread::scope(|scope| {
        for worker in 0..4u64 {
            scope.spawn(move || {
                let client = reqwest::blocking::Client::new();
                let mut i = from + worker;
                while i < from + count {
                    let body = json!({"providerId": "bulk", "budgetId": format!("b-{i}"),
                        "estimate": {"tokens": 1}, "deadlineMs": 1000});
                    let response = client
                        .post(server.url("/v1/admissions"))
                        .bearer_auth(key)
                        .json(&body)
                        .send()
                        .unwrap();
                    assert_eq!(response.status(), 200, "budget {i}");
                    let lease: Value = response.json().unwrap();
                    let lease_id = lease["leaseId"].as_str().unwrap();
                    let released = client
                        .post(server.url(&format!("/v1/leases/{lease_id}/release")))
                        .bearer_auth(key)
                        .json(&json!({"outcome": "success"}))
                        .send()
                        .unwrap();
                    assert_eq!(released.status(), 200);
                    i += 4;
                }
            });
        }
    });
}

/// The 100,000-budget memory check runs against the core directly
/// (`crates/admission/tests/budget_bounds.rs`); over HTTP, 10,000 budgets show the same bound.
#[test]
fn budgets_opened_and_left_over_http_are_forgotten_and_counted() {
    let server = TestServer::start_fresh(|c| c.budgets.idle_ms = 100);
    let key = setup(&server);
    open_and_leave(&server, &key, 0, 10_000);
    std::thread::sleep(Duration::from_millis(150));
    // Any operation evicts what has gone idle.
    let _ = server.acquire(&key, &json!({"providerId": "zero", "budgetId": "probe"}));
    let open = server.snapshot("t")["openBudgets"].as_u64().unwrap();
    let evicted = server.metric("turnstile_budgets_evicted_total") as u64;
    assert!(open < 1_000, "open budgets {open}");
    assert!(evicted + open >= 10_000, "evicted {evicted} + open {open}");
}

#[test]
fn an_evicted_budget_opens_anew_and_the_evidence_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), |c| c.budgets.idle_ms = 50);
    let key = setup(&server);
    let body = json!({"providerId": "wide", "budgetId": "inv", "estimate": {"tokens": 1}});
    let first: Value = server.acquire(&key, &body).json().unwrap();
    assert_eq!(first["evidence"]["budgetOpened"], true, "{first}");
    let lease = first["leaseId"].as_str().unwrap();
    server.assert_released(&key, lease, "success");
    let second: Value = server.acquire(&key, &body).json().unwrap();
    assert!(second["evidence"].get("budgetOpened").is_none(), "{second}");
    let lease = second["leaseId"].as_str().unwrap();
    server.assert_released(&key, lease, "success");
    std::thread::sleep(Duration::from_millis(80));
    let third: Value = server.acquire(&key, &body).json().unwrap();
    assert_eq!(third["evidence"]["budgetOpened"], true, "{third}");
    assert!(server.metric("turnstile_budgets_evicted_total") >= 1.0);
    let lease = third["leaseId"].as_str().unwrap();
    server.assert_released(&key, lease, "success");
    std::thread::sleep(Duration::from_millis(80));
    // Evicted again by the next operation; the store forgets its spend too, so a restart
    // restores nothing.
    let released = server
        .post("/v1/budgets/unknown/release", &key)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(released.status(), 200);
    assert_eq!(server.snapshot("t")["openBudgets"], 0);
    server.stop();
    let restarted = TestServer::start(dir.path(), |c| c.budgets.idle_ms = 60_000);
    let snapshot = restarted.get_json("/v1/workspaces/t/snapshot", &key);
    assert_eq!(snapshot["openBudgets"], 0, "{snapshot}");
}

#[test]
fn past_the_cap_an_admission_that_would_open_a_budget_is_refused_429_retryable() {
    // The principal's own cap (below the workspace's: issue 34) is the one reached here.
    let server = TestServer::start_fresh(|c| {
        c.budgets.max_open_per_workspace = 3;
        c.budgets.max_open_per_principal = Some(2);
    });
    let key = setup(&server);
    for budget in ["a", "b"] {
        let body = json!({"providerId": "wide", "budgetId": budget, "estimate": {"tokens": 1}});
        assert_eq!(server.acquire(&key, &body).status(), 200);
    }
    let refused = server.acquire(
        &key,
        &json!({"providerId": "wide", "budgetId": "c", "estimate": {"tokens": 1}}),
    );
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().unwrap();
    assert_eq!(body["reason"], "too-many-budgets", "{body}");
    assert_eq!(body["retryable"], true);
    // An open budget is never refused for the cap.
    let again = json!({"providerId": "wide", "budgetId": "a", "estimate": {"tokens": 1}});
    assert_eq!(server.acquire(&key, &again).status(), 200);
    // A released budget frees its place.
    let released = server
        .post("/v1/budgets/b/release", &key)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(released.status(), 200, "{}", released.text().unwrap());
    let c = json!({"providerId": "wide", "budgetId": "c", "estimate": {"tokens": 1}});
    assert_eq!(server.acquire(&key, &c).status(), 200);
}
