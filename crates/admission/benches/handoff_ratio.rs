//! Issue 14's figure, measured so that both sides see the same machine: the 100,000-lane
//! handoff over the 10-lane one.
//!
//! criterion measures `handoff/lanes/10` and `handoff/lanes/100000` (in `benches/admission.rs`)
//! one after the other, seconds apart, and on a shared VM the host's load moves between the two,
//! so their ratio moves from run to run more than the code does. Here both controllers live in
//! one process and take turns in blocks of [`BLOCK`] handoffs (the same timed part as criterion's:
//! the release and the handoff it performs; the re-queue that keeps every lane holding a waiter is
//! not timed). Each round is one block of each size; the ratio of a round compares two blocks
//! measured within a few milliseconds of each other. Reported: the median time per handoff of
//! each size, the ratio of those medians, and the 10th / 50th / 90th percentile of the per-round
//! ratios.
//!
//! `cargo bench -p turnstile-admission --bench handoff_ratio` (`TURNSTILE_HANDOFF_ROUNDS`
//! overrides the number of rounds, 400 by default). Allocator: mimalloc, as in the binary (see
//! `benches/admission.rs`).

use std::time::Instant;

use turnstile_admission::Fairness;

mod common;
use common::Handoffs;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Handoffs per block.
const BLOCK: usize = 2_000;
const SMALL: usize = 10;
const LARGE: usize = 100_000;

/// Nanoseconds per handoff over one block.
fn block(handoffs: &mut Handoffs) -> f64 {
    let mut timed = 0u128;
    for _ in 0..BLOCK {
        let start = Instant::now();
        handoffs.hand_off();
        timed += start.elapsed().as_nanos();
        handoffs.requeue();
    }
    timed as f64 / BLOCK as f64
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[at]
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that names neither this bench nor its figure skips it.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"handoff_ratio".contains(f.as_str())) {
        return;
    }
    let rounds: usize = std::env::var("TURNSTILE_HANDOFF_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    for fairness in [Fairness::Requests, Fairness::Tokens] {
        measure(fairness, rounds);
    }
}

/// The ratio with the provider's turns fair in `fairness`.
fn measure(fairness: Fairness, rounds: usize) {
    let mut small = Handoffs::in_mode(fairness, SMALL);
    let mut large = Handoffs::in_mode(fairness, LARGE);
    // Warm-up: one full turn of the large ring, so every lane has been served once.
    for _ in 0..LARGE / BLOCK {
        block(&mut small);
        block(&mut large);
    }
    let (mut small_ns, mut large_ns, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which size goes first, so neither always follows the other.
        let (s, l) = if round % 2 == 0 {
            let s = block(&mut small);
            (s, block(&mut large))
        } else {
            let l = block(&mut large);
            (block(&mut small), l)
        };
        small_ns.push(s);
        large_ns.push(l);
        ratios.push(l / s);
    }
    let (small_ns, large_ns, ratios) = (sorted(small_ns), sorted(large_ns), sorted(ratios));
    let (s50, l50) = (percentile(&small_ns, 0.5), percentile(&large_ns, 0.5));
    println!(
        "handoff_ratio ({fairness:?}): {:.2}x  (lanes/{SMALL} {s50:.0} ns, lanes/{LARGE} {l50:.0} ns per handoff, \
         medians of {rounds} blocks of {BLOCK}; per-round ratio p10 {:.2} / p50 {:.2} / p90 {:.2})",
        l50 / s50,
        percentile(&ratios, 0.1),
        percentile(&ratios, 0.5),
        percentile(&ratios, 0.9),
    );
}
