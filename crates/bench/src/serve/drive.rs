//! The load itself: `clients` clients on their own connections, closed or open loop, and what
//! each measured, merged.
//!
//! Invariants: only pairs started after the warm-up are counted (warm-up pairs are only
//! tallied, for Redis's figures); in the open loop a pair that starts late because the service
//! was slow is measured from when it was due (no coordinated omission), while a late timer of
//! the load generator is not charged to the service.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::client::{BenchClient, Endpoint, PairFailure};
use super::Target;

/// What every client measured, merged.
#[derive(Default)]
pub(super) struct Samples {
    /// Pair latencies, µs.
    pub(super) pairs: Vec<u64>,
    /// Latencies of the acquire requests, µs.
    pub(super) acquires: Vec<u64>,
    /// Latencies of the release requests, µs.
    pub(super) releases: Vec<u64>,
    pub(super) failures: BTreeMap<PairFailure, u64>,
    /// Pairs of the warm-up (not in the latencies; Redis's figures include them).
    pub(super) warmup_pairs: u64,
    /// With `--timeline`: every measured pair as (start after the warm-up, pair, acquire,
    /// release), µs.
    pub(super) timeline: Vec<[u64; 4]>,
    /// Wall-clock time of warm-up and measurement.
    pub(super) elapsed: Duration,
    /// With several targets: each target's (pair latencies, acquire latencies), µs, sorted, in
    /// `--url` order (client i drives target i mod N).
    pub(super) by_target: Vec<(Vec<u64>, Vec<u64>)>,
}

/// Runs `clients` clients for `warmup + measured`; only pairs started after the warm-up are
/// counted. Without a rate each client runs pairs back to back (closed loop: the figure is the
/// saturation throughput); with `rate` (pairs per second, all clients together) each client
/// starts its pairs on a fixed schedule, and a pair that starts late because the client's
/// previous pair was still running is measured from when it was due (a late timer is not the
/// service's fault and is not charged).
pub(super) async fn drive(
    target: &Target,
    clients: usize,
    rate: Option<f64>,
    warmup: Duration,
    measured: Duration,
    timeline: bool,
) -> anyhow::Result<Samples> {
    let pace = rate.map(|rate| Duration::from_secs_f64(clients as f64 / rate));
    let stagger = move |client_index: usize| client_index as f64 / clients as f64;
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for client_index in 0..clients {
        let endpoint = Endpoint::new(
            &target.bases[client_index % target.bases.len()],
            &target.keys[client_index % target.bases.len() % target.keys.len()],
            &target.provider,
            &format!("bench-{client_index}"),
        )?;
        let mut client = BenchClient::new(endpoint);
        tasks.push(tokio::spawn(async move {
            let mut samples = Samples {
                pairs: Vec::with_capacity(16_384),
                acquires: Vec::with_capacity(16_384),
                releases: Vec::with_capacity(16_384),
                ..Samples::default()
            };
            // Open loop (`--rate`): this client's k-th pair is due at `due`; clients are
            // staggered across one interval so their requests do not arrive in bursts.
            let mut due = pace.map(|interval| start + interval.mul_f64(stagger(client_index)));
            // When this client's previous pair ended.
            let mut previous_end = start;
            loop {
                let (counted_from, sent_at) = match (pace, due) {
                    (Some(interval), Some(at)) => {
                        due = Some(at + interval);
                        let now = Instant::now();
                        if now < at {
                            // On schedule: wait, and measure from the real start (the timer's
                            // own lateness is the load generator's, not the service's).
                            tokio::time::sleep_until(at.into()).await;
                            let now = Instant::now();
                            (now, now)
                        } else if previous_end > at {
                            // Late because the previous pair (the service) was still running
                            // when this one was due: it counts from when it was due, so a slow
                            // service is charged for every pair it delayed (no coordinated
                            // omission).
                            (at, now)
                        } else {
                            // Late only because this client's timer woke late: the load
                            // generator's delay, not the service's.
                            (now, now)
                        }
                    }
                    _ => {
                        let now = Instant::now();
                        (now, now)
                    }
                };
                if counted_from.duration_since(start) >= warmup + measured {
                    break;
                }
                let outcome = client.pair().await;
                previous_end = Instant::now();
                let elapsed = previous_end.duration_since(counted_from);
                if counted_from.duration_since(start) < warmup {
                    samples.warmup_pairs += 1;
                    continue;
                }
                match outcome {
                    Ok(times) => {
                        let waited_for_schedule = sent_at.duration_since(counted_from);
                        let (pair, acquire, release) = (
                            micros(elapsed),
                            micros(times.acquire + waited_for_schedule),
                            micros(times.release),
                        );
                        samples.pairs.push(pair);
                        samples.acquires.push(acquire);
                        samples.releases.push(release);
                        if timeline {
                            let started =
                                micros(counted_from.duration_since(start).saturating_sub(warmup));
                            samples.timeline.push([started, pair, acquire, release]);
                        }
                    }
                    Err(failure) => *samples.failures.entry(failure).or_default() += 1,
                }
            }
            samples
        }));
    }
    let mut merged = Samples {
        by_target: vec![(Vec::new(), Vec::new()); target.bases.len()],
        ..Samples::default()
    };
    for (client_index, task) in tasks.into_iter().enumerate() {
        let mut samples = task.await?;
        let (pairs, acquires) = &mut merged.by_target[client_index % target.bases.len()];
        pairs.extend_from_slice(&samples.pairs);
        acquires.extend_from_slice(&samples.acquires);
        merged.pairs.append(&mut samples.pairs);
        merged.acquires.append(&mut samples.acquires);
        merged.releases.append(&mut samples.releases);
        merged.timeline.append(&mut samples.timeline);
        merged.warmup_pairs += samples.warmup_pairs;
        for (failure, count) in samples.failures {
            *merged.failures.entry(failure).or_default() += count;
        }
    }
    merged.elapsed = start.elapsed();
    merged.pairs.sort_unstable();
    merged.acquires.sort_unstable();
    merged.releases.sort_unstable();
    for (pairs, acquires) in &mut merged.by_target {
        pairs.sort_unstable();
        acquires.sort_unstable();
    }
    Ok(merged)
}

/// `--timeline`: the measured pairs in start order, as CSV with milliseconds.
pub(super) fn write_timeline(
    file: std::fs::File,
    timeline: &mut [[u64; 4]],
) -> std::io::Result<()> {
    use std::io::Write;
    timeline.sort_unstable();
    let mut out = std::io::BufWriter::new(file);
    writeln!(out, "start_ms,pair_ms,acquire_ms,release_ms")?;
    let ms = |us: u64| us as f64 / 1000.0;
    for [start, pair, acquire, release] in timeline.iter().copied() {
        writeln!(
            out,
            "{:.3},{:.3},{:.3},{:.3}",
            ms(start),
            ms(pair),
            ms(acquire),
            ms(release)
        )?;
    }
    out.flush()
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
