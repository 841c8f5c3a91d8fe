//! `turnstile-bench serve` (formerly `turnstile bench-serve`): a load generator for the
//! admission service.
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
//! process's CPU time, and with `--redis-url` Redis's time per pair (`INFO commandstats`).
//! Without `--url` it starts an in-process service on an ephemeral loopback port with a fresh
//! data directory and a profile that never binds (the benchmark measures the service, not the
//! limits); with `--url` and `--key` it targets a running service, whose profile decides what
//! happens.
//!
//! This file sets the run up and tears it down; the load is `drive.rs`, its HTTP client
//! `client.rs`, the figures `report.rs`.

mod client;
mod drive;
mod report;

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use serde_json::json;

use drive::{drive, write_timeline};
pub(crate) use report::percentile_ms;
use report::{FcallDelta, Report};

#[derive(Debug, Args)]
pub struct ServeArgs {
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
    /// In-process only: what the bench provider's turns are fair in (`requests`, the default,
    /// or `tokens`; `docs/profiles.md`), to compare the two modes' cost.
    #[arg(long, value_enum, default_value_t = FairnessArg::Requests)]
    pub fairness: FairnessArg,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--fairness`: the bench provider's `fairness`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FairnessArg {
    Requests,
    Tokens,
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

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    if args.clients == 0 || args.seconds == 0 {
        bail!("--clients and --seconds must be at least 1");
    }
    if !args.url.is_empty() && args.fairness != FairnessArg::Requests {
        bail!("--fairness sets the in-process service's profile; with --url the service's own profile decides");
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
                    leases: turnstile_server::LeaseConfig {
                        durability: match args.durability {
                            Durability::Process => turnstile_server::LeaseDurability::Process,
                            Durability::Machine => turnstile_server::LeaseDurability::Machine,
                        },
                        ..turnstile_server::LeaseConfig::default()
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
                let target = setup(&client, &base, &admin, args.fairness).await?;
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
                Ok(after) => {
                    let delta = before.delta(after);
                    Some(FcallDelta {
                        calls: delta.calls,
                        usec: delta.usec,
                    })
                }
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

/// Registers the bench profile (its provider fair in `fairness`) and creates the bench
/// principal's key.
async fn setup(
    client: &reqwest::Client,
    base: &str,
    admin: &str,
    fairness: FairnessArg,
) -> anyhow::Result<Target> {
    let profile = match fairness {
        FairnessArg::Requests => BENCH_PROFILE.to_owned(),
        FairnessArg::Tokens => BENCH_PROFILE.replace(
            r#""bench-provider": {"concurrency": 4096}"#,
            r#""bench-provider": {"concurrency": 4096, "fairness": "tokens"}"#,
        ),
    };
    let key = register_bench_principal(client, base, admin, &profile).await?;
    Ok(Target {
        bases: vec![base.to_owned()],
        keys: vec![key],
        provider: "bench-provider".to_owned(),
    })
}

/// Registers `profile` (JSON) as revision `bench-v1` of workspace `bench` and returns a new key
/// of principal `bench` (shared with `turnstile-bench proxy`).
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
