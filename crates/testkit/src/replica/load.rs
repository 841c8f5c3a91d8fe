//! Load on replicas: clients of principal `client` that are admitted, call the fake upstream
//! and release ([`drive_clients`]), and the calls they make.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::deployment::Replica;
use crate::raw_http::{http, post_text};

/// The scripted fake upstream (`turnstile_proxy::fake`), in this test process; `GET /_stats`
/// answers its maximum in-flight count.
pub struct FakeUpstream {
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

/// Starts the fake upstream on a free port (it lives until the test process ends).
pub fn fake_upstream() -> FakeUpstream {
    FakeUpstream {
        addr: turnstile_proxy::FakeUpstream::spawn_thread()
            .addr
            .to_string(),
    }
}

/// One chat completion from the fake upstream (its first byte after 15 ms).
pub fn call_upstream(addr: &str) {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let answer = post_text(
        addr,
        "/v1/chat/completions",
        &[("x-fake-script", "first-byte-ms=15")],
        body,
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// A small xorshift: the clients' random choices, seeded per client.
pub fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Principal `client`'s admission of one call to `provider` (budget `run`, 1 token, $0.01).
pub fn acquire(replica: &Replica, provider: &str, deadline_ms: u64) -> (u16, Value) {
    http(
        &replica.service.addr,
        "POST",
        "/v1/admissions",
        replica.key("client"),
        Some(&json!({
            "providerId": provider,
            "budgetId": "run",
            "estimate": {"tokens": 1, "costUsd": 0.01},
            "deadlineMs": deadline_ms,
        })),
    )
    .expect("the replica answers")
}

/// Releases `lease` (outcome `success`) on the replica that granted it.
pub fn release(replica: &Replica, lease: &str) {
    let (status, answer) = http(
        &replica.service.addr,
        "POST",
        &format!("/v1/leases/{lease}/release"),
        replica.key("client"),
        Some(&json!({"outcome": "success"})),
    )
    .expect("the replica answers");
    assert_eq!(status, 200, "{answer}");
}

/// `clients` threads of principal `client`, for `duration`: each picks a replica at random,
/// is admitted to provider `upstream` (every admission shared), heartbeats one lease in three,
/// calls the upstream and releases. Answers how many calls were admitted.
pub fn drive_clients(
    replicas: &Arc<Vec<Replica>>,
    up: &FakeUpstream,
    clients: u64,
    duration: Duration,
) -> usize {
    let stop = Arc::new(AtomicBool::new(false));
    let granted = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (replicas, stop, granted) = (replicas.clone(), stop.clone(), granted.clone());
            let up = up.addr.clone();
            std::thread::spawn(move || {
                let mut seed = 0x9e37_79b9_7f4a_7c15 ^ (i + 1);
                while !stop.load(Ordering::SeqCst) {
                    let count = replicas.len() as u64;
                    let replica = &replicas[(next(&mut seed) % count) as usize];
                    let (status, lease) = acquire(replica, "upstream", 10_000);
                    assert_eq!(status, 200, "{lease}");
                    assert_eq!(lease["evidence"]["coordination"], "shared", "{lease}");
                    granted.fetch_add(1, Ordering::SeqCst);
                    let id = lease["leaseId"].as_str().expect("a lease ID");
                    if next(&mut seed) % 3 == 0 {
                        let (status, _) = http(
                            &replica.service.addr,
                            "POST",
                            &format!("/v1/leases/{id}/heartbeat"),
                            replica.key("client"),
                            None,
                        )
                        .expect("the replica answers");
                        assert_eq!(status, 200);
                    }
                    call_upstream(&up);
                    release(replica, id);
                }
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::SeqCst);
    for thread in threads {
        thread.join().expect("a client thread ends without a panic");
    }
    granted.load(Ordering::SeqCst)
}
