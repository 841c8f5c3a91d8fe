//! A replica of a deployment on one Redis, for the `replicas_*` tests: its `turnstile serve`
//! (killed on drop), its data directory and the principals' keys; its `/readyz` state; the
//! replicas tests' configuration; one replica scenario at a time ([`one_at_a_time`]).
//!
//! Keys and profiles are shared through Redis (`docs/replicas.md`, "Shared keys, profiles and
//! audit"): the first replica started on a Redis registers the deployment's profile and
//! creates its keys; every later replica on the same Redis adopts them.
//!
//! The Redis is [`RedisServer`] (`turnstile_testkit`): `redis-server`, or the binary
//! `TURNSTILE_TEST_REDIS_SERVER` names (`valkey-server`: `.ci/run` runs the replica tests again
//! against Valkey), checked at start by `INFO server`.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fixtures::config_file;
use crate::process::{ServeProcess, Turnstile};
use crate::raw_http::http;
use crate::{RedisCluster, RedisServer};

/// Keys by principal.
pub type Keys = Vec<(String, String)>;

/// One running replica.
pub struct Replica {
    /// Its `turnstile serve`.
    pub service: ServeProcess,
    /// The keys of the deployment's principals.
    pub keys: Keys,
    turnstile: Turnstile,
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
        self.service = self.turnstile.serve_with(
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
    /// The workspace.
    pub workspace: &'a str,
    /// Its profile, registered as revision `v1`.
    pub profile: Value,
    /// The principals that get a key.
    pub principals: &'a [&'a str],
}

/// Starts a replica (`turnstile`'s `serve`) on `redis` with the configuration file `config` writes into its data
/// directory; the first replica on this Redis (as `deployments` records it) sets `deployment`
/// up, later ones adopt its keys.
pub fn start_replica(
    turnstile: Turnstile,
    redis: &RedisServer,
    deployments: &PerRedis<Keys>,
    config: impl FnOnce(&Path) -> PathBuf,
    deployment: &Deployment,
) -> Replica {
    let url = redis.url();
    let id = (redis.port(), redis.pid());
    let args = ["--redis-url", url.as_str()];
    start_replica_on(turnstile, &args, id, deployments, config, deployment)
}

/// [`start_replica`] on a Redis Cluster (`--redis-cluster`, every node a seed).
pub fn start_cluster_replica(
    turnstile: Turnstile,
    cluster: &RedisCluster,
    deployments: &PerRedis<Keys>,
    config: impl FnOnce(&Path) -> PathBuf,
    deployment: &Deployment,
) -> Replica {
    let url = cluster.url();
    let first = &cluster.nodes()[0];
    let id = (first.port(), first.pid());
    start_replica_on(
        turnstile,
        &["--redis-url", &url, "--redis-cluster"],
        id,
        deployments,
        config,
        deployment,
    )
}

fn start_replica_on(
    turnstile: Turnstile,
    redis_args: &[&str],
    id: (u16, u32),
    deployments: &PerRedis<Keys>,
    config: impl FnOnce(&Path) -> PathBuf,
    deployment: &Deployment,
) -> Replica {
    let data = tempfile::tempdir().expect("a temporary directory");
    let config = config(data.path());
    let shared = deployments.get(id);
    let service = turnstile.serve_with(data.path(), &config, shared.is_none(), redis_args);
    if let Some(keys) = shared {
        return Replica {
            service,
            keys,
            turnstile,
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
    .expect("the replica answers");
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
            .expect("the replica answers");
            assert_eq!(status, 201, "{answer}");
            (
                (*principal).to_owned(),
                answer["key"].as_str().expect("a key").to_owned(),
            )
        })
        .collect();
    deployments.insert(id, keys.clone());
    Replica {
        service,
        keys,
        turnstile,
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

/// The replicas tests' configuration file in `dir`: share 0.34 when degraded, liveness 1.5 s
/// renewed every 300 ms, a probe every 50 ms, and `redis_timeout_ms` as the Redis call timeout
/// (100 ms for the failure tests; longer where a debug build's own scheduling on two busy cores
/// must not be mistaken for a Redis failure).
pub fn replica_config(dir: &Path, redis_timeout_ms: u64) -> PathBuf {
    config_file(
        dir,
        &format!(
            "demo = false\n\n[leases]\nttl_ms = 30000\n\n[coordination]\ndegraded_share = \"0.34\"\n\
             lease_liveness_ms = 1500\nrenew_every_ms = 300\nprobe_every_ms = 50\n\
             timeout_ms = {redis_timeout_ms}\n"
        ),
    )
}

/// What the replicas of one Redis (by port and PID) share in a test: keys and profiles are
/// shared through Redis, so the first replica on a Redis creates them and the later ones adopt
/// them (docs/replicas.md, "Shared keys, profiles and audit").
pub struct PerRedis<T>(Mutex<Vec<((u16, u32), T)>>);

impl<T: Clone> Default for PerRedis<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> PerRedis<T> {
    /// Nothing recorded yet (for a `static`).
    pub const fn new() -> Self {
        PerRedis(Mutex::new(Vec::new()))
    }

    /// What the first replica on this Redis recorded, if one did.
    pub fn get(&self, redis: (u16, u32)) -> Option<T> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .find(|(d, _)| *d == redis)
            .map(|(_, value)| value.clone())
    }

    /// Records what the first replica on this Redis set up.
    pub fn insert(&self, redis: (u16, u32), value: T) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push((redis, value));
    }
}

/// One replica scenario at a time within a test binary: each starts a Redis (`redis-server`, or
/// the binary `TURNSTILE_TEST_REDIS_SERVER` names, e.g. `valkey-server`) and its replicas, and
/// side by side on two cores their Redis calls pass a 100 ms timeout, which is the declared
/// degraded mode (correct behaviour, but not what these tests look at).
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
