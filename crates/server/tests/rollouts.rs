//! Rollouts over real sockets (issue 33, items 1 and 4): the service in process (`TestServer`),
//! a real HTTP client. A shadow with a tighter concurrency reports the arrivals it would have
//! queued or refused while every real answer is the one the service gives without it; promote
//! and abort are audited with their approval; a canary's evidence names the candidate; typed
//! refusals for a second rollout, a bad mode or share, a PUT while one runs; a restart ends a
//! running rollout in the audit log.

use serde_json::{json, Value};
use turnstile_testkit::{test_profile, TestServer};

const ROLLOUTS: &str = "/v1/workspaces/t/rollouts";

/// The test profile with the `wide` lane's concurrency at `n`.
fn wide(n: u64) -> Value {
    let mut profile = test_profile();
    profile["providers"]["wide"]["concurrency"] = json!(n);
    profile
}

fn post(server: &TestServer, key: &str, path: &str, body: &Value) -> (u16, Value) {
    let response = server.post(path, key).json(body).send().unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn get(server: &TestServer, key: &str, path: &str) -> (u16, Value) {
    let response = server.get(path, key).send().unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

/// Four arrivals on `wide` (two of alice, two of bob) held, then released, then a fifth:
/// each answer's (status, reason, revision).
fn arrivals(server: &TestServer, alice: &str, bob: &str) -> Vec<(u16, Value, Value)> {
    let body = json!({"providerId": "wide", "budgetId": "b", "estimate": {"tokens": 1}, "deadlineMs": 1000});
    let mut answers = Vec::new();
    let mut held = Vec::new();
    for key in [alice, bob, alice, bob] {
        let response = server.acquire(key, &body);
        let status = response.status().as_u16();
        let answer: Value = response.json().unwrap();
        answers.push((
            status,
            answer["evidence"]["reason"].clone(),
            answer["evidence"]["profileRevision"].clone(),
        ));
        if let Some(lease) = answer["leaseId"].as_str() {
            held.push((key.to_owned(), lease.to_owned()));
        }
    }
    for (key, lease) in held {
        server.assert_released(&key, &lease, "success");
    }
    let response = server.acquire(alice, &body);
    let status = response.status().as_u16();
    let answer: Value = response.json().unwrap();
    server.assert_released(alice, answer["leaseId"].as_str().unwrap(), "success");
    answers.push((
        status,
        answer["evidence"]["reason"].clone(),
        answer["evidence"]["profileRevision"].clone(),
    ));
    answers
}

#[test]
fn a_shadow_with_a_tighter_concurrency_counts_what_it_would_have_queued_and_changes_no_answer() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    assert_eq!(
        server.put_profile(&admin, "t", "v1", &wide(4)).status(),
        201
    );
    let (alice, bob) = (server.new_key("t", "alice"), server.new_key("t", "bob"));
    // Without a rollout: what the service answers.
    let without = arrivals(&server, &alice, &bob);
    assert!(
        without.iter().all(|(status, _, _)| *status == 200),
        "{without:?}"
    );

    let (status, started) = post(
        &server,
        &admin,
        ROLLOUTS,
        &json!({"revision": "v2", "profile": wide(2), "mode": "shadow",
                "note": "halve wide", "approvedBy": "Dana"}),
    );
    assert_eq!(status, 201, "{started}");
    assert_eq!(
        (started["revision"].as_str(), started["mode"].as_str()),
        (Some("v2"), Some("shadow"))
    );
    assert!(started["canaryShare"].is_null());
    assert_eq!(started["decisions"]["compared"], 0);
    // The candidate is registered, not current.
    let history = server.get_json("/v1/workspaces/t/profiles", &admin)["records"].clone();
    assert_eq!(
        history.as_array().unwrap().last().unwrap()["profileVersion"],
        "v1"
    );

    let with = arrivals(&server, &alice, &bob);
    assert_eq!(with, without, "a shadow changes no answer");
    let (status, current) = get(&server, &alice, &format!("{ROLLOUTS}/current"));
    assert_eq!(
        status, 200,
        "a principal of the workspace reads the counts: {current}"
    );
    let decisions = &current["decisions"];
    assert_eq!(decisions["compared"], 5, "{current}");
    assert_eq!(decisions["agree"], 3, "{current}");
    assert_eq!(
        decisions["differ"], 2,
        "the 3rd and 4th held arrivals: {current}"
    );
    let only = &decisions["candidateOnly"];
    assert_eq!(only["admit"], 0);
    assert_eq!(
        only["queue"].as_u64().unwrap() + only["refuse"].as_u64().unwrap(),
        2
    );
    assert_eq!(decisions["byReason"]["concurrency"], 2, "{current}");
    assert!(
        !current.to_string().contains("alice"),
        "counts only: {current}"
    );

    // Abort: audited, the current revision stays.
    let (status, aborted) = post(
        &server,
        &admin,
        &format!("{ROLLOUTS}/current/abort"),
        &json!({"note": "enough data"}),
    );
    assert_eq!(status, 200, "{aborted}");
    assert_eq!(aborted["event"], "aborted");
    assert_eq!(aborted["decisions"]["compared"], 5);
    assert_eq!(
        (aborted["note"].as_str(), aborted["approvedBy"].as_str()),
        (Some("enough data"), None)
    );
    assert!(aborted["actorKeyId"].as_str().unwrap().starts_with("key_"));
    assert_eq!(
        get(&server, &admin, &format!("{ROLLOUTS}/current")).1["error"],
        "no-rollout"
    );
    let records = server.get_json(ROLLOUTS, &admin)["records"].clone();
    let events: Vec<(&str, &str)> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["event"].as_str().unwrap(),
                r["approvedBy"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(events, [("started", "Dana"), ("aborted", "-")]);
    let history = server.get_json("/v1/workspaces/t/profiles", &admin)["records"].clone();
    assert_eq!(
        history.as_array().unwrap().last().unwrap()["profileVersion"],
        "v1"
    );
}

#[test]
fn promote_makes_the_candidate_current_with_its_approval_on_record() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    assert_eq!(
        server.put_profile(&admin, "t", "v1", &wide(4)).status(),
        201
    );
    let start = json!({"revision": "v2", "profile": wide(2), "mode": "canary", "canaryShare": 0.5});
    assert_eq!(post(&server, &admin, ROLLOUTS, &start).0, 201);

    // One at a time; no registration while it runs.
    let (status, second) = post(
        &server,
        &admin,
        ROLLOUTS,
        &json!({"revision": "v3", "profile": wide(3), "mode": "shadow"}),
    );
    assert_eq!(
        (status, second["error"].as_str()),
        (409, Some("rollout-running")),
        "{second}"
    );
    let put = server.put_profile(&admin, "t", "v3", &wide(3));
    assert_eq!(put.status(), 409);
    assert_eq!(put.json::<Value>().unwrap()["error"], "rollout-running");

    let (status, promoted) = post(
        &server,
        &admin,
        &format!("{ROLLOUTS}/current/promote"),
        &json!({"note": "canary clean for a day", "approvedBy": "CAB-17"}),
    );
    assert_eq!(status, 200, "{promoted}");
    assert_eq!(
        (promoted["event"].as_str(), promoted["revision"].as_str()),
        (Some("promoted"), Some("v2"))
    );
    assert_eq!(promoted["canaryShare"], 0.5);
    // The candidate is the current revision, its change record carries the same approval.
    let history = server.get_json("/v1/workspaces/t/profiles", &admin)["records"].clone();
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["kind"].as_str(), last["profileVersion"].as_str()),
        (Some("change"), Some("v2")),
        "{last}"
    );
    assert_eq!(
        (last["note"].as_str(), last["approvedBy"].as_str()),
        (Some("canary clean for a day"), Some("CAB-17"))
    );
    assert_eq!(last["actorKeyId"], promoted["actorKeyId"]);
    assert_eq!(
        post(
            &server,
            &admin,
            &format!("{ROLLOUTS}/current/promote"),
            &json!({})
        )
        .1["error"],
        "no-rollout"
    );
}

#[test]
fn bad_rollout_requests_are_refused_typed_and_change_nothing() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    let (status, none) = post(
        &server,
        &admin,
        ROLLOUTS,
        &json!({"revision": "v2", "profile": wide(2), "mode": "shadow"}),
    );
    assert_eq!(
        (status, none["error"].as_str()),
        (404, Some("no-profile")),
        "{none}"
    );
    assert_eq!(
        server.put_profile(&admin, "t", "v1", &wide(4)).status(),
        201
    );
    let cases = [
        (
            json!({"revision": "v2", "profile": wide(2), "mode": "canary"}),
            "canaryShare",
        ),
        (
            json!({"revision": "v2", "profile": wide(2), "mode": "canary", "canaryShare": 1.5}),
            "canaryShare",
        ),
        (
            json!({"revision": "v2", "profile": wide(2), "mode": "shadow", "canaryShare": 0.1}),
            "canaryShare",
        ),
        (
            json!({"revision": "v2", "profile": wide(2), "mode": "blue-green"}),
            "mode",
        ),
        (
            json!({"revision": "v 2", "profile": wide(2), "mode": "shadow"}),
            "revision",
        ),
        (
            json!({"revision": "v1", "profile": wide(4), "mode": "shadow"}),
            "revision",
        ),
        (
            json!({"revision": "v2", "profile": wide(2), "mode": "shadow", "approvedBy": ""}),
            "approvedBy",
        ),
        (
            json!({"revision": "v2", "profile": wide(2), "mode": "shadow", "extra": 1}),
            "extra",
        ),
    ];
    for (body, field) in cases {
        let (status, error) = post(&server, &admin, ROLLOUTS, &body);
        assert_eq!(status, 422, "{body} → {error}");
        assert_eq!(
            (error["error"].as_str(), error["field"].as_str()),
            (Some("invalid-request"), Some(field)),
            "{body}"
        );
    }
    // A bad candidate profile: named from the body.
    let mut odd = wide(2);
    odd["zz"] = json!(1);
    let (status, error) = post(
        &server,
        &admin,
        ROLLOUTS,
        &json!({"revision": "v2", "profile": odd, "mode": "shadow"}),
    );
    assert_eq!(
        (status, error["field"].as_str()),
        (422, Some("profile.zz")),
        "{error}"
    );
    let alice = server.new_key("t", "alice");
    let (status, _) = post(
        &server,
        &alice,
        ROLLOUTS,
        &json!({"revision": "v2", "profile": wide(2), "mode": "shadow"}),
    );
    assert_eq!(status, 403, "a principal key may not start one");
    assert_eq!(get(&server, &admin, &format!("{ROLLOUTS}/current")).0, 404);
    assert!(server.get_json(ROLLOUTS, &admin)["records"]
        .as_array()
        .unwrap()
        .is_empty());
    let (status, error) = post(
        &server,
        &admin,
        &format!("{ROLLOUTS}/current/abort"),
        &json!({}),
    );
    assert_eq!((status, error["error"].as_str()), (404, Some("no-rollout")));
}

#[test]
fn a_canary_principals_evidence_names_the_candidate_revision() {
    let server = TestServer::start_fresh(|_| {});
    let admin = server.admin();
    assert_eq!(
        server.put_profile(&admin, "t", "v1", &wide(4)).status(),
        201
    );
    let alice = server.new_key("t", "alice");
    let body = json!({"providerId": "wide", "budgetId": "b", "estimate": {"tokens": 1}, "deadlineMs": 1000});
    let revision_of = |server: &TestServer| {
        let answer: Value = server.acquire(&alice, &body).json().unwrap();
        server.assert_released(&alice, answer["leaseId"].as_str().unwrap(), "success");
        answer["evidence"]["profileRevision"].clone()
    };
    // The current revision decided: the answer names no candidate.
    assert_eq!(revision_of(&server), Value::Null);
    // A share of 1 puts every principal under the candidate; a share of 0 none.
    let start = json!({"revision": "v2", "profile": wide(2), "mode": "canary", "canaryShare": 1.0});
    assert_eq!(post(&server, &admin, ROLLOUTS, &start).0, 201);
    assert_eq!(revision_of(&server), "v2");
    // A refusal the candidate decided names it too (its tighter limit of 2 on `wide`).
    let held: Vec<String> = (0..2)
        .map(|_| server.granted_lease(&alice, &body))
        .collect();
    let refused = server.acquire(
        &alice,
        &json!({"providerId": "wide", "budgetId": "b", "estimate": {"tokens": 1}, "deadlineMs": 0}),
    );
    assert_eq!(refused.status(), 429);
    let refused: Value = refused.json().unwrap();
    assert_eq!(refused["evidence"]["profileRevision"], "v2", "{refused}");
    for lease in held {
        server.assert_released(&alice, &lease, "success");
    }
    assert_eq!(
        post(
            &server,
            &admin,
            &format!("{ROLLOUTS}/current/abort"),
            &json!({})
        )
        .0,
        200
    );
    assert_eq!(revision_of(&server), Value::Null);
    let start = json!({"revision": "v3", "profile": wide(3), "mode": "canary", "canaryShare": 0.0});
    assert_eq!(post(&server, &admin, ROLLOUTS, &start).0, 201);
    assert_eq!(revision_of(&server), Value::Null);
}

#[test]
fn a_restart_ends_a_running_rollout_in_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), |_| {});
    let admin = server.admin();
    assert_eq!(
        server.put_profile(&admin, "t", "v1", &wide(4)).status(),
        201
    );
    let start =
        json!({"revision": "v2", "profile": wide(2), "mode": "shadow", "approvedBy": "Dana"});
    assert_eq!(post(&server, &admin, ROLLOUTS, &start).0, 201);
    server.stop();
    let restarted = TestServer::start(dir.path(), |_| {});
    assert_eq!(
        get(&restarted, &admin, &format!("{ROLLOUTS}/current")).1["error"],
        "no-rollout"
    );
    let records = restarted.get_json(ROLLOUTS, &admin)["records"].clone();
    let last = records.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["event"].as_str(), last["revision"].as_str()),
        (Some("aborted"), Some("v2")),
        "{records}"
    );
    assert!(last["actorKeyId"].is_null() && last["note"].as_str().unwrap().contains("restart"));
    // The current revision is still v1, and a new rollout may start.
    let history = restarted.get_json("/v1/workspaces/t/profiles", &admin)["records"].clone();
    assert_eq!(
        history.as_array().unwrap().last().unwrap()["profileVersion"],
        "v1"
    );
    assert_eq!(post(&restarted, &admin, ROLLOUTS, &start).0, 201);
}
