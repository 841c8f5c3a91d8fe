//! The shared limits and the identity feed on a real **Redis Cluster** (three primaries formed
//! by `redis-cli --cluster create`): calls routed by each workspace's slot, the function
//! libraries loaded on every primary, the limits held across replicas whichever primary owns a
//! workspace, and degraded mode when any one primary hangs (SIGSTOP) or dies, with the library
//! loaded again and the leases registered again after a primary restarts empty.

use std::sync::Arc;
use std::time::{Duration, Instant};

use turnstile_admission::{Limits, Reason};
use turnstile_coord::identity::{SeedItem, Seeded, Written};
use turnstile_coord::{
    Admission, CoordConfig, Coordinator, FcallStats, Health, IdentityStore, LaneSpec, Mode,
    RedisStore, ScopeName, Topology, WorkspaceKeys,
};
use turnstile_testkit::{RedisCluster, RedisServer};

mod common;
use common::{limits, quick_config, runtime, until_healthy};

fn spec(workspace: &str, principal: &str, provider: Limits) -> LaneSpec {
    LaneSpec::new(
        (workspace, "openai", principal),
        "b",
        (&limits(1000), &limits(1000), &provider),
        Some(100),
        Some(0.25),
    )
    .unwrap()
}

fn config(cluster: &RedisCluster) -> CoordConfig {
    let mut config = quick_config(&cluster.url(), "0.5".parse().unwrap());
    config.topology = Topology::Cluster;
    config
}

async fn replica(cluster: &RedisCluster) -> Arc<Coordinator> {
    let coord = Coordinator::new(config(cluster)).unwrap();
    // The first probe connects to every primary and loads the library on each.
    until_healthy(&coord, 40, Duration::from_millis(25)).await;
    coord
}

/// `redis-cli -c` (cluster mode: follows `MOVED`) against `node`.
fn cli(node: &RedisServer, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-c", "-p", &node.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli (package redis-tools, installed with redis-server)");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn provider_leases(cluster: &RedisCluster, workspace: &str) -> u64 {
    let key = WorkspaceKeys::new(workspace).leases(&ScopeName::provider("openai"));
    let running = cluster
        .nodes()
        .iter()
        .find(|node| node.cli(&["PING"]) == "PONG")
        .expect("a running node");
    cli(running, &["ZCARD", &key]).parse().unwrap_or(0)
}

/// Enough workspaces that every primary owns some (checked, not assumed).
const WORKSPACES: usize = 24;

fn workspace(i: usize) -> String {
    format!("ws-cluster-{i}")
}

/// Waits until `coord`'s health is (`healthy`: true) or is not (false) `Healthy`; fails after
/// `within`, naming `what`. Answers how long it took.
async fn wait_health(coord: &Coordinator, healthy: bool, within: Duration, what: &str) -> Duration {
    let start = Instant::now();
    while (coord.health() == Health::Healthy) != healthy {
        assert!(start.elapsed() < within, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

/// A replica running its background task (probe, renewals), holding lease `h{i}` in every
/// workspace (limit 4).
async fn replica_holding_leases(
    cluster: &RedisCluster,
) -> (Arc<Coordinator>, tokio::task::JoinHandle<()>) {
    let coord = replica(cluster).await;
    let clock_start = Instant::now();
    let task = tokio::spawn(
        coord
            .clone()
            .run(move || clock_start.elapsed().as_millis() as u64),
    );
    for i in 0..WORKSPACES {
        let lane = spec(&workspace(i), "alice", limits(4));
        assert_eq!(
            coord.acquire(&lane, &format!("h{i}"), 0).await,
            Admission::Granted(Mode::Shared)
        );
    }
    (coord, task)
}

#[test]
fn two_replicas_share_every_workspaces_limit_whichever_primary_owns_it() {
    let rt = runtime();
    let cluster = RedisCluster::start(3).unwrap();
    rt.block_on(async {
        let (a, b) = (replica(&cluster).await, replica(&cluster).await);
        // The library is on every primary, not only on the node the replica first reached.
        for node in cluster.nodes() {
            let listed = node.cli(&["FUNCTION", "LIST", "LIBRARYNAME", "turnstile_v5"]);
            assert!(
                listed.contains("ts_acquire_v5"),
                "{}: {listed}",
                node.port()
            );
        }
        for i in 0..WORKSPACES {
            let lane = spec(&workspace(i), "alice", limits(2));
            assert_eq!(
                a.acquire(&lane, &format!("a{i}"), 0).await,
                Admission::Granted(Mode::Shared)
            );
            assert_eq!(
                b.acquire(&lane, &format!("b{i}"), 0).await,
                Admission::Granted(Mode::Shared)
            );
            assert!(matches!(
                a.acquire(&lane, &format!("c{i}"), 0).await,
                Admission::Wait {
                    reason: Reason::Concurrency,
                    mode: Mode::Shared,
                    ..
                }
            ));
            assert_eq!(provider_leases(&cluster, &workspace(i)), 2);
        }
        // Every primary holds some of them: the calls were routed by slot, not all to one node.
        let mut most_on_one = 0;
        for node in cluster.nodes() {
            let keys: u64 = node.cli(&["DBSIZE"]).parse().unwrap();
            assert!(keys > 0, "primary {} holds no workspace", node.port());
            let info = node.cli(&["INFO", "commandstats"]);
            most_on_one = most_on_one.max(FcallStats::parse(&info).calls);
        }
        // What the benchmarks read (`turnstile-bench serve --redis-cluster`) is summed over the
        // primaries: at least the three acquires per workspace, more than any one node ran.
        let stats = RedisStore::new(&cluster.url(), Topology::Cluster, Duration::from_secs(2))
            .unwrap()
            .fcall_stats()
            .await
            .unwrap();
        assert!(stats.calls >= 3 * WORKSPACES as u64, "{stats:?}");
        assert!(
            stats.calls > most_on_one,
            "{stats:?} vs {most_on_one} on one primary"
        );
        // Renewals (one pipeline per workspace on a cluster) keep them past their liveness.
        for _ in 0..8 {
            a.tick(0, true).await;
            b.tick(0, true).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for i in 0..WORKSPACES {
            assert_eq!(provider_leases(&cluster, &workspace(i)), 2, "renewed");
            assert!(a.release(&format!("a{i}"), 0, None, None, 0).await);
            assert!(b.release(&format!("b{i}"), 0, None, None, 0).await);
            assert_eq!(provider_leases(&cluster, &workspace(i)), 0);
        }
        // A pause set through one replica holds the lane on the other.
        let until = a.pause(&workspace(3), "openai", 5_000, 0).await;
        assert!(until > 4_000, "{until}");
        let lane = spec(&workspace(3), "alice", limits(2));
        assert!(matches!(
            b.acquire(&lane, "p1", 0).await,
            Admission::Paused { remaining_ms } if remaining_ms > 4_000
        ));
    });
}

/// Any one primary that hangs or dies makes the replica degraded within 250 ms (the probe asks
/// every primary); the declared share applies; a primary restarted with empty state gets the
/// library again and the live leases of its workspaces registered again.
#[test]
fn a_stopped_or_restarted_primary_degrades_then_reconciles() {
    let rt = runtime();
    let mut cluster = RedisCluster::start(3).unwrap();
    rt.block_on(async {
        let (coord, task) = replica_holding_leases(&cluster).await;

        cluster.node_mut(1).signal("STOP");
        let noticed = wait_health(&coord, false, Duration::from_millis(250), "not degraded within 250 ms of a primary's SIGSTOP").await;
        // Share 0.5 of 4 = 2, counting the lease granted before: one more, then full.
        let lane = spec(&workspace(0), "alice", limits(4));
        assert_eq!(
            coord.acquire(&lane, "d1", 0).await,
            Admission::Granted(Mode::Degraded)
        );
        assert!(matches!(
            coord.acquire(&lane, "d2", 0).await,
            Admission::Wait {
                mode: Mode::Degraded,
                ..
            }
        ));
        cluster.node_mut(1).signal("CONT");
        wait_health(&coord, true, Duration::from_secs(2), "not healthy within 2 s of SIGCONT").await;
        assert_eq!(provider_leases(&cluster, &workspace(0)), 2, "h0 and d1");
        assert!(coord.release("d1", 0, None, None, 0).await);

        // SIGKILL of a primary, then a restart with empty state (its cluster configuration
        // kept, so it serves its slots again, without the library or any lease).
        cluster.node_mut(2).kill();
        wait_health(&coord, false, Duration::from_millis(250), "not degraded within 250 ms of a primary's SIGKILL").await;
        let lost: u64 = cluster.nodes()[2].port().into();
        cluster.node_mut(2).restart_empty().unwrap();
        cluster.wait_ok(Duration::from_secs(20)).unwrap();
        let reconciled = wait_health(&coord, true, Duration::from_secs(2), "not healthy within 2 s of the cluster being ok again").await;
        let listed = cluster.nodes()[2].cli(&["FUNCTION", "LIST", "LIBRARYNAME", "turnstile_v5"]);
        assert!(listed.contains("ts_acquire_v5"), "reloaded on {lost}");
        for i in 0..WORKSPACES {
            assert_eq!(
                provider_leases(&cluster, &workspace(i)),
                1,
                "h{i} registered again"
            );
        }
        eprintln!(
            "a primary's SIGSTOP noticed after {noticed:?}; cluster ok to healthy after {reconciled:?}"
        );
        task.abort();
    });
}

/// Issue 34, item 1 on a cluster: every primary flushed (`FUNCTION FLUSH` + `FLUSHALL`) with the
/// connections up while one replica holds a workspace's whole provider limit: the other
/// replica's acquires grant nothing (they wait for the books' window, in which the holder
/// registers its leases again on the workspace's primary), and the holder counts the loss.
#[test]
fn books_flushed_on_every_primary_are_rebuilt_before_any_grant() {
    let rt = runtime();
    let cluster = RedisCluster::start(3).unwrap();
    rt.block_on(async {
        // No failure is tested here: a timeout long enough that a loaded host's scheduling is
        // not taken for a hung primary (a degraded holder would not be what is tested).
        let patient = || {
            let mut config = config(&cluster);
            config.timeout = Duration::from_secs(2);
            Coordinator::new(config).unwrap()
        };
        let (holder, other) = (patient(), patient());
        until_healthy(&holder, 40, Duration::from_millis(25)).await;
        until_healthy(&other, 40, Duration::from_millis(25)).await;
        let clock_start = Instant::now();
        let task = tokio::spawn(
            holder
                .clone()
                .run(move || clock_start.elapsed().as_millis() as u64),
        );
        let lane = spec("ws-books", "alice", limits(2));
        for token in ["h1", "h2"] {
            assert_eq!(
                holder.acquire(&lane, token, 0).await,
                Admission::Granted(Mode::Shared)
            );
        }
        assert!(matches!(
            other.acquire(&lane, "o0", 0).await,
            Admission::Wait {
                reason: Reason::Concurrency,
                ..
            }
        ));
        for node in cluster.nodes() {
            assert_eq!(node.cli(&["FUNCTION", "FLUSH"]), "OK");
            assert_eq!(node.cli(&["FLUSHALL"]), "OK");
        }
        // (The holder may have registered its leases again already: it checks every probe.)
        for token in ["o1", "o2"] {
            let answer = other.acquire(&lane, token, 0).await;
            assert!(
                matches!(
                    answer,
                    Admission::Wait {
                        reason: Reason::Concurrency,
                        ..
                    }
                ),
                "granted into the flushed books: {answer:?}"
            );
        }
        assert_eq!(
            provider_leases(&cluster, "ws-books"),
            2,
            "h1 and h2 registered again"
        );
        assert_eq!(
            holder
                .metrics
                .books_lost
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        task.abort();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_feed_lives_on_the_primary_of_its_slot() {
    let cluster = RedisCluster::start(3).unwrap();
    let store = || IdentityStore::new(&cluster.url(), Topology::Cluster, Duration::from_secs(2));
    let (a, b) = (store().unwrap(), store().unwrap());
    let epoch = match a
        .seed("epoch-c", &[SeedItem::Event("first".into())])
        .await
        .unwrap()
    {
        Seeded::Created { epoch, head } => {
            assert_eq!(head, 1);
            epoch
        }
        other => panic!("{other:?}"),
    };
    let written = b.append(&epoch, "second").await.unwrap();
    assert_eq!(
        written,
        Written::Appended {
            seq: 2,
            registration: None
        }
    );
    let page = a.since(0, 10).await.unwrap();
    assert_eq!(page.epoch.as_deref(), Some(epoch.as_str()));
    let events: Vec<&str> = page.events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(events, ["first", "second"]);
    // The identity library is on every primary (the one owning `{ts-id}` may change).
    for node in cluster.nodes() {
        let listed = node.cli(&["FUNCTION", "LIST", "LIBRARYNAME", "turnstile_identity_v2"]);
        assert!(
            listed.contains("ts_id_since_v2"),
            "{}: {listed}",
            node.port()
        );
    }
    // What the start checks: the seed node is a cluster node.
    assert_eq!(a.topology(), Topology::Cluster);
    assert!(a.seed_cluster_enabled().await.unwrap());
}

/// A workspace's slot migrated to another primary while a replica holds its leases: a call
/// during the migration waits for its end (`ASK`, `TRYAGAIN`), every call after it follows
/// `MOVED`, nothing degrades, and the limit keeps counting the leases held before the move.
#[test]
fn a_workspace_whose_slot_moves_keeps_its_leases_and_its_limit() {
    let rt = runtime();
    let cluster = RedisCluster::start(3).unwrap();
    rt.block_on(async {
        // A call may wait out the migration (below): a timeout far above it.
        let coord = Coordinator::new(CoordConfig {
            timeout: Duration::from_secs(2),
            ..config(&cluster)
        })
        .unwrap();
        coord.tick(0, false).await;
        assert_eq!(coord.health(), Health::Healthy);
        let ws = workspace(7);
        let lane = spec(&ws, "alice", limits(3));
        assert_eq!(
            coord.acquire(&lane, "h1", 0).await,
            Admission::Granted(Mode::Shared)
        );
        let key = WorkspaceKeys::new(&ws).leases(&ScopeName::provider("openai"));
        let nodes = cluster.nodes();
        let slot = nodes[0].cli(&["CLUSTER", "KEYSLOT", &key]);
        let src = nodes
            .iter()
            .position(|n| n.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot]) != "0")
            .expect("a primary holds the workspace's keys");
        let dst = (src + 1) % nodes.len();
        let id = |i: usize| nodes[i].cli(&["CLUSTER", "MYID"]);
        let (src_id, dst_id) = (id(src), id(dst));
        assert_eq!(
            nodes[dst].cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id]),
            "OK"
        );
        assert_eq!(
            nodes[src].cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id]),
            "OK"
        );
        let keys = nodes[src].cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
        let keys: Vec<&str> = keys.lines().map(str::trim).collect();
        assert!(!keys.is_empty());
        let port = nodes[dst].port().to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(keys.iter().copied());
        assert_eq!(nodes[src].cli(&migrate), "OK");
        // Mid-migration: the source answers `ASK` for the moved keys, and the destination
        // `TRYAGAIN` (the lane's pause key exists on neither node: Redis runs no multi-key call
        // of a slot split between two nodes). The call waits, and once the migration ends
        // (`SETSLOT … NODE` on every primary, 30 ms later) it follows `MOVED` and runs on the
        // new owner, which holds h1.
        let waiting = tokio::spawn({
            let (coord, lane) = (coord.clone(), lane.clone());
            async move { coord.acquire(&lane, "h2", 0).await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        for node in nodes {
            assert_eq!(
                node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]),
                "OK"
            );
        }
        assert_eq!(waiting.await.unwrap(), Admission::Granted(Mode::Shared));
        // Moved for good: the lane's connection follows `MOVED` to the new owner.
        assert_eq!(
            coord.acquire(&lane, "h3", 0).await,
            Admission::Granted(Mode::Shared)
        );
        assert!(matches!(
            coord.acquire(&lane, "h4", 0).await,
            Admission::Wait {
                reason: Reason::Concurrency,
                mode: Mode::Shared,
                ..
            }
        ));
        assert_eq!(coord.health(), Health::Healthy);
        assert_eq!(
            nodes[dst].cli(&["ZCARD", &key]),
            "3",
            "h1 (moved), h2 and h3 on the new owner"
        );
        coord.tick(0, true).await;
        assert_eq!(coord.health(), Health::Healthy, "renewals follow the move");
        for token in ["h1", "h2", "h3"] {
            assert!(coord.release(token, 0, None, None, 0).await);
        }
        assert_eq!(nodes[dst].cli(&["ZCARD", &key]), "0");
        assert_eq!(coord.health(), Health::Healthy);
    });
}

/// A primary killed in a cluster whose primaries have replicas: degraded while the cluster
/// fails over, then healthy again once a replica has taken its slots (the slot map is asked
/// again), with the live leases registered on the new primary.
#[test]
fn a_failed_over_primary_is_followed_to_its_replica() {
    let rt = runtime();
    let mut cluster = RedisCluster::start_with_replicas(3, 1).unwrap();
    rt.block_on(async {
        let (coord, task) = replica_holding_leases(&cluster).await;
        let victim = cluster.primaries()[0];
        cluster.node_mut(victim).kill();
        let killed = Instant::now();
        wait_health(
            &coord,
            false,
            Duration::from_millis(250),
            "not degraded within 250 ms of a primary's SIGKILL",
        )
        .await;
        // The replica takes over after the node timeout (2 s) and an election.
        let promoted = Instant::now() + Duration::from_secs(30);
        while cluster.primaries().len() < 3 {
            assert!(Instant::now() < promoted, "no replica took over");
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster.wait_ok(Duration::from_secs(30)).unwrap();
        let healthy = wait_health(
            &coord,
            true,
            Duration::from_secs(5),
            "not healthy within 5 s of the failover",
        )
        .await;
        for i in 0..WORKSPACES {
            let lane = spec(&workspace(i), "alice", limits(4));
            assert_eq!(
                coord.acquire(&lane, &format!("n{i}"), 0).await,
                Admission::Granted(Mode::Shared),
                "workspace {i} after the failover"
            );
            assert_eq!(provider_leases(&cluster, &workspace(i)), 2);
        }
        eprintln!(
            "failover: degraded after the kill, healthy {healthy:?} after the cluster was ok, \
             {:?} after the kill",
            killed.elapsed()
        );
        task.abort();
    });
}

/// The primary that holds the identity feed (`{ts-id}`) killed in a cluster with replicas:
/// once its replica has taken over, the feed is read and written again through the same
/// store (its cluster connection is built again after the failed calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_feed_follows_a_failover_of_its_primary() {
    let mut cluster = RedisCluster::start_with_replicas(3, 1).unwrap();
    let store =
        IdentityStore::new(&cluster.url(), Topology::Cluster, Duration::from_secs(1)).unwrap();
    let epoch = match store
        .seed("epoch-f", &[SeedItem::Event("before".into())])
        .await
        .unwrap()
    {
        Seeded::Created { epoch, .. } => epoch,
        other => panic!("{other:?}"),
    };
    // Only the identity's keys exist yet: the primary holding any holds them all.
    let holder = cluster
        .primaries()
        .into_iter()
        .find(|&i| cluster.nodes()[i].cli(&["DBSIZE"]) != "0")
        .expect("a primary holds the feed");
    // Replication is asynchronous: the replica has the seed before its primary dies.
    assert_eq!(cluster.nodes()[holder].cli(&["WAIT", "1", "5000"]), "1");
    cluster.node_mut(holder).kill();
    let promoted = Instant::now() + Duration::from_secs(30);
    while cluster.primaries().len() < 3 {
        assert!(Instant::now() < promoted, "no replica took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.wait_ok(Duration::from_secs(30)).unwrap();
    let ok = Instant::now();
    let page = loop {
        match store.since(0, 10).await {
            Ok(page) => break page,
            Err(error) => assert!(
                ok.elapsed() < Duration::from_secs(5),
                "the feed is not readable 5 s after the failover: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(page.epoch.as_deref(), Some(epoch.as_str()));
    assert_eq!(page.events.len(), 1, "the replica had the seed");
    let written = store.append(&epoch, "after").await.unwrap();
    assert_eq!(
        written,
        Written::Appended {
            seq: 2,
            registration: None
        }
    );
    eprintln!(
        "identity feed readable {:?} after the failover",
        ok.elapsed()
    );
}
