//! Replicas sharing keys, revocations, profiles and the audit log through Redis (issue 13),
//! with real processes: one `redis-server` (started here on a free port, stopped by PID) and
//! three `turnstile serve --redis-url` on their own data directories. Needs `redis-server`
//! (`.ci/run` installs it; a missing one fails, never skips).
//!
//! - A key created on A authenticates on B and C; a key revoked on B is refused by A and C
//!   within the follow interval (measured, worst case printed, asserted under a generous 3 s).
//! - A profile registered on C is enforced on A (an admission on A sees the new provider and
//!   its limit), with the same version, digest and history (`actorKeyId`, `note`,
//!   `approvedBy`, instants) on every replica; a rollback too.
//! - Registrations on two replicas at once are put in one order (every record's previous
//!   version is the record before it, on every replica); the same version with different
//!   limits at once: one wins, the other is 409.
//! - Redis stopped: key and profile writes are refused with 503 (`coordination-unavailable`,
//!   or `coordination-outcome-unknown` for a write already sent), none of them applies when
//!   Redis resumes, existing keys still authenticate; after Redis answers again writes work
//!   and propagate. Redis restarted empty: the feed is seeded again from a mirror and writes
//!   work again.
//! - Redis hanging with writes in it (held by `CLIENT PAUSE … WRITE`, then SIGSTOP, or in the
//!   stopped Redis's socket buffer): the revocation, registration and key creation are answered
//!   503 `coordination-outcome-unknown` and none applies after Redis resumes (each write's
//!   deadline in Redis's clock passed before the answer; v1 applied the revocation).
//! - A replica killed and restarted on its data directory catches up (a key created and one
//!   revoked while it was down); a new replica adopts the shared state and prints no key.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use turnstile_testkit::RedisServer;

mod common;
use common::TURNSTILE;
use turnstile_testkit::replica::one_at_a_time;
use turnstile_testkit::{http, ServeProcess};

const WORKSPACE: &str = "identity";
/// The follow interval of these replicas (the default).
const FOLLOW_MS: u64 = 100;

struct Replica {
    service: ServeProcess,
    /// The `shared:` line of its banner.
    shared: String,
    data: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Replica {
    fn addr(&self) -> &str {
        &self.service.addr
    }

    fn kill(&mut self) {
        let _ = self.service.child.kill();
        let _ = self.service.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

fn config_file(dir: &Path) -> PathBuf {
    turnstile_testkit::config_file(
        dir,
        &format!(
            "demo = false\n\n[coordination]\ndegraded_share = \"0.34\"\ntimeout_ms = 2000\n\
             follow_every_ms = {FOLLOW_MS}\n"
        ),
    )
}

/// Starts `turnstile serve --redis-url` on `data`; reads its banner up to the `shared:` line
/// and, when `admin` is expected (the replica that seeds the feed), the admin key.
fn start(data: &Path, redis: &RedisServer, expect_admin: bool) -> (ServeProcess, String) {
    start_reading(data, redis, |_| expect_admin)
}

/// [`start`], deciding from the `shared:` line whether an admin key follows.
fn start_reading(
    data: &Path,
    redis: &RedisServer,
    admin_follows: impl Fn(&str) -> bool,
) -> (ServeProcess, String) {
    let config = config_file(data);
    let url = redis.url();
    fn shared_line(line: &str) -> Option<&str> {
        line.trim().strip_prefix("shared:").map(str::trim)
    }
    let (service, banner) = TURNSTILE.serve_reading(
        data,
        &config,
        &["--redis-url", &url],
        |line| match shared_line(line) {
            Some(rest) => !admin_follows(rest),
            None => line.trim().starts_with("admin key:"),
        },
    );
    let shared = banner
        .iter()
        .find_map(|line| shared_line(line).map(str::to_owned));
    (
        service,
        shared.expect("a replica says how it met the shared state"),
    )
}

fn replica(redis: &RedisServer, first: bool) -> Replica {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_owned();
    let (service, shared) = start(&data, redis, first);
    Replica {
        service,
        shared,
        data,
        _dir: Some(dir),
    }
}

/// A redis-server and three replicas: A seeds the feed (its admin key), B and C adopt it.
fn deployment() -> (RedisServer, Vec<Replica>, String) {
    let redis = RedisServer::start().unwrap();
    let a = replica(&redis, true);
    let admin = a
        .service
        .admin_key
        .clone()
        .expect("the first replica prints the admin key");
    assert!(
        a.shared.contains("from this replica's state"),
        "{}",
        a.shared
    );
    let b = replica(&redis, false);
    let c = replica(&redis, false);
    for joined in [&b, &c] {
        assert!(joined.shared.starts_with("joined"), "{}", joined.shared);
        assert!(joined.service.admin_key.is_none());
    }
    (redis, vec![a, b, c], admin)
}

fn profile(late_concurrency: Option<u64>) -> Value {
    let mut providers = json!({"upstream": {"concurrency": 8, "maxQueueLength": 8}});
    if let Some(concurrency) = late_concurrency {
        providers["late"] = json!({"concurrency": concurrency});
    }
    json!({
        "workspace": {"concurrency": 64},
        "providers": providers,
        "principals": {"client": {"concurrency": 64, "maxQueueLength": 8}},
    })
}

fn put_profile(replica: &Replica, admin: &str, version: &str, body: &Value) -> (u16, Value) {
    http(
        replica.addr(),
        "PUT",
        &format!("/v1/workspaces/{WORKSPACE}/profiles/{version}"),
        admin,
        Some(body),
    )
    .expect("the replica answers")
}

fn create_key(replica: &Replica, admin: &str) -> (u16, Value) {
    http(
        replica.addr(),
        "POST",
        &format!("/v1/workspaces/{WORKSPACE}/keys"),
        admin,
        Some(&json!({"principalId": "client"})),
    )
    .expect("the replica answers")
}

fn revoke(replica: &Replica, admin: &str, key_id: &str) -> (u16, Value) {
    http(
        replica.addr(),
        "DELETE",
        &format!("/v1/workspaces/{WORKSPACE}/keys/{key_id}"),
        admin,
        None,
    )
    .expect("the replica answers")
}

/// The status of an authenticated read with `key` (200 known, 401 unknown).
fn auth_status(replica: &Replica, key: &str) -> u16 {
    http(
        replica.addr(),
        "GET",
        &format!("/v1/workspaces/{WORKSPACE}/profiles"),
        key,
        None,
    )
    .expect("the replica answers")
    .0
}

/// Waits until `replica` answers `status` for `key`; how long it took.
fn until_status(replica: &Replica, key: &str, status: u16, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if auth_status(replica, key) == status {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "{} did not answer {status} within {within:?}",
            replica.addr()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn history(replica: &Replica, admin: &str) -> Vec<Value> {
    let (status, answer) = http(
        replica.addr(),
        "GET",
        &format!("/v1/workspaces/{WORKSPACE}/profiles"),
        admin,
        None,
    )
    .expect("the replica answers");
    assert_eq!(status, 200, "{answer}");
    answer["records"].as_array().cloned().unwrap_or_default()
}

/// Every replica's history, once they all agree (they follow the feed within 100 ms).
fn agreed_history(replicas: &[&Replica], admin: &str, records: usize) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let all: Vec<Vec<Value>> = replicas.iter().map(|r| history(r, admin)).collect();
        if all[0].len() == records && all.iter().all(|h| h == &all[0]) {
            return all[0].clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "histories differ: {all:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn acquire(replica: &Replica, key: &str, provider: &str) -> (u16, Value) {
    http(
        replica.addr(),
        "POST",
        "/v1/admissions",
        key,
        Some(&json!({
            "providerId": provider,
            "budgetId": "run",
            "estimate": {"tokens": 1},
            "deadlineMs": 0,
        })),
    )
    .expect("the replica answers")
}

#[test]
fn keys_created_on_one_replica_work_everywhere_and_revocations_reach_every_replica_within_a_second()
{
    let _one = one_at_a_time();
    let (_redis, replicas, admin) = deployment();
    let [a, b, c] = [&replicas[0], &replicas[1], &replicas[2]];
    // The admin key of the first replica is the deployment's.
    for replica in [a, b, c] {
        assert_eq!(auth_status(replica, &admin), 200);
    }
    let (status, answer) = put_profile(a, &admin, "v1", &profile(None));
    assert_eq!(status, 201, "{answer}");

    let mut created = Vec::new();
    let mut revoked = Vec::new();
    for round in 0..5 {
        let (status, answer) = create_key(&replicas[round % 3], &admin);
        assert_eq!(status, 201, "{answer}");
        let key = answer["key"].as_str().unwrap().to_owned();
        let key_id = answer["keyId"].as_str().unwrap().to_owned();
        // Known on every replica (the creating one at once).
        assert_eq!(auth_status(&replicas[round % 3], &key), 200);
        let worst = [a, b, c]
            .iter()
            .map(|r| until_status(r, &key, 200, Duration::from_secs(3)))
            .max()
            .unwrap();
        created.push(worst);

        // Revoked on another replica: refused there at once, by the others within the bound.
        let revoker = &replicas[(round + 1) % 3];
        let sent = Instant::now();
        let (status, answer) = revoke(revoker, &admin, &key_id);
        assert_eq!(status, 200, "{answer}");
        let answered = sent.elapsed();
        assert_eq!(
            auth_status(revoker, &key),
            401,
            "refused where it was revoked"
        );
        let others: Vec<&Replica> = replicas
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != (round + 1) % 3)
            .map(|(_, r)| r)
            .collect();
        let handles: Vec<_> = others
            .iter()
            .map(|r| {
                let addr = r.addr().to_owned();
                let key = key.clone();
                std::thread::spawn(move || loop {
                    let status = http(
                        &addr,
                        "GET",
                        &format!("/v1/workspaces/{WORKSPACE}/profiles"),
                        &key,
                        None,
                    )
                    .map(|(s, _)| s);
                    if status == Some(401) {
                        return sent.elapsed();
                    }
                    assert!(
                        sent.elapsed() < Duration::from_secs(3),
                        "not refused within 3 s"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                })
            })
            .collect();
        let worst = handles
            .into_iter()
            .map(|h| h.join().expect("refused within 3 s"))
            .max()
            .unwrap();
        revoked.push((worst, answered));
        // A second revocation, on any replica, finds nothing.
        let (status, answer) = revoke(&replicas[round % 3], &admin, &key_id);
        assert_eq!(status, 404, "{answer}");
        assert_eq!(answer["error"], "unknown-key");
    }
    let worst_revocation = revoked.iter().map(|(w, _)| *w).max().unwrap();
    println!(
        "replicas_identity: key known on all 3 replicas after (worst of 5) {:?}; revocation refused by every replica after (from the DELETE's start, per round) {:?}, worst {worst_revocation:?} (follow interval {FOLLOW_MS} ms)",
        created.iter().max().unwrap(),
        revoked,
    );
    assert!(worst_revocation < Duration::from_secs(3));
    // The revocation history is the deployment's, with who revoked.
    let listings: Vec<Value> = [a, b, c]
        .iter()
        .map(|r| {
            http(
                r.addr(),
                "GET",
                &format!("/v1/workspaces/{WORKSPACE}/keys"),
                &admin,
                None,
            )
            .unwrap()
            .1
        })
        .collect();
    assert_eq!(listings[0]["revocations"].as_array().unwrap().len(), 5);
    assert!(listings.iter().all(|l| l == &listings[0]), "{listings:#?}");
}

#[test]
fn a_profile_registered_on_one_replica_is_enforced_on_all_with_the_same_history() {
    let _one = one_at_a_time();
    let (_redis, replicas, admin) = deployment();
    let [a, b, c] = [&replicas[0], &replicas[1], &replicas[2]];
    let (status, answer) = put_profile(a, &admin, "v1", &profile(None));
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = create_key(a, &admin);
    assert_eq!(status, 201, "{answer}");
    let key = answer["key"].as_str().unwrap().to_owned();
    until_status(a, &key, 200, Duration::from_secs(3));
    let (status, answer) = acquire(a, &key, "late");
    assert_ne!(status, 200, "v1 has no provider `late`: {answer}");

    // Registered on C: enforced on A (the new provider, with its concurrency of 1).
    let (status, registered) = put_profile(c, &admin, "v2", &profile(Some(1)));
    assert_eq!(status, 201, "{registered}");
    assert_eq!(registered["kind"], "change");
    let start = Instant::now();
    let lease = loop {
        let (status, answer) = acquire(a, &key, "late");
        if status == 200 {
            break answer;
        }
        assert!(start.elapsed() < Duration::from_secs(3), "{answer}");
        std::thread::sleep(Duration::from_millis(5));
    };
    println!(
        "replicas_identity: a profile registered on C admitted on A after {:?}",
        start.elapsed()
    );
    let (status, answer) = acquire(a, &key, "late");
    assert_eq!(status, 429, "v2's limit of 1 holds on A: {answer}");
    assert_eq!(answer["reason"], "concurrency");
    let lease_id = lease["leaseId"].as_str().unwrap();
    let (status, answer) = http(
        a.addr(),
        "POST",
        &format!("/v1/leases/{lease_id}/release"),
        &key,
        Some(&json!({"outcome": "success"})),
    )
    .unwrap();
    assert_eq!(status, 200, "{answer}");

    // Rolled back on B, with its approval on record (issue 33).
    let mut rollback = profile(None);
    rollback["note"] = json!("v2 is too tight");
    rollback["approvedBy"] = json!("Dana");
    let (status, answer) = put_profile(b, &admin, "v1", &rollback);
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["kind"], "rollback");

    // The same history everywhere: versions, digests, instants and who made each change.
    let records = agreed_history(&[a, b, c], &admin, 3);
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["initial", "change", "rollback"]);
    assert_eq!(records[1]["digest"], registered["digest"]);
    assert_eq!(records[1]["atEpochMs"], registered["atEpochMs"]);
    assert!(records.iter().all(|r| r["actorKeyId"].is_string()));
    assert_eq!(
        (&records[2]["note"], &records[2]["approvedBy"]),
        (&json!("v2 is too tight"), &json!("Dana")),
        "the approval travels on the feed to every replica"
    );
    // A rollout runs on one process only: a replica refuses to start one, typed (issue 33).
    let (status, answer) = http(
        a.addr(),
        "POST",
        &format!("/v1/workspaces/{WORKSPACE}/rollouts"),
        &admin,
        Some(&json!({"revision": "v9", "profile": profile(Some(2)), "mode": "shadow"})),
    )
    .unwrap();
    assert_eq!(
        (status, answer["error"].as_str()),
        (409, Some("rollouts-unsupported")),
        "{answer}"
    );
    let revisions: Vec<Value> = [a, b, c]
        .iter()
        .map(|r| {
            http(
                r.addr(),
                "GET",
                &format!("/v1/workspaces/{WORKSPACE}/profiles/v2"),
                &admin,
                None,
            )
            .unwrap()
            .1
        })
        .collect();
    assert_eq!(revisions[0]["digest"], registered["digest"]);
    assert!(
        revisions.iter().all(|r| r == &revisions[0]),
        "{revisions:#?}"
    );

    // The audit log of pauses is shared too: a Retry-After on A is in B's and C's history.
    let (status, answer) = http(
        a.addr(),
        "POST",
        "/v1/providers/upstream/retry-after",
        &key,
        Some(&json!({"retryAfterMs": 200})),
    )
    .unwrap();
    assert_eq!(status, 200, "{answer}");
    let pauses = |replica: &Replica| {
        http(
            replica.addr(),
            "GET",
            &format!("/v1/workspaces/{WORKSPACE}/pauses"),
            &admin,
            None,
        )
        .unwrap()
        .1["records"]
            .clone()
    };
    let start = Instant::now();
    loop {
        let all: Vec<Value> = [a, b, c].iter().map(|r| pauses(r)).collect();
        if all[0].as_array().is_some_and(|r| r.len() == 1) && all.iter().all(|p| p == &all[0]) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(3), "{all:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn registrations_on_two_replicas_at_once_are_put_in_one_order() {
    let _one = one_at_a_time();
    let (_redis, replicas, admin) = deployment();
    let [a, b, c] = [&replicas[0], &replicas[1], &replicas[2]];
    let (status, answer) = put_profile(a, &admin, "v0", &profile(None));
    assert_eq!(status, 201, "{answer}");
    let rounds = 5;
    for round in 0..rounds {
        let handles: Vec<_> = [(a, "a"), (b, "b")]
            .iter()
            .map(|(replica, name)| {
                let addr = replica.addr().to_owned();
                let admin = admin.clone();
                let version = format!("r{round}{name}");
                std::thread::spawn(move || {
                    http(
                        &addr,
                        "PUT",
                        &format!("/v1/workspaces/{WORKSPACE}/profiles/{version}"),
                        &admin,
                        Some(&profile(Some(round + 1))),
                    )
                    .expect("the replica answers")
                })
            })
            .collect();
        for handle in handles {
            let (status, answer) = handle.join().unwrap();
            assert_eq!(status, 201, "{answer}");
        }
    }
    // One order on every replica: each change's previous version is the record before it.
    let records = agreed_history(&[a, b, c], &admin, 1 + 2 * rounds as usize);
    for pair in records.windows(2) {
        assert_eq!(
            pair[1]["previousProfileVersion"], pair[0]["profileVersion"],
            "{records:#?}"
        );
    }

    // The same version with different limits on two replicas at once: exactly one wins.
    let handles: Vec<_> = [(a, 5), (c, 6)]
        .iter()
        .map(|(replica, concurrency)| {
            let addr = replica.addr().to_owned();
            let admin = admin.clone();
            let body = profile(Some(*concurrency));
            std::thread::spawn(move || {
                http(
                    &addr,
                    "PUT",
                    &format!("/v1/workspaces/{WORKSPACE}/profiles/contested"),
                    &admin,
                    Some(&body),
                )
                .expect("the replica answers")
            })
        })
        .collect();
    let mut statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap().0).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409]);
    agreed_history(&[a, b, c], &admin, 2 + 2 * rounds as usize);
}

#[test]
fn with_redis_down_writes_are_refused_typed_and_keys_still_authenticate() {
    let _one = one_at_a_time();
    let (mut redis, replicas, admin) = deployment();
    let [a, b, c] = [&replicas[0], &replicas[1], &replicas[2]];
    let (status, answer) = put_profile(a, &admin, "v1", &profile(None));
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = create_key(a, &admin);
    assert_eq!(status, 201, "{answer}");
    let key = answer["key"].as_str().unwrap().to_owned();
    let key_id = answer["keyId"].as_str().unwrap().to_owned();
    for replica in [a, b, c] {
        until_status(replica, &key, 200, Duration::from_secs(3));
    }
    let keys_before = live_keys(a, &admin);

    redis.signal("STOP");
    for replica in [a, b, c] {
        assert_eq!(
            auth_status(replica, &key),
            200,
            "authenticated from the mirror"
        );
    }
    // Refused: never sent (`coordination-unavailable`: the revocation's and the registration's
    // catch-up read hangs first), or sent into the stopped Redis's socket buffer
    // (`coordination-outcome-unknown`: the key creation, dated from a recent clock reading).
    let refusals = [
        create_key(b, &admin),
        revoke(c, &admin, &key_id),
        put_profile(a, &admin, "v2", &profile(Some(1))),
    ];
    for (status, answer) in &refusals {
        assert_eq!(*status, 503, "{answer}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(
            ["coordination-unavailable", "coordination-outcome-unknown"].contains(&error),
            "{answer}"
        );
    }
    redis.signal("CONT");
    // None of them applies when Redis resumes (their deadlines passed while it was stopped).
    std::thread::sleep(Duration::from_secs(2));
    for replica in [a, b, c] {
        assert_eq!(auth_status(replica, &key), 200, "not revoked");
        assert_eq!(live_keys(replica, &admin), keys_before, "no key created");
    }
    agreed_history(&[a, b, c], &admin, 1);
    // Writes work again and reach every replica.
    let start = Instant::now();
    let answer = loop {
        let (status, answer) = create_key(b, &admin);
        if status == 201 {
            break answer;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{answer}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let second = answer["key"].as_str().unwrap().to_owned();
    // On every replica before Redis loses the feed: the replica that seeds it again does so
    // from its mirror, which must hold `second`.
    for replica in [a, b, c] {
        until_status(replica, &second, 200, Duration::from_secs(3));
    }

    // Redis restarted empty: the feed is seeded again from a mirror; keys and writes go on.
    redis.restart_empty().unwrap();
    let start = Instant::now();
    let answer = loop {
        let (status, answer) = create_key(c, &admin);
        if status == 201 {
            break answer;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{answer}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let third = answer["key"].as_str().unwrap().to_owned();
    for replica in [a, b, c] {
        until_status(replica, &third, 200, Duration::from_secs(3));
        assert_eq!(auth_status(replica, &key), 200);
        assert_eq!(auth_status(replica, &second), 200);
    }
    let (status, answer) = revoke(a, &admin, &key_id);
    assert_eq!(status, 200, "{answer}");
    until_status(c, &key, 401, Duration::from_secs(3));
}

#[test]
fn a_restarted_replica_catches_up_and_a_new_one_adopts_the_shared_state() {
    let _one = one_at_a_time();
    let (redis, mut replicas, admin) = deployment();
    let (status, answer) = put_profile(&replicas[0], &admin, "v1", &profile(None));
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = create_key(&replicas[0], &admin);
    assert_eq!(status, 201, "{answer}");
    let old_key = answer["key"].as_str().unwrap().to_owned();
    let old_id = answer["keyId"].as_str().unwrap().to_owned();
    until_status(&replicas[2], &old_key, 200, Duration::from_secs(3));

    // C dies; meanwhile a key is created, the old one revoked and a profile registered.
    replicas[2].kill();
    let (status, answer) = create_key(&replicas[0], &admin);
    assert_eq!(status, 201, "{answer}");
    let new_key = answer["key"].as_str().unwrap().to_owned();
    let (status, answer) = revoke(&replicas[1], &admin, &old_id);
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = put_profile(&replicas[1], &admin, "v2", &profile(Some(1)));
    assert_eq!(status, 201, "{answer}");

    // C restarts on its data directory: it prints no key and has caught up before answering.
    let data = replicas[2].data.clone();
    let (service, shared) = start(&data, &redis, false);
    assert!(shared.contains("caught up"), "{shared}");
    replicas[2].service = service;
    let c = &replicas[2];
    assert_eq!(auth_status(c, &new_key), 200);
    assert_eq!(auth_status(c, &old_key), 401);
    agreed_history(&[&replicas[0], &replicas[1], c], &admin, 2);

    // A new replica adopts the deployment's state: no key of its own, the admin key works.
    let d = replica(&redis, false);
    assert!(d.shared.starts_with("joined"), "{}", d.shared);
    assert_eq!(auth_status(&d, &admin), 200);
    assert_eq!(auth_status(&d, &new_key), 200);
    assert_eq!(auth_status(&d, &old_key), 401);
    agreed_history(&[&replicas[0], &d], &admin, 2);
}

#[test]
fn two_replicas_starting_at_once_on_an_empty_redis_make_one_admin_key() {
    let _one = one_at_a_time();
    let redis = RedisServer::start().unwrap();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let started: Vec<(ServeProcess, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = dirs
            .iter()
            .map(|dir| {
                let redis = &redis;
                scope.spawn(move || {
                    // Only the replica that seeded the feed prints keys.
                    start_reading(dir.path(), redis, |shared| {
                        shared.contains("from this replica's state")
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut replicas: Vec<Replica> = started
        .into_iter()
        .zip(&dirs)
        .map(|((service, shared), dir)| Replica {
            service,
            shared,
            data: dir.path().to_owned(),
            _dir: None,
        })
        .collect();
    let admins: Vec<String> = replicas
        .iter()
        .filter_map(|r| r.service.admin_key.clone())
        .collect();
    assert_eq!(
        admins.len(),
        1,
        "one seeds, the other adopts: {:?}",
        replicas.iter().map(|r| &r.shared).collect::<Vec<_>>()
    );
    for replica in &replicas {
        assert_eq!(auth_status(replica, &admins[0]), 200);
    }
    for replica in &mut replicas {
        replica.kill();
    }
}

#[test]
fn a_replica_restarted_while_redis_is_down_serves_from_its_mirror_and_catches_up() {
    let _one = one_at_a_time();
    let (redis, mut replicas, admin) = deployment();
    let (status, answer) = put_profile(&replicas[0], &admin, "v1", &profile(None));
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = create_key(&replicas[0], &admin);
    assert_eq!(status, 201, "{answer}");
    let key = answer["key"].as_str().unwrap().to_owned();
    until_status(&replicas[2], &key, 200, Duration::from_secs(3));

    replicas[2].kill();
    redis.signal("STOP");
    let data = replicas[2].data.clone();
    let (service, shared) = start(&data, &redis, false);
    assert!(shared.starts_with("Redis does not answer"), "{shared}");
    replicas[2].service = service;
    assert_eq!(auth_status(&replicas[2], &key), 200, "from the mirror");
    let (status, answer) = create_key(&replicas[2], &admin);
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"], "coordination-unavailable");

    redis.signal("CONT");
    let start = Instant::now();
    let answer = loop {
        let (status, answer) = create_key(&replicas[0], &admin);
        if status == 201 {
            break answer;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{answer}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let later = answer["key"].as_str().unwrap().to_owned();
    until_status(&replicas[2], &later, 200, Duration::from_secs(5));
}

#[test]
fn a_new_replica_does_not_start_without_redis() {
    let _one = one_at_a_time();
    let mut redis = RedisServer::start().unwrap();
    let url = redis.url();
    redis.kill();
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path());
    let output = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path())
        .arg("--config")
        .arg(&config)
        .args(["--redis-url", &url])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("never joined"), "{stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).contains("admin key"));
}

/// How many live keys `replica` lists for the workspace.
fn live_keys(replica: &Replica, admin: &str) -> usize {
    let (status, answer) = http(
        replica.addr(),
        "GET",
        &format!("/v1/workspaces/{WORKSPACE}/keys"),
        admin,
        None,
    )
    .expect("the replica answers");
    assert_eq!(status, 200, "{answer}");
    answer["keys"].as_array().map_or(0, Vec::len)
}

/// The bug this guards against (docs/replicas.md, "Shared keys, profiles and audit"): a write
/// answered 503 because its call to a *hanging* Redis timed out used to sit in Redis (its
/// socket buffer, or its queue of paused clients) and apply when Redis resumed, reaching every
/// replica through the feed. Each write now carries a deadline in Redis's clock that has
/// passed when the replica answers, so a refused write can never apply later.
///
/// A revocation and a registration first catch up with the feed (a read), so to have their
/// write sit in Redis the test holds writes only (`CLIENT PAUSE … WRITE`: reads answer, the
/// write waits in Redis), then stops Redis altogether (SIGSTOP) while the writes wait; a key
/// creation is sent straight into the stopped Redis's socket buffer. Redis resumes (SIGCONT)
/// after the replicas answered; 2 s later nothing of it has applied anywhere.
#[test]
fn writes_answered_while_redis_hangs_never_apply_after_it_resumes() {
    let _one = one_at_a_time();
    let (redis, replicas, admin) = deployment();
    let [a, b, c] = [&replicas[0], &replicas[1], &replicas[2]];
    let (status, answer) = put_profile(a, &admin, "v1", &profile(None));
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = create_key(a, &admin);
    assert_eq!(status, 201, "{answer}");
    let key = answer["key"].as_str().unwrap().to_owned();
    let key_id = answer["keyId"].as_str().unwrap().to_owned();
    for replica in [a, b, c] {
        until_status(replica, &key, 200, Duration::from_secs(3));
    }
    agreed_history(&[a, b, c], &admin, 1);
    let keys_before = live_keys(a, &admin);

    // Writes held in Redis for 3.5 s (reads still answer); then Redis stops altogether.
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "3500", "WRITE"]), "OK");
    let sent = Instant::now();
    let writes: Vec<_> = [
        (
            c.addr().to_owned(),
            "DELETE",
            format!("/keys/{key_id}"),
            None,
        ),
        (
            a.addr().to_owned(),
            "PUT",
            "/profiles/v2".to_owned(),
            Some(profile(Some(1))),
        ),
    ]
    .into_iter()
    .map(|(addr, method, path, body)| {
        let admin = admin.clone();
        std::thread::spawn(move || {
            http(
                &addr,
                method,
                &format!("/v1/workspaces/{WORKSPACE}{path}"),
                &admin,
                body.as_ref(),
            )
            .expect("the replica answers")
        })
    })
    .collect();
    // The catch-up reads answered and the writes wait in Redis: stop it.
    std::thread::sleep(Duration::from_millis(500));
    redis.signal("STOP");
    // A key creation goes straight to the stopped Redis (its socket buffer).
    let created = create_key(b, &admin);
    let mut answers: Vec<(u16, Value)> = writes.into_iter().map(|h| h.join().unwrap()).collect();
    answers.push(created);
    let answered = sent.elapsed();
    for (status, answer) in &answers {
        assert_eq!(*status, 503, "refused: {answer}");
    }
    // Redis resumes after every answer, with its pause over: whatever still waits in it runs.
    std::thread::sleep(Duration::from_millis(4_000).saturating_sub(sent.elapsed()));
    redis.signal("CONT");
    std::thread::sleep(Duration::from_secs(2));
    for replica in [a, b, c] {
        assert_eq!(
            auth_status(replica, &key),
            200,
            "the revocation answered 503 after {answered:?} did not apply on {}",
            replica.addr()
        );
        assert_eq!(
            live_keys(replica, &admin),
            keys_before,
            "the key creation answered 503 did not apply on {}",
            replica.addr()
        );
    }
    let records = agreed_history(&[a, b, c], &admin, 1);
    assert_eq!(records[0]["profileVersion"], "v1", "{records:#?}");
    // Each answer says what is known: written before the answer, or never.
    for (_, answer) in &answers {
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(
            ["coordination-outcome-unknown", "coordination-unavailable"].contains(&error),
            "{answer}"
        );
    }
    assert_eq!(answers[0].1["error"], "coordination-outcome-unknown");
    assert_eq!(answers[1].1["error"], "coordination-outcome-unknown");
    // And the revocation, sent again once Redis answers, works.
    let start = Instant::now();
    loop {
        let (status, answer) = revoke(a, &admin, &key_id);
        if status == 200 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{answer}");
        std::thread::sleep(Duration::from_millis(50));
    }
    for replica in [a, b, c] {
        until_status(replica, &key, 401, Duration::from_secs(3));
    }
}
