//! Every input is bounded and typed (issue 17): each case reproduces a break the issue
//! reported.

use std::io::{Read, Write};

use serde_json::{json, Value};
use turnstile_testkit::{test_profile, TestServer};

fn typed(response: reqwest::blocking::Response, status: u16, error: &str) -> Value {
    assert_eq!(response.status().as_u16(), status);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let body: Value = response.json().unwrap();
    assert_eq!(body["error"], error, "{body}");
    assert!(body["message"].is_string(), "{body}");
    body
}

#[test]
fn actual_usage_out_of_range_is_422_and_counters_never_wrap() {
    let server = TestServer::start_fresh(|_| {});
    server.register_test_profile();
    let alice = server.new_key("t", "alice");
    let body = json!({"providerId": "wide", "budgetId": "b", "estimate": {}, "deadlineMs": 0});
    let lease = |server: &TestServer| -> String { server.granted_lease(&alice, &body) };
    let first = lease(&server);
    let ok = server.release(
        &alice,
        &first,
        &json!({"outcome": "success", "actualUsage": {"tokens": 100}}),
    );
    assert_eq!(ok.status(), 200);
    let second = lease(&server);
    for usage in [
        json!({"tokens": 18446744073709551615u64}),
        json!({"tokens": 9007199254740992u64}),
        json!({"costUsd": 1e308}),
        json!({"costUsd": 1e9 + 1.0}),
    ] {
        let refused = server.release(
            &alice,
            &second,
            &json!({"outcome": "success", "actualUsage": usage}),
        );
        let body = typed(refused, 422, "invalid-request");
        assert!(body["field"].as_str().unwrap().starts_with("actualUsage."));
    }
    assert_eq!(server.metric("turnstile_actual_tokens_total"), 100.0);
    let max = server.release(
        &alice,
        &second,
        &json!({"outcome": "success", "actualUsage": {"tokens": 9007199254740991u64, "costUsd": 1e9}}),
    );
    assert_eq!(max.status(), 200);
    assert!(server.metric("turnstile_actual_tokens_total") > 100.0);
}

#[test]
fn errors_of_every_layer_are_typed_json() {
    let server = TestServer::start_fresh(|_| {});
    server.register_test_profile();
    let alice = server.new_key("t", "alice");

    // Invalid UTF-8 in a path ID.
    let bad_path = server
        .post("/v1/budgets/%FF%FE/release", &alice)
        .send()
        .unwrap();
    let body = typed(bad_path, 422, "invalid-request");
    assert_eq!(body["field"], "path");

    // JSON sent as text/plain.
    let plain = server
        .post("/v1/admissions", &alice)
        .header("content-type", "text/plain")
        .body(json!({"providerId": "wide", "budgetId": "b", "estimate": {}}).to_string())
        .send()
        .unwrap();
    typed(plain, 415, "unsupported-media-type");
    let none = server
        .post("/v1/admissions", &alice)
        .body(json!({"providerId": "wide", "budgetId": "b", "estimate": {}}).to_string())
        .send()
        .unwrap();
    typed(none, 415, "unsupported-media-type");

    // Duplicate keys inside a nested object (the top level was refused already).
    let duplicate = server
        .post("/v1/admissions", &alice)
        .header("content-type", "application/json")
        .body(r#"{"providerId":"wide","budgetId":"b","estimate":{"tokens":1,"tokens":2}}"#)
        .send()
        .unwrap();
    let body = typed(duplicate, 422, "invalid-request");
    assert!(body["message"].as_str().unwrap().contains("duplicate"));

    // `..` is not an ID (sent raw: HTTP clients normalise it away).
    let body = test_profile().to_string();
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "PUT /v1/workspaces/../profiles/v1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.admin(),
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 422"), "{answer}");
    assert!(answer.contains("\"field\":\"workspaceId\""), "{answer}");

    // The auth scheme is case-insensitive.
    let lower = server
        .client
        .post(server.url("/v1/budgets/b/release"))
        .header("authorization", format!("bearer {alice}"))
        .send()
        .unwrap();
    assert_eq!(lower.status(), 200);
    let shouting = server
        .client
        .post(server.url("/v1/budgets/b/release"))
        .header("authorization", format!("BEARER {alice}"))
        .send()
        .unwrap();
    assert_eq!(shouting.status(), 200);
    typed(
        server
            .client
            .post(server.url("/v1/budgets/b/release"))
            .header("authorization", format!("Basic {alice}"))
            .send()
            .unwrap(),
        401,
        "unauthorized",
    );
}

#[test]
fn the_key_listing_returns_every_revocation() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    for i in 0..260 {
        let created: Value = server
            .post("/v1/workspaces/t/keys", &admin)
            .json(&json!({"principalId": format!("p{i}")}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let key_id = created["keyId"].as_str().unwrap();
        let revoked = server
            .client
            .delete(server.url(&format!("/v1/workspaces/t/keys/{key_id}")))
            .bearer_auth(&admin)
            .send()
            .unwrap();
        assert_eq!(revoked.status(), 200);
    }
    let listing = server.get_json("/v1/workspaces/t/keys", &admin);
    assert_eq!(listing["revocations"].as_array().unwrap().len(), 260);
}
