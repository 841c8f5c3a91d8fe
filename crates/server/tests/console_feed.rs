//! The console's HTTP side (issue 15): the live event feed, one profile revision, and the
//! embedded page with its Content-Security-Policy. The page itself is tested in a real browser
//! (`tests/console/`, run by `.ci/run`).

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use turnstile_testkit::{test_profile, TestServer};

/// The `update` events of a finite stream (`maxEvents`).
fn updates(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|frame| {
            let mut lines = frame.lines();
            (lines.next()? == "event: update")
                .then(|| serde_json::from_str(lines.next()?.strip_prefix("data: ")?).ok())
                .flatten()
        })
        .collect()
}

/// Lane `provider` of workspace `t` now: the first `update` of the admin's feed.
fn lane_now(server: &TestServer, provider: &str) -> Value {
    let text = server
        .get("/v1/workspaces/t/events?maxEvents=1", &server.admin())
        .send()
        .unwrap()
        .text()
        .unwrap();
    updates(&text)[0]["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["providerId"] == provider)
        .cloned()
        .unwrap()
}

#[test]
fn the_feed_streams_lanes_decisions_and_transitions() {
    let server = TestServer::start_fresh(|_| {});
    server.register_test_profile();
    let alice = server.new_key("t", "alice");
    let response = server
        .get("/v1/workspaces/t/events?maxEvents=3", &server.admin())
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let started = Instant::now();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let mut response = response;
        response.read_to_string(&mut text).unwrap();
        text
    });
    // A grant and a failure that opens `p`'s breaker (threshold 1).
    std::thread::sleep(Duration::from_millis(100));
    let lease_id = &server.granted_lease(
        &alice,
        &json!({"providerId": "p", "budgetId": "b", "estimate": {}, "deadlineMs": 0}),
    );
    server.assert_released(&alice, lease_id, "failure");
    let text = reader.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "{text}");
    let events = updates(&text);
    assert_eq!(events.len(), 3, "{text}");
    // The first update is the lanes now.
    let lanes = events[0]["lanes"].as_array().unwrap();
    let p = lanes.iter().find(|l| l["providerId"] == "p").unwrap();
    assert_eq!(
        (p["active"].as_u64(), p["concurrency"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(p["breakerState"], "closed");
    // Later ones carry the admission, the per-principal grant (admin key) and the transition.
    let later = &events[1..];
    let admitted: u64 = later
        .iter()
        .flat_map(|e| e["decisions"].as_array().unwrap().clone())
        .filter(|d| d["providerId"] == "p" && d["reason"] == "admitted")
        .map(|d| d["count"].as_u64().unwrap())
        .sum();
    assert_eq!(admitted, 1, "{text}");
    assert!(later.iter().any(|e| e["principals"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["principalId"] == "alice" && p["grants"] == 1)));
    let last = events.last().unwrap();
    let p = last["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["providerId"] == "p")
        .unwrap();
    assert_eq!(p["breakerState"], "open", "{text}");
    assert!(p["nextProbeAt"].as_u64().is_some());
    assert!(later.iter().any(|e| e["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["providerId"] == "p" && t["to"] == "open")));
    // The service's metrics never name the principal.
    assert!(!server.metrics_text().contains("alice"));
}

/// Issue 35: the lanes view says which limit binds a queued lane. Alice holds `p`'s one
/// permit; Bob's request waits for it: the feed's lane `p` counts one lane bound by the
/// provider's concurrency, and names no principal.
#[test]
fn the_feed_names_the_limit_that_binds_a_queued_lane() {
    let server = TestServer::start_fresh(|_| {});
    server.register_test_profile();
    let (alice, bob) = (server.new_key("t", "alice"), server.new_key("t", "bob"));
    let lease = server.granted_lease(
        &alice,
        &json!({"providerId": "p", "budgetId": "a", "estimate": {}, "deadlineMs": 0}),
    );
    let waiting = {
        let (server_url, bob) = (server.url("/v1/admissions"), bob.clone());
        std::thread::spawn(move || {
            reqwest::blocking::Client::new()
                .post(server_url)
                .bearer_auth(bob)
                .json(&json!({"providerId": "p", "budgetId": "b", "estimate": {}, "deadlineMs": 1500}))
                .send()
                .unwrap()
                .status()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let p = loop {
        let p = lane_now(&server, "p");
        if p["queued"] == 1 || Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        p["bindings"],
        json!([{"binding": "provider-concurrency", "lanes": 1}]),
        "{p}"
    );
    assert!(!p.to_string().contains("bob") && !p.to_string().contains("alice"));
    server.assert_released(&alice, &lease, "success");
    assert_eq!(
        waiting.join().unwrap(),
        200,
        "bob is served once alice is done"
    );
    let p = lane_now(&server, "p");
    assert_eq!(p["bindings"], json!([]), "nothing waits: {p}");
}

/// Issue 35: `GET /v1/workspaces` lists what a key may see: an admin key every workspace with
/// a profile and its revision, a principal key its own workspace only.
#[test]
fn the_workspace_listing_shows_an_admin_every_workspace_and_a_principal_its_own() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    assert_eq!(
        server
            .put_profile(&admin, "t", "v1", &test_profile())
            .status(),
        201
    );
    assert_eq!(
        server
            .put_profile(&admin, "u", "v7", &test_profile())
            .status(),
        201
    );
    let listed = server.get_json("/v1/workspaces", &admin);
    let workspaces = &listed["workspaces"];
    for (id, version) in [("t", "v1"), ("u", "v7")] {
        assert!(
            workspaces
                .as_array()
                .unwrap()
                .iter()
                .any(|w| *w == json!({"workspaceId": id, "profileVersion": version})),
            "{listed}"
        );
    }
    let alice = server.new_key("t", "alice");
    assert_eq!(
        server.get_json("/v1/workspaces", &alice),
        json!({"workspaces": [{"workspaceId": "t", "profileVersion": "v1"}]})
    );
    let newcomer = server.new_key("fresh", "carol");
    assert_eq!(
        server.get_json("/v1/workspaces", &newcomer),
        json!({"workspaces": [{"workspaceId": "fresh", "profileVersion": null}]})
    );
    let anonymous = server
        .client
        .get(server.url("/v1/workspaces"))
        .send()
        .unwrap();
    assert_eq!(anonymous.status(), 401);
}

#[test]
fn a_principal_sees_its_own_workspace_without_other_principals() {
    let server = TestServer::start_fresh(|_| {});
    server.register_test_profile();
    let alice = server.new_key("t", "alice");
    let outsider = server.new_key("elsewhere", "carol");
    let forbidden = server
        .get("/v1/workspaces/t/events?maxEvents=1", &outsider)
        .send()
        .unwrap();
    assert_eq!(forbidden.status(), 403);
    let text = server
        .get("/v1/workspaces/t/events?maxEvents=1", &alice)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let events = updates(&text);
    // Never the field, not even empty: `principals` is for admin keys.
    assert!(events[0].get("principals").is_none(), "{}", events[0]);
    for bad in ["?maxEvents=0", "?maxEvents=x", "?other=1"] {
        let response = server
            .get(&format!("/v1/workspaces/t/events{bad}"), &alice)
            .send()
            .unwrap();
        assert_eq!(response.status(), 422, "{bad}");
    }
    let unknown = server
        .get("/v1/workspaces/none/events?maxEvents=1", &server.admin())
        .send()
        .unwrap();
    assert_eq!(unknown.status(), 404);
}

#[test]
fn a_revision_reads_back_for_diff_and_rollback() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    let v1 = test_profile();
    let mut v2 = test_profile();
    v2["providers"]["wide"]["concurrency"] = json!(2);
    assert_eq!(server.put_profile(&admin, "t", "v1", &v1).status(), 201);
    assert_eq!(server.put_profile(&admin, "t", "v2", &v2).status(), 201);
    let revision = server.get_json("/v1/workspaces/t/profiles/v1", &admin);
    assert_eq!(revision["profileVersion"], "v1");
    assert_eq!(revision["profile"]["providers"]["wide"]["concurrency"], 4);
    // Sending it back unchanged is a rollback, with the same digest as the first registration.
    let record: Value = server
        .put_profile(&admin, "t", "v1", &revision["profile"])
        .json()
        .unwrap();
    assert_eq!(record["kind"], "rollback");
    assert_eq!(record["digest"], revision["digest"]);
    let missing = server
        .get("/v1/workspaces/t/profiles/v9", &admin)
        .send()
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().unwrap()["error"],
        "unknown-revision"
    );
    let alice = server.new_key("t", "alice");
    assert_eq!(
        server
            .get("/v1/workspaces/t/profiles/v1", &alice)
            .send()
            .unwrap()
            .status(),
        403
    );
}

#[test]
fn the_console_is_embedded_with_a_strict_policy() {
    let server = TestServer::start_fresh(|_| {});
    let page = server.client.get(server.url("/ui")).send().unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"));
    let html = page.text().unwrap();
    assert!(html.contains("/ui/app.js") && !html.contains("<script>"));
    for asset in ["app.js", "app.css", "charts.js", "rollout.js"] {
        let response = server
            .client
            .get(server.url(&format!("/ui/{asset}")))
            .send()
            .unwrap();
        assert_eq!(response.status(), 200, "{asset}");
        assert!(response.headers().contains_key("content-security-policy"));
    }
    let missing = server.client.get(server.url("/ui/nope.js")).send().unwrap();
    assert_eq!(missing.status(), 404);
}
