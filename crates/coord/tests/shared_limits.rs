//! The shared limits against a real `redis-server`, with several [`Coordinator`]s (replicas)
//! on one Redis: concurrency never above the limit under random acquire / release / kill
//! sequences and none left after the releases, a killed replica's leases back within the
//! liveness bound, monotonic pauses, integer micro-dollar budgets with actual-usage
//! corrections, and degraded mode on a stopped (SIGSTOP) and a killed Redis, with
//! reconciliation after a restart with empty state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use turnstile_admission::{Limits, Reason};
use turnstile_coord::{
    Admission, CoordConfig, Coordinator, DegradedShare, Health, LaneSpec, Mode, ScopeName,
    WorkspaceKeys,
};
use turnstile_testkit::RedisServer;

mod common;
use common::{limits, quick_config, runtime, until_healthy};

fn spec(workspace: &str, principal: &str, provider: Limits, budget: &str) -> LaneSpec {
    LaneSpec::new(
        (workspace, "openai", principal),
        budget,
        (&limits(1000), &limits(1000), &provider),
        Some(100),
        Some(0.25),
    )
    .unwrap()
}

fn config(server: &RedisServer, share: DegradedShare) -> CoordConfig {
    quick_config(&server.url(), share)
}

async fn replica(server: &RedisServer, share: DegradedShare) -> Arc<Coordinator> {
    replica_with(config(server, share)).await
}

async fn replica_with(config: CoordConfig) -> Arc<Coordinator> {
    let coord = Coordinator::new(config).unwrap();
    until_healthy(&coord, 20, Duration::ZERO).await;
    coord
}

fn provider_leases(server: &RedisServer, workspace: &str) -> u64 {
    let key = WorkspaceKeys::new(workspace).leases(&ScopeName::provider("openai"));
    // Only live members by Redis's clock (an expired one is removed by the next acquire).
    let time = server.cli(&["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<u64>().unwrap());
    let now_ms = parts.next().unwrap() * 1000 + parts.next().unwrap() / 1000;
    server
        .cli(&["ZCOUNT", &key, &format!("({now_ms}"), "+inf"])
        .parse()
        .unwrap_or(0)
}

#[derive(Debug, Clone)]
enum Op {
    Acquire(usize),
    Release(usize, usize),
    Renew(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..3).prop_map(Op::Acquire),
        2 => (0usize..3, 0usize..8).prop_map(|(r, i)| Op::Release(r, i)),
        1 => (0usize..3).prop_map(Op::Renew),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Three replicas, one Redis, random acquire / release / renew: never more leases than
    /// the limit in Redis or granted in total, and none left after every release.
    #[test]
    fn three_replicas_never_hold_more_than_the_limit(ops in proptest::collection::vec(op(), 1..80), limit in 1u32..5) {
        let rt = runtime();
        let server = RedisServer::start().unwrap();
        rt.block_on(async {
            // Liveness far beyond the run: only releases free slots here.
            let long = || CoordConfig { liveness_ms: 600_000, ..config(&server, DegradedShare::Closed) };
            let replicas = [
                replica_with(long()).await,
                replica_with(long()).await,
                replica_with(long()).await,
            ];
            let lane = spec("ws-prop", "alice", limits(limit), "b");
            let mut held: [Vec<String>; 3] = Default::default();
            let mut next = 0u64;
            for op in ops {
                match op {
                    Op::Acquire(r) => {
                        next += 1;
                        let token = format!("t{next}");
                        match replicas[r].acquire(&lane, &token, 0).await {
                            Admission::Granted(Mode::Shared) => held[r].push(token),
                            Admission::Wait { reason: Reason::Concurrency, .. } => {}
                            other => panic!("{other:?}"),
                        }
                    }
                    Op::Release(r, i) => {
                        if !held[r].is_empty() {
                            let token = held[r].remove(i % held[r].len());
                            assert!(replicas[r].release(&token, 0, None, None, 0).await);
                        }
                    }
                    Op::Renew(r) => replicas[r].tick(0, true).await,
                }
                let total: usize = held.iter().map(Vec::len).sum();
                assert!(total <= limit as usize, "{total} granted with limit {limit}");
                assert_eq!(provider_leases(&server, "ws-prop"), total as u64);
            }
            for (r, tokens) in held.iter_mut().enumerate() {
                for token in tokens.drain(..) {
                    assert!(replicas[r].release(&token, 0, None, None, 0).await);
                }
            }
            assert_eq!(provider_leases(&server, "ws-prop"), 0);
        });
    }
}

#[test]
fn a_killed_replicas_leases_come_back_within_the_liveness_bound() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let lane = spec("ws-kill", "alice", limits(2), "b");
        let survivor = replica(&server, DegradedShare::Closed).await;
        let doomed = replica(&server, DegradedShare::Closed).await;
        let renewing = tokio::spawn(doomed.clone().run(|| 0));
        assert_eq!(
            doomed.acquire(&lane, "d1", 0).await,
            Admission::Granted(Mode::Shared)
        );
        assert_eq!(
            doomed.acquire(&lane, "d2", 0).await,
            Admission::Granted(Mode::Shared)
        );
        // Renewed past the liveness: still held.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(matches!(
            survivor.acquire(&lane, "s0", 0).await,
            Admission::Wait { .. }
        ));
        // The replica dies (no release, no renewal).
        renewing.abort();
        drop(doomed);
        let killed = Instant::now();
        loop {
            if survivor.acquire(&lane, "s1", 0).await == Admission::Granted(Mode::Shared) {
                break;
            }
            assert!(
                killed.elapsed() < Duration::from_millis(1_000 + 200 + 300),
                "not back in time"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let back = killed.elapsed();
        assert!(
            back >= Duration::from_millis(600),
            "back after {back:?}: earlier than the last renewal allows"
        );
    });
}

#[test]
fn pauses_are_monotonic_and_budgets_are_integer_micro_dollars() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let a = replica(&server, DegradedShare::Closed).await;
        let b = replica(&server, DegradedShare::Closed).await;
        let long = a.pause("ws-p", "openai", 5_000, 0).await;
        let short = b.pause("ws-p", "openai", 100, 0).await;
        assert!(long > 4_900 && short > 4_800, "{long} {short}: a shorter pause never shortens");
        let lane = spec("ws-p", "alice", limits(10), "b");
        assert!(matches!(b.acquire(&lane, "x", 0).await, Admission::Paused { remaining_ms } if remaining_ms > 4_000));

        // 0.1 + 0.1 + 0.1 fits a 0.3 budget exactly (no f64 drift); a fourth does not.
        let provider = Limits {
            concurrency: 10,
            max_cost_usd: Some(0.3),
            ..Limits::default()
        };
        let lane = LaneSpec::new(("ws-b", "openai", "alice"), "run-1", (&limits(10), &limits(10), &provider), None, Some(0.1)).unwrap();
        for (i, coord) in [&a, &b, &a].into_iter().enumerate() {
            assert_eq!(coord.acquire(&lane, &format!("c{i}"), 0).await, Admission::Granted(Mode::Shared));
        }
        assert_eq!(b.acquire(&lane, "c3", 0).await, Admission::Rejected(Reason::Cost));
        // An actual usage below the estimate gives money back: 0.1 charged, 0.05 used.
        assert!(a.release("c0", 0, None, Some(50_000), 0).await);
        assert_eq!(b.acquire(&lane, "c4", 0).await, Admission::Rejected(Reason::Cost));
        let small = LaneSpec { micro_usd: Some(50_000), ..lane.clone() };
        assert_eq!(b.acquire(&small, "c5", 0).await, Admission::Granted(Mode::Shared));
    });
}

/// SIGSTOP (a hang) and SIGKILL of Redis: noticed within 250 ms; no call waits more than the
/// timeout; the declared share applies (money fails closed); on recovery the live leases are
/// registered again and pauses merged, also after a restart with empty state.
#[test]
fn a_stopped_or_killed_redis_degrades_to_the_declared_share_and_reconciles() {
    let rt = runtime();
    let mut server = RedisServer::start().unwrap();
    rt.block_on(async {
        let coord = Coordinator::new(config(&server, "0.5".parse().unwrap())).unwrap();
        coord.tick(0, false).await;
        let clock_start = Instant::now();
        let task = tokio::spawn(
            coord
                .clone()
                .run(move || clock_start.elapsed().as_millis() as u64),
        );
        let lane = spec("ws-deg", "alice", limits(4), "b");
        assert_eq!(
            coord.acquire(&lane, "h1", 0).await,
            Admission::Granted(Mode::Shared)
        );

        server.signal("STOP");
        let stopped = Instant::now();
        while coord.health() == Health::Healthy {
            assert!(
                stopped.elapsed() < Duration::from_millis(250),
                "not degraded within 250 ms"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let noticed = stopped.elapsed();
        // Share 0.5 of 4 = 2, counting the lease granted before: one more, then full.
        let started = Instant::now();
        assert_eq!(
            coord.acquire(&lane, "d1", 0).await,
            Admission::Granted(Mode::Degraded)
        );
        assert!(
            started.elapsed() < Duration::from_millis(5),
            "degraded admissions do not touch Redis"
        );
        assert!(matches!(
            coord.acquire(&lane, "d2", 0).await,
            Admission::Wait {
                mode: Mode::Degraded,
                ..
            }
        ));
        // A money budget fails closed.
        let money = Limits {
            concurrency: 4,
            max_cost_usd: Some(1.0),
            ..Limits::default()
        };
        let paid = LaneSpec::new(
            ("ws-deg", "openai", "alice"),
            "b",
            (&limits(9), &limits(9), &money),
            None,
            Some(0.1),
        )
        .unwrap();
        assert_eq!(coord.acquire(&paid, "m1", 0).await, Admission::Unavailable);
        // A pause seen while degraded is merged on recovery.
        coord
            .pause(
                "ws-deg",
                "openai",
                60_000,
                clock_start.elapsed().as_millis() as u64,
            )
            .await;

        server.signal("CONT");
        let resumed = Instant::now();
        while coord.health() != Health::Healthy {
            assert!(
                resumed.elapsed() < Duration::from_secs(2),
                "not healthy within 2 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            provider_leases(&server, "ws-deg"),
            2,
            "h1 and d1 registered"
        );
        let pause_key = WorkspaceKeys::new("ws-deg").pause("openai");
        let pttl: i64 = server.cli(&["PTTL", &pause_key]).parse().unwrap();
        assert!(pttl > 50_000, "the degraded pause was merged: {pttl}");
        assert!(coord.release("d1", 0, None, None, 0).await);

        // SIGKILL and a restart with empty state.
        server.kill();
        let killed = Instant::now();
        while coord.health() == Health::Healthy {
            assert!(
                killed.elapsed() < Duration::from_millis(250),
                "not degraded within 250 ms"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server.restart_empty().unwrap();
        let restarted = Instant::now();
        while coord.health() != Health::Healthy {
            assert!(
                restarted.elapsed() < Duration::from_secs(2),
                "not healthy within 2 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            provider_leases(&server, "ws-deg"),
            1,
            "h1 registered again in the empty Redis"
        );
        eprintln!(
            "SIGSTOP noticed after {noticed:?}; SIGKILL after {:?}",
            killed.elapsed()
        );
        task.abort();
    });
}

/// Without fair turns (`turn_window_ms = None`) `ts_acquire_v3` gets no wait keys: the pause
/// is read on its own and the limit still holds; a plain release frees the slot.
#[test]
fn without_turns_the_limit_and_the_pause_still_hold() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let mut config = config(&server, DegradedShare::Closed);
        config.turn_window_ms = None;
        let a = replica_with(config).await;
        let lane = spec("ws-nt", "alice", limits(1), "");
        assert_eq!(
            a.acquire(&lane, "x1", 0).await,
            Admission::Granted(Mode::Shared)
        );
        assert!(matches!(
            a.acquire(&lane, "x2", 0).await,
            Admission::Wait {
                reason: Reason::Concurrency,
                mode: Mode::Shared,
                ..
            }
        ));
        assert!(a.release("x1", 0, None, None, 0).await);
        assert_eq!(
            a.acquire(&lane, "x2", 0).await,
            Admission::Granted(Mode::Shared)
        );
        assert!(a.release("x2", 0, None, None, 0).await);
        let keys = WorkspaceKeys::new("ws-nt");
        assert_eq!(
            server.cli(&["EXISTS", &keys.waiting(&ScopeName::provider("openai"))]),
            "0"
        );
        a.pause("ws-nt", "openai", 5_000, 0).await;
        assert!(matches!(
            a.acquire(&lane, "x3", 0).await,
            Admission::Paused { remaining_ms } if remaining_ms > 4_000
        ));
    });
}

/// A scope's request and token buckets are one hash shared by every replica (`turnstile_v3`):
/// all or nothing (a refused token estimate takes no request), the burst is shared across
/// replicas, and the hash and the budget carry an expiry that a second grant does not move (it
/// is refreshed only when the levels written would outlast it).
#[test]
fn buckets_share_one_hash_and_expiries_are_refreshed_only_when_needed() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let a = replica(&server, DegradedShare::Closed).await;
        let b = replica(&server, DegradedShare::Closed).await;
        let provider = Limits {
            concurrency: 100,
            requests_per_minute: Some(2),
            tokens_per_second: Some(1_000),
            max_tokens: Some(1_000_000),
            ..Limits::default()
        };
        let scopes = (&limits(100), &limits(100), &provider);
        let lane = LaneSpec::new(
            ("ws-k", "openai", "alice"),
            "run-k",
            scopes,
            Some(100),
            None,
        )
        .unwrap();
        let keys = WorkspaceKeys::new("ws-k");
        let bkt = keys.buckets(&ScopeName::provider("openai"));
        let bud = keys.budget("run-k");
        assert_eq!(
            a.acquire(&lane, "k0", 0).await,
            Admission::Granted(Mode::Shared)
        );
        let x0 = server.cli(&["HGET", &bkt, "x"]);
        // Twice the longest refill from empty (two requests at 2 per minute: 60 s), plus 1 s.
        let ttl: i64 = server.cli(&["PTTL", &bkt]).parse().unwrap();
        assert!(ttl > 110_000 && ttl <= 121_000, "bucket hash PTTL {ttl}");
        // A budget lives 24 to 25 h after its last charge.
        let ttl: i64 = server.cli(&["PTTL", &bud]).parse().unwrap();
        assert!(ttl > 86_400_000 && ttl <= 90_000_000, "budget PTTL {ttl}");
        let bud_x = server.cli(&["HGET", &bud, "x"]);

        // Above the token bucket's capacity: refused, and the request bucket is left as it was.
        let rl = server.cli(&["HGET", &bkt, "rl"]);
        let big = LaneSpec {
            tokens: Some(2_000),
            ..lane.clone()
        };
        assert_eq!(
            b.acquire(&big, "k-big", 0).await,
            Admission::Rejected(Reason::TokensPerSecond)
        );
        assert_eq!(server.cli(&["HGET", &bkt, "rl"]), rl);

        assert_eq!(
            b.acquire(&lane, "k1", 0).await,
            Admission::Granted(Mode::Shared)
        );
        assert_eq!(server.cli(&["HGET", &bkt, "x"]), x0, "bucket expiry moved");
        assert_eq!(
            server.cli(&["HGET", &bud, "x"]),
            bud_x,
            "budget expiry moved"
        );
        // Less than one request left (two taken from a burst of two; refilling 2 per minute),
        // and 200 of 1,000 tokens taken (refilling 1,000 per second).
        let rl: u64 = server.cli(&["HGET", &bkt, "rl"]).parse().unwrap();
        assert!(rl < 60_000, "request level {rl}");
        let tl: u64 = server.cli(&["HGET", &bkt, "tl"]).parse().unwrap();
        assert!((800_000..=1_000_000).contains(&tl), "token level {tl}");
        // The burst is shared: the third request waits, whichever replica asks.
        match a.acquire(&lane, "k2", 0).await {
            Admission::Wait {
                reason: Reason::RequestsPerMinute,
                after_ms: Some(after),
                ..
            } => {
                assert!(after > 20_000 && after <= 30_000, "wait {after}")
            }
            other => panic!("{other:?}"),
        }
        // The token budget line (on the provider): 2 x 100 charged; a release with 50 actual
        // gives 50 back.
        let line = format!("{}:t", ScopeName::provider("openai").0);
        assert_eq!(server.cli(&["HGET", &bud, &line]), "200");
        assert!(a.release("k0", 0, Some(50), None, 0).await);
        assert_eq!(server.cli(&["HGET", &bud, &line]), "150");
    });
}

/// At start a replica reads Redis's eviction policy: an evicting one is warned about (an
/// evicted lease set lets replicas admit past a limit until its holders renew), `noeviction`
/// is not, and a Redis that refuses `CONFIG` (as managed Redis often does) gets no warning.
#[test]
fn an_evicting_maxmemory_policy_is_warned_about_and_a_refused_config_is_silent() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let coord = replica(&server, DegradedShare::Closed).await;
        assert!(!coord.warn_if_evicting().await, "noeviction is the default");
        assert_eq!(
            server.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]),
            "OK"
        );
        assert!(coord.warn_if_evicting().await, "allkeys-lru evicts");
        // A managed Redis: `CONFIG` refused to the replica's user.
        assert_eq!(server.cli(&["ACL", "SETUSER", "default", "-config"]), "OK");
        assert!(
            !coord.warn_if_evicting().await,
            "a refused CONFIG GET says nothing"
        );
        assert_eq!(coord.health(), Health::Healthy, "and is no failure");
    });
}

/// The holders check the books every probe, so a probe interval that would let the books'
/// window end before they did is refused, naming the setting.
#[test]
fn a_probe_interval_longer_than_half_the_books_window_is_refused() {
    let mut config = CoordConfig::new("redis://127.0.0.1:1", DegradedShare::Closed);
    config.probe_every = Duration::from_millis(turnstile_coord::PROBE_EVERY_MAX_MS + 1);
    let Err(error) = Coordinator::new(config) else {
        panic!("accepted");
    };
    assert!(
        error.to_string().contains("coordination.probe_every_ms"),
        "{error}"
    );
}
