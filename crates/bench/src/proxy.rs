//! `turnstile-bench proxy` (formerly `turnstile bench-proxy`): what proxy mode adds to a model
//! call.
//!
//! One process, three tokio runtimes with their own named threads: the scripted fake upstream
//! (`ts-fake`), a turnstile service with the proxy routes in front of it (`ts-svc`), and the
//! load generator (`ts-load`), all on loopback. For each concurrency (`--clients`, default 1
//! and 64) it runs chat-completion calls back to back for `--seconds`, first **directly**
//! against the fake upstream, then **through** the proxy, and reports p50 / p99 latency,
//! calls/s, the added p50 / p99 (proxied − direct), and the service's CPU per proxied call:
//! the user + system time of the `ts-svc` threads (the driver is a task there) and the
//! service's `turnstile-store` thread only (Linux: `/proc/self/task/*/stat`), so the load generator and the fake upstream are not
//! charged. A streamed phase at concurrency 1
//! measures the time to the first body byte, direct and proxied.
//!
//! The service runs the same code as `turnstile serve` (its router, driver, auth, caps) with a
//! profile that never binds: the benchmark measures the proxy, not the limits.

use std::time::{Duration, Instant};

use crate::serve::{percentile_ms, register_bench_principal};
use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::http::HeaderValue;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::json;
use tokio::net::TcpStream;
use turnstile_proxy::FakeUpstream;
use turnstile_proxy::{ApiFormat, ModelConfig, UpstreamConfig};

#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Concurrencies to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize, 64])]
    pub clients: Vec<usize>,
    /// Measured seconds per phase (after a warm-up of one second).
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Worker threads of the service's runtime.
    #[arg(long, default_value_t = 2)]
    pub service_threads: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Skip the streamed phase (profiling the non-streamed path alone).
    #[arg(long)]
    pub no_stream: bool,
}

const PROFILE: &str = r#"{
  "workspace": {"concurrency": 4096, "maxQueueLength": 100000},
  "providers": {"bench-provider": {"concurrency": 4096}},
  "principals": {"bench": {"concurrency": 4096, "allowUnknownCost": true}}
}"#;

/// One measured phase.
#[derive(Debug, Serialize)]
struct Phase {
    target: &'static str,
    clients: usize,
    stream: bool,
    calls: u64,
    failures: u64,
    calls_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Streams: time to the first body byte.
    first_byte_p50_ms: Option<f64>,
    first_byte_p99_ms: Option<f64>,
    /// Service CPU (ts-svc threads) per call, ms; proxied phases only.
    service_cpu_per_call_ms: Option<f64>,
    /// The system (kernel) part of `service_cpu_per_call_ms`.
    service_sys_cpu_per_call_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Comparison {
    clients: usize,
    stream: bool,
    added_p50_ms: f64,
    added_p99_ms: f64,
    added_first_byte_p50_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    phases: Vec<Phase>,
    added: Vec<Comparison>,
}

pub fn run(args: ProxyArgs) -> anyhow::Result<()> {
    if args.clients.is_empty() || args.clients.contains(&0) || args.seconds == 0 {
        bail!("--clients and --seconds must be at least 1");
    }
    let runtime = |name: &str, threads: usize| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
            .context("cannot start a runtime")
    };
    let fake_rt = runtime("ts-fake", 2)?;
    let service_rt = runtime("ts-svc", args.service_threads.max(1))?;
    let load_rt = runtime("ts-load", 2)?;

    let fake = fake_rt.block_on(FakeUpstream::start(([127, 0, 0, 1], 0).into(), false))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!(
        "turnstile-bench-proxy-{}-{stamp}",
        std::process::id()
    ));
    let mut config = turnstile_server::Config {
        listen: "127.0.0.1:0".parse()?,
        data_dir: dir.clone(),
        demo: false,
        ..turnstile_server::Config::default()
    };
    config.proxy.upstreams.insert(
        "fake".into(),
        UpstreamConfig {
            format: ApiFormat::Openai,
            base_url: Some(fake.openai_base()),
            base_url_env: None,
            api_key_env: None,
            required: false,
        },
    );
    config.proxy.models.insert(
        "bench-model".into(),
        ModelConfig {
            upstream: Some("fake".into()),
            provider: Some("bench-provider".into()),
            deployments: None,
            upstream_model: None,
            input_usd_per_mtok: Some(1.0),
            output_usd_per_mtok: Some(2.0),
            default_max_output_tokens: None,
        },
    );
    let server = service_rt.block_on(turnstile_server::start(config))?;
    let base = format!("http://{}", server.local_addr());
    let admin = server
        .bootstrap_keys()
        .map(|k| k.admin_key.clone())
        .context("a fresh data directory yields an admin key")?;
    let key = load_rt.block_on(setup(&base, &admin))?;

    let result = load_rt.block_on(async {
        let mut phases = Vec::new();
        let mut added = Vec::new();
        let direct = Target {
            authority: fake.addr.to_string(),
            path: "/v1/chat/completions",
            key: None,
        };
        let proxied = Target {
            authority: server.local_addr().to_string(),
            path: "/openai/v1/chat/completions",
            key: Some(key.clone()),
        };
        let mut plan: Vec<(usize, bool)> = args.clients.iter().map(|c| (*c, false)).collect();
        if !args.no_stream {
            plan.push((1, true));
        }
        for (clients, stream) in plan {
            let d = phase(&direct, "direct", clients, stream, args.seconds).await?;
            let p = phase(&proxied, "proxied", clients, stream, args.seconds).await?;
            added.push(Comparison {
                clients,
                stream,
                added_p50_ms: p.p50_ms - d.p50_ms,
                added_p99_ms: p.p99_ms - d.p99_ms,
                added_first_byte_p50_ms: p
                    .first_byte_p50_ms
                    .zip(d.first_byte_p50_ms)
                    .map(|(a, b)| a - b),
            });
            phases.push(d);
            phases.push(p);
        }
        anyhow::Ok(Report { phases, added })
    });
    let stopped = service_rt.block_on(server.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
    let report = result?;
    stopped?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(())
}

fn print(report: &Report) {
    println!("bench-proxy: fake upstream, service and load generator on loopback, one process");
    println!(
        "{:<8} {:>7} {:>6} {:>9} {:>10} {:>8} {:>8} {:>10} {:>12}",
        "target",
        "clients",
        "stream",
        "calls",
        "calls/s",
        "p50 ms",
        "p99 ms",
        "1st-byte",
        "svc cpu/call"
    );
    for p in &report.phases {
        println!(
            "{:<8} {:>7} {:>6} {:>9} {:>10.0} {:>8.3} {:>8.3} {:>10} {:>12}",
            p.target,
            p.clients,
            p.stream,
            p.calls,
            p.calls_per_sec,
            p.p50_ms,
            p.p99_ms,
            p.first_byte_p50_ms
                .map_or("-".into(), |v| format!("{v:.3}")),
            match (p.service_cpu_per_call_ms, p.service_sys_cpu_per_call_ms) {
                (Some(all), Some(sys)) => format!("{all:.4} ms ({sys:.4} sys)"),
                (Some(all), None) => format!("{all:.4} ms"),
                _ => "-".into(),
            },
        );
        if p.failures > 0 {
            println!("         {} failures", p.failures);
        }
    }
    for a in &report.added {
        println!(
            "added by the proxy at {} client(s){}: p50 {:+.3} ms, p99 {:+.3} ms{}",
            a.clients,
            if a.stream { ", streamed" } else { "" },
            a.added_p50_ms,
            a.added_p99_ms,
            a.added_first_byte_p50_ms
                .map_or(String::new(), |v| format!(", first byte p50 {v:+.3} ms")),
        );
    }
}

struct Target {
    authority: String,
    path: &'static str,
    key: Option<String>,
}

async fn phase(
    target: &Target,
    name: &'static str,
    clients: usize,
    stream: bool,
    seconds: u64,
) -> anyhow::Result<Phase> {
    let body = json!({"model": "bench-model", "messages": [{"role": "user", "content": "Say hello."}],
                      "max_tokens": 16, "stream": stream});
    let body = Bytes::from(serde_json::to_vec(&body)?);
    let warmup = Duration::from_secs(1);
    let measured = Duration::from_secs(seconds);
    let start = Instant::now();
    let mut cpu_before = None;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let body = body.clone();
        let authority = target.authority.clone();
        let host = HeaderValue::from_str(&target.authority)?;
        let bearer = match &target.key {
            Some(key) => Some(HeaderValue::from_str(&format!("Bearer {key}"))?),
            None => None,
        };
        let path = target.path;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(65_536);
            let mut first_bytes = Vec::new();
            let mut failures = 0u64;
            let mut sender: Option<SendRequest<Full<Bytes>>> = None;
            loop {
                let began = Instant::now();
                if began.duration_since(start) >= warmup + measured {
                    break;
                }
                let outcome = async {
                    let s = match &mut sender {
                        Some(s) => s,
                        slot => slot.insert(connect(&authority).await?),
                    };
                    s.ready().await?;
                    let mut request = Request::new(Full::new(body.clone()));
                    *request.method_mut() = Method::POST;
                    *request.uri_mut() = path.parse()?;
                    let headers = request.headers_mut();
                    headers.insert(HOST, host.clone());
                    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    if let Some(bearer) = &bearer {
                        headers.insert(AUTHORIZATION, bearer.clone());
                    }
                    let response = s.send_request(request).await?;
                    if !response.status().is_success() {
                        bail!("status {}", response.status());
                    }
                    let mut body = response.into_body();
                    let mut first = None;
                    while let Some(frame) = body.frame().await {
                        let frame = frame?;
                        if first.is_none() && frame.data_ref().is_some_and(|d| !d.is_empty()) {
                            first = Some(began.elapsed());
                        }
                    }
                    anyhow::Ok(first)
                }
                .await;
                let elapsed = began.elapsed();
                if began.duration_since(start) < warmup {
                    if outcome.is_err() {
                        sender = None;
                    }
                    continue;
                }
                match outcome {
                    Ok(first) => {
                        latencies.push(elapsed.as_micros() as u64);
                        if let Some(first) = first {
                            first_bytes.push(first.as_micros() as u64);
                        }
                    }
                    Err(_) => {
                        failures += 1;
                        sender = None;
                    }
                }
            }
            (latencies, first_bytes, failures)
        }));
    }
    // CPU is measured over the measured window only.
    tokio::time::sleep_until((start + warmup).into()).await;
    if cpu_before.is_none() {
        cpu_before = service_cpu();
    }
    let mut latencies = Vec::new();
    let mut first_bytes = Vec::new();
    let mut failures = 0;
    for task in tasks {
        let (mut l, mut f, n) = task.await?;
        latencies.append(&mut l);
        first_bytes.append(&mut f);
        failures += n;
    }
    let cpu = service_cpu()
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    latencies.sort_unstable();
    first_bytes.sort_unstable();
    let calls = latencies.len() as u64;
    let window = start.elapsed().saturating_sub(warmup).as_secs_f64();
    Ok(Phase {
        target: name,
        clients,
        stream,
        calls,
        failures,
        calls_per_sec: calls as f64 / window.max(1e-9),
        p50_ms: percentile_ms(&latencies, 0.50),
        p99_ms: percentile_ms(&latencies, 0.99),
        first_byte_p50_ms: stream.then(|| percentile_ms(&first_bytes, 0.50)),
        first_byte_p99_ms: stream.then(|| percentile_ms(&first_bytes, 0.99)),
        service_cpu_per_call_ms: (name == "proxied")
            .then_some(cpu)
            .flatten()
            .map(|cpu| cpu.total().as_secs_f64() * 1000.0 / calls.max(1) as f64),
        service_sys_cpu_per_call_ms: (name == "proxied")
            .then_some(cpu)
            .flatten()
            .map(|cpu| cpu.sys.as_secs_f64() * 1000.0 / calls.max(1) as f64),
    })
}

async fn connect(authority: &str) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// CPU time of the service, user and system (kernel) apart.
#[derive(Debug, Clone, Copy)]
struct Cpu {
    user: Duration,
    sys: Duration,
}

impl Cpu {
    fn total(self) -> Duration {
        self.user + self.sys
    }
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, before: Cpu) -> Cpu {
        Cpu {
            user: self.user.saturating_sub(before.user),
            sys: self.sys.saturating_sub(before.sys),
        }
    }
}

/// User and system CPU of the service: its runtime's threads (`ts-svc`) and its store thread
/// (`turnstile-store`). Linux only.
fn service_cpu() -> Option<Cpu> {
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    let (mut user, mut sys) = (0u64, 0u64);
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let Ok(entry) = entry else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ... : comm may hold spaces, so split after the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        // The service's runtime threads (the driver runs there) and its store thread.
        if !(comm.starts_with("ts-svc") || comm.starts_with("turnstile-store")) {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        // After the comm: state is field 0; utime is field 11, stime field 12.
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        user += utime;
        sys += stime;
    }
    Some(Cpu {
        user: Duration::from_secs_f64(user as f64 / ticks_per_sec),
        sys: Duration::from_secs_f64(sys as f64 / ticks_per_sec),
    })
}

/// Registers the bench profile and creates the bench principal's key.
async fn setup(base: &str, admin: &str) -> anyhow::Result<String> {
    register_bench_principal(&reqwest::Client::new(), base, admin, PROFILE).await
}
