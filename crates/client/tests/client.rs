//! The Rust client against a real service (testkit's in-process `TestServer` on loopback):
//! grants, refusals, releases with breaker transitions, heartbeats past the TTL, release on
//! drop, a dropped acquire forgotten by the service, and the wire types reading back exactly
//! what the service writes.

use std::time::Duration;

use serde_json::{json, Value};
use turnstile_admission::{
    ActualUsage, BreakerState, Decision, Estimate, Evidence, Outcome, Reason,
};
use turnstile_client::{AcquireRequest, Client, ClientError, WorkspaceSnapshot};
use turnstile_testkit::{eventually, runtime, TestServer, WORKSPACE};

fn request(provider: &str, deadline_ms: u64) -> AcquireRequest {
    AcquireRequest {
        provider_id: provider.into(),
        budget_id: "inv-1".into(),
        estimate: Estimate {
            tokens: Some(10.0),
            ..Estimate::default()
        },
        deadline_ms: Some(deadline_ms),
    }
}

/// Polls the workspace's snapshot until `done` holds (the service settles a dropped lease or
/// request on its own tasks).
async fn until(client: &Client, done: impl Fn(&WorkspaceSnapshot) -> bool) -> WorkspaceSnapshot {
    eventually("the service's snapshot settling", || async {
        let snapshot = client.snapshot(WORKSPACE).await.expect("a snapshot");
        done(&snapshot).then_some(snapshot)
    })
    .await
}

#[test]
fn a_bad_url_or_key_is_a_typed_error() {
    for url in [
        "not a url",
        "ftp://host",
        "http://",
        "unix:/tmp/sock",
        "http://h/?q=1",
    ] {
        assert!(
            matches!(Client::new(url, "k"), Err(ClientError::InvalidUrl { .. })),
            "{url}"
        );
    }
    assert!(matches!(
        Client::new("http://127.0.0.1:1", ""),
        Err(ClientError::InvalidKey)
    ));
    assert!(matches!(
        Client::new("http://127.0.0.1:1", "a key\n"),
        Err(ClientError::InvalidKey)
    ));
    let client = Client::new("http://127.0.0.1:1/prefix/", "secret-key").expect("a client");
    assert!(!format!("{client:?}").contains("secret-key"));
}

#[test]
fn grants_refusals_and_releases_read_what_the_service_wrote() {
    let server = TestServer::start_fresh(|_| {});
    let (alice, _) = server.register_test_profile_with_keys();
    let other = server.new_key("empty", "carol");
    runtime().block_on(async {
        let client = Client::new(&server.base, &alice).expect("a client");
        let info = client.workspace().await.expect("the key's workspace");
        assert_eq!(
            (info.workspace_id.as_str(), info.profile_version.as_deref()),
            (WORKSPACE, Some("v1"))
        );
        let snapshot = client.snapshot(WORKSPACE).await.expect("a snapshot");
        assert!(["p", "zero", "wide"]
            .iter()
            .all(|p| snapshot.core.providers.contains_key(*p)));

        let lease = client.acquire(request("p", 1_000)).await.expect("a grant");
        assert_eq!(lease.evidence().decision, Decision::Admit);
        assert_eq!(lease.evidence().estimated_tokens, Some(10));
        assert!(lease.ttl_ms() > 0 && !lease.lease_id().is_empty());
        // A failure opens p's breaker (threshold 1): the release answers the transition.
        let transitions = lease
            .release(Outcome::Failure, ActualUsage::none().tokens(12))
            .await
            .expect("released");
        assert_eq!(transitions.len(), 1);
        assert_eq!(
            (transitions[0].provider_id.as_str(), transitions[0].to),
            ("p", BreakerState::Open)
        );

        match client.acquire(request("p", 1_000)).await {
            Err(ClientError::Rejected {
                reason,
                retryable,
                retry_after_ms,
                evidence,
            }) => {
                assert_eq!(reason, Reason::CircuitOpen);
                assert_eq!(evidence.decision, Decision::Reject);
                assert_eq!(evidence.breaker_state, BreakerState::Open);
                assert!(retryable && retry_after_ms.is_some_and(|ms| ms > 0));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(client
            .release_budget("inv-1")
            .await
            .expect("a budget release"));
        let until = client.retry_after("wide", 1_000).await.expect("a pause");
        assert!(until > 0);

        let stranger = Client::new(&server.base, "tsk_not_a_key").expect("a client");
        assert!(matches!(
            stranger.workspace().await,
            Err(ClientError::Unauthorized)
        ));
        let no_profile = Client::new(&server.base, &other).expect("a client");
        let info = no_profile.workspace().await.expect("its workspace");
        assert_eq!(info.profile_version, None);
        let missing = no_profile
            .acquire(request("p", 100))
            .await
            .expect_err("no profile");
        assert_eq!(missing.not_found_code(), Some("no-profile"));
    });
}

#[test]
fn the_evidence_types_read_back_every_field_the_service_wrote() {
    let server = TestServer::start_fresh(|_| {});
    let (alice, _) = server.register_test_profile_with_keys();
    // A grant written by hand (lease_answer.rs), a refusal and a release with a transition
    // written by serde: each reads into the core's types and writes back the same JSON.
    let grant: Value = server
        .acquire(&alice, &turnstile_testkit::admission("p"))
        .json()
        .unwrap();
    let evidence: Evidence = serde_json::from_value(grant["evidence"].clone()).unwrap();
    assert_eq!(serde_json::to_value(&evidence).unwrap(), grant["evidence"]);
    let lease = grant["leaseId"].as_str().unwrap();
    let released: Value = server
        .release(&alice, lease, &json!({"outcome": "failure"}))
        .json()
        .unwrap();
    let transitions: Vec<turnstile_admission::BreakerTransition> =
        serde_json::from_value(released["breakerTransitions"].clone()).unwrap();
    assert_eq!(transitions.len(), 1);
    assert_eq!(
        serde_json::to_value(&transitions).unwrap(),
        released["breakerTransitions"]
    );
    let refusal: Value = server
        .acquire(&alice, &turnstile_testkit::admission("p"))
        .json()
        .unwrap();
    let read: turnstile_admission::Rejection = serde_json::from_value(refusal.clone()).unwrap();
    assert_eq!(serde_json::to_value(&read).unwrap(), refusal);
    // The outcome the client sends is what the service reads: retry-after pauses the lane.
    runtime().block_on(async {
        let client = Client::new(&server.base, &alice).expect("a client");
        let lease = client
            .acquire(request("wide", 1_000))
            .await
            .expect("a grant");
        lease
            .release(
                Outcome::RetryAfter {
                    retry_after_ms: 60_000,
                },
                ActualUsage::none(),
            )
            .await
            .expect("released");
        let snapshot = client.snapshot(WORKSPACE).await.expect("a snapshot");
        assert!(snapshot.core.providers["wide"].paused_until.is_some());
    });
}

#[test]
fn heartbeats_keep_a_lease_past_its_ttl_and_a_dropped_lease_is_released() {
    let server = TestServer::start_fresh(|config| config.leases.ttl_ms = 300);
    let (alice, _) = server.register_test_profile_with_keys();
    runtime().block_on(async {
        let client = Client::new(&server.base, &alice).expect("a client");
        let lease = client.acquire(request("p", 1_000)).await.expect("a grant");
        assert_eq!(lease.ttl_ms(), 300);
        // Four TTLs: without heartbeats the service would have reclaimed it.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        assert!(lease.heartbeats() >= 3, "{} heartbeats", lease.heartbeats());
        assert!(!lease.lost());
        lease
            .release(Outcome::Success, ActualUsage::none())
            .await
            .expect("still held");

        let lease = client.acquire(request("p", 1_000)).await.expect("a grant");
        assert_eq!(until(&client, |s| s.leases == 1).await.core.active, 1);
        drop(lease);
        let settled = until(&client, |s| s.leases == 0).await;
        assert_eq!(settled.core.active, 0);
    });
}

#[test]
fn a_dropped_acquire_leaves_no_waiter_behind() {
    let server = TestServer::start_fresh(|_| {});
    let (alice, bob) = server.register_test_profile_with_keys();
    // p has one permit: bob holds it, alice's acquire queues.
    let held = server.granted_lease(&bob, &turnstile_testkit::admission("p"));
    runtime().block_on(async {
        let client = Client::new(&server.base, &alice).expect("a client");
        let waiting = client.acquire(request("p", 10_000));
        let watch = async {
            until(&client, |s| s.waiters == 1 && s.core.queued == 1).await;
        };
        tokio::select! {
            answer = waiting => panic!("the acquire should wait, got {answer:?}"),
            () = watch => {}
        }
        // The select dropped the acquire: the service forgets the waiter.
        let settled = until(&client, |s| s.waiters == 0).await;
        assert_eq!(settled.core.queued, 0);
    });
    server.assert_released(&bob, &held, "success");
}

#[test]
fn a_refused_try_release_keeps_the_lease_and_a_second_release_asks_nobody() {
    let server = TestServer::start_fresh(|config| config.admission.max_retry_after_ms = 1_000);
    let (alice, _) = server.register_test_profile_with_keys();
    runtime().block_on(async {
        let client = Client::new(&server.base, &alice).expect("a client");
        let mut lease = client
            .acquire(request("wide", 1_000))
            .await
            .expect("a grant");
        // More tokens than JSON can carry exactly: refused naming the field.
        let huge = ActualUsage::none().tokens(u64::MAX);
        match lease.try_release(Outcome::Success, huge).await {
            Err(ClientError::Status {
                status: 422, field, ..
            }) => {
                assert_eq!(field.as_deref(), Some("actualUsage.tokens"))
            }
            other => panic!("expected a 422, got {other:?}"),
        }
        assert_eq!(
            client.snapshot(WORKSPACE).await.expect("a snapshot").leases,
            1
        );
        lease
            .try_release(Outcome::Success, ActualUsage::none())
            .await
            .expect("released");
        let again = lease
            .try_release(Outcome::Success, ActualUsage::none())
            .await;
        assert_eq!(
            again.expect_err("released once").not_found_code(),
            Some("unknown-lease")
        );
        drop(lease);
        assert_eq!(until(&client, |s| s.leases == 0).await.core.active, 0);
    });
}

#[test]
fn a_deadline_or_retry_after_above_the_services_maximum_is_sent_at_the_maximum_and_remembered() {
    let server = TestServer::start_fresh(|config| {
        config.admission.max_wait_ms = 2_000;
        config.admission.default_wait_ms = 1_000;
        config.admission.max_retry_after_ms = 1_000;
    });
    let (alice, _) = server.register_test_profile_with_keys();
    // The service's answer names the bound as a number.
    let raw: Value = server
        .acquire(
            &alice,
            &json!({"providerId": "wide", "budgetId": "b", "estimate": {}, "deadlineMs": 10_000}),
        )
        .json()
        .unwrap();
    assert_eq!(
        (raw["field"].as_str(), raw["maximum"].as_u64()),
        (Some("deadlineMs"), Some(2_000)),
        "{raw}"
    );
    runtime().block_on(async {
        let client = Client::new(&server.base, &alice).expect("a client");

        // An hour's deadline: admitted (asked again at 2 s, then sent at 2 s, by clones too).
        let lease = client
            .acquire(request("wide", 3_600_000))
            .await
            .expect("a grant");
        let clone = client.clone();
        let second = clone
            .acquire(request("wide", 3_600_000))
            .await
            .expect("a grant");
        // A provider's hour of Retry-After pauses the lane for the service's maximum.
        lease
            .release(
                Outcome::RetryAfter {
                    retry_after_ms: 3_600_000,
                },
                ActualUsage::none(),
            )
            .await
            .expect("released at the maximum");
        second
            .release(Outcome::Success, ActualUsage::none())
            .await
            .expect("released");
        let paused_until = client
            .retry_after("wide", 3_600_000)
            .await
            .expect("a pause");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(paused_until <= now + 1_000, "{paused_until} vs {now}");
        assert_eq!(until(&client, |s| s.leases == 0).await.core.active, 0);
    });
}
