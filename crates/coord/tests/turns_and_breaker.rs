//! Fair turns and the shared breaker against a real `redis-server`, with two [`Coordinator`]s
//! (replicas) on one Redis:
//!
//! - Turns: when a principal waits for a full provider scope, the next free slot goes to the
//!   principal holding fewer, whichever replica asks first; a waiter not seen for the turn
//!   window no longer holds its turn.
//! - Breaker: failures released through one replica open it for the other (with the remaining
//!   open time); after the open time exactly one replica gets the half-open probe lease; its
//!   success closes it for both, its failure reopens it; a probe holder that dies frees the
//!   probe after its liveness; outcomes a degraded replica saw are merged on recovery.

use std::sync::Arc;
use std::time::Duration;

use turnstile_admission::CircuitBreakerConfig;
use turnstile_admission::{Limits, Reason};
use turnstile_coord::{
    Admission, CoordConfig, Coordinator, DegradedShare, Health, LaneSpec, Mode, Outcome,
    WorkspaceKeys,
};
use turnstile_testkit::RedisServer;

mod common;
use common::{limits, quick_config, runtime, until_healthy};

const WORKSPACE: &str = "fair";

fn lane(principal: &str, provider: &Limits) -> LaneSpec {
    LaneSpec::new(
        (WORKSPACE, "openai", principal),
        "",
        (&limits(100), &limits(100), provider),
        None,
        None,
    )
    .unwrap()
}

fn config(server: &RedisServer, window_ms: u64) -> CoordConfig {
    let mut config = quick_config(&server.url(), DegradedShare::Closed);
    config.timeout = Duration::from_secs(2);
    config.turn_window_ms = Some(window_ms);
    config
}

async fn replica(server: &RedisServer, window_ms: u64) -> Arc<Coordinator> {
    let coord = Coordinator::new(config(server, window_ms)).unwrap();
    until_healthy(&coord, 1, Duration::ZERO).await;
    coord
}

const GRANTED: Admission = Admission::Granted(Mode::Shared);

/// Full (`Wait` with `concurrency`) or another principal's turn.
fn is_concurrency_wait(answer: &Admission) -> bool {
    matches!(
        answer,
        Admission::Turn
            | Admission::Wait {
                reason: Reason::Concurrency,
                mode: Mode::Shared,
                ..
            }
    )
}

#[test]
fn the_next_free_slot_goes_to_the_waiting_principal_holding_fewer() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        // A long window: turns must not lapse while the test runs on a loaded machine.
        let r1 = replica(&server, 5_000).await;
        let r2 = replica(&server, 5_000).await;
        let provider = limits(2);
        let (a, b) = (lane("alice", &provider), lane("bob", &provider));
        assert_eq!(r1.acquire(&a, "a1", 0).await, GRANTED);
        assert_eq!(r1.acquire(&a, "a2", 0).await, GRANTED);
        // Full: bob waits (and is registered as waiting); holding fewer than alice, his is the
        // next turn, so his waiter polls soon.
        assert_eq!(
            r2.acquire(&b, "b1", 0).await,
            Admission::Wait {
                reason: Reason::Concurrency,
                after_ms: Some(turnstile_coord::TURN_NEXT_POLL_MS),
                mode: Mode::Shared,
            }
        );
        assert!(r1.release("a1", 0, None, None, 0).await);
        // A slot is free, but alice (holding 1) asks first while bob (holding 0) waits: bob's
        // turn. Without turns the fastest poller (alice) would take it.
        assert_eq!(r1.acquire(&a, "a3", 0).await, Admission::Turn);
        assert_eq!(
            r1.metrics.turns.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        assert_eq!(r2.acquire(&b, "b1", 0).await, GRANTED);
        // Both hold 1, both wait: whoever falls behind gets the next slot.
        assert!(is_concurrency_wait(&r1.acquire(&a, "a3", 0).await));
        assert!(r2.release("b1", 0, None, None, 0).await);
        // bob (0) is behind alice (1), and alice is waiting: bob is served first even if
        // alice asks first...
        assert_eq!(r1.acquire(&a, "a3", 0).await, Admission::Turn);
        assert_eq!(r2.acquire(&b, "b2", 0).await, GRANTED);
        // ...and alice's release gives alice the next one, although bob asks first.
        assert!(is_concurrency_wait(&r2.acquire(&b, "b3", 0).await));
        assert!(r1.release("a2", 0, None, None, 0).await);
        assert_eq!(r2.acquire(&b, "b3", 0).await, Admission::Turn);
        assert_eq!(r1.acquire(&a, "a3", 0).await, GRANTED);
    });
}

#[test]
fn a_waiter_not_seen_for_the_window_loses_its_turn() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let r1 = replica(&server, 200).await;
        let r2 = replica(&server, 200).await;
        let provider = limits(1);
        let (a, b) = (lane("alice", &provider), lane("bob", &provider));
        assert_eq!(r1.acquire(&a, "a1", 0).await, GRANTED);
        assert!(is_concurrency_wait(&r2.acquire(&b, "b1", 0).await));
        assert!(r1.release("a1", 0, None, None, 0).await);
        // alice and bob both hold 0: a tie is no reason to wait.
        assert_eq!(r1.acquire(&a, "a2", 0).await, GRANTED);
        assert!(r1.release("a2", 0, None, None, 0).await);
        // bob's wait lapses (he was last refused more than the window ago).
        tokio::time::sleep(Duration::from_millis(400)).await;
        let provider = limits(2);
        let (a, b) = (lane("alice", &provider), lane("bob", &provider));
        assert_eq!(r1.acquire(&a, "a3", 0).await, GRANTED);
        assert_eq!(r1.acquire(&a, "a4", 0).await, GRANTED);
        assert!(is_concurrency_wait(&r2.acquire(&b, "b1", 0).await));
        assert!(r1.release("a4", 0, None, None, 0).await);
        assert_eq!(r1.acquire(&a, "a5", 0).await, Admission::Turn);
        // bob gave up: after the window alice may take the free slot.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(r1.acquire(&a, "a5", 0).await, GRANTED);
    });
}

fn breaker_lane(open_ms: u64) -> LaneSpec {
    let provider = Limits {
        concurrency: 10,
        circuit_breaker: Some(CircuitBreakerConfig {
            failure_threshold: 2,
            open_ms: Some(open_ms),
            half_open_max_calls: None,
        }),
        ..Limits::default()
    };
    lane("alice", &provider)
}

fn probes(server: &RedisServer) -> u64 {
    let key = WorkspaceKeys::new(WORKSPACE).probes("openai");
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &server.port().to_string(), "ZCARD", &key])
        .output()
        .expect("redis-cli (package redis-tools, installed with redis-server)");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

fn open_for(answer: &Admission) -> Option<u64> {
    match answer {
        Admission::Wait {
            reason: Reason::CircuitOpen,
            after_ms,
            mode: Mode::Shared,
        } => Some(after_ms.unwrap_or(0)),
        _ => None,
    }
}

async fn fail(coord: &Coordinator, lane: &LaneSpec, token: &str) {
    assert_eq!(coord.acquire(lane, token, 0).await, GRANTED);
    let held = coord.claim(token).unwrap();
    coord
        .finish_outcome(held, 0, None, None, Outcome::Failure, 0)
        .await;
}

async fn succeed(coord: &Coordinator, token: &str) {
    let held = coord.claim(token).unwrap();
    coord
        .finish_outcome(held, 0, None, None, Outcome::Success, 0)
        .await;
}

#[test]
fn failures_through_one_replica_open_the_breaker_for_the_other_and_one_probe_closes_it() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let r1 = replica(&server, 50).await;
        let r2 = replica(&server, 50).await;
        let lane = breaker_lane(600);
        fail(&r1, &lane, "f1").await;
        // One failure is below the threshold: still closed on the other replica.
        assert_eq!(r2.acquire(&lane, "x1", 0).await, GRANTED);
        succeed(&r2, "x1").await;
        // A success reset the count: two more failures are needed.
        fail(&r1, &lane, "f2").await;
        assert_eq!(r2.acquire(&lane, "x2", 0).await, GRANTED);
        assert!(r2.release("x2", 0, None, None, 0).await);
        fail(&r1, &lane, "f3").await;
        let open = open_for(&r2.acquire(&lane, "x3", 0).await).expect("open on the other replica");
        assert!(open > 0 && open <= 600, "remaining open time {open} ms");
        assert!(open_for(&r1.acquire(&lane, "x4", 0).await).is_some());
        tokio::time::sleep(Duration::from_millis(open + 20)).await;
        // Half-open: exactly one probe lease, whichever replica asks first.
        assert_eq!(r2.acquire(&lane, "p1", 0).await, GRANTED);
        assert_eq!(probes(&server), 1);
        assert_eq!(
            open_for(&r1.acquire(&lane, "x5", 0).await),
            Some(0),
            "probes busy: wait without an instant"
        );
        assert_eq!(open_for(&r2.acquire(&lane, "x6", 0).await), Some(0));
        // The probe's success closes it for both.
        succeed(&r2, "p1").await;
        assert_eq!(probes(&server), 0);
        assert_eq!(r1.acquire(&lane, "x7", 0).await, GRANTED);
        assert_eq!(r2.acquire(&lane, "x8", 0).await, GRANTED);
    });
}

#[test]
fn a_failed_probe_reopens_the_breaker_and_a_dead_probe_holder_frees_the_probe() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let r1 = replica(&server, 50).await;
        let r2 = replica(&server, 50).await;
        let lane = breaker_lane(300);
        fail(&r1, &lane, "f1").await;
        fail(&r1, &lane, "f2").await;
        assert!(open_for(&r2.acquire(&lane, "x1", 0).await).is_some());
        tokio::time::sleep(Duration::from_millis(350)).await;
        // The probe fails: open again, for the full open time.
        fail(&r2, &lane, "p1").await;
        let open = open_for(&r1.acquire(&lane, "x2", 0).await).expect("reopened");
        assert!(
            open > 200,
            "a fresh open period, not the old one: {open} ms"
        );
        tokio::time::sleep(Duration::from_millis(open + 20)).await;
        // A replica takes the probe and dies (no release, no renewal).
        let doomed = replica(&server, 50).await;
        assert_eq!(doomed.acquire(&lane, "p2", 0).await, GRANTED);
        assert_eq!(probes(&server), 1);
        drop(doomed);
        assert_eq!(open_for(&r1.acquire(&lane, "x3", 0).await), Some(0));
        // Its probe lease expires with its liveness (1 s): another replica probes.
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(r1.acquire(&lane, "p3", 0).await, GRANTED);
        assert_eq!(probes(&server), 1);
        succeed(&r1, "p3").await;
        assert_eq!(r2.acquire(&lane, "x4", 0).await, GRANTED);
    });
}

#[test]
fn failures_seen_while_degraded_are_merged_into_the_shared_breaker_on_recovery() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let mut degradable = config(&server, 50);
        degradable.timeout = Duration::from_millis(100);
        degradable.degraded_share = DegradedShare::Slice(1.0);
        let r1 = Coordinator::new(degradable).unwrap();
        r1.tick(0, false).await;
        assert_eq!(r1.health(), Health::Healthy);
        let r2 = replica(&server, 50).await;
        let lane = breaker_lane(5_000);
        assert_eq!(r1.acquire(&lane, "l1", 0).await, GRANTED);
        server.signal("STOP");
        r1.tick(0, false).await;
        assert_eq!(r1.health(), Health::Degraded);
        // Degraded: its local breaker applies (the core's); the outcomes are kept.
        succeed(&r1, "l1").await;
        fail_degraded(&r1, &lane, "l2").await;
        fail_degraded(&r1, &lane, "l3").await;
        server.signal("CONT");
        r1.tick(0, false).await;
        assert_eq!(r1.health(), Health::Healthy, "recovered and merged");
        // Two failures after the last success: open for every replica.
        let open = open_for(&r2.acquire(&lane, "x1", 0).await).expect("merged open");
        assert!(open > 0 && open <= 5_000, "{open}");
    });
}

async fn fail_degraded(coord: &Coordinator, lane: &LaneSpec, token: &str) {
    assert_eq!(
        coord.acquire(lane, token, 0).await,
        Admission::Granted(Mode::Degraded)
    );
    let held = coord.claim(token).unwrap();
    coord
        .finish_outcome(held, 0, None, None, Outcome::Failure, 0)
        .await;
}
