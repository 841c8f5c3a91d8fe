//! The scale ARCHITECTURE.md designs for, in one process: 100,000 principals and 1,000,000
//! queued waiters in one workspace controller.
//!
//! Prints (once, before the timed part):
//!
//! - `bytes per principal`: resident memory of the controller built from a profile naming
//!   100,000 principals (the profile it keeps included), divided by 100,000;
//! - `bytes per waiter`: resident memory added by queueing 1,000,000 waiters (10 per
//!   principal, each with its own budget ID, a deadline and a token estimate), divided by
//!   1,000,000; and the time that took per waiter.
//!
//! Resident memory is read from `/proc/self/status` (`VmRSS`), so the figure includes the
//! allocator's own overhead; the benchmark keeps nothing per waiter itself.
//!
//! Timed (criterion), with the queue held at 1,000,000 and every permit taken (workspace
//! concurrency 1,000):
//!
//! - `scale_1m/release_handoff`: release the oldest lease; the release hands its permit to the
//!   next lane's head (an admission);
//! - `scale_1m/enqueue`: one new waiter joins the back of its lane (untimed in the first, timed
//!   here), so the queue stays at 1,000,000.
//!
//! The sum of the two is one admit + release cycle at that scale.
//!
//! Allocator: mimalloc, the one the `turnstile` binary ships with (`crates/cli/src/allocator.rs`).
//! It matters at scale: mimalloc backs its segments with 2 MiB transparent huge pages where the
//! system allows them (`madvise` mode or `always`), the system allocator does not, and with
//! 100,000 lanes a handoff's random reads also miss the TLB on 4 KiB pages
//! (`docs/performance.md`, session 10).

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use turnstile_admission::{
    Acquired, AdmissionRequest, BudgetBounds, Controller, Estimate, LeaseId, Outcome,
};

mod common;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PRINCIPALS: usize = 100_000;
const WAITERS: usize = 1_000_000;
const WORKSPACE_CONCURRENCY: u32 = 1_000;
/// Waiters never expire during the run (a deadline ten hours away).
const DEADLINE_MS: u64 = 36_000_000;

/// Resident set size of this process, in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

struct Scale {
    controller: Controller,
    names: Vec<String>,
    leases: VecDeque<LeaseId>,
    next_principal: usize,
    next_budget: u64,
    now: u64,
}

impl Scale {
    fn request(&mut self) -> AdmissionRequest {
        let principal = &self.names[self.next_principal % PRINCIPALS];
        self.next_principal += 1;
        self.next_budget += 1;
        AdmissionRequest::new(
            principal.as_str(),
            "jev",
            format!("inv-{}", self.next_budget),
        )
        .with_estimate(Estimate::new().tokens(100))
        .with_deadline(DEADLINE_MS)
    }

    fn build() -> Self {
        let names: Vec<String> = (0..PRINCIPALS).map(|i| format!("p{i}")).collect();
        let profile = common::profile(WORKSPACE_CONCURRENCY, PRINCIPALS);
        let before_controller = rss_bytes();
        let mut controller = Controller::new(profile, 0).expect("profile");
        controller.set_budget_bounds(BudgetBounds {
            idle_ms: Some(10_000),
            max_open: None,
            max_open_per_principal: None,
        });
        let after_controller = rss_bytes();
        let mut scale = Scale {
            controller,
            names,
            leases: VecDeque::new(),
            next_principal: 0,
            next_budget: 0,
            now: 0,
        };
        // Take every permit first, then queue a million waiters behind them.
        while scale.leases.len() < WORKSPACE_CONCURRENCY as usize {
            let request = scale.request();
            match scale.controller.acquire(request, 0) {
                Acquired::Admitted(lease) => scale.leases.push_back(lease.id),
                other => panic!("the first requests are admitted: {other:?}"),
            }
        }
        scale.next_principal = 0;
        let before_waiters = rss_bytes();
        let started = Instant::now();
        for _ in 0..WAITERS {
            let request = scale.request();
            match scale.controller.acquire(request, 0) {
                Acquired::Queued { .. } => {}
                other => panic!("waiters queue: {other:?}"),
            }
        }
        let fill = started.elapsed();
        let after_waiters = rss_bytes();
        println!(
            "scale: {PRINCIPALS} principals: {} bytes per principal (controller RSS {:.1} MB)",
            after_controller.saturating_sub(before_controller) / PRINCIPALS as u64,
            after_controller.saturating_sub(before_controller) as f64 / 1e6,
        );
        println!(
            "scale: {WAITERS} waiters queued: {} bytes per waiter (RSS +{:.1} MB), {:.2} µs per enqueue while filling",
            after_waiters.saturating_sub(before_waiters) / WAITERS as u64,
            after_waiters.saturating_sub(before_waiters) as f64 / 1e6,
            fill.as_secs_f64() * 1e6 / WAITERS as f64,
        );
        assert_eq!(scale.controller.totals().queued, WAITERS as u64);
        scale
    }

    /// Releases the oldest lease; its permit goes to the next head. Returns the time taken.
    fn release_handoff(&mut self) -> Duration {
        self.now += 1;
        let lease = self.leases.pop_front().expect("a lease is held");
        let start = Instant::now();
        self.controller.release(lease, Outcome::Success, self.now);
        let resolution = self
            .controller
            .poll_resolution()
            .expect("a waiter is admitted");
        let elapsed = start.elapsed();
        self.leases
            .push_back(resolution.outcome.expect("admitted").id);
        elapsed
    }

    /// Queues one new waiter. Returns the time taken.
    fn enqueue(&mut self) -> Duration {
        let request = self.request();
        let start = Instant::now();
        let acquired = self.controller.acquire(request, self.now);
        let elapsed = start.elapsed();
        assert!(matches!(acquired, Acquired::Queued { .. }), "{acquired:?}");
        black_box(acquired);
        elapsed
    }
}

fn scale(c: &mut Criterion) {
    let mut scale = Scale::build();
    let mut group = c.benchmark_group("scale_1m");
    group.bench_function("release_handoff", |b| {
        b.iter_custom(|iterations| {
            let mut timed = Duration::ZERO;
            for _ in 0..iterations {
                timed += scale.release_handoff();
                scale.enqueue();
            }
            timed
        })
    });
    group.bench_function("enqueue", |b| {
        b.iter_custom(|iterations| {
            let mut timed = Duration::ZERO;
            for _ in 0..iterations {
                scale.release_handoff();
                timed += scale.enqueue();
            }
            timed
        })
    });
    group.finish();
    assert_eq!(scale.controller.totals().queued, WAITERS as u64);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = scale
}
criterion_main!(benches);
