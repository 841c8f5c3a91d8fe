//! Permissions follow the profile (issue 17): every call, made by every role, answers as the
//! one role table (`turnstile_server::access`) says.

use reqwest::blocking::RequestBuilder;
use serde_json::{json, Value};
use turnstile_server::{access, Access, Operation, Role};
use turnstile_testkit::{test_profile, TestServer};

fn call(server: &TestServer, key: &str, operation: Operation) -> RequestBuilder {
    let c = &server.client;
    let url = |p: &str| server.url(p);
    let lease = "/v1/leases/0123456789abcdef0123456789abcdef";
    let builder = match operation {
        Operation::RegisterProfile => c
            .put(url("/v1/workspaces/t/profiles/v1"))
            .json(&test_profile()),
        Operation::ReadProfiles => c.get(url("/v1/workspaces/t/profiles")),
        Operation::ReadBreakers => c.get(url("/v1/workspaces/t/breakers")),
        Operation::ReadSnapshot => c.get(url("/v1/workspaces/t/snapshot")),
        Operation::CreateKey => c
            .post(url("/v1/workspaces/t/keys"))
            .json(&json!({"principalId": "zed"})),
        Operation::ListKeys => c.get(url("/v1/workspaces/t/keys")),
        Operation::RevokeKey => c.delete(url("/v1/workspaces/t/keys/key_0000000000000000")),
        Operation::Acquire => c.post(url("/v1/admissions")).json(
            &json!({"providerId": "wide", "budgetId": "perm", "estimate": {}, "deadlineMs": 0}),
        ),
        Operation::ReleaseLease => c
            .post(url(&format!("{lease}/release")))
            .json(&json!({"outcome": "success"})),
        Operation::HeartbeatLease => c.post(url(&format!("{lease}/heartbeat"))),
        Operation::ReleaseBudget => c.post(url("/v1/budgets/perm/release")),
        Operation::PauseProvider => c
            .post(url("/v1/providers/wide/retry-after"))
            .json(&json!({"retryAfterMs": 1})),
        Operation::ReadProfileRevision => c.get(url("/v1/workspaces/t/profiles/v1")),
        // One event, so the stream ends and the body can be read.
        Operation::WatchEvents => c.get(url("/v1/workspaces/t/events?maxEvents=1")),
        Operation::ReadFairness => c.get(url("/v1/workspaces/t/fairness")),
        Operation::ListWorkspaces => c.get(url("/v1/workspaces")),
    };
    builder.bearer_auth(key)
}

#[test]
fn every_call_answers_as_the_role_table_says() {
    let server = TestServer::start_fresh(|_| {});
    server.register_test_profile();
    let named = server.new_key("t", "alice");
    // A valid key of a principal the profile does not name.
    let unnamed = server.new_key("t", "mallory");
    for operation in Operation::ALL {
        for (role, key) in [
            (Role::Admin, server.admin()),
            (Role::Principal, named.clone()),
            (Role::UnnamedPrincipal, unnamed.clone()),
        ] {
            let response = call(&server, &key, operation).send().unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().unwrap_or(Value::Null);
            let denied = access(role, operation) == Access::Denied;
            assert_eq!(
                status == 403,
                denied,
                "{role:?} {operation:?}: {status} {body}"
            );
            assert!(status < 500, "{role:?} {operation:?}: {status} {body}");
            if denied && !(role == Role::UnnamedPrincipal && operation == Operation::Acquire) {
                assert_eq!(body["error"], "forbidden", "{role:?} {operation:?}");
            }
        }
    }
    // The unnamed principal's admission is the core's typed `disabled` rejection.
    let refused = call(&server, &unnamed, Operation::Acquire).send().unwrap();
    assert_eq!(refused.json::<Value>().unwrap()["reason"], "disabled");

    // Workspace-scoped reads are for the own workspace only.
    let outsider = server.new_key("elsewhere", "carol");
    for operation in [
        Operation::ReadProfiles,
        Operation::ReadBreakers,
        Operation::ReadSnapshot,
        Operation::WatchEvents,
        Operation::ReadFairness,
    ] {
        assert_eq!(access(Role::Principal, operation), Access::OwnWorkspace);
        let status = call(&server, &outsider, operation).send().unwrap().status();
        assert_eq!(status, 403, "{operation:?}");
    }
}

#[test]
fn a_disabled_principal_cannot_pause_providers_or_reset_an_exhausted_budget() {
    let server = TestServer::start_fresh(|_| {});
    server.register_test_profile();
    let alice = server.new_key("t", "alice");
    let mallory = server.new_key("t", "mallory");
    // alice exhausts her cost budget (maxCostUsd 1) on invocation `spent`.
    let body = json!({"providerId": "wide", "budgetId": "spent", "estimate": {"costUsd": 1.0}, "deadlineMs": 0});
    let lease_id = &server.granted_lease(&alice, &body);
    server.assert_released(&alice, lease_id, "success");
    let exhausted = server.acquire(&alice, &body);
    assert_eq!(exhausted.status(), 422);
    assert_eq!(exhausted.json::<Value>().unwrap()["reason"], "cost");

    let reset = server
        .post("/v1/budgets/spent/release", &mallory)
        .send()
        .unwrap();
    assert_eq!(reset.status(), 403);
    assert_eq!(reset.json::<Value>().unwrap()["error"], "forbidden");
    let pause = server
        .post("/v1/providers/wide/retry-after", &mallory)
        .json(&json!({"retryAfterMs": 3_600_000}))
        .send()
        .unwrap();
    assert_eq!(pause.status(), 403);

    // Nothing changed: the budget is still exhausted and the provider is not paused.
    let still = server.acquire(&alice, &body);
    assert_eq!(still.json::<Value>().unwrap()["reason"], "cost");
    let other = json!({"providerId": "wide", "budgetId": "fresh", "estimate": {}, "deadlineMs": 0});
    assert_eq!(server.acquire(&alice, &other).status(), 200);
}
