//! The console's history and fairness answers (issue 15): who changed a profile (the acting
//! admin key's `keyId`, kept across a restart), the Retry-After pause history (journaled, kept
//! across a restart), and the server-side fairness window with its scoping by key. Issue 33,
//! item 4: every revision change keeps its approval on record (`note`, `approvedBy`).

use serde_json::{json, Value};
use turnstile_testkit::{test_profile, TestServer};

fn records(server: &TestServer, key: &str, path: &str) -> Vec<Value> {
    let response = server.get(path, key).send().unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let body: Value = response.json().unwrap();
    body["records"].as_array().unwrap().clone()
}

#[test]
fn profile_history_says_which_admin_key_made_each_change_and_keeps_it_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), |_| {});
    let admin = server.admin();
    // The admin key's ID, as every answer names a key: `key_` + 16 hex digits of its hash.
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(admin.as_bytes()))
    };
    let admin_id = format!("key_{}", &digest[..16]);

    let created = server.put_profile(&admin, "t", "v1", &test_profile());
    assert_eq!(created.status(), 201);
    let record: Value = created.json().unwrap();
    assert_eq!(record["actorKeyId"], admin_id.as_str());
    let mut second = test_profile();
    second["providers"]["p"]["concurrency"] = json!(2);
    assert_eq!(server.put_profile(&admin, "t", "v2", &second).status(), 201);
    // A rollback goes through the same audited call.
    let rollback: Value = server
        .put_profile(&admin, "t", "v1", &test_profile())
        .json()
        .unwrap();
    assert_eq!(rollback["kind"], "rollback");
    assert_eq!(rollback["actorKeyId"], admin_id.as_str());

    // A principal of the workspace reads the history too, with the actor.
    let alice = server.new_key("t", "alice");
    let history = records(&server, &alice, "/v1/workspaces/t/profiles");
    let kinds: Vec<&str> = history
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["initial", "change", "rollback"]);
    assert!(history.iter().all(|r| r["actorKeyId"] == admin_id.as_str()));

    // The demo workspace's first-start profile was registered by no key.
    let demo = records(&server, &admin, "/v1/workspaces/demo/profiles");
    assert_eq!(demo.len(), 1);
    assert!(demo[0]["actorKeyId"].is_null());

    server.stop();
    let restarted = TestServer::start(dir.path(), |_| {});
    let history = records(&restarted, &admin, "/v1/workspaces/t/profiles");
    assert_eq!(history.len(), 3);
    assert!(history.iter().all(|r| r["actorKeyId"] == admin_id.as_str()));
}

/// Issue 33, item 4: `PUT …/profiles/{v}` takes `note` and `approvedBy` beside the profile,
/// answers and lists them with the actor, keeps them across a restart, and refuses bad ones
/// (typed, naming the field) without registering anything.
#[test]
fn every_revision_change_keeps_its_note_and_approver_on_record() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), |_| {});
    let admin = server.admin();
    let with = |profile: &Value, note: Option<&str>, approved_by: Option<&str>| {
        let mut body = profile.clone();
        body["note"] = json!(note);
        body["approvedBy"] = json!(approved_by);
        body
    };
    let v1 = with(
        &test_profile(),
        Some("first limits\nCHG-1"),
        Some("Dana (SRE)"),
    );
    let created = server.put_profile(&admin, "t", "v1", &v1);
    assert_eq!(created.status(), 201);
    let record: Value = created.json().unwrap();
    assert_eq!(record["note"], "first limits\nCHG-1");
    assert_eq!(record["approvedBy"], "Dana (SRE)");
    assert!(record["actorKeyId"].as_str().unwrap().starts_with("key_"));
    // The note is not part of the revision: the same limits again are unchanged.
    let again = server.put_profile(&admin, "t", "v1", &with(&test_profile(), Some("x"), None));
    assert_eq!(again.status(), 200);

    // Bad approvals: typed 422 naming the field, nothing registered.
    let mut second = test_profile();
    second["providers"]["p"]["concurrency"] = json!(2);
    let refused = [
        (with(&second, Some("  "), None), "note"),
        (with(&second, Some(&"n".repeat(1001)), None), "note"),
        (with(&second, None, Some("a\u{7}b")), "approvedBy"),
        (with(&second, None, Some(&"a".repeat(129))), "approvedBy"),
        (
            {
                let mut b = second.clone();
                b["note"] = json!(7);
                b
            },
            "note",
        ),
    ];
    for (body, field) in refused {
        let answer = server.put_profile(&admin, "t", "v2", &body);
        assert_eq!(answer.status(), 422, "{field}");
        let error: Value = answer.json().unwrap();
        assert_eq!(error["error"], "invalid-request");
        assert_eq!(error["field"], field);
    }
    assert_eq!(
        records(&server, &admin, "/v1/workspaces/t/profiles").len(),
        1
    );

    // Without an approval the record says so (null), a rollback carries its own.
    assert_eq!(server.put_profile(&admin, "t", "v2", &second).status(), 201);
    let rollback: Value = server
        .put_profile(
            &admin,
            "t",
            "v1",
            &with(&test_profile(), Some("v2 queued too much"), Some("Lee")),
        )
        .json()
        .unwrap();
    assert_eq!(rollback["kind"], "rollback");
    assert_eq!(rollback["approvedBy"], "Lee");

    server.stop();
    let restarted = TestServer::start(dir.path(), |_| {});
    let history = records(&restarted, &admin, "/v1/workspaces/t/profiles");
    let approvals: Vec<(&str, Value, Value)> = history
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap(),
                r["note"].clone(),
                r["approvedBy"].clone(),
            )
        })
        .collect();
    assert_eq!(
        approvals,
        [
            ("initial", json!("first limits\nCHG-1"), json!("Dana (SRE)")),
            ("change", Value::Null, Value::Null),
            ("rollback", json!("v2 queued too much"), json!("Lee")),
        ]
    );
}

#[test]
fn pauses_are_journaled_with_their_cause_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), |_| {});
    let admin = server.admin();
    server.register_test_profile();
    let alice = server.new_key("t", "alice");
    assert!(records(&server, &alice, "/v1/workspaces/t/pauses").is_empty());

    // A principal relays a provider's Retry-After.
    let paused: Value = server
        .post("/v1/providers/wide/retry-after", &alice)
        .json(&json!({"retryAfterMs": 5000}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let until = paused["pausedUntilEpochMs"].as_u64().unwrap();
    // Relaying the same Retry-After again moves the end by milliseconds: the feed sees it, the
    // audit log does not (at most one record per second of extension).
    for _ in 0..3 {
        let again = server
            .post("/v1/providers/wide/retry-after", &alice)
            .json(&json!({"retryAfterMs": 5000}))
            .send()
            .unwrap();
        assert_eq!(again.status(), 200);
    }
    // A lease released with outcome retry-after pauses its lane too.
    let lease_id = &server.granted_lease(
        &alice,
        &json!({"providerId": "p", "budgetId": "b", "estimate": {}, "deadlineMs": 0}),
    );
    assert_eq!(
        server
            .release(
                &alice,
                lease_id,
                &json!({"outcome": "retry-after", "retryAfterMs": 7000})
            )
            .status(),
        200
    );

    let pauses = records(&server, &admin, "/v1/workspaces/t/pauses");
    assert_eq!(pauses.len(), 2, "{pauses:?}");
    assert_eq!(pauses[0]["schema"], "turnstile-provider-pause/v1");
    assert_eq!(pauses[0]["providerId"], "wide");
    assert_eq!(pauses[0]["cause"], "retry-after-call");
    assert_eq!(pauses[0]["retryAfterMs"], 5000);
    assert_eq!(pauses[0]["untilEpochMs"].as_u64(), Some(until));
    assert_eq!(pauses[1]["providerId"], "p");
    assert_eq!(pauses[1]["cause"], "release-outcome");
    assert_eq!(pauses[1]["retryAfterMs"], 7000);
    let at = pauses[1]["atEpochMs"].as_u64().unwrap();
    assert_eq!(pauses[1]["untilEpochMs"].as_u64(), Some(at + 7000));
    // Another workspace's principal cannot read them.
    let outsider = server.new_key("elsewhere", "carol");
    assert_eq!(
        server
            .get("/v1/workspaces/t/pauses", &outsider)
            .send()
            .unwrap()
            .status(),
        403
    );

    server.stop();
    let restarted = TestServer::start(dir.path(), |_| {});
    let after = records(&restarted, &admin, "/v1/workspaces/t/pauses");
    assert_eq!(after, pauses);
}

#[test]
fn the_fairness_window_is_computed_by_the_server_and_scoped_by_key() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    let (alice, bob) = server.register_test_profile_with_keys();
    let grant = |key: &str| {
        let lease: Value = server
            .acquire(
                key,
                &json!({"providerId": "wide", "budgetId": "f", "estimate": {}, "deadlineMs": 0}),
            )
            .json()
            .unwrap();
        let id = lease["leaseId"].as_str().unwrap().to_owned();
        assert_eq!(
            server
                .release(key, &id, &json!({"outcome": "success"}))
                .status(),
            200
        );
    };
    for _ in 0..3 {
        grant(&alice);
    }
    grant(&bob);
    // A refusal is not a grant.
    let refused = server.acquire(
        &alice,
        &json!({"providerId": "zero", "budgetId": "f", "estimate": {}, "deadlineMs": 0}),
    );
    assert_ne!(refused.status(), 200);

    let view = server.get_json("/v1/workspaces/t/fairness", &admin);
    assert_eq!(view["totalGrants"], 4, "{view}");
    assert_eq!(view["bucketMs"], 60000);
    assert_eq!(view["unattributedGrants"], 0);
    let principals = view["principals"].as_array().unwrap();
    assert_eq!(principals.len(), 2);
    assert_eq!(principals[0]["principalId"], "alice");
    assert_eq!(principals[0]["grants"], 3);
    assert!((principals[0]["share"].as_f64().unwrap() - 0.75).abs() < 1e-9);
    assert_eq!(principals[1]["principalId"], "bob");
    assert!((principals[1]["share"].as_f64().unwrap() - 0.25).abs() < 1e-9);
    let minutes = view["minutes"].as_array().unwrap();
    assert!(!minutes.is_empty() && minutes.len() <= 5);
    let by_minute: u64 = minutes.iter().map(|m| m["grants"].as_u64().unwrap()).sum();
    assert_eq!(by_minute, 4);

    // A principal key sees the totals and its own row, never another principal's ID.
    let own = server.get_json("/v1/workspaces/t/fairness", &bob);
    assert_eq!(own["totalGrants"], 4);
    let rows = own["principals"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["principalId"], "bob");
    assert!(!own.to_string().contains("alice"));

    // Another workspace's key: 403; a workspace without a profile: 404 no-profile.
    let outsider = server.new_key("elsewhere", "carol");
    let status = |key: &str, path: &str| server.get(path, key).send().unwrap().status();
    assert_eq!(status(&outsider, "/v1/workspaces/t/fairness"), 403);
    let missing = server
        .get("/v1/workspaces/none/fairness", &admin)
        .send()
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.json::<Value>().unwrap()["error"], "no-profile");
    // The window never reaches the metrics.
    assert!(!server.metrics_text().contains("alice"));
}
