//! `turnstile bench-serve`: a load generator for the admission service.
//!
//! `--clients` concurrent clients (default 64) each run acquire + release pairs back to back
//! over loopback HTTP/1.1 keep-alive connections, for `--seconds` after a short warm-up. It
//! reports pairs per second, the p50 / p99 / max latency of a pair and the p50 / p99 latency of
//! each request (acquire or release), all measured at the client. Without `--url` it starts an in-process service on an ephemeral
//! loopback port with a fresh data directory and a profile that never binds (the benchmark
//! measures the service, not the limits); with `--url` and `--key` it targets a running service,
//! whose profile decides what happens.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use serde_json::json;

#[derive(Debug, Args)]
pub struct BenchServeArgs {
    /// Base URL of a running service (e.g. http://127.0.0.1:8686); default: in-process.
    #[arg(long)]
    pub url: Option<String>,
    /// Principal key for `--url`.
    #[arg(long)]
    pub key: Option<String>,
    /// Provider lane to acquire on (with `--url`).
    #[arg(long, default_value = "llm-subagent")]
    pub provider: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Measured duration in seconds (after a 1 s warm-up).
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
}

const BENCH_PROFILE: &str = r#"{
  "workspace": {"concurrency": 4096, "maxQueueLength": 100000},
  "providers": {"bench-provider": {"concurrency": 4096}},
  "principals": {"bench": {"concurrency": 4096}}
}"#;

struct Target {
    base: String,
    key: String,
    provider: String,
}

pub fn run(args: BenchServeArgs) -> anyhow::Result<()> {
    if args.clients == 0 || args.seconds == 0 {
        bail!("--clients and --seconds must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(args.clients * 2)
            .tcp_nodelay(true)
            .build()?;
        let mut server = None;
        let mut data_dir = None;
        let target = match (&args.url, &args.key) {
            (Some(url), Some(key)) => Target {
                base: url.trim_end_matches('/').to_owned(),
                key: key.clone(),
                provider: args.provider.clone(),
            },
            (Some(_), None) => bail!("--url needs --key (a principal key)"),
            (None, _) => {
                let dir = std::env::temp_dir().join(format!(
                    "turnstile-bench-{}-{}",
                    std::process::id(),
                    Instant::now().elapsed().as_nanos()
                ));
                let config = turnstile_server::Config {
                    listen: "127.0.0.1:0".parse()?,
                    data_dir: dir.clone(),
                    demo: false,
                    ..turnstile_server::Config::default()
                };
                let running = turnstile_server::start(config).await?;
                let base = format!("http://{}", running.local_addr());
                let admin = running
                    .bootstrap_keys()
                    .map(|k| k.admin_key.clone())
                    .context("a fresh data directory yields an admin key")?;
                let target = setup(&client, &base, &admin).await?;
                server = Some(running);
                data_dir = Some(dir);
                target
            }
        };
        let target = Arc::new(target);

        println!(
            "bench-serve: {} clients, {} s, target {}",
            args.clients, args.seconds, target.base
        );
        let warmup = Duration::from_secs(1);
        let measured = Duration::from_secs(args.seconds);
        let start = Instant::now();
        let mut tasks = Vec::with_capacity(args.clients);
        for client_index in 0..args.clients {
            let client = client.clone();
            let target = target.clone();
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(16_384);
                let mut requests = Vec::with_capacity(32_768);
                let mut failures = 0u64;

                loop {
                    let began = Instant::now();
                    if began.duration_since(start) >= warmup + measured {
                        break;
                    }

                    let outcome = pair(&client, &target, client_index).await;
                    let elapsed = began.elapsed();
                    if began.duration_since(start) >= warmup {
                        match outcome {
                            Some((acquire, release)) => {
                                latencies.push(elapsed.as_micros() as u64);
                                requests.push(acquire.as_micros() as u64);
                                requests.push(release.as_micros() as u64);
                            }
                            None => failures += 1,
                        }
                    }
                }
                (latencies, requests, failures)
            }));
        }
        let mut latencies = Vec::new();
        let mut requests = Vec::new();
        let mut failures = 0;
        for task in tasks {
            let (mut l, mut r, f) = task.await?;
            latencies.append(&mut l);
            requests.append(&mut r);
            failures += f;
        }
        latencies.sort_unstable();
        requests.sort_unstable();
        let pairs = latencies.len();
        let rate = pairs as f64 / measured.as_secs_f64();
        println!("pairs:        {pairs} ({failures} failed)");
        println!("pairs/s:      {rate:.0}");
        println!(
            "pair latency: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            percentile_ms(&latencies, 0.50),
            percentile_ms(&latencies, 0.99),
            latencies.last().map_or(0.0, |&v| v as f64 / 1000.0)
        );
        println!(
            "request latency (acquire or release): p50 {:.2} ms, p99 {:.2} ms",
            percentile_ms(&requests, 0.50),
            percentile_ms(&requests, 0.99),
        );
        if let Some(server) = server {
            server.shutdown().await?;
        }
        if let Some(dir) = data_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        anyhow::Ok(())
    })
}

/// Registers the bench profile and creates the bench principal's key.
async fn setup(client: &reqwest::Client, base: &str, admin: &str) -> anyhow::Result<Target> {
    let profile: serde_json::Value = serde_json::from_str(BENCH_PROFILE)?;
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
    let key = body["key"]
        .as_str()
        .context("the key response carries a key")?
        .to_owned();
    Ok(Target {
        base: base.to_owned(),
        key,
        provider: "bench-provider".to_owned(),
    })
}

/// The `p` quantile of sorted microsecond samples, in ms (0 when there are none).
fn percentile_ms(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let index = ((p * sorted_us.len() as f64).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    sorted_us[index] as f64 / 1000.0
}

/// One acquire + release. Returns the latency of each when both succeeded.
async fn pair(
    client: &reqwest::Client,
    target: &Target,
    client_index: usize,
) -> Option<(Duration, Duration)> {
    let began = Instant::now();
    let body = json!({
        "providerId": target.provider,
        "budgetId": format!("bench-{client_index}"),
        "estimate": {"tokens": 100, "costUsd": 0.0001},
        "deadlineMs": 5000,
    });
    let Ok(response) = client
        .post(format!("{}/v1/admissions", target.base))
        .bearer_auth(&target.key)
        .json(&body)
        .send()
        .await
    else {
        return None;
    };
    if !response.status().is_success() {
        let _ = response.bytes().await;
        return None;
    }
    let Ok(lease) = response.json::<serde_json::Value>().await else {
        return None;
    };
    let lease_id = lease["leaseId"].as_str()?;
    let acquired = began.elapsed();
    let released_at = Instant::now();
    let released = client
        .post(format!("{}/v1/leases/{lease_id}/release", target.base))
        .bearer_auth(&target.key)
        .json(&json!({"outcome": "success"}))
        .send()
        .await;
    match released {
        Ok(response) => {
            let ok = response.status().is_success();
            let _ = response.bytes().await;
            ok.then(|| (acquired, released_at.elapsed()))
        }
        Err(_) => None,
    }
}
