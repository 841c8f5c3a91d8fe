//! The gate serves `POST /v1/admissions` and `POST /v1/leases/{leaseId}/release` itself
//! (`src/hot_routes.rs`); any other spelling of a path goes through the router. A lease ID
//! with one character percent-encoded is the same lease to the router (axum decodes path
//! parameters), so the same release can be sent both ways: every kind of answer must be the
//! same, byte for byte.

use serde_json::{json, Value};
use turnstile_testkit::{admission, TestServer};

/// The lease ID's path segment with its first character percent-encoded (router only).
fn encoded(lease: &str) -> String {
    let first = lease.as_bytes()[0];
    format!("%{first:02X}{}", &lease[1..])
}

fn release_at(
    server: &TestServer,
    segment: &str,
    key: Option<&str>,
    body: &Value,
) -> (u16, String) {
    let mut request = server
        .client
        .post(server.url(&format!("/v1/leases/{segment}/release")))
        .json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

#[test]
fn a_release_answers_the_same_through_the_gate_and_through_the_router() {
    let server = TestServer::start_fresh(|_| {});
    let (alice, bob) = server.register_test_profile_with_keys();
    let success = json!({ "outcome": "success" });
    let first = server.granted_lease(&alice, &admission("p"));
    let plain = first.clone();
    let routed = encoded(&first);

    // Refusals that leave the lease held: the same answer both ways.
    for (key, body) in [
        (None, success.clone()),
        (Some("tsk_not-a-key"), success.clone()),
        (Some(bob.as_str()), success.clone()),
        (Some(alice.as_str()), json!({ "outcome": "maybe" })),
        (
            Some(alice.as_str()),
            json!({ "outcome": "success", "extra": 1 }),
        ),
        (Some(alice.as_str()), json!({ "outcome": "retry-after" })),
    ] {
        let hot = release_at(&server, &plain, key, &body);
        let router = release_at(&server, &routed, key, &body);
        assert!(hot.0 >= 400 && hot.0 < 500, "{hot:?}");
        assert_eq!(hot, router, "key {key:?}, body {body}");
    }

    // The lease is released once, by the router; then both ways say it is gone.
    let released = release_at(&server, &routed, Some(&alice), &success);
    assert_eq!(released.0, 200, "{released:?}");
    let gone_hot = release_at(&server, &plain, Some(&alice), &success);
    let gone_router = release_at(&server, &routed, Some(&alice), &success);
    assert_eq!(gone_hot.0, 404);
    assert_eq!(gone_hot, gone_router);

    // A release by the gate answers exactly what the router answered.
    let second = server.granted_lease(&alice, &admission("p"));
    assert_eq!(
        release_at(&server, &second, Some(&alice), &success),
        released
    );
}

#[test]
fn an_admission_without_a_known_key_is_refused_before_its_body_is_read() {
    let server = TestServer::start_fresh(|_| {});
    for key in [None, Some("tsk_not-a-key")] {
        let mut request = server
            .client
            .post(server.url("/v1/admissions"))
            .header("content-type", "text/plain")
            .body("not json");
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().unwrap();
        assert_eq!(response.status(), 401);
        let body: Value = response.json().unwrap();
        assert_eq!(body["error"], "unauthorized");
    }
}
