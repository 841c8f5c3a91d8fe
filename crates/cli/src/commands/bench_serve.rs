//! `turnstile bench-serve`: a load generator for the admission service.
//!
//! `--clients` concurrent clients (default 64) each run acquire + release pairs over their own
//! loopback HTTP/1.1 keep-alive connection, for `--seconds` after a warm-up. Two modes:
//!
//! - **Closed loop** (default): every client starts its next pair as soon as the last one
//!   ended. The throughput is the service's saturation point on this machine (load generator
//!   included); latency then is mostly queueing, and by Little's law the mean pair time is
//!   `clients / throughput`.
//! - **Open loop** (`--rate N`): the clients together start `N` pairs per second on a fixed
//!   schedule, and a pair that starts late because the service was slow is measured from when
//!   it was due (no coordinated omission). This answers "what is the latency at N pairs/s".
//!
//! It reports pairs per second, failures by cause, and p50 / p99 / max latency of a pair, of
//! one request, and of acquire and release separately, all measured at the client, plus the
//! process's CPU time, and with `--redis-url` Redis's time per pair (`INFO commandstats`). Without `--url` it starts an in-process service on an ephemeral loopback
//! port with a fresh data directory and a profile that never binds (the benchmark measures the
//! service, not the limits); with `--url` and `--key` it targets a running service, whose
//! profile decides what happens.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;
use serde_json::json;

use super::bench_client::{BenchClient, Endpoint, PairFailure};

#[derive(Debug, Args)]
pub struct BenchServeArgs {
    /// Base URL of a running service (e.g. http://127.0.0.1:8686); default: in-process.
    /// Several (`--url A,B,C` or the flag repeated): replicas of one deployment, the clients
    /// spread over them in turn (client i on URL i mod n), all acting with the same `--key`
    /// (keys are shared between replicas, `docs/replicas.md`).
    #[arg(long, value_delimiter = ',')]
    pub url: Vec<String>,
    /// Principal key for `--url`; one per URL, comma-separated and in `--url` order, when the
    /// URLs are separate deployments (e.g. a paired run of a replica with Redis beside one
    /// without: `docs/performance.md`).
    #[arg(long)]
    pub key: Option<String>,
    /// Provider lane to acquire on (with `--url`).
    #[arg(long, default_value = "llm-subagent")]
    pub provider: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Measured duration in seconds (after the warm-up).
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Warm-up before measuring, in milliseconds (pairs started in it are not counted).
    #[arg(long, default_value_t = 1000)]
    pub warmup_ms: u64,
    /// Open loop: start this many pairs per second (all clients together) on a fixed schedule
    /// and measure latency at that load. Without it, clients run pairs back to back and the
    /// benchmark measures the saturation throughput.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// In-process only: how far the lease log makes a grant survive (`process` or `machine`,
    /// `docs/server.md`, "Durability").
    #[arg(long, value_enum, default_value_t = Durability::Process)]
    pub durability: Durability,
    /// In-process: share the limits through this Redis (`redis://HOST:PORT`, one that holds no
    /// turnstile deployment yet: a deployment's keys are shared), as a replica
    /// does (`docs/replicas.md`); the difference to a run without it is the added latency and
    /// cost of coordination. With `--url`: the Redis the target service coordinates through,
    /// read only for the cost report. Either way the report adds Redis's time per acquire +
    /// release pair, from `INFO commandstats` before and after the run.
    #[arg(long)]
    pub redis_url: Option<String>,
    /// `--redis-url` names a Redis Cluster (seed nodes, comma-separated); Redis's time per
    /// pair is then summed over its primaries.
    #[arg(long)]
    pub redis_cluster: bool,
    /// Also write every measured pair to this file as CSV (`start_ms,pair_ms,acquire_ms,
    /// release_ms`, the start counted from the end of the warm-up, in start order): to find
    /// when a tail happened, e.g. the worst 10 ms windows of a run.
    #[arg(long)]
    pub timeline: Option<std::path::PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `[leases] durability` of the in-process service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    Process,
    Machine,
}

const BENCH_PROFILE: &str = r#"{
  "workspace": {"concurrency": 4096, "maxQueueLength": 100000},
  "providers": {"bench-provider": {"concurrency": 4096}},
  "principals": {"bench": {"concurrency": 4096}}
}"#;

struct Target {
    /// One base URL, or a deployment's replicas (clients take them in turn).
    bases: Vec<String>,
    /// One key for every base, or one per base (in order).
    keys: Vec<String>,
    provider: String,
}

/// What `--redis-url` names.
fn topology(cluster: bool) -> turnstile_coord::Topology {
    if cluster {
        turnstile_coord::Topology::Cluster
    } else {
        turnstile_coord::Topology::Standalone
    }
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 && rate <= 10_000_000.0 => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a rate: give pairs per second, above 0 and at most 10000000"
        )),
    }
}

pub fn run(args: BenchServeArgs) -> anyhow::Result<()> {
    if args.clients == 0 || args.seconds == 0 {
        bail!("--clients and --seconds must be at least 1");
    }
    // Created first, so an unwritable path is refused before anything starts, not after the run.
    let timeline_file = match &args.timeline {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("--timeline {}", path.display()))?,
        ),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        // Only for the in-process setup (profile and key); the load runs on `BenchClient`s.
        let client = reqwest::Client::new();
        let mut server = None;
        let mut data_dir = None;
        let target = match (args.url.is_empty(), &args.key) {
            (false, Some(key)) => Target {
                bases: args
                    .url
                    .iter()
                    .map(|url| url.trim_end_matches('/').to_owned())
                    .collect(),
                keys: {
                    let keys: Vec<String> = key.split(',').map(str::to_owned).collect();
                    if keys.len() != 1 && keys.len() != args.url.len() {
                        bail!(
                            "--key: one key, or one per --url ({} URLs, {} keys)",
                            args.url.len(),
                            keys.len()
                        );
                    }
                    keys
                },
                provider: args.provider.clone(),
            },
            (false, None) => bail!("--url needs --key (a principal key)"),
            (true, _) => {
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let dir = std::env::temp_dir()
                    .join(format!("turnstile-bench-{}-{stamp}", std::process::id(),));
                let mut config = turnstile_server::Config {
                    listen: "127.0.0.1:0".parse()?,
                    data_dir: dir.clone(),
                    demo: false,
                    leases: turnstile_server::config::LeaseConfig {
                        durability: match args.durability {
                            Durability::Process => {
                                turnstile_server::config::LeaseDurability::Process
                            }
                            Durability::Machine => {
                                turnstile_server::config::LeaseDurability::Machine
                            }
                        },
                        ..turnstile_server::config::LeaseConfig::default()
                    },
                    ..turnstile_server::Config::default()
                };
                config.coordination.redis_url = args.redis_url.clone();
                config.coordination.redis_cluster = args.redis_cluster;
                let running = turnstile_server::start(config).await?;
                let base = format!("http://{}", running.local_addr());
                let admin = running
                    .bootstrap_keys()
                    .map(|k| k.admin_key.clone())
                    .with_context(|| match &args.redis_url {
                        // Keys are shared through Redis: a fresh replica on a Redis that
                        // already holds a deployment adopts its keys and gets no admin key.
                        Some(url) => format!(
                            "{url} already holds a turnstile deployment, whose keys this \
                             in-process service adopts (docs/replicas.md); run the benchmark \
                             against an empty redis-server, or with --url against a replica"
                        ),
                        None => "a fresh data directory yields an admin key".to_owned(),
                    })?;
                let target = setup(&client, &base, &admin).await?;
                server = Some(running);
                data_dir = Some(dir);
                target
            }
        };

        if !args.json {
            let load = match args.rate {
                Some(rate) => format!("{rate} pairs/s offered"),
                None => "back to back".to_owned(),
            };
            println!(
                "bench-serve: {} clients, {load}, {} s, target {}",
                args.clients,
                args.seconds,
                target.bases.join(", ")
            );
        }
        let warmup = Duration::from_millis(args.warmup_ms);
        let measured = Duration::from_secs(args.seconds);
        let redis = match &args.redis_url {
            Some(url) => Some(
                turnstile_coord::RedisStore::new(
                    url,
                    topology(args.redis_cluster),
                    Duration::from_secs(2),
                )
                .map_err(|e| anyhow::anyhow!("--redis-url: {e}"))?,
            ),
            None => None,
        };
        let fcall_before = match &redis {
            Some(redis) => Some(redis.fcall_stats().await.map_err(anyhow::Error::from)?),
            None => None,
        };
        let cpu_before = process_cpu();
        let driven = drive(
            &target,
            args.clients,
            args.rate,
            warmup,
            measured,
            args.timeline.is_some(),
        )
        .await;
        let cpu = process_cpu()
            .zip(cpu_before)
            .map(|(after, before)| after.saturating_sub(before));
        let fcall = match (&redis, fcall_before) {
            (Some(redis), Some(before)) => match redis.fcall_stats().await {
                Ok(after) => Some(before.delta(after)),
                Err(_) => None,
            },
            _ => None,
        };
        // The in-process service and its data directory go away whatever the outcome.
        let stopped = match server {
            Some(server) => server
                .shutdown()
                .await
                .map(drop)
                .map_err(anyhow::Error::from),
            None => Ok(()),
        };
        if let Some(dir) = data_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        let mut driven = driven?;
        if let (Some(path), Some(file)) = (&args.timeline, timeline_file) {
            write_timeline(file, &mut driven.timeline)
                .with_context(|| format!("--timeline {}", path.display()))?;
        }
        let report = Report::new(&args, driven, measured, cpu, fcall);
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            report.print();
        }
        stopped?;
        if report.pairs == 0 {
            bail!("no acquire + release pair succeeded");
        }
        anyhow::Ok(())
    })
}

/// What every client measured, merged.
#[derive(Default)]
struct Samples {
    /// Pair latencies, µs.
    pairs: Vec<u64>,
    /// Latencies of the acquire requests, µs.
    acquires: Vec<u64>,
    /// Latencies of the release requests, µs.
    releases: Vec<u64>,
    failures: BTreeMap<PairFailure, u64>,
    /// Pairs of the warm-up (not in the latencies; Redis's figures include them).
    warmup_pairs: u64,
    /// With `--timeline`: every measured pair as (start after the warm-up, pair, acquire,
    /// release), µs.
    timeline: Vec<[u64; 4]>,
    /// Wall-clock time of warm-up and measurement.
    elapsed: Duration,
    /// With several targets: each target's (pair latencies, acquire latencies), µs, sorted, in
    /// `--url` order (client i drives target i mod N).
    by_target: Vec<(Vec<u64>, Vec<u64>)>,
}

/// Runs `clients` clients for `warmup + measured`; only pairs started after the warm-up are
/// counted. Without a rate each client runs pairs back to back (closed loop: the figure is the
/// saturation throughput); with `rate` (pairs per second, all clients together) each client
/// starts its pairs on a fixed schedule, and a pair that starts late because the client's
/// previous pair was still running is measured from when it was due (a late timer is not the
/// service's fault and is not charged).
async fn drive(
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
fn write_timeline(file: std::fs::File, timeline: &mut [[u64; 4]]) -> std::io::Result<()> {
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

/// Two sorted sample sets as one sorted set.
fn merged_sorted(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut merged = Vec::with_capacity(a.len() + b.len());
    merged.extend_from_slice(a);
    merged.extend_from_slice(b);
    merged.sort_unstable();
    merged
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
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
struct Report {
    target: String,
    in_process_service: bool,
    clients: usize,
    /// `--rate`: the offered load in pairs per second (absent: closed loop, back to back).
    target_pairs_per_second: Option<f64>,
    measured_seconds: u64,
    pairs: usize,
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
    fn new(
        args: &BenchServeArgs,
        samples: Samples,
        measured: Duration,
        cpu: Option<Duration>,
        fcall: Option<turnstile_coord::FcallStats>,
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
            redis: fcall.map(|f| RedisCost {
                fcalls: f.calls,
                fcall_usec: f.usec,
                usec_per_pair: f.usec as f64 / every_pair.max(1) as f64,
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

    fn print(&self) {
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

/// User + system CPU time of this process so far.
#[cfg(unix)]
fn process_cpu() -> Option<Duration> {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let to_duration = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(t.tv_sec()).ok()?)
            .checked_add(Duration::from_micros(u64::try_from(t.tv_usec()).ok()?))
    };
    to_duration(usage.user_time())?.checked_add(to_duration(usage.system_time())?)
}

#[cfg(not(unix))]
fn process_cpu() -> Option<Duration> {
    None
}

/// Registers the bench profile and creates the bench principal's key.
async fn setup(client: &reqwest::Client, base: &str, admin: &str) -> anyhow::Result<Target> {
    let key = register_bench_principal(client, base, admin, BENCH_PROFILE).await?;
    Ok(Target {
        bases: vec![base.to_owned()],
        keys: vec![key],
        provider: "bench-provider".to_owned(),
    })
}

/// Registers `profile` (JSON) as revision `bench-v1` of workspace `bench` and returns a new key
/// of principal `bench` (shared with `bench-proxy`).
pub(crate) async fn register_bench_principal(
    client: &reqwest::Client,
    base: &str,
    admin: &str,
    profile: &str,
) -> anyhow::Result<String> {
    let profile: serde_json::Value = serde_json::from_str(profile)?;
    let response = client
        .put(format!("{base}/v1/workspaces/bench/profiles/bench-v1"))
        .bearer_auth(admin)
        .json(&profile)
        .send()
        .await?;
    if !response.status().is_success() {
        bail!(
            "registering the bench profile failed: {}",
            response.status()
        );
    }
    let response = client
        .post(format!("{base}/v1/workspaces/bench/keys"))
        .bearer_auth(admin)
        .json(&json!({"principalId": "bench"}))
        .send()
        .await?;
    let body: serde_json::Value = response.json().await?;
    Ok(body["key"]
        .as_str()
        .context("the key response carries a key")?
        .to_owned())
}

/// The `p` quantile of sorted microsecond samples, in ms (0 when there are none).
pub(crate) fn percentile_ms(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let index = ((p * sorted_us.len() as f64).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    sorted_us[index] as f64 / 1000.0
}
