//! Replicas sharing limits through Redis (issue 13), with real processes: one `redis-server`
//! (started here on a free port, stopped by PID), three `turnstile serve --redis-url` on their
//! own data directories, and the fake upstream (`turnstile_proxy::fake`, in the test process),
//! which records its maximum in-flight count. Needs `redis-server` (`.ci/run` installs it; a missing one fails, never skips).
//!
//! - End to end: clients of all three replicas acquire, heartbeat, call the upstream and
//!   release at random: the upstream never serves more calls than the provider's concurrency,
//!   and no lease is left in Redis after the releases.
//! - A replica SIGKILLed holding every slot: the slots come back within the liveness bound
//!   (1.5 s here, far below the 30 s client lease TTL); the other replicas answer throughout.
//! - Redis SIGSTOPped, then SIGKILLed and restarted empty: every replica reports `degraded`
//!   within 250 ms, admits only its declared share (evidence `coordination: degraded`), fails
//!   money budgets closed, and is healthy again within 2 s with its live leases registered.
//! - A Redis Cluster node (none of its slots served, then all of them): the replica refuses to
//!   start and names the reason.
//! - Redis loses the books under held leases (`FLUSHALL`, `FUNCTION FLUSH` + `FLUSHALL`, the
//!   workspace's keys evicted, a lease set evicted alone) with the connections kept up: the
//!   holders register their leases again before anyone is granted (issue 34, item 1).
#![cfg(unix)]

use std::process::{Command, Stdio};
use std::sync::Arc;

use std::time::{Duration, Instant};

use serde_json::json;
use turnstile_coord::{ScopeName, WorkspaceKeys};
use turnstile_testkit::{replica, RedisServer};

mod common;
use common::TURNSTILE;
use turnstile_testkit::replica::{
    acquire, coordination_failure, drive_clients, fake_upstream, release, replica_config,
    start_replica, wait_for_all, Deployment, Keys, Replica,
};
use turnstile_testkit::replica::{one_at_a_time, PerRedis};
use turnstile_testkit::{get_text, http};

const WORKSPACE: &str = "replicas";
/// The provider's concurrency, shared by the three replicas.
const LIMIT: u64 = 3;

/// The client's key of each Redis (the first replica on a Redis creates it, the others adopt it).
static DEPLOYMENTS: PerRedis<Keys> = PerRedis::new();

/// Starts a replica on `redis`; the first one registers the profile and creates the client's
/// key, which every later replica on the same Redis shares.
fn replica(redis: &RedisServer) -> Replica {
    replica_with_timeout(redis, 100)
}

/// [`replica`] with its own Redis call timeout.
fn replica_with_timeout(redis: &RedisServer, redis_timeout_ms: u64) -> Replica {
    let deployment = Deployment {
        workspace: WORKSPACE,
        profile: json!({
            "workspace": {"concurrency": 64},
            "providers": {
                "upstream": {"concurrency": LIMIT, "maxQueueLength": 64},
                "paid": {"concurrency": LIMIT, "maxCostUsd": 100.0},
            },
            "principals": {"client": {"concurrency": 64, "maxQueueLength": 64}},
        }),
        principals: &["client"],
    };
    start_replica(
        TURNSTILE,
        redis,
        &DEPLOYMENTS,
        |dir| replica_config(dir, redis_timeout_ms),
        &deployment,
    )
}

/// Leases whose liveness has not run out by Redis's clock.
fn live_leases(redis: &RedisServer, provider: &str) -> u64 {
    replica::live_leases(redis, WORKSPACE, provider)
}

#[test]
fn three_replicas_never_let_the_upstream_exceed_the_shared_concurrency() {
    let _serial = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let replicas: Arc<Vec<Replica>> = Arc::new(
        (0..3)
            .map(|_| replica_with_timeout(&redis, 2_000))
            .collect(),
    );
    let up = fake_upstream();
    let total = drive_clients(&replicas, &up, 9, Duration::from_secs(4));
    let (_, stats) = http(&up.addr, "GET", "/_stats", "", None).unwrap();
    let max = stats["max_in_flight"].as_u64().unwrap();
    eprintln!("{total} calls through 3 replicas, upstream max in flight {max}");
    assert!(
        max <= LIMIT,
        "the upstream served {max} at once (limit {LIMIT})"
    );
    assert_eq!(max, LIMIT, "the clients saturated the shared limit");
    assert!(total >= 30, "only {total} calls");
    assert_eq!(
        live_leases(&redis, "upstream"),
        0,
        "no lease left after the releases"
    );
}

#[test]
fn a_replica_killed_holding_leases_gives_its_slots_back_within_the_liveness_bound() {
    let _serial = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let mut replicas: Vec<Replica> = (0..3).map(|_| replica(&redis)).collect();
    for _ in 0..LIMIT {
        let (status, answer) = acquire(&replicas[0], "upstream", 0);
        assert_eq!(status, 200, "{answer}");
    }
    let (status, answer) = acquire(&replicas[1], "upstream", 0);
    assert_eq!(status, 429, "{answer}");
    assert_eq!(answer["reason"], "concurrency");
    assert_eq!(live_leases(&redis, "upstream"), LIMIT);

    let mut doomed = replicas.remove(0);
    doomed.service.child.kill().unwrap();
    doomed.service.child.wait().unwrap();
    let killed = Instant::now();
    let mut granted = 0;
    while granted == 0 {
        // The other replicas answer throughout, and never beyond the limit.
        for replica in &replicas {
            let (status, answer) = acquire(replica, "upstream", 0);
            assert!(status == 200 || status == 429, "{status} {answer}");
            granted += usize::from(status == 200);
        }
        assert!(
            killed.elapsed() < Duration::from_millis(1_500 + 300 + 700),
            "slots not back within the liveness bound"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    // The dead replica's leases were granted one after another, so (unless a renewal caught
    // them all after the last grant) they expire one after another too, a few ms apart on a
    // quiet machine, more on a loaded one: each remaining slot is back within the same bound.
    for _ in granted..LIMIT as usize {
        loop {
            let (status, answer) = acquire(&replicas[0], "upstream", 0);
            if status == 200 {
                break;
            }
            assert_eq!(status, 429, "{answer}");
            assert!(
                killed.elapsed() < Duration::from_millis(1_500 + 300 + 700),
                "all the dead replica's slots are back within the liveness bound: {answer}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let (status, answer) = acquire(&replicas[1], "upstream", 0);
    assert_eq!(status, 429, "{answer}");
    eprintln!(
        "slots back {:?} after the SIGKILL (liveness 1.5 s, client TTL 30 s)",
        killed.elapsed()
    );
}

#[test]
fn a_stopped_or_killed_redis_makes_every_replica_degraded_within_250_ms() {
    let _serial = one_at_a_time();
    let mut redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let replicas: Vec<Replica> = (0..3).map(|_| replica(&redis)).collect();
    wait_for_all(&replicas, "healthy", Duration::from_secs(2));

    redis.signal("STOP");
    let stopped = Instant::now();
    // An admission during the hang waits on Redis for one timeout at most.
    let (status, answer) = acquire(&replicas[0], "upstream", 0);
    let first = stopped.elapsed();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["evidence"]["coordination"], "degraded", "{answer}");
    let within = Duration::from_millis(250).saturating_sub(stopped.elapsed());
    wait_for_all(&replicas, "degraded", within);
    eprintln!(
        "SIGSTOP: first admission answered in {first:?}; all degraded within {:?}",
        stopped.elapsed()
    );
    assert!(
        first < Duration::from_millis(250),
        "an admission waited {first:?}"
    );
    // The declared share: floor(3 x 0.34) = 1 per replica.
    let (status, answer) = acquire(&replicas[0], "upstream", 0);
    assert_eq!(status, 429, "{answer}");
    let mut held = Vec::new();
    for replica in &replicas[1..] {
        let (status, answer) = acquire(replica, "upstream", 0);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["evidence"]["coordination"], "degraded");
        held.push(answer["leaseId"].as_str().unwrap().to_owned());
    }
    // Money fails closed.
    let (status, answer) = acquire(&replicas[1], "paid", 0);
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["reason"], "coordination-unavailable");
    let metrics = metrics(&replicas[2]);
    assert!(
        metrics.contains("turnstile_coordination_state{state=\"degraded\"} 1"),
        "{metrics}"
    );
    // `/readyz` says why, in a word: a hung Redis answers nothing within the timeout.
    for replica in &replicas {
        assert_eq!(coordination_failure(replica), "timeout");
    }

    redis.signal("CONT");
    let resumed = Instant::now();
    wait_for_all(&replicas, "healthy", Duration::from_secs(2));
    eprintln!("SIGCONT: all healthy after {:?}", resumed.elapsed());
    assert_eq!(
        coordination_failure(&replicas[0]),
        "",
        "healthy: no failure shown"
    );
    assert_eq!(
        live_leases(&redis, "upstream"),
        3,
        "the degraded leases were registered"
    );
    release(&replicas[1], &held[0]);
    assert_eq!(live_leases(&redis, "upstream"), 2);

    redis.kill();
    let killed = Instant::now();
    wait_for_all(&replicas, "degraded", Duration::from_millis(250));
    eprintln!("SIGKILL: all degraded after {:?}", killed.elapsed());
    // A dead Redis refuses the connection: a failed call, not a timeout.
    assert_eq!(coordination_failure(&replicas[0]), "redis");
    redis.restart_empty().unwrap();
    let restarted = Instant::now();
    wait_for_all(&replicas, "healthy", Duration::from_secs(2));
    eprintln!(
        "restart (empty): all healthy after {:?}",
        restarted.elapsed()
    );
    assert_eq!(
        live_leases(&redis, "upstream"),
        2,
        "live leases registered in the empty Redis"
    );
    // Shared again: two held, one free in the whole deployment.
    let (status, answer) = acquire(&replicas[0], "upstream", 0);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["evidence"]["coordination"], "shared");
    for replica in &replicas[1..] {
        let (status, answer) = acquire(replica, "upstream", 0);
        assert_eq!(status, 429, "{answer}");
    }
}

fn metrics(replica: &Replica) -> String {
    get_text(&replica.service.addr, "/metrics")
}

#[test]
fn a_restarted_replica_registers_its_reinstated_leases_again() {
    let _serial = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let mut replicas: Vec<Replica> = (0..2).map(|_| replica(&redis)).collect();
    for _ in 0..2 {
        let (status, answer) = acquire(&replicas[0], "upstream", 0);
        assert_eq!(status, 200, "{answer}");
    }
    // SIGKILL and restart on the same data directory: the core reinstates both leases.
    replicas[0].kill_and_restart(&redis);
    // The members of the dead process expire after their liveness (1.5 s); the reinstated
    // leases were registered again under new members and are renewed.
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(live_leases(&redis, "upstream"), 2);
    let (status, answer) = acquire(&replicas[1], "upstream", 0);
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = acquire(&replicas[1], "upstream", 0);
    assert_eq!(status, 429, "the reinstated leases count: {answer}");
}

/// A Redis Cluster node named as one standalone Redis (without `--redis-cluster` the functions
/// would be loaded on that node only and calls would not follow `MOVED`): `turnstile serve
/// --redis-url` refuses to start against one and names the flag, instead of joining it and
/// then failing every call. Run against Valkey too (`.ci/run`).
#[test]
fn a_redis_cluster_node_is_refused_at_start_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bus = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let binary = turnstile_testkit::server_binary();
    let mut server = Command::new(&binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        // The bus port defaults to the port + 10,000: past 65,535 for a free port above 55,535.
        .args(["--cluster-port", &bus.to_string()])
        .args(["--cluster-enabled", "yes", "--cluster-config-file"])
        .arg(dir.path().join("nodes.conf"))
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{binary} starts: {e}"));
    let ready = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < ready,
            "{binary} in cluster mode did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let config = dir.path().join("turnstile.toml");
    std::fs::write(
        &config,
        format!("demo = false\n\n[coordination]\nredis_url = \"redis://127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    // First a node that serves no slot (every call answers CLUSTERDOWN), then one that serves
    // them all (every call would work on it, and the replica would join).
    for (phase, data) in [("no slot", "data-1"), ("every slot", "data-2")] {
        if phase == "every slot" {
            let added = Command::new("redis-cli")
                .args([
                    "-p",
                    &port.to_string(),
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    "0",
                    "16383",
                ])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&added.stdout).trim(), "OK");
            // A node that was down marks itself ok again after a rejoin delay of up to 5 s
            // (Valkey takes that long here; Redis is at once).
            let ok = Instant::now() + Duration::from_secs(15);
            loop {
                let info = Command::new("redis-cli")
                    .args(["-p", &port.to_string(), "CLUSTER", "INFO"])
                    .output()
                    .unwrap();
                if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    Instant::now() < ok,
                    "the cluster node never served its slots"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let mut serve = Command::new(env!("CARGO_BIN_EXE_turnstile"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path().join(data))
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = serve.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = serve.kill();
                let _ = server.kill();
                panic!("{phase}: turnstile serve kept running against a cluster node");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(!status.success(), "{phase}: {stderr}");
        assert!(
            stderr.contains("Redis Cluster node (cluster_enabled:1)")
                && stderr.contains("--redis-cluster"),
            "{phase}: {stderr}"
        );
    }
    let _ = server.kill();
    let _ = server.wait();
}

/// How a test makes Redis lose the books while every connection stays up.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// `FLUSHALL`.
    FlushAll,
    /// `FUNCTION FLUSH` then `FLUSHALL` (the libraries gone too).
    FunctionFlushAndFlushAll,
    /// Every key of the workspace deleted (what an `allkeys-*` policy evicting them does).
    EvictWorkspace,
}

impl Loss {
    fn inflict(self, redis: &RedisServer) {
        match self {
            Loss::FlushAll => assert_eq!(redis.cli(&["FLUSHALL"]), "OK"),
            Loss::FunctionFlushAndFlushAll => {
                assert_eq!(redis.cli(&["FUNCTION", "FLUSH"]), "OK");
                assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
            }
            Loss::EvictWorkspace => {
                let pattern = format!("{}*", WorkspaceKeys::new(WORKSPACE).prefix());
                let keys = redis.cli(&["--scan", "--pattern", &pattern]);
                let keys: Vec<&str> = keys.lines().collect();
                assert!(!keys.is_empty(), "the workspace has keys");
                let mut del = vec!["DEL"];
                del.extend(keys);
                redis.cli(&del);
            }
        }
    }
}

/// Two replicas on `redis`, healthy, the first holding the provider's whole concurrency.
fn replica_1_holding_the_limit(redis: &RedisServer) -> Vec<Replica> {
    let replicas: Vec<Replica> = (0..2).map(|_| replica(redis)).collect();
    wait_for_all(&replicas, "healthy", Duration::from_secs(5));
    for _ in 0..LIMIT {
        let (status, answer) = acquire(&replicas[0], "upstream", 0);
        assert_eq!(status, 200, "{answer}");
    }
    replicas
}

/// Issue 34, item 1: two replicas share the provider's concurrency; replica 1 holds all of
/// it and replica 2 is refused. Redis loses the books with the connections kept up. Replica 2
/// then tries to fill the limit again at once: none of its admissions is granted (it waits
/// for the books' reconciliation window, during which replica 1 registers its leases again),
/// both replicas declare `reconciling` meanwhile, and afterwards Redis holds replica 1's
/// leases and replica 2 is still refused. On main replica 2 admitted the whole limit again.
fn books_lost_under_held_leases(loss: Loss) {
    let _serial = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let replicas = replica_1_holding_the_limit(&redis);
    let (status, answer) = acquire(&replicas[1], "upstream", 0);
    assert_eq!(status, 429, "{answer}");
    assert_eq!(live_leases(&redis, "upstream"), LIMIT);

    loss.inflict(&redis);
    let lost = Instant::now();
    let replicas = Arc::new(replicas);
    let tries: Vec<_> = (0..LIMIT)
        .map(|_| {
            let replicas = Arc::clone(&replicas);
            std::thread::spawn(move || acquire(&replicas[1], "upstream", 0))
        })
        .collect();
    // While the books are rebuilt, the replicas say so.
    let mut seen = false;
    while !seen && lost.elapsed() < Duration::from_millis(900) {
        seen = replicas
            .iter()
            .any(|r| replica::coordination(r) == "reconciling");
        std::thread::sleep(Duration::from_millis(10));
    }
    for attempt in tries {
        let (status, answer) = attempt.join().unwrap();
        assert_eq!(
            status, 429,
            "{loss:?}: replica 2 admitted into the emptied books: {answer}"
        );
        assert_eq!(answer["reason"], "concurrency", "{answer}");
    }
    assert!(seen, "no replica declared `reconciling` after {loss:?}");
    eprintln!(
        "{loss:?}: replica 2's admissions all refused, the last after {:?}",
        lost.elapsed()
    );
    assert_eq!(live_leases(&redis, "upstream"), LIMIT, "{loss:?}");
    assert!(
        metrics(&replicas[0]).contains("turnstile_coordination_books_lost_total 1"),
        "the holder counted the loss once: {}",
        metrics(&replicas[0])
    );
    // Later (past renewals and the liveness of anything stale) the limit still holds.
    std::thread::sleep(Duration::from_millis(2_000));
    wait_for_all(&replicas, "healthy", Duration::from_secs(2));
    let (status, answer) = acquire(&replicas[1], "upstream", 0);
    assert_eq!(status, 429, "{loss:?}: {answer}");
    assert_eq!(live_leases(&redis, "upstream"), LIMIT, "{loss:?}");
}

#[test]
fn books_lost_to_flushall_are_rebuilt_before_any_grant() {
    books_lost_under_held_leases(Loss::FlushAll);
}

#[test]
fn books_lost_to_function_flush_and_flushall_are_rebuilt_before_any_grant() {
    books_lost_under_held_leases(Loss::FunctionFlushAndFlushAll);
}

#[test]
fn books_lost_to_eviction_of_the_workspace_are_rebuilt_before_any_grant() {
    books_lost_under_held_leases(Loss::EvictWorkspace);
}

/// A lease set evicted alone (the books epoch kept: what `volatile-*` never and `allkeys-*`
/// sometimes does): the holder's next renewal finds its leases missing and registers them
/// again (on main a renewal, `ZADD XX`, let them go for good).
#[test]
fn leases_evicted_alone_are_registered_again_by_the_next_renewal() {
    let _serial = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let replicas = replica_1_holding_the_limit(&redis);
    let key = WorkspaceKeys::new(WORKSPACE).leases(&ScopeName::provider("upstream"));
    // Deleted (a renewal may register them again before the next line reads them).
    assert_eq!(redis.cli(&["DEL", &key]), "1");
    // Renewals every 300 ms in these replicas' configuration.
    let deleted = Instant::now();
    while live_leases(&redis, "upstream") != LIMIT {
        assert!(
            deleted.elapsed() < Duration::from_millis(1_500),
            "the evicted leases were not registered again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "evicted leases registered again after {:?}",
        deleted.elapsed()
    );
    let (status, answer) = acquire(&replicas[1], "upstream", 0);
    assert_eq!(status, 429, "{answer}");
    assert!(metrics(&replicas[0]).contains("turnstile_coordination_books_lost_total 1"));
}
