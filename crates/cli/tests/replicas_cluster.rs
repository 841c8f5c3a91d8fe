//! Replicas sharing limits through a **Redis Cluster** (issue 13), with real processes: three
//! primaries formed by `redis-cli --cluster create` (`turnstile_testkit::RedisCluster`),
//! three `turnstile serve --redis-url <every node> --redis-cluster` on their own data
//! directories, and the fake upstream (`turnstile_proxy::fake`, in the test process), which
//! records its maximum in-flight count.
//!
//! - End to end: the second and third replica adopt the first one's keys and profile through
//!   the cluster (the identity feed on the primary of `{ts-id}`); clients of all three acquire,
//!   heartbeat, call the upstream and release at random: the upstream never serves more calls
//!   than the provider's concurrency, and no lease is left after the releases.
//! - A primary SIGSTOPped: every replica reports `degraded` within 250 ms and admits its
//!   declared share (evidence `coordination: degraded`); after SIGCONT all are `healthy` again
//!   within 2 s.
//! - `--redis-cluster` against a standalone Redis: the replica refuses to start and says why.
#![cfg(unix)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use turnstile_coord::{ScopeName, WorkspaceKeys};
use turnstile_testkit::{RedisCluster, RedisServer};

mod common;
use common::TURNSTILE;
use turnstile_testkit::http;
use turnstile_testkit::replica::{
    acquire, drive_clients, fake_upstream, release, replica_config, start_cluster_replica,
    wait_for_all, Deployment, Keys, Replica,
};
use turnstile_testkit::replica::{one_at_a_time, PerRedis};

const WORKSPACE: &str = "replicas";
/// The provider's concurrency, shared by the three replicas.
const LIMIT: u64 = 3;

static DEPLOYMENTS: PerRedis<Keys> = PerRedis::new();

fn replica(cluster: &RedisCluster, redis_timeout_ms: u64) -> Replica {
    let deployment = Deployment {
        workspace: WORKSPACE,
        profile: json!({
            "workspace": {"concurrency": 64},
            "providers": {"upstream": {"concurrency": LIMIT, "maxQueueLength": 64}},
            "principals": {"client": {"concurrency": 64, "maxQueueLength": 64}},
        }),
        principals: &["client"],
    };
    start_cluster_replica(
        TURNSTILE,
        cluster,
        &DEPLOYMENTS,
        |dir| replica_config(dir, redis_timeout_ms),
        &deployment,
    )
}

/// The provider lane's lease members, asked with `redis-cli -c` (follows `MOVED`).
fn leases(cluster: &RedisCluster) -> u64 {
    let key = WorkspaceKeys::new(WORKSPACE).leases(&ScopeName::provider("upstream"));
    let out = Command::new("redis-cli")
        .args(["-c", "-p", &cluster.nodes()[0].port().to_string()])
        .args(["ZCARD", &key])
        .output()
        .expect("redis-cli (installed with redis-server)");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(u64::MAX)
}

#[test]
fn three_replicas_on_a_cluster_never_let_the_upstream_exceed_the_shared_concurrency() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start(3).expect("a Redis Cluster of three primaries");
    let replicas: Arc<Vec<Replica>> = Arc::new((0..3).map(|_| replica(&cluster, 2_000)).collect());
    let up = fake_upstream();
    let total = drive_clients(&replicas, &up, 9, Duration::from_secs(4));
    let (_, stats) = http(&up.addr, "GET", "/_stats", "", None).unwrap();
    let max = stats["max_in_flight"].as_u64().unwrap();
    eprintln!("{total} calls through 3 replicas on a cluster, upstream max in flight {max}");
    assert!(
        max <= LIMIT,
        "the upstream served {max} at once (limit {LIMIT})"
    );
    assert_eq!(max, LIMIT, "the clients saturated the shared limit");
    assert!(total >= 30, "only {total} calls");
    assert_eq!(leases(&cluster), 0, "no lease left after the releases");
}

#[test]
fn a_stopped_primary_makes_every_replica_degraded_within_250_ms() {
    let _serial = one_at_a_time();
    let mut cluster = RedisCluster::start(3).expect("a Redis Cluster of three primaries");
    let replicas: Vec<Replica> = (0..3).map(|_| replica(&cluster, 100)).collect();
    wait_for_all(&replicas, "healthy", Duration::from_secs(5));
    let (status, held) = acquire(&replicas[0], "upstream", 0);
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["evidence"]["coordination"], "shared", "{held}");

    // Whichever primary stops (here not necessarily the workspace's), every replica's probe
    // of every primary fails: degraded, as with a standalone Redis.
    cluster.node_mut(2).signal("STOP");
    let noticed = wait_for_all(&replicas, "degraded", Duration::from_millis(250));
    // Share 0.34 of 3 = 1 per replica: replica 1 admits one alone, then queues.
    let (status, alone) = acquire(&replicas[1], "upstream", 0);
    assert_eq!(status, 200, "{alone}");
    assert_eq!(alone["evidence"]["coordination"], "degraded", "{alone}");
    let (status, full) = acquire(&replicas[1], "upstream", 0);
    assert_eq!(status, 429, "beyond the declared share: {full}");

    cluster.node_mut(2).signal("CONT");
    let recovered = wait_for_all(&replicas, "healthy", Duration::from_secs(2));
    eprintln!(
        "a primary's SIGSTOP noticed by all after {noticed:?}; healthy again after {recovered:?}"
    );
    release(&replicas[1], alone["leaseId"].as_str().unwrap());
    release(&replicas[0], held["leaseId"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(2);
    while leases(&cluster) != 0 {
        assert!(
            Instant::now() < deadline,
            "leases left: {}",
            leases(&cluster)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn redis_cluster_against_a_standalone_redis_is_refused_with_its_reason() {
    let _serial = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().unwrap();
    let config = replica_config(dir.path(), 100);
    let out = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&config)
        .args(["--redis-url", &redis.url(), "--redis-cluster"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("not a Redis Cluster node (cluster_enabled:0)"),
        "{stderr}"
    );
}
