//! What a run measured, as `turnstile-bench serve` reports it: pairs per second, failures by
//! cause, latency quantiles (pair, request, acquire, release; per target with several URLs),
//! CPU time and Redis's cost per pair.
//!
//! Invariants: the JSON field names are the report's contract (scripts and
//! `docs/performance.md` read them) and do not change; a quantile of no samples is 0.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::drive::Samples;
use super::ServeArgs;

/// Two sorted sample sets as one sorted set.
fn merged_sorted(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut merged = Vec::with_capacity(a.len() + b.len());
    merged.extend_from_slice(a);
    merged.extend_from_slice(b);
    merged.sort_unstable();
    merged
}

/// Latency quantiles in milliseconds.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Latency {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

impl Latency {
    fn of(sorted_us: &[u64]) -> Self {
        Latency {
            p50_ms: percentile_ms(sorted_us, 0.50),
            p99_ms: percentile_ms(sorted_us, 0.99),
            max_ms: sorted_us.last().map_or(0.0, |&v| v as f64 / 1000.0),
        }
    }
}

/// The benchmark's result (`--json` prints it as is).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Report {
    target: String,
    in_process_service: bool,
    clients: usize,
    /// `--rate`: the offered load in pairs per second (absent: closed loop, back to back).
    target_pairs_per_second: Option<f64>,
    measured_seconds: u64,
    pub(super) pairs: usize,
    pairs_per_second: f64,
    /// Failed pairs by cause ("status 429", "transport", ...).
    failures: BTreeMap<String, u64>,
    pair_latency: Latency,
    /// One acquire or one release.
    request_latency: Latency,
    /// `POST /v1/admissions`: the time a caller waits for its permit.
    acquire_latency: Latency,
    /// `POST /v1/leases/{id}/release`.
    release_latency: Latency,
    /// CPU seconds of this process during warm-up and measurement: the clients, plus the
    /// service when it runs in-process. Absent where the platform does not report it.
    process_cpu_seconds: Option<f64>,
    /// Wall-clock seconds of warm-up and measurement.
    wall_seconds: f64,
    /// With `--redis-url`: what the shared limits cost Redis during warm-up and measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    redis: Option<RedisCost>,
    /// With several `--url` targets: each one's figures, in `--url` order. Its clients ran in
    /// the same process at the same time as the others', so two targets compare under the
    /// same host conditions (a paired measurement: e.g. one replica with Redis beside one
    /// without, for the latency Redis adds).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    per_target: Vec<TargetFigures>,
}

/// One target's share of a run with several.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct TargetFigures {
    url: String,
    pairs: usize,
    pair_latency: Latency,
    acquire_latency: Latency,
}

/// The `FCALL`s Redis counted during a run and the µs it spent in them (the difference of two
/// `INFO commandstats` readings).
pub(super) struct FcallDelta {
    pub(super) calls: u64,
    pub(super) usec: u64,
}

/// Redis's side of a run, from `INFO commandstats` (`cmdstat_fcall`) before and after it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RedisCost {
    /// `FCALL`s during warm-up and measurement (a batch of a workspace's queued acquires and
    /// releases is one, `docs/replicas.md`; plus a replica's lease renewals every
    /// `renew_every_ms`).
    fcalls: u64,
    /// µs Redis spent in them (wall-clock inside Redis: a loaded host inflates it).
    fcall_usec: u64,
    /// µs per acquire + release pair: all `FCALL` µs over every pair of the run, warm-up and
    /// failed pairs included (batches make µs per `FCALL` no measure of a pair).
    usec_per_pair: f64,
}

impl Report {
    pub(super) fn new(
        args: &ServeArgs,
        samples: Samples,
        measured: Duration,
        cpu: Option<Duration>,
        fcall: Option<FcallDelta>,
    ) -> Self {
        let pairs = samples.pairs.len();
        let failed: u64 = samples.failures.values().sum();
        let every_pair = pairs as u64 + samples.warmup_pairs + failed;
        Report {
            target: if args.url.is_empty() {
                "in-process".to_owned()
            } else {
                args.url.join(",")
            },
            in_process_service: args.url.is_empty(),
            clients: args.clients,
            target_pairs_per_second: args.rate,
            measured_seconds: args.seconds,
            pairs,
            pairs_per_second: pairs as f64 / measured.as_secs_f64(),
            failures: samples
                .failures
                .iter()
                .map(|(failure, count)| (failure.to_string(), *count))
                .collect(),
            pair_latency: Latency::of(&samples.pairs),
            request_latency: Latency::of(&merged_sorted(&samples.acquires, &samples.releases)),
            acquire_latency: Latency::of(&samples.acquires),
            release_latency: Latency::of(&samples.releases),
            process_cpu_seconds: cpu.map(|d| d.as_secs_f64()),
            wall_seconds: samples.elapsed.as_secs_f64(),
            redis: fcall.map(|FcallDelta { calls, usec }| RedisCost {
                fcalls: calls,
                fcall_usec: usec,
                usec_per_pair: usec as f64 / every_pair.max(1) as f64,
            }),
            per_target: if args.url.len() > 1 {
                args.url
                    .iter()
                    .zip(&samples.by_target)
                    .map(|(url, (pairs, acquires))| TargetFigures {
                        url: url.clone(),
                        pairs: pairs.len(),
                        pair_latency: Latency::of(pairs),
                        acquire_latency: Latency::of(acquires),
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    pub(super) fn print(&self) {
        let failed: u64 = self.failures.values().sum();
        println!("pairs:        {} ({failed} failed)", self.pairs);
        for (failure, count) in &self.failures {
            println!("  failed by {failure}: {count}");
        }
        match self.target_pairs_per_second {
            Some(rate) => println!(
                "pairs/s:      {:.0} (offered {rate:.0}, open loop)",
                self.pairs_per_second
            ),
            None => println!(
                "pairs/s:      {:.0} (closed loop: saturation)",
                self.pairs_per_second
            ),
        }
        println!(
            "pair          p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.pair_latency.p50_ms, self.pair_latency.p99_ms, self.pair_latency.max_ms
        );
        for (name, latency) in [
            ("request", &self.request_latency),
            ("  acquire", &self.acquire_latency),
            ("  release", &self.release_latency),
        ] {
            println!(
                "{name:<13} p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                latency.p50_ms, latency.p99_ms, latency.max_ms
            );
        }
        for target in &self.per_target {
            println!(
                "{}: {} pairs, acquire p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                target.url,
                target.pairs,
                target.acquire_latency.p50_ms,
                target.acquire_latency.p99_ms,
                target.acquire_latency.max_ms
            );
        }
        if let Some(redis) = &self.redis {
            println!(
                "redis:        {:.1} µs per acquire + release pair ({} FCALLs, {} µs, INFO commandstats; warm-up included)",
                redis.usec_per_pair, redis.fcalls, redis.fcall_usec
            );
        }
        if let Some(cpu) = self.process_cpu_seconds {
            let scope = if self.in_process_service {
                "clients and service"
            } else {
                "clients only"
            };
            println!(
                "process CPU:  {cpu:.2} s over {:.2} s wall ({scope}; {:.0}% of one core)",
                self.wall_seconds,
                100.0 * cpu / self.wall_seconds.max(f64::EPSILON)
            );
        }
    }
}

/// The `p` quantile of sorted microsecond samples, in ms (0 when there are none).
pub(crate) fn percentile_ms(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let index = ((p * sorted_us.len() as f64).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    sorted_us[index] as f64 / 1000.0
}
