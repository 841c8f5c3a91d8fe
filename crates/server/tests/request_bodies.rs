//! Every field of every request body, sent with a wrong type, a negative number, a huge number,
//! null, missing, and with unknown fields: always a typed answer below 500 (4xx wherever the
//! value is invalid), and the server keeps serving.

use serde_json::{json, Value};
use turnstile_testkit::{test_profile, TestServer};

#[derive(Clone, Copy, Debug)]
enum Mutation {
    WrongTypeString,
    WrongTypeObject,
    WrongTypeArray,
    Negative,
    Fraction,
    Huge,
    Overflow,
    Null,
    Missing,
    UnknownSibling,
}

const MUTATIONS: [Mutation; 10] = [
    Mutation::WrongTypeString,
    Mutation::WrongTypeObject,
    Mutation::WrongTypeArray,
    Mutation::Negative,
    Mutation::Fraction,
    Mutation::Huge,
    Mutation::Overflow,
    Mutation::Null,
    Mutation::Missing,
    Mutation::UnknownSibling,
];

struct Endpoint {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    admin: bool,
    base: Value,
    /// (JSON path, required, accepts any string)
    fields: Vec<(Vec<&'static str>, bool, bool)>,
}

fn endpoints() -> Vec<Endpoint> {
    let mut profile = test_profile();
    profile["providers"]["p"]["circuitBreaker"]["openMs"] = json!(1000);
    vec![
        Endpoint {
            name: "admission",
            method: "POST",
            path: "/v1/admissions",
            admin: false,
            base: json!({
                "providerId": "wide", "budgetId": "b",
                "estimate": {"tokens": 1, "costUsd": 0.01, "requestBytes": 1, "items": 1,
                              "attempts": 1, "batchSize": 1, "retainedWork": 1},
                "deadlineMs": 100
            }),
            fields: vec![
                (vec!["providerId"], true, true),
                (vec!["budgetId"], true, true),
                (vec!["estimate"], true, false),
                (vec!["deadlineMs"], false, false),
                (vec!["estimate", "tokens"], false, false),
                (vec!["estimate", "costUsd"], false, false),
                (vec!["estimate", "requestBytes"], false, false),
                (vec!["estimate", "items"], false, false),
                (vec!["estimate", "attempts"], false, false),
                (vec!["estimate", "batchSize"], false, false),
                (vec!["estimate", "retainedWork"], false, false),
            ],
        },
        Endpoint {
            name: "release",
            method: "POST",
            path: "/v1/leases/0123456789abcdef0123456789abcdef/release",
            admin: false,
            base: json!({"outcome": "retry-after", "retryAfterMs": 1,
                         "actualUsage": {"tokens": 1, "costUsd": 0.1}}),
            fields: vec![
                (vec!["outcome"], true, false),
                (vec!["retryAfterMs"], false, false),
                (vec!["actualUsage"], false, false),
                (vec!["actualUsage", "tokens"], false, false),
                (vec!["actualUsage", "costUsd"], false, false),
            ],
        },
        Endpoint {
            name: "retry-after",
            method: "POST",
            path: "/v1/providers/p/retry-after",
            admin: false,
            base: json!({"retryAfterMs": 1}),
            fields: vec![(vec!["retryAfterMs"], true, false)],
        },
        Endpoint {
            name: "keys",
            method: "POST",
            path: "/v1/workspaces/t/keys",
            admin: true,
            base: json!({"principalId": "fuzz"}),
            fields: vec![(vec!["principalId"], true, true)],
        },
        Endpoint {
            name: "profile",
            method: "PUT",
            path: "/v1/workspaces/fuzz/profiles/",
            admin: true,
            base: profile,
            fields: vec![
                (vec!["workspace"], true, false),
                (vec!["providers"], true, false),
                (vec!["principals"], false, false),
                (vec!["workspace", "concurrency"], true, false),
                (vec!["workspace", "requestsPerMinute"], false, false),
                (vec!["workspace", "maxQueueLength"], false, false),
                (vec!["workspace", "maxQueueWaitMs"], false, false),
                (vec!["providers", "p", "concurrency"], true, false),
                (vec!["providers", "wide", "tokensPerSecond"], false, false),
                (vec!["providers", "p", "circuitBreaker"], false, false),
                (
                    vec!["providers", "p", "circuitBreaker", "failureThreshold"],
                    true,
                    false,
                ),
                (
                    vec!["providers", "p", "circuitBreaker", "openMs"],
                    false,
                    false,
                ),
                (vec!["principals", "alice", "concurrency"], true, false),
                (vec!["principals", "alice", "maxCostUsd"], false, false),
                (
                    vec!["principals", "alice", "allowUnknownCost"],
                    false,
                    false,
                ),
                (vec!["principals", "alice", "maxBatchSize"], false, false),
            ],
        },
    ]
}

fn mutate(base: &Value, path: &[&str], mutation: Mutation) -> Value {
    let mut value = base.clone();
    let (last, parents) = path.split_last().unwrap();
    let mut parent = &mut value;
    for key in parents {
        parent = parent.get_mut(*key).unwrap();
    }
    let object = parent.as_object_mut().unwrap();
    match mutation {
        Mutation::WrongTypeString => {
            object.insert((*last).into(), json!("abc"));
        }
        Mutation::WrongTypeObject => {
            object.insert((*last).into(), json!({"x": 1}));
        }
        Mutation::WrongTypeArray => {
            object.insert((*last).into(), json!([1, 2]));
        }
        Mutation::Negative => {
            object.insert((*last).into(), json!(-1));
        }
        Mutation::Fraction => {
            object.insert((*last).into(), json!(1.5));
        }
        Mutation::Huge => {
            object.insert((*last).into(), json!(1e300));
        }
        Mutation::Overflow => {
            object.insert(
                (*last).into(),
                serde_json::from_str::<Value>("18446744073709551616").unwrap(),
            );
        }
        Mutation::Null => {
            object.insert((*last).into(), Value::Null);
        }
        Mutation::Missing => {
            object.remove(*last);
        }
        Mutation::UnknownSibling => {
            object.insert("unknownField".into(), json!(1));
        }
    }
    value
}

/// Whether this mutation makes the body invalid for sure (so the answer must be 4xx).
fn must_refuse(mutation: Mutation, required: bool, free_string: bool) -> bool {
    match mutation {
        Mutation::WrongTypeObject | Mutation::WrongTypeArray | Mutation::UnknownSibling => true,
        Mutation::WrongTypeString => !free_string,
        Mutation::Negative => true,
        Mutation::Missing => required,
        // Valid in some fields (a fractional or huge cost, a null optional value).
        Mutation::Fraction | Mutation::Huge | Mutation::Overflow | Mutation::Null => false,
    }
}

#[test]
fn every_field_of_every_body_gets_a_typed_4xx_never_a_5xx() {
    let server = TestServer::start_fresh(|c| {
        c.admission.max_wait_ms = 1000;
        c.admission.default_wait_ms = 500;
    });
    let admin = server.admin();
    server.register_test_profile();
    let alice = server.new_key("t", "alice");

    let mut cases = 0;
    let mut version = 0;
    for endpoint in endpoints() {
        let key = if endpoint.admin { &admin } else { &alice };
        let mut bodies: Vec<(String, Vec<u8>, bool)> = vec![
            ("not json".into(), b"{".to_vec(), true),
            ("empty".into(), Vec::new(), true),
            ("array".into(), b"[]".to_vec(), true),
            (
                "positional".into(),
                b"[\"wide\", \"b\", {}, 10]".to_vec(),
                true,
            ),
            ("null".into(), b"null".to_vec(), true),
            ("string".into(), b"\"x\"".to_vec(), true),
            (
                "trailing".into(),
                format!("{} x", endpoint.base).into_bytes(),
                true,
            ),
            (
                "unknown top-level".into(),
                mutate(&endpoint.base, &["zzz"], Mutation::UnknownSibling)
                    .to_string()
                    .into_bytes(),
                true,
            ),
        ];
        for (path, required, free_string) in &endpoint.fields {
            for mutation in MUTATIONS {
                let body = mutate(&endpoint.base, path, mutation);
                bodies.push((
                    format!("{} {:?}", path.join("."), mutation),
                    body.to_string().into_bytes(),
                    must_refuse(mutation, *required, *free_string),
                ));
            }
        }
        for (label, body, refuse) in bodies {
            cases += 1;
            version += 1;
            let path = if endpoint.method == "PUT" {
                format!("{}v{version}", endpoint.path)
            } else {
                endpoint.path.to_owned()
            };
            let request = match endpoint.method {
                "PUT" => server.client.put(server.url(&path)),
                _ => server.client.post(server.url(&path)),
            };
            let response = request
                .bearer_auth(key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .unwrap();
            let status = response.status().as_u16();
            let text = response.text().unwrap();
            let context = format!("{} / {label}: {status} {text}", endpoint.name);
            assert!(status < 500, "5xx for {context}");
            if refuse {
                assert!((400..500).contains(&status), "expected 4xx for {context}");
            }
            if status >= 400 {
                let typed: Value =
                    serde_json::from_str(&text).unwrap_or_else(|_| panic!("untyped {context}"));
                assert!(
                    typed.get("error").is_some() || typed.get("reason").is_some(),
                    "untyped {context}"
                );
            }
            if status == 200 && endpoint.name == "admission" {
                let lease: Value = serde_json::from_str(&text).unwrap();
                let id = lease["leaseId"].as_str().unwrap();
                assert_eq!(
                    server
                        .release(&alice, id, &json!({"outcome": "none"}))
                        .status(),
                    200
                );
            }
        }
    }
    assert!(cases > 300, "{cases} cases");

    // Still serving, with nothing left behind.
    assert_eq!(server.status_of_get("/healthz"), 200);
    let ok = server.acquire(
        &alice,
        &json!({"providerId": "wide", "budgetId": "after", "estimate": {}}),
    );
    assert_eq!(ok.status(), 200);
    let snapshot = server.snapshot("t");
    assert_eq!(snapshot["queued"], 0);
    assert_eq!(snapshot["active"], 1);
}
