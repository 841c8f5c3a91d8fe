//! The script's token bucket is the core's (`crates/admission/src/bucket.rs`): over 10^5
//! random sequences (100 proptest cases x 1,000 sequences, each up to 24 steps of a clock
//! advance and a take), the library's conformance hook `ts_bucket_run` (the same
//! `buckets_try` / `buckets_store` Lua code as `ts_acquire`, with an injected clock; the
//! functions' names carry the contract's version, `crates/coord/src/protocol/mod.rs`) and
//! `TokenBucket` agree on every decision, every retry wait and every level. Needs `redis-server` (installed by `.ci/run`).

use proptest::prelude::*;
use turnstile_admission::TokenBucket;
use turnstile_coord::{testing, RedisStore};
use turnstile_testkit::RedisServer;

type Run = (u64, u64, u64, Vec<(u64, u64)>);

fn core_run((rate, capacity, period, steps): &Run) -> Vec<(bool, i64, u64)> {
    let start = steps.first().map_or(0, |s| s.0);
    let mut bucket = TokenBucket::full_with_capacity(*rate, *capacity, *period, start);
    steps
        .iter()
        .map(|&(now, units)| {
            bucket.refill(now);
            if bucket.has(units) {
                bucket.take(units);
                (true, 0, bucket.level_units())
            } else {
                let wait = bucket.wait_for(units).map_or(-1, |w| w as i64);
                (false, wait, bucket.level_units())
            }
        })
        .collect()
}

fn run_strategy() -> impl Strategy<Value = Run> {
    (
        1u64..5_000,
        prop_oneof![Just(1_000u64), Just(60_000u64)],
        1u64..20_000,
        1_700_000_000_000u64..1_800_000_000_000,
        proptest::collection::vec((0u64..3_000, 0u64..40), 1..24),
    )
        .prop_map(|(rate, period, capacity, start, deltas)| {
            let mut now = start;
            let steps = deltas
                .into_iter()
                .map(|(dt, units)| {
                    now += dt;
                    // Mostly small takes, sometimes near or above the capacity.
                    let units = match units {
                        0..=29 => units,
                        30..=37 => capacity.saturating_sub(units - 30),
                        _ => capacity + (units - 37),
                    };
                    (now, units)
                })
                .collect();
            (rate, capacity, period, steps)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    #[test]
    fn lua_bucket_decides_exactly_as_bucket_rs(runs in proptest::collection::vec(run_strategy(), 1_000)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let server = SERVER.with(|s| s.url());
        let answers = runtime.block_on(async {
            let store = RedisStore::new(&server, turnstile_coord::Topology::Standalone, std::time::Duration::from_secs(10)).unwrap();
            store.load_library().await.unwrap();
            testing::bucket_runs(&store, "ts:{conformance}:bkt", &runs).await.unwrap()
        });
        prop_assert_eq!(answers.len(), runs.len());
        for (run, lua) in runs.iter().zip(answers) {
            prop_assert_eq!(&lua, &core_run(run), "run {:?}", run);
        }
    }
}

thread_local! {
    static SERVER: RedisServer = RedisServer::start().expect("redis-server (apt-get install redis-server)");
}
