//! Natural batching (`ts_batch_v5`, `crates/coord/src/batcher.rs`) against real
//! `redis-server`s: a batch of mixed acquires and releases decides exactly what the same
//! operations decide sent one by one (`ts_acquire_v5` / `ts_release_v5`), and leaves the same
//! state; many concurrent acquires through one replica (batched) never exceed a shared limit,
//! each caller getting its own answer; a hung Redis decides every queued admission by the
//! declared share.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use redis::Value;
use turnstile_admission::{CircuitBreakerConfig, Limits};
use turnstile_coord::testing::{self, acquire_op, release_op, Op, OpKind, ReleaseCall};
use turnstile_coord::{
    Admission, CoordConfig, Coordinator, DegradedShare, FcallStats, Health, LaneSpec, Mode,
    Outcome, RedisStore, ScopeName, Topology, WorkspaceKeys,
};
use turnstile_testkit::RedisServer;

mod common;
use common::{runtime, until_healthy};

const WS: &str = "ws-batch";
const PRINCIPALS: [&str; 3] = ["alice", "bob", "carol"];
/// Liveness and turn window far beyond a run: no decision here depends on the clock.
const LONG_MS: u64 = 600_000;

/// A lane with every kind of shared limit whose decisions do not depend on the milliseconds
/// between two calls: concurrency on each scope (fair turns on the workspace and provider),
/// an attempts and a token budget on the principal, a request bucket refilling one request a
/// minute on the provider, and the provider's breaker (open for ten minutes).
fn lane(principal: &str) -> LaneSpec {
    let mine = Limits {
        concurrency: 2,
        max_attempts: Some(4),
        max_tokens: Some(900),
        ..Limits::default()
    };
    let workspace = Limits {
        concurrency: 4,
        ..Limits::default()
    };
    let provider = Limits {
        concurrency: 3,
        requests_per_minute: Some(1),
        requests_burst: Some(6),
        circuit_breaker: Some(CircuitBreakerConfig {
            failure_threshold: 3,
            open_ms: Some(LONG_MS),
            half_open_max_calls: None,
        }),
        ..Limits::default()
    };
    LaneSpec::new(
        (WS, "openai", principal),
        "budget",
        (&mine, &workspace, &provider),
        Some(100),
        None,
    )
    .unwrap()
}

#[derive(Debug, Clone)]
enum Step {
    Acquire(usize),
    /// Releases the lease of the n-th acquire so far (whatever its answer was: releasing a
    /// lease that was never granted is harmless, and the same in both runs).
    Release {
        of: usize,
        pause: bool,
        outcome: u8,
        actual: Option<u64>,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (0usize..3).prop_map(Step::Acquire),
        4 => (0usize..64, proptest::bool::weighted(0.05), 0u8..3, proptest::option::of(0u64..300))
            .prop_map(|(of, pause, outcome, actual)| Step::Release { of, pause, outcome, actual }),
    ]
}

fn release_call(
    spec: &LaneSpec,
    member: &str,
    pause: bool,
    outcome: u8,
    actual: Option<u64>,
) -> ReleaseCall {
    ReleaseCall {
        pause_ms: if pause { LONG_MS } else { 0 },
        charged_tokens: spec.tokens.unwrap_or(0),
        actual_tokens: actual,
        outcome: match outcome {
            0 => Outcome::None,
            1 => Outcome::Success,
            _ => Outcome::Failure,
        },
        ..ReleaseCall::plain(spec, member)
    }
}

/// The operations of `steps`, in order.
fn ops(steps: &[Step]) -> Vec<Op> {
    let mut acquired: Vec<(usize, String)> = Vec::new();
    let mut out = Vec::new();
    for step in steps {
        match step {
            Step::Acquire(p) => {
                let member = format!("m-{}", acquired.len());
                out.push(acquire_op(
                    &lane(PRINCIPALS[*p]),
                    &member,
                    LONG_MS,
                    Some(LONG_MS),
                ));
                acquired.push((*p, member));
            }
            Step::Release {
                of,
                pause,
                outcome,
                actual,
            } => {
                if acquired.is_empty() {
                    continue;
                }
                let (p, member) = &acquired[of % acquired.len()];
                out.push(release_op(&release_call(
                    &lane(PRINCIPALS[*p]),
                    member,
                    *pause,
                    *outcome,
                    *actual,
                )));
            }
        }
    }
    out
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

/// An answer without its instants (the server's clock differs between the two runs): an
/// acquire's verdict, reason and scope index; a release's pause (set or not) and breaker state.
fn decision(kind: OpKind, value: &Value) -> String {
    match (kind, value) {
        (OpKind::Acquire, Value::Int(_)) => "granted".into(),
        (OpKind::Release, Value::Int(i)) => format!("plain {i}"),
        (OpKind::Acquire, Value::Array(items)) => {
            items.iter().take(3).map(text).collect::<Vec<_>>().join(" ")
        }
        (OpKind::Release, Value::Array(items)) => format!(
            "paused {} breaker {}",
            items.get(1).map(text).is_some_and(|u| u != "0"),
            items.get(2).map(text).unwrap_or_default()
        ),
        (_, other) => format!("{other:?}"),
    }
}

/// What the operations left in Redis, without instants: every lease and wait set's members,
/// the budget lines, the breaker's state and count, whether the pause is set, and the
/// provider's request bucket in whole requests.
fn state(server: &RedisServer) -> Vec<String> {
    let keys = WorkspaceKeys::new(WS);
    let mut out = Vec::new();
    let mut scopes: Vec<ScopeName> = PRINCIPALS.iter().map(|p| ScopeName::principal(p)).collect();
    scopes.push(ScopeName::workspace());
    scopes.push(ScopeName::provider("openai"));
    for scope in &scopes {
        for key in [keys.leases(scope), keys.waiting(scope)] {
            let mut members: Vec<String> = server
                .cli(&["ZRANGE", &key, "0", "-1"])
                .lines()
                .map(str::to_owned)
                .collect();
            members.sort();
            out.push(format!("{key} {members:?}"));
        }
    }
    let budget = server.cli(&["HGETALL", &keys.budget("budget")]);
    let mut lines: Vec<(String, String)> = budget
        .lines()
        .collect::<Vec<_>>()
        .chunks(2)
        .filter(|kv| kv[0] != "x")
        .map(|kv| {
            (
                kv[0].to_owned(),
                kv.get(1).copied().unwrap_or("").to_owned(),
            )
        })
        .collect();
    lines.sort();
    out.push(format!("budget {lines:?}"));
    out.push(format!(
        "breaker {}",
        server
            .cli(&["HMGET", &keys.breaker("openai"), "s", "f"])
            .replace('\n', " ")
    ));
    out.push(format!(
        "probes {}",
        server.cli(&["ZCARD", &keys.probes("openai")])
    ));
    out.push(format!(
        "paused {}",
        server.cli(&["EXISTS", &keys.pause("openai")])
    ));
    let level = server.cli(&["HGET", &keys.buckets(&ScopeName::provider("openai")), "rl"]);
    out.push(format!(
        "requests {}",
        level.parse::<u64>().map_or(-1, |l| (l / 60_000) as i64)
    ));
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// A batch of mixed acquires and releases (cut into batches of random sizes, up to all of
    /// them in one call) gives every operation the decision it gets when the same operations
    /// are sent one by one, and leaves the same state in Redis.
    #[test]
    fn a_batch_decides_exactly_what_the_same_operations_decide_one_by_one(
        steps in proptest::collection::vec(step(), 1..60),
        cuts in proptest::collection::vec(1usize..12, 1..40),
    ) {
        let rt = runtime();
        let one_by_one = RedisServer::start().unwrap();
        let batched = RedisServer::start().unwrap();
        // The workspace's books trusted from the start (a new workspace's first grant would
        // wait for the books' reconciliation window, a time the two runs would not share).
        for server in [&one_by_one, &batched] {
            server.cli(&["SET", &WorkspaceKeys::new(WS).books_epoch(), "0"]);
        }
        let ops = ops(&steps);
        let (single, batch, states) = rt.block_on(async {
            let a = RedisStore::new(&one_by_one.url(), Topology::Standalone, Duration::from_secs(10)).unwrap();
            let b = RedisStore::new(&batched.url(), Topology::Standalone, Duration::from_secs(10)).unwrap();
            a.load_library().await.unwrap();
            b.load_library().await.unwrap();
            let mut single = Vec::new();
            for op in &ops {
                single.push(decision(op.kind, &testing::single(&a, op).await.unwrap()));
            }
            let mut batch = Vec::new();
            let mut rest: &[Op] = &ops;
            let mut cut = cuts.iter().cycle();
            while !rest.is_empty() {
                let n = (*cut.next().unwrap()).min(rest.len());
                let (now, later) = rest.split_at(n);
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                let answers = testing::batch(&b, now.iter(), deadline).await.unwrap();
                prop_assert_eq!(answers.len(), now.len());
                for (op, answer) in now.iter().zip(&answers) {
                    batch.push(decision(op.kind, answer));
                }
                rest = later;
            }
            Ok((single, batch, (state(&one_by_one), state(&batched))))
        })?;
        prop_assert_eq!(single, batch);
        prop_assert_eq!(states.0, states.1);
    }
}

fn config(server: &RedisServer, share: DegradedShare) -> CoordConfig {
    let mut config = CoordConfig::new(&server.url(), share);
    config.liveness_ms = LONG_MS;
    config.probe_every = Duration::from_millis(50);
    config
}

fn limited(concurrency: u32) -> LaneSpec {
    let loose = Limits {
        concurrency: 10_000,
        ..Limits::default()
    };
    let provider = Limits {
        concurrency,
        ..Limits::default()
    };
    LaneSpec::new(
        (WS, "openai", "alice"),
        "b",
        (&loose, &loose, &provider),
        None,
        None,
    )
    .unwrap()
}

/// Probes until healthy: the first probe loads the library, which can outlast the 100 ms
/// timeout on a loaded host (a replica recovers on a later probe).
async fn healthy(coord: &Coordinator) {
    until_healthy(coord, 20, Duration::ZERO).await;
}

async fn fcalls(server: &RedisServer) -> FcallStats {
    let store =
        RedisStore::new(&server.url(), Topology::Standalone, Duration::from_secs(5)).unwrap();
    store.fcall_stats().await.unwrap()
}

/// Many concurrent acquires on one replica, batched: a burst of 200 gets exactly the limit
/// granted (each caller its own answer), then 32 workers acquiring and releasing in a loop
/// never hold more than the limit at once, and nothing is left in Redis after the releases.
#[test]
fn concurrent_acquires_on_one_replica_never_exceed_a_shared_limit() {
    const LIMIT: u32 = 5;
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let coord = Coordinator::new(config(&server, DegradedShare::Closed)).unwrap();
        healthy(&coord).await;
        let spec = Arc::new(limited(LIMIT));
        let before = fcalls(&server).await;

        let mut burst = Vec::new();
        for i in 0..200 {
            let (coord, spec) = (coord.clone(), spec.clone());
            burst.push(tokio::spawn(async move {
                let token = format!("burst-{i}");
                let answer = coord.acquire(&spec, &token, 0).await;
                (token, answer)
            }));
        }
        let mut granted = Vec::new();
        for task in burst {
            let (token, answer) = task.await.unwrap();
            match answer {
                Admission::Granted(Mode::Shared) => granted.push(token),
                Admission::Wait {
                    mode: Mode::Shared, ..
                }
                | Admission::Turn => {}
                other => panic!("unexpected answer {other:?}"),
            }
        }
        assert_eq!(
            granted.len(),
            LIMIT as usize,
            "exactly the limit is granted"
        );
        assert_eq!(coord.held(), LIMIT as usize);
        let calls = before.delta(fcalls(&server).await).calls;
        // 200 acquires plus the two INFO readers' nothing: batching sent fewer calls.
        assert!(
            calls < 200,
            "200 concurrent acquires took {calls} FCALLs: no batching"
        );
        for token in &granted {
            assert!(coord.release(token, 0, None, None, 0).await);
        }

        let holding = Arc::new(AtomicU64::new(0));
        let most = Arc::new(AtomicU64::new(0));
        let grants = Arc::new(AtomicU64::new(0));
        let mut workers = Vec::new();
        for w in 0..32 {
            let (coord, spec) = (coord.clone(), spec.clone());
            let (holding, most, grants) = (holding.clone(), most.clone(), grants.clone());
            workers.push(tokio::spawn(async move {
                for n in 0..40 {
                    let token = format!("w{w}-{n}");
                    if coord.acquire(&spec, &token, 0).await == Admission::Granted(Mode::Shared) {
                        let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        grants.fetch_add(1, Ordering::Relaxed);
                        tokio::task::yield_now().await;
                        holding.fetch_sub(1, Ordering::SeqCst);
                        assert!(coord.release(&token, 0, None, None, 0).await);
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
            }));
        }
        for worker in workers {
            worker.await.unwrap();
        }
        assert!(most.load(Ordering::SeqCst) <= u64::from(LIMIT));
        assert!(grants.load(Ordering::Relaxed) > 0);
        assert_eq!(coord.held(), 0);
        let key = WorkspaceKeys::new(WS).leases(&ScopeName::provider("openai"));
        assert_eq!(
            server.cli(&["ZCARD", &key]),
            "0",
            "every lease released in Redis"
        );
        assert_eq!(coord.health(), Health::Healthy);
    });
}

/// With Redis stopped (SIGSTOP), concurrent admissions queued behind the hung call are all
/// decided by the declared share, none later than about one command timeout after it started.
#[test]
fn a_hung_redis_decides_every_queued_admission_by_the_share() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let coord = Coordinator::new(config(&server, "0.5".parse().unwrap())).unwrap();
        healthy(&coord).await;
        let spec = Arc::new(limited(40));
        server.signal("STOP");
        let started = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..30 {
            let (coord, spec) = (coord.clone(), spec.clone());
            tasks.push(tokio::spawn(async move {
                coord.acquire(&spec, &format!("t{i}"), 0).await
            }));
        }
        let mut granted = 0;
        for task in tasks {
            match task.await.unwrap() {
                Admission::Granted(Mode::Degraded) => granted += 1,
                Admission::Wait {
                    mode: Mode::Degraded,
                    ..
                } => {}
                other => panic!("not decided by the share: {other:?}"),
            }
        }
        let took = started.elapsed();
        server.signal("CONT");
        // Share 0.5 of 40: 20 of the 30.
        assert_eq!(granted, 20);
        assert_eq!(coord.health(), Health::Degraded);
        // The timeout is 100 ms; a queued admission is not sent again after the failure.
        assert!(took < Duration::from_millis(600), "took {took:?}");
        let errors = coord.metrics.errors.load(Ordering::Relaxed);
        assert!(
            (1..30).contains(&errors),
            "failed calls counted per call: {errors}"
        );
    });
}

/// A caller that sends its operation itself (nothing in flight) and is dropped before the
/// answer (a cancelled request) leaves the workspace's link usable: its connection, whose
/// answer may still come, is closed, so the next call never reads the abandoned call's answer
/// as its own. Here the abandoned acquire is refused (`defer`, an array); a release that read
/// it would fail to decode and degrade the replica.
#[test]
fn a_call_abandoned_in_flight_never_answers_the_next_one() {
    let rt = runtime();
    let server = RedisServer::start().unwrap();
    rt.block_on(async {
        let coord = Coordinator::new(config(&server, DegradedShare::Closed)).unwrap();
        healthy(&coord).await;
        let spec = limited(1);
        assert_eq!(
            coord.acquire(&spec, "holder", 0).await,
            Admission::Granted(Mode::Shared)
        );
        server.signal("STOP");
        let abandoned =
            tokio::time::timeout(Duration::from_millis(30), coord.acquire(&spec, "gone", 0)).await;
        server.signal("CONT");
        assert!(
            abandoned.is_err(),
            "the acquire was answered: {abandoned:?}"
        );
        // Redis runs the abandoned acquire (already in its socket) before anything sent later.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(coord.release("holder", 0, None, None, 0).await);
        assert_eq!(
            coord.acquire(&spec, "next", 0).await,
            Admission::Granted(Mode::Shared)
        );
        assert_eq!(coord.health(), Health::Healthy);
        assert_eq!(coord.metrics.errors.load(Ordering::Relaxed), 0);
        let key = WorkspaceKeys::new(WS).leases(&ScopeName::provider("openai"));
        assert_eq!(
            server.cli(&["ZCARD", &key]),
            "1",
            "only the next lease is held"
        );
    });
}
