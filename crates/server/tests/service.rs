//! Behaviour of `turnstile serve` over real loopback HTTP.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use turnstile_testkit::{admission, test_profile, TestServer};

#[test]
fn full_flow_register_acquire_heartbeat_release() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();

    let created = server.put_profile(&admin, "t", "v1", &test_profile());
    assert_eq!(created.status(), 201);
    let record: Value = created.json().unwrap();
    assert_eq!(record["kind"], "initial");
    assert_eq!(record["schema"], "decision-admission-profile-change/v1");
    assert!(record["digest"].as_str().unwrap().starts_with("sha256:"));

    let again = server.put_profile(&admin, "t", "v1", &test_profile());
    assert_eq!(again.status(), 200);
    assert_eq!(again.json::<Value>().unwrap()["unchanged"], true);

    let alice = server.new_key("t", "alice");
    let granted = server.acquire(&alice, &admission("p"));
    assert_eq!(granted.status(), 200);
    let lease: Value = granted.json().unwrap();
    let lease_id = lease["leaseId"].as_str().unwrap().to_owned();
    assert_eq!(lease_id.len(), 32);
    assert_eq!(lease["evidence"]["decision"], "admit");
    assert_eq!(lease["evidence"]["active"], 1);
    let text = lease.to_string();
    assert!(!text.contains("alice") && !text.contains("\"t\""), "{text}");

    let beat = server
        .post(&format!("/v1/leases/{lease_id}/heartbeat"), &alice)
        .send()
        .unwrap();
    assert_eq!(beat.status(), 200);
    assert!(
        beat.json::<Value>().unwrap()["expiresAtEpochMs"]
            .as_u64()
            .unwrap()
            > 0
    );

    let released = server.release(
        &alice,
        &lease_id,
        &json!({"outcome": "success", "actualUsage": {"tokens": 7, "costUsd": 0.5}}),
    );
    assert_eq!(released.status(), 200);
    assert_eq!(released.json::<Value>().unwrap()["released"], true);
    assert_eq!(
        server
            .release(&alice, &lease_id, &json!({"outcome": "success"}))
            .status(),
        404
    );
    assert_eq!(server.metric("turnstile_actual_tokens_total"), 7.0);

    let history = server.get_json("/v1/workspaces/t/profiles", &admin);
    assert_eq!(history["records"].as_array().unwrap().len(), 1);
    assert_eq!(server.snapshot("t")["active"], 0);
}

#[test]
fn each_status_code() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    let (alice, bob) = server.register_test_profile_with_keys();
    let other = server.new_key("elsewhere", "carol");

    // 401: no key, unknown key.
    let none = server
        .client
        .post(server.url("/v1/admissions"))
        .json(&admission("p"))
        .send()
        .unwrap();
    assert_eq!(none.status(), 401);
    assert_eq!(none.json::<Value>().unwrap()["error"], "unauthorized");
    assert_eq!(server.acquire("tsk_nope", &admission("p")).status(), 401);

    // 403: admin key as a principal, principal key on an admin call, another workspace.
    assert_eq!(server.acquire(&admin, &admission("p")).status(), 403);
    assert_eq!(
        server
            .put_profile(&alice, "t", "v9", &test_profile())
            .status(),
        403
    );
    assert_eq!(
        server
            .get("/v1/workspaces/t/profiles", &other)
            .send()
            .unwrap()
            .status(),
        403
    );
    assert_eq!(
        server
            .get("/v1/workspaces/t/profiles", &alice)
            .send()
            .unwrap()
            .status(),
        200
    );
    // A principal the profile does not name is `disabled`: 403 as a typed rejection.
    let disabled = server.acquire(&other, &admission("p"));
    assert_eq!(disabled.status(), 404, "workspace without a profile");
    let stranger = server.new_key("t", "mallory");
    let disabled = server.acquire(&stranger, &admission("p"));
    assert_eq!(disabled.status(), 403);
    assert_eq!(disabled.json::<Value>().unwrap()["reason"], "disabled");

    // 409: a reused revision with different limits; 422: invalid limits name the field.
    let mut changed = test_profile();
    changed["workspace"]["concurrency"] = json!(5);
    let conflict = server.put_profile(&admin, "t", "v1", &changed);
    assert_eq!(conflict.status(), 409);
    assert_eq!(
        conflict.json::<Value>().unwrap()["error"],
        "invalid-definition"
    );
    let mut invalid = test_profile();
    invalid["workspace"]["maxPrincipalShare"] = json!(1.5);
    let invalid = server.put_profile(&admin, "t", "v2", &invalid);
    assert_eq!(invalid.status(), 422);
    assert_eq!(
        invalid.json::<Value>().unwrap()["field"],
        "maxPrincipalShare"
    );

    // 422: invalid estimate, permanent bounds, never-fitting ceilings, unknown provider.
    for (body, reason) in [
        (
            json!({"providerId": "p", "budgetId": "b", "estimate": {"tokens": -1}}),
            "invalid-estimate",
        ),
        (
            json!({"providerId": "p", "budgetId": "b", "estimate": {"batchSize": 9}}),
            "batch-size",
        ),
        (
            json!({"providerId": "zero", "budgetId": "b", "estimate": {}}),
            "concurrency",
        ),
        (
            json!({"providerId": "wide", "budgetId": "b", "estimate": {"tokens": 5000}}),
            "tokens-per-second",
        ),
        (
            json!({"providerId": "p", "budgetId": "b", "estimate": {"costUsd": 2}}),
            "cost",
        ),
        (
            json!({"providerId": "nope", "budgetId": "b", "estimate": {}}),
            "unconfigured-provider",
        ),
    ] {
        let response = server.acquire(&alice, &body);
        assert_eq!(response.status(), 422, "{body}");
        let rejection: Value = response.json().unwrap();
        assert_eq!(rejection["reason"], reason);
        assert_eq!(rejection["retryable"], false);
        assert!(rejection["evidence"]["estimatedTokens"].is_null() || reason != "invalid-estimate");
    }

    // 429 queue-timeout / queue-full with Retry-After: provider p has one permit.
    let held: Value = server.acquire(&alice, &admission("p")).json().unwrap();
    let lease = held["leaseId"].as_str().unwrap().to_owned();
    let timed_out = server.acquire(
        &bob,
        &json!({"providerId": "p", "budgetId": "b", "estimate": {}, "deadlineMs": 100}),
    );
    assert_eq!(timed_out.status(), 429);
    assert!(timed_out.headers().get("retry-after").is_some());
    assert_eq!(
        timed_out.json::<Value>().unwrap()["reason"],
        "deadline-exceeded"
    );

    let waiter = {
        let client = server.client.clone();
        let url = server.url("/v1/admissions");
        let bob = bob.clone();
        std::thread::spawn(move || {
            client
                .post(url)
                .bearer_auth(bob)
                .json(&json!({"providerId": "p", "budgetId": "b", "estimate": {}, "deadlineMs": 3000}))
                .send()
                .unwrap()
                .status()
        })
    };
    wait_until(|| server.snapshot("t")["queued"] == 1);
    let full = server.acquire(&alice, &admission("p"));
    assert_eq!(full.status(), 429);
    let retry_after: u64 = full.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    let full: Value = full.json().unwrap();
    assert_eq!(full["reason"], "queue-full");
    assert_eq!(full["retryable"], true);

    // Releasing hands the permit to the queued client.
    server.assert_released(&alice, &lease, "success");
    assert_eq!(waiter.join().unwrap(), 200);

    // 503 retry-after on a free provider lane.
    let paused = server
        .post("/v1/providers/wide/retry-after", &alice)
        .json(&json!({"retryAfterMs": 60000}))
        .send()
        .unwrap();
    assert_eq!(paused.status(), 200);
    let refused = server.acquire(
        &alice,
        &json!({"providerId": "wide", "budgetId": "b", "estimate": {}, "deadlineMs": 1000}),
    );
    assert_eq!(refused.status(), 503);
    let seconds: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((59..=60).contains(&seconds), "{seconds}");
    let refused: Value = refused.json().unwrap();
    assert_eq!(refused["reason"], "retry-after");
    assert_eq!(refused["retryable"], true);
    assert_eq!(
        server
            .post("/v1/providers/nope/retry-after", &alice)
            .json(&json!({"retryAfterMs": 1}))
            .send()
            .unwrap()
            .status(),
        404
    );

    // 413: body over the cap. 404 / 405 typed.
    let huge = "x".repeat(200_000);
    let too_large = server
        .post("/v1/admissions", &alice)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .unwrap();
    assert_eq!(too_large.status(), 413);
    assert_eq!(too_large.headers()["connection"], "close");
    assert_eq!(
        server
            .client
            .get(server.url("/nope"))
            .send()
            .unwrap()
            .status(),
        404
    );
    let wrong_method = server
        .client
        .get(server.url("/v1/admissions"))
        .send()
        .unwrap();
    assert_eq!(wrong_method.status(), 405);
    assert_eq!(
        wrong_method.json::<Value>().unwrap()["error"],
        "method-not-allowed"
    );

    // Budgets.
    let budget = server
        .post("/v1/budgets/inv-1/release", &alice)
        .send()
        .unwrap();
    assert_eq!(budget.status(), 200);
}

#[test]
fn circuit_open_is_503_with_retry_after() {
    let server = TestServer::start_fresh(|_| {});
    let (alice, _) = server.register_test_profile_with_keys();
    let id = &server.granted_lease(&alice, &admission("p"));
    server.assert_released(&alice, id, "failure");
    let open = server.acquire(&alice, &admission("p"));
    assert_eq!(open.status(), 503);
    let seconds: u64 = open.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((59..=60).contains(&seconds));
    let open: Value = open.json().unwrap();
    assert_eq!(open["reason"], "circuit-open");
    assert_eq!(open["evidence"]["breakerState"], "open");
    let metrics = server.metrics_text();
    assert!(metrics.contains("turnstile_breaker_transitions_total{state=\"open\"} 1"));
    assert!(!metrics.contains("alice") && !metrics.contains("\"t\""));
}

/// `deadlineMs: 0` means "only if free now" (issue 11: it used to become a deadline of `now`,
/// which the core refused as `deadline-exceeded` even on an idle provider). On an idle provider
/// it is admitted; on a busy one it is refused at once with the reason it would have waited for,
/// retryable, and nothing stays queued.
#[test]
fn deadline_zero_is_admitted_when_free_and_refused_at_once_with_the_real_reason_when_busy() {
    let server = TestServer::start_fresh(|_| {});
    let (alice, bob) = server.register_test_profile_with_keys();
    let now_only = json!({"providerId": "p", "budgetId": "b", "estimate": {}, "deadlineMs": 0});

    let idle = server.acquire(&alice, &now_only);
    assert_eq!(idle.status(), 200);
    let lease: Value = idle.json().unwrap();

    let busy = server.acquire(&bob, &now_only);
    assert_eq!(
        busy.status(),
        429,
        "retryable: the provider is busy, not unusable"
    );
    assert!(busy.headers().get("retry-after").is_some());
    let busy: Value = busy.json().unwrap();
    assert_eq!(busy["reason"], "concurrency");
    assert_eq!(busy["retryable"], true);
    assert_eq!(busy["evidence"]["decision"], "reject");
    assert_eq!(
        server.snapshot("t")["queued"],
        0,
        "it never joined the queue"
    );

    // A paused provider: the refusal names the pause and its real remaining time.
    let id = lease["leaseId"].as_str().unwrap();
    server.assert_released(&alice, id, "success");
    let paused = server
        .post("/v1/providers/p/retry-after", &alice)
        .json(&json!({"retryAfterMs": 30000}))
        .send()
        .unwrap();
    assert_eq!(paused.status(), 200);
    let refused = server.acquire(&bob, &now_only);
    assert_eq!(refused.status(), 503);
    let refused: Value = refused.json().unwrap();
    assert_eq!(refused["reason"], "retry-after");
    let hint = refused["evidence"]["retryAfterMs"].as_u64().unwrap();
    assert!((29_000..=30_000).contains(&hint), "{hint}");
}

#[test]
fn restart_keeps_keys_profiles_and_audit() {
    let dir = tempfile::tempdir().unwrap();
    let first = TestServer::start(dir.path(), |_| {});
    let admin = first.admin();
    let demo = first.keys.as_ref().unwrap().demo_key.clone().unwrap();
    let (alice, _) = first.register_test_profile_with_keys();
    let mut v2 = test_profile();
    v2["providers"]["p"]["concurrency"] = json!(2);
    assert_eq!(first.put_profile(&admin, "t", "v2", &v2).status(), 201);
    first.stop();

    let second = TestServer::start(dir.path(), |_| {});
    assert!(
        second.keys.is_none(),
        "keys are printed on the first start only"
    );
    let history = second.get_json("/v1/workspaces/t/profiles", &admin);
    let kinds: Vec<&str> = history["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["initial", "change"]);
    // The current profile is v2: two permits on p.
    let a: Value = second.acquire(&alice, &admission("p")).json().unwrap();
    let b = second.acquire(&alice, &admission("p"));
    assert_eq!(b.status(), 200, "v2 allows two permits");
    assert!(a["leaseId"].is_string());
    // The revision is still immutable and rollback reproduces the original digest.
    assert_eq!(second.put_profile(&admin, "t", "v1", &v2).status(), 409);
    let rollback = second.put_profile(&admin, "t", "v1", &test_profile());
    assert_eq!(rollback.status(), 201);
    let rollback: Value = rollback.json().unwrap();
    assert_eq!(rollback["kind"], "rollback");
    assert_eq!(rollback["digest"], history["records"][0]["digest"]);
    // The demo workspace and its key survive too.
    let demo_lease = second.acquire(&demo, &json!({"providerId": "llm-subagent", "budgetId": "x", "estimate": {"tokens": 10, "costUsd": 0.01}}));
    assert_eq!(demo_lease.status(), 200);
}

#[test]
fn an_expired_lease_is_reclaimed_and_its_slot_reused() {
    let server = TestServer::start_fresh(|c| c.leases.ttl_ms = 200);
    let (alice, bob) = server.register_test_profile_with_keys();
    let lease: Value = server.acquire(&alice, &admission("p")).json().unwrap();
    let id = lease["leaseId"].as_str().unwrap().to_owned();
    assert_eq!(lease["ttlMs"], 200);
    // Bob waits for the only permit; the crashed holder never heartbeats.
    let started = Instant::now();
    let waited = server.acquire(
        &bob,
        &json!({"providerId": "p", "budgetId": "b", "estimate": {}, "deadlineMs": 1500}),
    );
    assert_eq!(waited.status(), 200);
    assert!(started.elapsed() < Duration::from_millis(1200));
    assert_eq!(server.metric("turnstile_leases_expired_total"), 1.0);
    assert_eq!(
        server
            .release(&alice, &id, &json!({"outcome": "success"}))
            .status(),
        404
    );
    // A heartbeated lease is not reclaimed.
    let bob_lease: Value = waited.json().unwrap();
    let bob_id = bob_lease["leaseId"].as_str().unwrap();
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(
            server
                .post(&format!("/v1/leases/{bob_id}/heartbeat"), &bob)
                .send()
                .unwrap()
                .status(),
            200
        );
    }
    server.assert_released(&bob, bob_id, "success");
}

#[test]
fn a_disconnected_queued_client_leaves_no_waiter() {
    let server = TestServer::start_fresh(|_| {});
    let (alice, bob) = server.register_test_profile_with_keys();
    let held: Value = server.acquire(&alice, &admission("p")).json().unwrap();

    let body = json!({"providerId": "p", "budgetId": "b", "estimate": {}, "deadlineMs": 60000})
        .to_string();
    let mut stream = TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "POST /v1/admissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {bob}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    wait_until(|| server.snapshot("t")["queued"] == 1);
    assert_eq!(server.metric("turnstile_waiters_queued"), 1.0);
    drop(stream);
    wait_until(|| server.snapshot("t")["queued"] == 0);
    wait_until(|| server.metric("turnstile_waiters_queued") == 0.0);
    assert_eq!(server.snapshot("t")["waiters"], 0);
    assert_eq!(server.metric("turnstile_waiters_disconnected_total"), 1.0);

    // The permit is not handed to the departed client: releasing leaves the pool idle.
    let id = held["leaseId"].as_str().unwrap();
    server.assert_released(&alice, id, "success");
    let snapshot = server.snapshot("t");
    assert_eq!(snapshot["active"], 0);
    assert_eq!(snapshot["leases"], 0);
}

#[test]
fn a_slow_client_sending_headers_byte_by_byte_is_cut_off() {
    let server = TestServer::start_fresh(|c| c.http.header_read_timeout_ms = 300);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let started = Instant::now();
    let mut cut_off = false;
    for byte in request {
        if stream.write_all(&[*byte]).is_err() {
            cut_off = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
        if started.elapsed() > Duration::from_millis(1500) {
            break;
        }
    }
    // The request head is never complete, so only the header timeout can end this: the
    // server closes (possibly after a 408) well before the 3 s read timeout.
    let mut buf = Vec::new();
    let read = stream.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    assert!(cut_off || read.is_ok(), "connection still open: {read:?}");
    assert!(
        !text.contains("200 OK"),
        "the slow request must not be served: {text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "closed by the header timeout"
    );
    // The server keeps serving others.
    assert_eq!(server.status_of_get("/healthz"), 200);
}

/// Every (method, path) of the OpenAPI document, sorted.
fn documented_routes(doc: &Value) -> Vec<(String, String)> {
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.push((method.clone(), path.clone()));
        }
    }
    documented.sort();
    documented
}

#[test]
fn openapi_lists_exactly_the_served_routes() {
    let server = TestServer::start_fresh(|_| {});
    let doc: Value = server
        .client
        .get(server.url("/openapi.json"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let documented = documented_routes(&doc);
    // The router serves exactly these tables (both are declared with `route_table!`, which
    // makes the table and the routes from one list).
    let mut routes: Vec<(String, String)> = turnstile_server::ROUTES
        .iter()
        .chain(turnstile_proxy::ROUTES)
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    routes.sort();
    assert_eq!(documented, routes);
    // Every documented route is served (never the router's 404/405).
    for (method, path) in routes {
        let concrete = path
            .replace("{workspaceId}", "t")
            .replace("{profileVersion}", "v1")
            .replace("{leaseId}", "00000000000000000000000000000000")
            .replace("{budgetId}", "b")
            .replace("{providerId}", "p")
            .replace("{keyId}", "key_0000000000000000");
        let request = match method.as_str() {
            "get" => server.client.get(server.url(&concrete)),
            "post" => server.client.post(server.url(&concrete)),
            "put" => server.client.put(server.url(&concrete)),
            "delete" => server.client.delete(server.url(&concrete)),
            other => panic!("{other}"),
        };
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        let body = response.text().unwrap();
        assert!(
            status != 405 && !body.contains("no such route"),
            "{method} {path}: {status}"
        );
    }
}

#[test]
fn openapi_documents_the_proxy_headers_and_refusals() {
    let doc: Value = serde_json::from_str(turnstile_server::OPENAPI).unwrap();
    let resolve = |value: &Value| -> Value {
        match value["$ref"].as_str() {
            Some(reference) => {
                let name = reference.rsplit('/').next().unwrap();
                let kind = reference.split('/').nth(2).unwrap();
                doc["components"][kind][name].clone()
            }
            None => value.clone(),
        }
    };
    for (method, path) in turnstile_proxy::ROUTES {
        let operation = &doc["paths"][path][method];
        let at = format!("{method} {path}");
        assert_eq!(operation["x-proxy"], true, "{at}: marked as a proxy route");
        let security = operation["security"].to_string();
        assert!(security.contains("principalKey"), "{at}: {security}");
        let responses = operation["responses"].as_object().unwrap();
        for status in ["200", "401", "403", "429", "503"] {
            assert!(responses.contains_key(status), "{at}: no {status}");
        }
        if *method == "get" {
            continue;
        }
        // The admission headers the proxy reads, under the names it reads them by.
        let parameters: Vec<String> = operation["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| resolve(p)["name"].as_str().unwrap().to_owned())
            .collect();
        for header in [turnstile_proxy::WAIT_HEADER, turnstile_proxy::BUDGET_HEADER] {
            assert!(parameters.iter().any(|p| p == header), "{at}: {header}");
        }
        for status in ["400", "404", "408", "413", "502", "504"] {
            assert!(responses.contains_key(status), "{at}: no {status}");
        }
        // Refusals that waiting can help say how long; every proxy-made answer names its reason.
        for status in ["429", "503"] {
            let headers = resolve(&responses[status])["headers"].clone();
            for header in [
                "retry-after",
                "retry-after-ms",
                turnstile_proxy::REASON_HEADER,
            ] {
                assert!(headers.get(header).is_some(), "{at} {status}: {header}");
            }
        }
        let refused = resolve(&responses["400"])["headers"].clone();
        assert!(refused.get("x-should-retry").is_some(), "{at} 400");
    }
}

#[test]
fn health_readiness_and_metrics_have_no_ids() {
    let server = TestServer::start_fresh(|_| {});
    assert_eq!(server.status_of_get("/healthz"), 200);
    assert_eq!(server.status_of_get("/readyz"), 200);
    let (alice, _) = server.register_test_profile_with_keys();
    let _ = server.acquire(&alice, &admission("p"));
    let _ = server.acquire(&alice, &admission("zero"));
    let metrics = server.metrics_text();
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        if let Some(start) = line.find('{') {
            let labels = &line[start + 1..line.find('}').unwrap()];
            for pair in labels.split(',') {
                let name = pair.split('=').next().unwrap();
                assert!(
                    ["decision", "reason", "state", "breaker_status", "kind"].contains(&name),
                    "{line}"
                );
            }
        }
    }
    assert!(metrics.contains("reason=\"concurrency\""));
    assert!(!metrics.contains("alice") && !metrics.contains("inv-1"));
}

fn wait_until(mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "condition not reached"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn actual_usage_on_release_is_charged_to_the_invocation_budget() {
    let server = TestServer::start_fresh(|_| {});
    let (alice, _) = server.register_test_profile_with_keys();
    // alice may spend $1 per invocation.
    let ask = json!({"providerId": "wide", "budgetId": "inv-usage",
        "estimate": {"tokens": 10, "costUsd": 0.1}, "deadlineMs": 1000});
    let granted = server.acquire(&alice, &ask);
    assert_eq!(granted.status(), 200);
    let lease: Value = granted.json().unwrap();
    // The call cost far more than estimated.
    let released = server.release(
        &alice,
        lease["leaseId"].as_str().unwrap(),
        &json!({"outcome": "success", "actualUsage": {"costUsd": 0.95}}),
    );
    assert_eq!(released.status(), 200);
    // $0.95 + $0.1 > $1: the invocation's next attempt fails closed.
    let refused = server.acquire(&alice, &ask);
    assert_eq!(refused.status(), 422);
    assert_eq!(refused.json::<Value>().unwrap()["reason"], "cost");
    // Another invocation is not affected; releasing this one's budget opens it again.
    let other = json!({"providerId": "wide", "budgetId": "inv-other",
        "estimate": {"tokens": 10, "costUsd": 0.1}, "deadlineMs": 1000});
    let granted = server.acquire(&alice, &other);
    assert_eq!(granted.status(), 200);
    let lease: Value = granted.json().unwrap();
    server.release(
        &alice,
        lease["leaseId"].as_str().unwrap(),
        &json!({"outcome": "success"}),
    );
    assert_eq!(
        server
            .post("/v1/budgets/inv-usage/release", &alice)
            .send()
            .unwrap()
            .status(),
        200
    );
    assert_eq!(server.acquire(&alice, &ask).status(), 200);
    // An invalid actual cost is a typed 422 naming the field, and the lease stays held.
    let granted = server.acquire(&alice, &other);
    let lease: Value = granted.json().unwrap();
    let lease_id = lease["leaseId"].as_str().unwrap();
    let bad = server.release(
        &alice,
        lease_id,
        &json!({"outcome": "success", "actualUsage": {"costUsd": -1}}),
    );
    assert_eq!(bad.status(), 422);
    assert_eq!(bad.json::<Value>().unwrap()["field"], "actualUsage.costUsd");
    server.assert_released(&alice, lease_id, "success");
}

#[test]
fn keys_are_listed_by_id_and_a_revoked_key_authenticates_nobody_even_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), |_| {});
    let admin = server.admin();
    let (alice, bob) = server.register_test_profile_with_keys();
    // A second key for bob: the one to revoke.
    let created = server
        .post("/v1/workspaces/t/keys", &admin)
        .json(&json!({"principalId": "bob"}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    let created: Value = created.json().unwrap();
    let second = created["key"].as_str().unwrap().to_owned();
    let second_id = created["keyId"].as_str().unwrap().to_owned();
    assert!(second_id.starts_with("key_") && !second.contains(&second_id[4..]));
    assert_eq!(server.acquire(&second, &admission("wide")).status(), 200);

    // The listing names keys by ID, never the key or its hash.
    let listing = server.get("/v1/workspaces/t/keys", &admin).send().unwrap();
    assert_eq!(listing.status(), 200);
    let listing: Value = listing.json().unwrap();
    let principals: Vec<&str> = listing["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["principalId"].as_str().unwrap())
        .collect();
    assert_eq!(principals.len(), 3);
    for name in ["alice", "bob"] {
        assert!(principals.contains(&name), "{listing}");
    }
    let text = listing.to_string();
    for key in [&alice, &bob, &second] {
        assert!(!text.contains(&key[4..20]), "a key leaked into the listing");
    }
    // Principal keys may not list or revoke.
    assert_eq!(
        server
            .get("/v1/workspaces/t/keys", &alice)
            .send()
            .unwrap()
            .status(),
        403
    );
    let revoke = |key: &str, workspace: &str, id: &str| {
        server
            .client
            .delete(server.url(&format!("/v1/workspaces/{workspace}/keys/{id}")))
            .bearer_auth(key)
            .send()
            .unwrap()
    };
    assert_eq!(revoke(&alice, "t", &second_id).status(), 403);
    // Another workspace's path does not reach the key.
    assert_eq!(revoke(&admin, "elsewhere", &second_id).status(), 404);

    let revoked = revoke(&admin, "t", &second_id);
    assert_eq!(revoked.status(), 200);
    let revoked: Value = revoked.json().unwrap();
    assert_eq!(revoked["schema"], "turnstile-key-revocation/v1");
    assert_eq!(revoked["keyId"], second_id.as_str());
    assert_eq!(server.acquire(&second, &admission("wide")).status(), 401);
    assert_eq!(server.acquire(&alice, &admission("wide")).status(), 200);
    let again = revoke(&admin, "t", &second_id);
    assert_eq!(again.status(), 404);
    assert_eq!(again.json::<Value>().unwrap()["error"], "unknown-key");

    let listing = server.get_json("/v1/workspaces/t/keys", &admin);
    assert_eq!(listing["keys"].as_array().unwrap().len(), 2);
    assert_eq!(listing["revocations"][0]["keyId"], second_id.as_str());
    assert!(!listing["revocations"].to_string().contains("bob"));
    server.stop();

    // The revocation is durable.
    let restarted = TestServer::start(dir.path(), |_| {});
    assert_eq!(restarted.acquire(&second, &admission("wide")).status(), 401);
    assert_eq!(restarted.acquire(&bob, &admission("wide")).status(), 200);
}
