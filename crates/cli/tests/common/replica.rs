//! A replica of a deployment on one Redis, for the `replicas_*` tests: its `turnstile serve`
//! (killed on drop), its data directory and the principals' keys.
//!
//! Keys and profiles are shared through Redis (`docs/replicas.md`, "Shared keys, profiles and
//! audit"): the first replica started on a Redis registers the deployment's profile and
//! creates its keys; every later replica on the same Redis adopts them.
//!
//! The Redis is [`RedisServer`] (`turnstile_testkit`): `redis-server`, or the binary
//! `TURNSTILE_TEST_REDIS_SERVER` names (`valkey-server`: `.ci/run` runs the replica tests again
//! against Valkey), checked at start by `INFO server`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use turnstile_testkit::{RedisCluster, RedisServer};

use super::{http, start_with, PerRedis, Service};

/// Keys by principal.
pub type Keys = Vec<(String, String)>;

/// One running replica.
pub struct Replica {
    pub service: Service,
    pub keys: Keys,
    config: PathBuf,
    data: tempfile::TempDir,
}

impl Replica {
    /// The key of `principal`.
    pub fn key(&self, principal: &str) -> &str {
        self.keys
            .iter()
            .find(|(p, _)| p == principal)
            .map(|(_, k)| k.as_str())
            .expect("a key for the principal")
    }

    /// SIGKILL, then a restart on the same data directory and configuration.
    pub fn kill_and_restart(&mut self, redis: &RedisServer) {
        let _ = self.service.child.kill();
        let _ = self.service.child.wait();
        let url = redis.url();
        self.service = start_with(
            self.data.path(),
            &self.config,
            false,
            &["--redis-url", &url],
        );
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.service.child.kill();
        let _ = self.service.child.wait();
    }
}

/// What the first replica of a deployment sets up.
pub struct Deployment<'a> {
    pub workspace: &'a str,
    pub profile: Value,
    pub principals: &'a [&'a str],
}

/// Starts a replica on `redis` with the configuration file `config` writes into its data
/// directory; the first replica on this Redis (as `deployments` records it) sets `deployment`
/// up, later ones adopt its keys.
pub fn start_replica(
    redis: &RedisServer,
    deployments: &PerRedis<Keys>,
    config: impl FnOnce(&Path) -> PathBuf,
    deployment: &Deployment,
) -> Replica {
    let url = redis.url();
    let id = (redis.port(), redis.pid());
    start_replica_on(&["--redis-url", &url], id, deployments, config, deployment)
}

/// [`start_replica`] on a Redis Cluster (`--redis-cluster`, every node a seed).
pub fn start_cluster_replica(
    cluster: &RedisCluster,
    deployments: &PerRedis<Keys>,
    config: impl FnOnce(&Path) -> PathBuf,
    deployment: &Deployment,
) -> Replica {
    let url = cluster.url();
    let first = &cluster.nodes()[0];
    let id = (first.port(), first.pid());
    start_replica_on(
        &["--redis-url", &url, "--redis-cluster"],
        id,
        deployments,
        config,
        deployment,
    )
}

fn start_replica_on(
    redis_args: &[&str],
    id: (u16, u32),
    deployments: &PerRedis<Keys>,
    config: impl FnOnce(&Path) -> PathBuf,
    deployment: &Deployment,
) -> Replica {
    let data = tempfile::tempdir().unwrap();
    let config = config(data.path());
    let shared = deployments.get(id);
    let service = start_with(data.path(), &config, shared.is_none(), redis_args);
    if let Some(keys) = shared {
        return Replica {
            service,
            keys,
            config,
            data,
        };
    }
    let admin = service.admin_key.clone().expect("first start");
    let workspace = deployment.workspace;
    let (status, answer) = http(
        &service.addr,
        "PUT",
        &format!("/v1/workspaces/{workspace}/profiles/v1"),
        &admin,
        Some(&deployment.profile),
    )
    .unwrap();
    assert_eq!(status, 201, "{answer}");
    let keys: Keys = deployment
        .principals
        .iter()
        .map(|principal| {
            let (status, answer) = http(
                &service.addr,
                "POST",
                &format!("/v1/workspaces/{workspace}/keys"),
                &admin,
                Some(&json!({ "principalId": principal })),
            )
            .unwrap();
            assert_eq!(status, 201, "{answer}");
            (
                (*principal).to_owned(),
                answer["key"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    deployments.insert(id, keys.clone());
    Replica {
        service,
        keys,
        config,
        data,
    }
}

/// The replica's coordination state, from `/readyz`.
pub fn coordination(replica: &Replica) -> String {
    readyz_field(replica, "coordination")
}

/// The kind of the replica's last failed Redis call while it is not healthy, from `/readyz`
/// (empty when healthy).
pub fn coordination_failure(replica: &Replica) -> String {
    readyz_field(replica, "coordinationFailure")
}

fn readyz_field(replica: &Replica, field: &str) -> String {
    let (_, answer) = http(&replica.service.addr, "GET", "/readyz", "", None).unwrap_or_default();
    answer[field].as_str().unwrap_or("").to_owned()
}

/// Waits until every replica's `/readyz` says `state`; answers how long that took.
pub fn wait_for_all(replicas: &[Replica], state: &str, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if replicas.iter().all(|r| coordination(r) == state) {
            return start.elapsed();
        }
        if start.elapsed() >= within {
            let states: Vec<String> = replicas.iter().map(coordination).collect();
            panic!("not all {state} within {within:?}: {states:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The scripted fake upstream (`turnstile_proxy::fake`), in this test process; `GET /_stats`
/// answers its maximum in-flight count.
pub struct FakeUpstream {
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
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: up\r\nContent-Type: application/json\r\n\
         x-fake-script: first-byte-ms=15\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
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
                    let id = lease["leaseId"].as_str().unwrap();
                    if next(&mut seed).is_multiple_of(3) {
                        let (status, _) = http(
                            &replica.service.addr,
                            "POST",
                            &format!("/v1/leases/{id}/heartbeat"),
                            replica.key("client"),
                            None,
                        )
                        .unwrap();
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
        thread.join().unwrap();
    }
    granted.load(Ordering::SeqCst)
}

/// The replicas tests' configuration file in `dir`: share 0.34 when degraded, liveness 1.5 s
/// renewed every 300 ms, a probe every 50 ms, and `redis_timeout_ms` as the Redis call timeout
/// (100 ms for the failure tests; longer where a debug build's own scheduling on two busy cores
/// must not be mistaken for a Redis failure).
pub fn replica_config(dir: &Path, redis_timeout_ms: u64) -> PathBuf {
    let path = dir.join("turnstile.toml");
    std::fs::write(
        &path,
        format!(
            "demo = false\n\n[leases]\nttl_ms = 30000\n\n[coordination]\ndegraded_share = \"0.34\"\n\
             lease_liveness_ms = 1500\nrenew_every_ms = 300\nprobe_every_ms = 50\n\
             timeout_ms = {redis_timeout_ms}\n"
        ),
    )
    .unwrap();
    path
}
