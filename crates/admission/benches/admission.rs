//! Admission hot paths, with the nearest off-the-shelf primitives measured in the same run.
//!
//! - `admit_release/warm`: an immediate admit plus its release on a warm controller.
//! - `handoff/lanes/{10,100000}`: a release that hands the permit to a queued waiter, with every
//!   lane holding a waiter (workspace concurrency 1, one principal per lane). Only the release is
//!   timed; the admitted lane then queues a new waiter (untimed), so the queue stays at N lanes.
//! - `admit_release-tokens/warm` and `handoff-tokens/lanes/{10,100000}`: the same with the
//!   provider's turns fair in tokens (issue 31: the provider's order is a B-tree of its N
//!   backlogged lanes, O(log N) per handoff).
//! - `baseline/governor_keyed_check` and `baseline/tokio_semaphore_try_acquire`: the ratio to
//!   what the core does is measured side by side.
//!
//! Allocator: mimalloc, the one the `turnstile` binary ships with (`crates/cli/src/allocator.rs`).
//! It matters at scale: mimalloc backs its segments with 2 MiB transparent huge pages where the
//! system allows them (`madvise` mode or `always`), the system allocator does not, and with
//! 100,000 lanes a handoff's random reads also miss the TLB on 4 KiB pages
//! (`docs/performance.md`, session 10).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use turnstile_admission::{Acquired, Controller, Fairness, Outcome};

mod common;
use common::{profile_in, request, Handoffs};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The benchmark names of each mode: requests mode keeps the names earlier runs used.
fn named(fairness: Fairness, name: &str) -> String {
    match fairness {
        Fairness::Requests => name.to_owned(),
        Fairness::Tokens => format!("{name}-tokens"),
    }
}

fn admit_release(c: &mut Criterion) {
    for fairness in [Fairness::Requests, Fairness::Tokens] {
        let mut controller = Controller::new(profile_in(fairness, 64, 1), 0).expect("profile");
        let template = request("p0");
        let mut now = 0;
        c.bench_function(&named(fairness, "admit_release/warm"), |b| {
            b.iter(|| {
                now += 1;
                match controller.acquire(black_box(template.clone()), now) {
                    Acquired::Admitted(lease) => {
                        controller.release(lease.id, Outcome::Success, now);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            })
        });
    }
}

fn handoff(c: &mut Criterion) {
    for fairness in [Fairness::Requests, Fairness::Tokens] {
        handoff_in(c, fairness);
    }
}

fn handoff_in(c: &mut Criterion, fairness: Fairness) {
    let mut group = c.benchmark_group(named(fairness, "handoff"));
    for lanes in [10usize, 100_000] {
        let mut handoffs = Handoffs::in_mode(fairness, lanes);
        group.bench_with_input(BenchmarkId::new("lanes", lanes), &lanes, |b, _| {
            // Only the release (and the handoff it performs) is timed; re-queueing a waiter for
            // the admitted lane, which keeps every lane holding a waiter, is not.
            b.iter_custom(|iterations| {
                let mut timed = Duration::ZERO;
                for _ in 0..iterations {
                    let start = Instant::now();
                    handoffs.hand_off();
                    timed += start.elapsed();
                    handoffs.requeue();
                }
                timed
            })
        });
    }
    group.finish();
}

fn baselines(c: &mut Criterion) {
    let mut group = c.benchmark_group("baseline");
    let quota = governor::Quota::per_second(NonZeroU32::new(u32::MAX).expect("non-zero"));
    let limiter = governor::RateLimiter::keyed(quota);
    let mut key = 0u64;
    group.bench_function("governor_keyed_check", |b| {
        b.iter(|| {
            key = (key + 1) % 1024;
            black_box(limiter.check_key(&key)).ok();
        })
    });
    let semaphore = tokio::sync::Semaphore::new(64);
    group.bench_function("tokio_semaphore_try_acquire", |b| {
        b.iter(|| {
            let permit = semaphore.try_acquire().expect("permit");
            drop(black_box(permit));
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50);
    targets = admit_release, handoff, baselines
}
criterion_main!(benches);
