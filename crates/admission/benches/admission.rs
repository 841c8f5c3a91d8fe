//! Admission hot paths, with the nearest off-the-shelf primitives measured in the same run.
//!
//! - `admit_release/warm`: an immediate admit plus its release on a warm controller.
//! - `handoff/lanes/{10,100000}`: a release that hands the permit to a queued waiter, with every
//!   lane holding a waiter (workspace concurrency 1, one principal per lane). Only the release is
//!   timed; the admitted lane then queues a new waiter (untimed), so the queue stays at N lanes.
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
use turnstile_admission::{
    Acquired, AdmissionRequest, Controller, Estimate, Lease, Limits, Outcome, Profile,
};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn wide_limits(concurrency: u32) -> Limits {
    Limits {
        concurrency,
        requests_per_minute: Some(u64::from(u32::MAX)),
        tokens_per_second: Some(u64::from(u32::MAX)),
        max_queue_length: Some(10_000_000),
        ..Limits::default()
    }
}

fn profile(workspace_concurrency: u32, principals: usize) -> Profile {
    let mut profile = Profile {
        workspace: wide_limits(workspace_concurrency),
        ..Profile::default()
    };
    profile
        .providers
        .insert("jev".into(), wide_limits(workspace_concurrency));
    for i in 0..principals {
        profile.principals.insert(format!("p{i}"), wide_limits(4));
    }
    profile
}

fn request(principal: &str) -> AdmissionRequest {
    AdmissionRequest::new(principal, "jev", "invocation").with_estimate(Estimate::new().tokens(100))
}

fn admit_release(c: &mut Criterion) {
    let mut controller = Controller::new(profile(64, 1), 0).expect("profile");
    let template = request("p0");
    let mut now = 0;
    c.bench_function("admit_release/warm", |b| {
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

/// A controller with `lanes` principals, one lease held and one waiter per lane.
fn handoff_setup(lanes: usize) -> (Controller, Lease, Vec<String>) {
    let names: Vec<String> = (0..lanes).map(|i| format!("p{i}")).collect();
    let mut controller = Controller::new(profile(1, lanes), 0).expect("profile");
    let Acquired::Admitted(lease) = controller.acquire(request(&names[0]), 0) else {
        panic!("first request must be admitted");
    };
    for name in &names {
        let Acquired::Queued { .. } = controller.acquire(request(name), 0) else {
            panic!("lane waiters must queue");
        };
    }
    (controller, lease, names)
}

fn handoff(c: &mut Criterion) {
    let mut group = c.benchmark_group("handoff");
    for lanes in [10usize, 100_000] {
        let (mut controller, mut lease, names) = handoff_setup(lanes);
        let mut next = 0usize;
        group.bench_with_input(BenchmarkId::new("lanes", lanes), &lanes, |b, _| {
            // Only the release (and the handoff it performs) is timed; re-queueing a waiter for
            // the admitted lane, which keeps every lane holding a waiter, is not.
            b.iter_custom(|iterations| {
                let mut timed = Duration::ZERO;
                for _ in 0..iterations {
                    let start = Instant::now();
                    controller.release(lease.id, Outcome::Success, 0);
                    let resolution = controller.poll_resolution().expect("a waiter is admitted");
                    timed += start.elapsed();
                    lease = resolution.outcome.expect("admitted");
                    let name = &names[next % names.len()];
                    next += 1;
                    black_box(controller.acquire(request(name), 0));
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
