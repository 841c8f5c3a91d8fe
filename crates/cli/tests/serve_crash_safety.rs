//! Leases survive a crash of `turnstile serve` (issue 14), with real processes: a fake upstream
//! that records how many calls it serves at once, clients that acquire, call it and release,
//! a SIGKILL of the service mid-load and an immediate restart on the same data directory.
//! The upstream never serves more calls than the provider's concurrency, the pre-crash lease
//! IDs can still be heartbeated and released after the restart, a lease whose holder is gone
//! is reclaimed at its TTL (never earlier), and budgets stay charged.
//!
//! The lane state survives too: a Retry-After pause holds until its end, an open breaker stays
//! open until its open period ends (then lets a probe through), both even when the service is
//! killed right after the answer that caused them (they are in the lease log before it), and a
//! request bucket spent just before the crash is not full again after an immediate restart.
//!
//! A clean stop (SIGTERM) is not a crash: the bucket checkpoint it writes gives every lane
//! exactly the requests it had left after an immediate restart (an untouched lane its whole
//! burst), and a crash after a clean restart drains again (the checkpoint is used once).
#![cfg(unix)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
use common::start;
use turnstile_testkit::{get_text, http, ServeProcess};

/// The provider's concurrency in the test profile.
const PROVIDER_CONCURRENCY: usize = 4;

// ----- the service -------------------------------------------------------------------------

/// The smallest lease log segments (4 KiB): under load the log rotates every few dozen
/// grants, so the SIGKILL lands among rotations and background compactions.
fn config_file(dir: &Path, ttl_ms: u64) -> std::path::PathBuf {
    turnstile_testkit::config_file(dir, &format!(
            "demo = false\n\n[leases]\nttl_ms = {ttl_ms}\ndurability = \"process\"\nsegment_bytes = 4096\n"
        ))
}

/// Registers `profile` as revision v1 of workspace `crash` and answers a new key of principal
/// `client`.
fn register(service: &ServeProcess, profile: &Value) -> String {
    let admin = service.admin_key.as_deref().expect("first start");
    let (status, answer) = http(
        &service.addr,
        "PUT",
        "/v1/workspaces/crash/profiles/v1",
        admin,
        Some(profile),
    )
    .unwrap();
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = http(
        &service.addr,
        "POST",
        "/v1/workspaces/crash/keys",
        admin,
        Some(&json!({"principalId": "client"})),
    )
    .unwrap();
    assert_eq!(status, 201, "{answer}");
    answer["key"].as_str().unwrap().to_owned()
}

/// Registers the test profile (one provider lane) and returns a key of principal `client`.
fn set_up(service: &ServeProcess, provider: Value, principal: Value) -> String {
    let profile = json!({
        "workspace": {"concurrency": 64},
        "providers": {"upstream": provider},
        "principals": {"client": principal},
    });
    register(service, &profile)
}

/// Where the clients find the service (changes at the restart).
#[derive(Clone)]
struct Target(Arc<Mutex<String>>);

impl Target {
    fn get(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    /// Sends until the service answers (retrying across the crash and restart).
    fn send(&self, method: &str, path: &str, key: &str, body: Option<&Value>) -> (u16, Value) {
        let give_up = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(answer) = http(&self.get(), method, path, key, body) {
                return answer;
            }
            assert!(Instant::now() < give_up, "the service never came back");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

// ----- the fake upstream ---------------------------------------------------------------------

/// A loopback HTTP server that counts the calls it serves at once and keeps the maximum.
/// `/short` takes 20 ms; `/long` lasts until `finish_long` is set.
struct Upstream {
    addr: String,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    finish_long: Arc<AtomicBool>,
}

fn upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = Upstream {
        addr: listener.local_addr().unwrap().to_string(),
        in_flight: Arc::default(),
        max_in_flight: Arc::default(),
        finish_long: Arc::default(),
    };
    let (in_flight, max, finish) = (
        up.in_flight.clone(),
        up.max_in_flight.clone(),
        up.finish_long.clone(),
    );
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (in_flight, max, finish) = (in_flight.clone(), max.clone(), finish.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                    return;
                }
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                        break;
                    }
                }
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(now, Ordering::SeqCst);
                if request_line.contains("/long") {
                    while !finish.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                }
                in_flight.fetch_sub(1, Ordering::SeqCst);
                let mut stream = stream;
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    up
}

fn call_upstream(addr: &str, path: &str) {
    assert!(get_text(addr, path).starts_with("HTTP/1.1 200"));
}

fn acquire_body(budget: &str, tokens: u64, deadline_ms: u64) -> Value {
    json!({
        "providerId": "upstream",
        "budgetId": budget,
        "estimate": {"tokens": tokens},
        "deadlineMs": deadline_ms,
    })
}

// ----- the tests ---------------------------------------------------------------------------

#[test]
fn a_sigkill_mid_load_never_lets_the_upstream_exceed_the_providers_concurrency() {
    let data = tempfile::tempdir().unwrap();
    let config = config_file(data.path(), 20_000);
    let mut service = start(data.path(), &config, true);
    let key = set_up(
        &service,
        json!({"concurrency": PROVIDER_CONCURRENCY, "maxQueueLength": 256, "maxQueueWaitMs": 20000}),
        json!({"concurrency": 64, "maxQueueLength": 256}),
    );
    let target = Target(Arc::new(Mutex::new(service.addr.clone())));
    let up = upstream();
    let stop = Arc::new(AtomicBool::new(false));
    let crashed = Arc::new(AtomicBool::new(false));
    // Leases acquired before the crash and released after the restart, by the loaders.
    let carried = Arc::new(AtomicUsize::new(0));

    // Loaders: acquire (waiting in the queue), call the upstream, release.
    let loaders: Vec<_> = (0..8)
        .map(|i| {
            let (target, key, stop, crashed, carried) = (
                target.clone(),
                key.clone(),
                stop.clone(),
                crashed.clone(),
                carried.clone(),
            );
            let up_addr = up.addr.clone();
            std::thread::spawn(move || {
                let mut granted = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    // A queued caller whose connection fails at the crash just asks again.
                    let Some((status, lease)) = http(
                        &target.get(),
                        "POST",
                        "/v1/admissions",
                        &key,
                        Some(&acquire_body(&format!("load-{i}"), 1, 15_000)),
                    ) else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    if status != 200 {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    let before_crash = !crashed.load(Ordering::SeqCst);
                    granted += 1;
                    let id = lease["leaseId"].as_str().unwrap().to_owned();
                    call_upstream(&up_addr, "/short");
                    // A release whose connection failed may have been applied before the
                    // crash (then the retry is a 404); otherwise it must succeed.
                    let mut interrupted = false;
                    let (status, answer) = loop {
                        match http(
                            &target.get(),
                            "POST",
                            &format!("/v1/leases/{id}/release"),
                            &key,
                            Some(&json!({"outcome": "success"})),
                        ) {
                            Some(answer) => break answer,
                            None => {
                                interrupted = true;
                                std::thread::sleep(Duration::from_millis(10));
                            }
                        }
                    };
                    assert!(
                        status == 200 || (interrupted && status == 404),
                        "a granted lease is always releasable: {status} {answer}"
                    );
                    if before_crash && crashed.load(Ordering::SeqCst) && status == 200 {
                        carried.fetch_add(1, Ordering::SeqCst);
                    }
                }
                granted
            })
        })
        .collect();

    // Holders: a lease each, in a long upstream call across the crash.
    let holders: Vec<_> = (0..2)
        .map(|i| {
            let (target, key) = (target.clone(), key.clone());
            let up_addr = up.addr.clone();
            let (tx, rx) = std::sync::mpsc::channel::<String>();
            let thread = std::thread::spawn(move || {
                let (status, lease) = target.send(
                    "POST",
                    "/v1/admissions",
                    &key,
                    Some(&acquire_body(&format!("hold-{i}"), 1, 15_000)),
                );
                assert_eq!(status, 200, "{lease}");
                let id = lease["leaseId"].as_str().unwrap().to_owned();
                tx.send(id.clone()).unwrap();
                call_upstream(&up_addr, "/long");
                id
            });
            (thread, rx)
        })
        .collect();
    let held: Vec<String> = holders
        .iter()
        .map(|(_, rx)| rx.recv_timeout(Duration::from_secs(30)).unwrap())
        .collect();

    // Mid-load: SIGKILL, then an immediate restart on the same data directory.
    std::thread::sleep(Duration::from_millis(700));
    crashed.store(true, Ordering::SeqCst);
    service.child.kill().unwrap();
    service.child.wait().unwrap();
    let restarted = start(data.path(), &config, false);
    *target.0.lock().unwrap() = restarted.addr.clone();
    service = restarted;

    // The restarted service runs the load with the holders' calls still in flight.
    std::thread::sleep(Duration::from_millis(1_500));
    for id in &held {
        let (status, answer) =
            target.send("POST", &format!("/v1/leases/{id}/heartbeat"), &key, None);
        assert_eq!(
            status, 200,
            "a pre-crash lease heartbeats after the restart: {answer}"
        );
    }
    up.finish_long.store(true, Ordering::SeqCst);
    for (thread, _) in holders {
        let id = thread.join().unwrap();
        let (status, answer) = target.send(
            "POST",
            &format!("/v1/leases/{id}/release"),
            &key,
            Some(&json!({"outcome": "success"})),
        );
        assert_eq!(
            status, 200,
            "a pre-crash lease releases after the restart: {answer}"
        );
        // Released exactly once.
        let (status, _) = target.send(
            "POST",
            &format!("/v1/leases/{id}/release"),
            &key,
            Some(&json!({"outcome": "success"})),
        );
        assert_eq!(status, 404);
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    let granted: usize = loaders.into_iter().map(|t| t.join().unwrap()).sum();
    let max = up.max_in_flight.load(Ordering::SeqCst);
    eprintln!(
        "granted {granted}, max in flight {max}, loader leases carried across the crash {}",
        carried.load(Ordering::SeqCst)
    );
    assert!(granted > 20, "the load ran ({granted} grants)");
    assert!(
        max <= PROVIDER_CONCURRENCY,
        "the upstream served {max} calls at once, above the provider's concurrency"
    );
    assert_eq!(max, PROVIDER_CONCURRENCY, "the load filled the provider");
    service.child.kill().unwrap();
    service.child.wait().unwrap();
}

#[test]
fn after_a_sigkill_an_abandoned_lease_is_reclaimed_at_its_ttl_and_budgets_stay_charged() {
    const TTL_MS: u64 = 1_500;
    let data = tempfile::tempdir().unwrap();
    let config = config_file(data.path(), TTL_MS);
    let mut service = start(data.path(), &config, true);
    let key = set_up(
        &service,
        json!({"concurrency": 1, "maxQueueLength": 8}),
        json!({"concurrency": 8, "maxTokens": 100}),
    );
    let (status, lease) = http(
        &service.addr,
        "POST",
        "/v1/admissions",
        &key,
        Some(&acquire_body("b", 60, 0)),
    )
    .unwrap();
    assert_eq!(status, 200, "{lease}");

    service.child.kill().unwrap();
    service.child.wait().unwrap();
    let restarted = Instant::now();
    service = start(data.path(), &config, false);
    let addr = service.addr.clone();
    let try_now = |budget: &str, tokens: u64| {
        http(
            &addr,
            "POST",
            "/v1/admissions",
            &key,
            Some(&acquire_body(budget, tokens, 0)),
        )
        .unwrap()
    };

    // The lease still holds the provider's one slot, and its 60 tokens stay charged.
    let (status, answer) = try_now("other", 1);
    assert_ne!(
        status, 200,
        "the pre-crash lease no longer counts: {answer}"
    );
    assert_eq!(answer["reason"], "concurrency", "{answer}");
    let (status, answer) = try_now("b", 60);
    assert_ne!(status, 200);
    assert_eq!(
        answer["reason"], "tokens",
        "the budget was refunded: {answer}"
    );

    // Nobody heartbeats it: reclaimed a TTL after the restart, not earlier.
    let freed = loop {
        let (status, answer) = try_now("other", 1);
        if status == 200 {
            let id = answer["leaseId"].as_str().unwrap();
            let (status, _) = http(
                &addr,
                "POST",
                &format!("/v1/leases/{id}/release"),
                &key,
                Some(&json!({"outcome": "success"})),
            )
            .unwrap();
            assert_eq!(status, 200);
            break restarted.elapsed();
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(10),
            "never reclaimed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        freed >= Duration::from_millis(TTL_MS),
        "freed {freed:?} after the restart, before its TTL"
    );
    // The released lease's holder is gone: its old ID is unknown now.
    let old = lease["leaseId"].as_str().unwrap();
    let (status, _) = http(
        &addr,
        "POST",
        &format!("/v1/leases/{old}/release"),
        &key,
        Some(&json!({"outcome": "success"})),
    )
    .unwrap();
    assert_eq!(status, 404);
    // Reclaiming a lease gives its permit back, never its budget: 60 + 60 > 100, 60 + 40 fits.
    let (_, answer) = try_now("b", 60);
    assert_eq!(answer["reason"], "tokens", "{answer}");
    let (status, answer) = try_now("b", 40);
    assert_eq!(status, 200, "{answer}");
    service.child.kill().unwrap();
    service.child.wait().unwrap();
}

// ----- lane state: pauses, breakers, rate buckets --------------------------------------------

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `POST /v1/admissions` that is answered at once (`deadlineMs: 0`).
fn try_acquire(service: &ServeProcess, key: &str, budget: &str) -> (u16, Value) {
    http(
        &service.addr,
        "POST",
        "/v1/admissions",
        key,
        Some(&acquire_body(budget, 1, 0)),
    )
    .unwrap()
}

fn release(service: &ServeProcess, key: &str, lease: &Value, outcome: Value) {
    let id = lease["leaseId"].as_str().unwrap();
    let (status, answer) = http(
        &service.addr,
        "POST",
        &format!("/v1/leases/{id}/release"),
        key,
        Some(&outcome),
    )
    .unwrap();
    assert_eq!(status, 200, "{answer}");
}

/// The audit records at `path` once there are at least `count` (they are written by the store
/// thread just after the answer that caused them; a restart reads the lease log, not them).
fn audit_records(service: &ServeProcess, key: &str, path: &str, count: usize) -> Vec<Value> {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, answer) = http(&service.addr, "GET", path, key, None).unwrap();
        assert_eq!(status, 200, "{answer}");
        let records = answer["records"].as_array().cloned().unwrap_or_default();
        if records.len() >= count {
            return records;
        }
        assert!(Instant::now() < give_up, "never journaled: {answer}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls until an acquire on the lane is admitted (then releases it); returns that acquire's
/// answer. Every refusal on the way must have `reason`.
fn admitted_after(service: &ServeProcess, key: &str, reason: &str, give_up: Duration) -> Value {
    let start = Instant::now();
    loop {
        let (status, answer) = try_acquire(service, key, "later");
        if status == 200 {
            return answer;
        }
        assert_eq!(answer["reason"], reason, "{answer}");
        assert!(start.elapsed() < give_up, "never admitted: {answer}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn after_a_sigkill_a_retry_after_pause_holds_until_its_end_then_the_lane_admits() {
    const PAUSE_MS: u64 = 4_000;
    let data = tempfile::tempdir().unwrap();
    let config = config_file(data.path(), 30_000);
    let mut service = start(data.path(), &config, true);
    let key = set_up(
        &service,
        json!({"concurrency": 4}),
        json!({"concurrency": 4}),
    );
    // The provider told a caller to back off: the lease is released with its Retry-After.
    let (status, lease) = try_acquire(&service, &key, "b");
    assert_eq!(status, 200, "{lease}");
    let before = epoch_ms();
    release(
        &service,
        &key,
        &lease,
        json!({"outcome": "retry-after", "retryAfterMs": PAUSE_MS}),
    );
    // The pause ends between these two (it began while the release was being answered).
    let (earliest, until) = (before + PAUSE_MS, epoch_ms() + PAUSE_MS);

    // Killed at once after the answer: the pause was durable before it (the audit log's
    // record, written just after the answer, may be lost; the restart does not need it).
    service.child.kill().unwrap();
    service.child.wait().unwrap();
    service = start(data.path(), &config, false);

    // Still paused after the restart, with the real remaining time.
    let (status, answer) = try_acquire(&service, &key, "b");
    assert_eq!(status, 503, "the pause did not survive the crash: {answer}");
    assert_eq!(answer["reason"], "retry-after", "{answer}");
    let remaining = answer["evidence"]["retryAfterMs"].as_u64().unwrap();
    let now = epoch_ms();
    let (least, most) = (earliest.saturating_sub(now), until.saturating_sub(now));
    assert!(
        remaining >= least && remaining <= most + 1_000 + 100,
        "remaining {remaining} ms, {least}..{most} ms of the pause left"
    );
    // Admitted once it ends (at most a second later: the journal's resolution).
    let lease = admitted_after(&service, &key, "retry-after", Duration::from_secs(10));
    assert!(epoch_ms() >= earliest, "admitted before the pause ended");
    release(&service, &key, &lease, json!({"outcome": "success"}));
    service.child.kill().unwrap();
    service.child.wait().unwrap();
}

#[test]
fn after_a_sigkill_an_open_breaker_stays_open_then_lets_a_probe_through_after_its_open_period() {
    const OPEN_MS: u64 = 3_000;
    let data = tempfile::tempdir().unwrap();
    let config = config_file(data.path(), 30_000);
    let mut service = start(data.path(), &config, true);
    let key = set_up(
        &service,
        json!({
            "concurrency": 4,
            "circuitBreaker": {"failureThreshold": 2, "openMs": OPEN_MS, "halfOpenMaxCalls": 1},
        }),
        json!({"concurrency": 4}),
    );
    // Two failed calls open the breaker (while the second release is answered).
    let mut opened_at = 0;
    for _ in 0..2 {
        let (status, lease) = try_acquire(&service, &key, "b");
        assert_eq!(status, 200, "{lease}");
        opened_at = epoch_ms();
        release(&service, &key, &lease, json!({"outcome": "failure"}));
    }

    // Killed at once after the answer: the transition was durable before it (the audit log's
    // record, written just after the answer, may be lost; the restart does not need it).
    service.child.kill().unwrap();
    service.child.wait().unwrap();
    service = start(data.path(), &config, false);

    let (status, answer) = try_acquire(&service, &key, "b");
    assert_eq!(status, 503, "the breaker closed at the restart: {answer}");
    assert_eq!(answer["reason"], "circuit-open", "{answer}");
    // Half-open when it would have been without the crash: one probe, not before.
    let probe = admitted_after(&service, &key, "circuit-open", Duration::from_secs(10));
    assert!(
        epoch_ms() >= opened_at + OPEN_MS,
        "a probe passed before the open period ended"
    );
    let (status, answer) = try_acquire(&service, &key, "b");
    assert_ne!(
        status, 200,
        "a second call passed a half-open breaker: {answer}"
    );
    release(&service, &key, &probe, json!({"outcome": "success"}));
    // The history: the probe's half-open and closed (the open before the crash may be lost).
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let transitions = audit_records(&service, &key, "/v1/workspaces/crash/breakers", 2);
        let states: Vec<&str> = transitions
            .iter()
            .map(|t| t["to"].as_str().unwrap())
            .collect();
        if states.ends_with(&["half-open", "closed"]) {
            break;
        }
        assert!(Instant::now() < give_up, "{states:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, answer) = try_acquire(&service, &key, "b");
    assert_eq!(status, 200, "{answer}");
    service.child.kill().unwrap();
    service.child.wait().unwrap();
}

#[test]
fn after_a_sigkill_a_request_bucket_spent_before_the_crash_is_not_full_again() {
    // 12 requests per minute, at most 3 at once: one more every 5 s.
    const REFILL_MS: u64 = 5_000;
    let data = tempfile::tempdir().unwrap();
    let config = config_file(data.path(), 30_000);
    let mut service = start(data.path(), &config, true);
    let key = set_up(
        &service,
        json!({"concurrency": 8, "requestsPerMinute": 12, "requestsBurst": 3}),
        json!({"concurrency": 8}),
    );
    for _ in 0..3 {
        let (status, lease) = try_acquire(&service, &key, "b");
        assert_eq!(status, 200, "{lease}");
        release(&service, &key, &lease, json!({"outcome": "success"}));
    }
    let last_grant = Instant::now();
    let (status, answer) = try_acquire(&service, &key, "b");
    assert_eq!(
        (status, &answer["reason"]),
        (429, &json!("requests-per-minute"))
    );

    service.child.kill().unwrap();
    service.child.wait().unwrap();
    service = start(data.path(), &config, false);

    let (status, answer) = try_acquire(&service, &key, "b");
    assert!(
        last_grant.elapsed() < Duration::from_millis(REFILL_MS),
        "the restart took too long for this test"
    );
    assert_eq!(status, 429, "a full bucket again after the crash: {answer}");
    assert_eq!(answer["reason"], "requests-per-minute", "{answer}");
    // It refills from the last grant before the crash, as it would have without one.
    let lease = admitted_after(
        &service,
        &key,
        "requests-per-minute",
        Duration::from_secs(15),
    );
    assert!(
        last_grant.elapsed() >= Duration::from_millis(REFILL_MS - 500),
        "refilled after {:?}",
        last_grant.elapsed()
    );
    release(&service, &key, &lease, json!({"outcome": "success"}));
    let (status, answer) = try_acquire(&service, &key, "b");
    assert_eq!(status, 429, "one request per 5 s: {answer}");
    service.child.kill().unwrap();
    service.child.wait().unwrap();
}

// ----- a clean stop keeps the bucket levels --------------------------------------------------

/// Registers a profile of two rate-limited provider lanes, `busy` (6 requests per minute: one
/// more every 10 s) and `idle` (3 per minute), and returns a key of principal `client`.
fn set_up_two_lanes(service: &ServeProcess) -> String {
    let profile = json!({
        "workspace": {"concurrency": 64},
        "providers": {
            "busy": {"concurrency": 8, "requestsPerMinute": 6},
            "idle": {"concurrency": 8, "requestsPerMinute": 3},
        },
        "principals": {"client": {"concurrency": 8}},
    });
    register(service, &profile)
}

/// `POST /v1/admissions` on `provider`, answered at once; a granted lease is released at once.
fn try_lane(service: &ServeProcess, key: &str, provider: &str) -> (u16, Value) {
    let mut body = acquire_body("b", 1, 0);
    body["providerId"] = json!(provider);
    let (status, answer) = http(&service.addr, "POST", "/v1/admissions", key, Some(&body)).unwrap();
    if status == 200 {
        release(service, key, &answer, json!({"outcome": "success"}));
    }
    (status, answer)
}

/// Admits `count` on the lane, then expects a `requests-per-minute` refusal.
fn admits_exactly(service: &ServeProcess, key: &str, provider: &str, count: usize) {
    for i in 0..count {
        let (status, answer) = try_lane(service, key, provider);
        assert_eq!(
            status,
            200,
            "{provider}: request {} of {count}: {answer}",
            i + 1
        );
    }
    let (status, answer) = try_lane(service, key, provider);
    assert_eq!(
        (status, &answer["reason"]),
        (429, &json!("requests-per-minute")),
        "{provider}: more than {count} passed: {answer}"
    );
}

/// SIGTERM (a clean stop: Ctrl-C, a deploy), then waits until the process has exited.
fn terminate(service: &mut ServeProcess) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &service.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = service.child.wait().unwrap();
    assert!(exit.success(), "a clean stop exits with 0: {exit}");
}

fn kill(service: &mut ServeProcess) {
    service.child.kill().unwrap();
    service.child.wait().unwrap();
}

const CHECKPOINT: &str = "bucket-checkpoint.json";

#[test]
fn after_a_sigterm_every_lane_restarts_with_exactly_the_requests_it_had_left() {
    // One more request every 10 s on `busy`: the test runs well within that.
    let data = tempfile::tempdir().unwrap();
    let config = config_file(data.path(), 30_000);
    let mut service = start(data.path(), &config, true);
    let key = set_up_two_lanes(&service);
    let first_grant = Instant::now();
    for _ in 0..4 {
        let (status, answer) = try_lane(&service, &key, "busy");
        assert_eq!(status, 200, "{answer}");
    }

    terminate(&mut service);
    let checkpoint = std::fs::read_to_string(data.path().join(CHECKPOINT)).unwrap();
    assert!(
        checkpoint.starts_with(r#"{"format":"turnstile-bucket-checkpoint/v1","#),
        "{checkpoint}"
    );
    service = start(data.path(), &config, false);
    assert!(
        !data.path().join(CHECKPOINT).exists(),
        "a restored checkpoint is removed before serving"
    );

    // `busy` has exactly the 2 requests it had left; `idle`, untouched, its full burst at
    // once (a drain since the last grant would refuse it).
    admits_exactly(&service, &key, "busy", 2);
    admits_exactly(&service, &key, "idle", 3);
    assert!(
        first_grant.elapsed() < Duration::from_secs(10),
        "the restart took too long for this test"
    );
    kill(&mut service);
}

#[test]
fn after_a_sigkill_following_a_clean_restart_every_bucket_is_drained_again() {
    let data = tempfile::tempdir().unwrap();
    let config = config_file(data.path(), 30_000);
    let mut service = start(data.path(), &config, true);
    let key = set_up_two_lanes(&service);
    let (status, answer) = try_lane(&service, &key, "busy");
    assert_eq!(status, 200, "{answer}");
    terminate(&mut service);
    let clean_stop = std::fs::read(data.path().join(CHECKPOINT)).unwrap();

    // A clean restart, a grant, then a crash: no checkpoint is left to restore.
    service = start(data.path(), &config, false);
    let (status, answer) = try_lane(&service, &key, "busy");
    assert_eq!(status, 200, "{answer}");
    kill(&mut service);
    assert!(!data.path().join(CHECKPOINT).exists());
    service = start(data.path(), &config, false);
    // Drained since the last grant (a second ago): even the untouched lane is empty.
    let (status, answer) = try_lane(&service, &key, "idle");
    assert_eq!(status, 429, "a full bucket after a crash: {answer}");
    assert_eq!(answer["reason"], "requests-per-minute", "{answer}");
    let (status, answer) = try_lane(&service, &key, "busy");
    assert_eq!(status, 429, "{answer}");
    kill(&mut service);

    // The old checkpoint put back by hand: the lease log has a later grant, so it is stale
    // and the buckets are drained (and the file removed).
    std::fs::write(data.path().join(CHECKPOINT), clean_stop).unwrap();
    service = start(data.path(), &config, false);
    assert!(!data.path().join(CHECKPOINT).exists());
    let (status, answer) = try_lane(&service, &key, "idle");
    assert_eq!(status, 429, "a stale checkpoint was restored: {answer}");
    kill(&mut service);
}
