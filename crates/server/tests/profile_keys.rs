//! Unknown profile keys are refused, in every form the service parses, and the answers of
//! issue 36's documented cases: a zero `maxQueueWaitMs` makes `queue-timeout` permanent
//! (`retryable: false`), and `deadline-exceeded` is 429 with `retryable: false`.
//! (Unknown keys of the map form at every depth: `request_bodies.rs`.)

use serde_json::{json, Value};
use turnstile_testkit::{test_profile, TestServer};

#[test]
fn unknown_keys_of_a_principal_list_entry_are_refused() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    let mut profile = test_profile();
    profile["principals"] =
        json!([{"id": "alice", "limits": {"concurrency": 2}, "class": "quiet"}]);
    let response = server.put_profile(&admin, "t", "v1", &profile);
    assert_eq!(response.status(), 422);
    let body: Value = response.json().unwrap();
    assert_eq!(body["error"], "invalid-definition");
    assert_eq!(body["field"], "principals[0].class", "{body}");

    // Without the unknown key the list form is accepted, as the map form.
    profile["principals"] = json!([{"id": "alice", "limits": {"concurrency": 2}}]);
    assert_eq!(
        server.put_profile(&admin, "t", "v1", &profile).status(),
        201
    );
}

#[test]
fn a_zero_dwell_queue_timeout_is_permanent_and_deadline_exceeded_is_not_retryable() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    let mut profile = test_profile();
    profile["providers"]["nowait"] = json!({"concurrency": 4, "maxQueueWaitMs": 0});
    assert_eq!(
        server.put_profile(&admin, "t", "v1", &profile).status(),
        201
    );
    let bob = server.new_key("t", "bob");

    // Capacity is free, but a zero dwell bound can never be met: every request times out at
    // once, and that is permanent (until the profile changes).
    for _ in 0..2 {
        let response = server.acquire(
            &bob,
            &json!({"providerId": "nowait", "budgetId": "b", "estimate": {}, "deadlineMs": 1000}),
        );
        assert_eq!(response.status(), 429);
        let body: Value = response.json().unwrap();
        assert_eq!(body["reason"], "queue-timeout");
        assert_eq!(body["retryable"], false, "{body}");
    }

    // deadline-exceeded: 429 (the wait ran out under load), not retryable (this request's
    // deadline has passed; a new request gets a new one).
    let alice = server.new_key("t", "alice");
    let held = server.acquire(
        &alice,
        &json!({"providerId": "p", "budgetId": "a", "estimate": {}, "deadlineMs": 1000}),
    );
    assert_eq!(held.status(), 200);
    let response = server.acquire(
        &bob,
        &json!({"providerId": "p", "budgetId": "b", "estimate": {}, "deadlineMs": 100}),
    );
    assert_eq!(response.status(), 429);
    assert!(response.headers().get("retry-after").is_some());
    let body: Value = response.json().unwrap();
    assert_eq!(body["reason"], "deadline-exceeded");
    assert_eq!(body["retryable"], false);
}
