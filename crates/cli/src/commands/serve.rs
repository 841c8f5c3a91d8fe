//! `turnstile serve`: admission as an HTTP service on embedded defaults.
//!
//! Loopback on port 8686, state in `./turnstile-data/`, the example profile in workspace `demo`.
//! The first start prints a generated admin key and the demo principal's key once; only their
//! hashes are stored. Stops gracefully on Ctrl-C / SIGTERM.
//!
//! With `--otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`) the service's `decision.admit`
//! spans and admission counters are exported over OTLP/HTTP; the exporters run on their own
//! threads and are flushed when the service stops.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use turnstile_server::Config;
use turnstile_server::{BucketRule, CheckpointIgnored};
use turnstile_shell::Telemetry;

use turnstile_cli::{HintExt, OtlpExport};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (overrides the config file; default 127.0.0.1:8686): HOST:PORT,
    /// a host name such as localhost:8686, or a port alone (loopback).
    #[arg(long, value_parser = turnstile_server::parse_listen)]
    pub listen: Option<SocketAddr>,
    /// Data directory for the SQLite file (overrides the config file; default ./turnstile-data).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// TOML configuration file (see docs/server.md).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Export spans and metrics over OTLP/HTTP to this collector (e.g. http://localhost:4318).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Share each provider's limits with other replicas through Redis (redis://HOST:PORT;
    /// overrides `[coordination] redis_url`; see docs/replicas.md).
    #[arg(long, env = "TURNSTILE_REDIS_URL")]
    pub redis_url: Option<String>,
    /// The Redis URL names a Redis Cluster: one or more seed nodes, comma-separated
    /// (`redis://10.0.0.5:7000,redis://10.0.0.6:7000`); sets `[coordination] redis_cluster`.
    #[arg(long, env = "TURNSTILE_REDIS_CLUSTER")]
    pub redis_cluster: bool,
    /// Log lines on stderr as `text` or `json` (one object per line); see docs/server.md, "Logs".
    #[arg(long, env = "TURNSTILE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The least level logged (`error`, `warn`, `info`, `debug`, `trace`); `RUST_LOG`, when
    /// set, takes precedence (with per-target directives such as `turnstile::admission=debug`).
    #[arg(long, default_value = "info")]
    pub log_level: tracing::Level,
    /// Start even when the lease log does not cover its own history (a file of
    /// `<data>/leases/` deleted or truncated): what it lost is lost, and every lane waits one
    /// lease TTL before it grants, so leases that may still run end first (see docs/server.md,
    /// "Durability").
    #[arg(long)]
    pub accept_lease_log_loss: bool,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the log subscriber: `RUST_LOG` or `--log-level`, text or JSON lines on stderr
/// through a non-blocking writer (a slow terminal or pipe drops lines, it never stalls the
/// service). The guard flushes what is buffered when dropped.
fn init_logs(args: &ServeArgs) -> tracing_appender::non_blocking::WorkerGuard {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::new(directives),
        _ => EnvFilter::new(args.log_level.as_str().to_ascii_lowercase()),
    };
    let (writer, guard) = tracing_appender::non_blocking(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false);
    // A subscriber installed earlier (a test harness) keeps its place.
    let _ = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    guard
}

/// The effective configuration: file (or defaults), then command-line overrides.
pub fn config(args: &ServeArgs) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(data) = &args.data {
        config.data_dir = data.clone();
    }
    if let Some(url) = &args.redis_url {
        config.coordination.redis_url = Some(url.clone());
    }
    if args.redis_cluster {
        config.coordination.redis_cluster = true;
    }
    config.accept_lease_log_loss = args.accept_lease_log_loss;
    Ok(config)
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = config(&args)?;
    let _logs = init_logs(&args);
    // Built outside the async runtime, flushed after it (turnstile_cli::OtlpExport).
    let export = match &args.otlp_endpoint {
        Some(endpoint) => Some(OtlpExport::start(endpoint, "turnstile serve")?),
        None => None,
    };
    let telemetry = export
        .as_ref()
        .map_or_else(Telemetry::global, OtlpExport::telemetry);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(async move {
        catch_file_size_signal();
        let data_dir = config.data_dir.clone();
        let listen = config.listen;
        // Proxy routes by model and upstream name (never a key).
        let models = config
            .proxy
            .models
            .iter()
            .map(|(model, route)| {
                let upstreams: Vec<&str> = match &route.deployments {
                    Some(deployments) => deployments.iter().map(|d| d.upstream.as_str()).collect(),
                    None => route.upstream.iter().map(String::as_str).collect(),
                };
                format!("{model}->{}", upstreams.join("+"))
            })
            .collect::<Vec<_>>()
            .join(",");
        let server = match turnstile_server::start_with_telemetry(config, telemetry).await {
            Ok(server) => server,
            Err(error) => {
                let error = anyhow::Error::from(error);
                let in_use = error.chain().any(|cause| {
                    cause
                        .downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
                });
                return if in_use {
                    Err(error).hint(format!(
                        "another process listens on {listen} (a turnstile serve already \
                         running?): stop it, or choose another address with --listen ADDR"
                    ))
                } else {
                    Err(error)
                };
            }
        };
        println!(
            "turnstile serve: listening on http://{}",
            server.local_addr()
        );
        tracing::info!(
            target: "turnstile::serve",
            listen = %server.local_addr(),
            data_dir = %data_dir.display(),
            mode = if server.joining().is_some() { "replica" } else { "single" },
            console = %format_args!("http://{}/ui", server.local_addr()),
            models = %models,
            "started"
        );
        println!("  state:   {}", data_dir.display());
        let restored = server.restored();
        let lanes = restored.lanes;
        match lanes.checkpoint_ignored {
            Some(CheckpointIgnored::Stale) => eprintln!(
                "turnstile serve: warning: the bucket checkpoint of the last clean stop is \
                 older than the lease log's last grant; rate buckets drained instead"
            ),
            Some(CheckpointIgnored::Unreadable) => eprintln!(
                "turnstile serve: warning: the bucket checkpoint of the last clean stop \
                 cannot be read; rate buckets drained instead"
            ),
            None => {}
        }
        if restored.leases + lanes.pauses + lanes.breakers + lanes.buckets > 0 {
            println!(
                "  restored: {} leases, {} paused lanes, {} open breakers, {} rate buckets {}",
                restored.leases,
                lanes.pauses,
                lanes.breakers,
                lanes.buckets,
                bucket_rule(lanes.bucket_rule)
            );
        }
        if let Some(joining) = server.joining() {
            println!("  shared:  {}", joining_line(joining));
        }
        if let Some(keys) = server.bootstrap_keys() {
            print!("{}", banner(keys, &data_dir));
        }
        let stopped = server.run_until(shutdown_signal()).await?;
        if let Err(error) = stopped.checkpoint {
            eprintln!(
                "turnstile serve: warning: no bucket checkpoint written ({error}); the next \
                 start drains every rate bucket as after a crash"
            );
        }
        anyhow::Ok(())
    });
    drop(runtime);
    if let Some(export) = export {
        // Flush what is still buffered; an unreachable collector must not fail the stop.
        export.flush();
    }
    served?;
    println!("turnstile serve: stopped");
    Ok(())
}

/// The first-start banner: the keys (shown once, each the last word of its line), what the
/// demo workspace holds, and what to do when the admin key is lost. Labels share one column.
fn banner(keys: &turnstile_server::BootstrapKeys, data_dir: &std::path::Path) -> String {
    use turnstile_server::{DEMO_PRINCIPAL, DEMO_PROFILE, DEMO_PROFILE_VERSION, DEMO_WORKSPACE};
    let mut rows = vec![("admin key:", keys.admin_key.as_str())];
    if let Some(demo) = &keys.demo_key {
        rows.push(("demo principal key:", demo.as_str()));
    }
    let width = rows.iter().map(|(label, _)| label.len()).max().unwrap_or(0);
    let mut out =
        String::from("\nFirst start: these keys are shown once and stored only as hashes.\n");
    for (label, value) in rows {
        out.push_str(&format!("  {label:<width$}  {value}\n"));
    }
    if keys.demo_key.is_some() {
        let providers = serde_json::from_str::<serde_json::Value>(DEMO_PROFILE)
            .ok()
            .and_then(|profile| {
                profile["providers"]
                    .as_object()
                    .map(|p| p.keys().cloned().collect::<Vec<_>>().join(", "))
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "The demo key acts as principal `{DEMO_PRINCIPAL}` of workspace `{DEMO_WORKSPACE}`, \
             which has examples/profile.json as revision `{DEMO_PROFILE_VERSION}` (provider \
             lanes: {providers}).\n"
        ));
    }
    out.push_str(&format!(
        "Lost the admin key? Stop the service, then run `turnstile admin-key reset --data {}`.\n\n",
        data_dir.display()
    ));
    out
}

/// `SIGXFSZ` on Linux (every architecture but MIPS).
#[cfg(all(
    target_os = "linux",
    not(any(target_arch = "mips", target_arch = "mips64"))
))]
const SIGXFSZ: i32 = 25;

/// A write past the file size limit (`ulimit -f`) fails with `EFBIG` instead of killing the
/// process: the lease log then refuses grants, `/readyz` says so, and it repairs itself once
/// the limit allows writes again (docs/server.md, "Durability"). Logged at warn.
fn catch_file_size_signal() {
    #[cfg(all(
        target_os = "linux",
        not(any(target_arch = "mips", target_arch = "mips64"))
    ))]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::from_raw(SIGXFSZ)) {
            Ok(mut caught) => {
                tokio::spawn(async move {
                    while caught.recv().await.is_some() {
                        tracing::warn!(
                            target: "turnstile::store",
                            "a write exceeded the file size limit (SIGXFSZ): it failed"
                        );
                    }
                });
            }
            Err(error) => tracing::warn!(
                target: "turnstile::store",
                %error,
                "cannot catch SIGXFSZ: a write past the file size limit ends the process"
            ),
        }
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Replicas: how this start met the deployment's shared keys and profiles (`docs/replicas.md`).
/// The banner's words for how the rate buckets restarted (counts only, no IDs).
fn bucket_rule(rule: BucketRule) -> &'static str {
    match rule {
        BucketRule::Checkpoint => "restored from the clean stop's checkpoint",
        BucketRule::Drained => "drained since the last grant (no usable checkpoint)",
        BucketRule::Full => "full",
    }
}

fn joining_line(joining: &turnstile_server::Joining) -> String {
    use turnstile_server::Joining;
    match joining {
        Joining::Seeded { events } => format!(
            "keys, profiles and audit log shared through Redis from this replica's state ({events} events)"
        ),
        Joining::Adopted { events } => format!(
            "joined the deployment's shared keys, profiles and audit log ({events} events); \
             use the admin key the first replica printed"
        ),
        Joining::CaughtUp { events } => format!(
            "shared keys, profiles and audit log caught up ({events} new events)"
        ),
        Joining::Offline => "Redis does not answer: keys and profiles served from this replica's \
             mirror, key and profile writes refused until it does"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_banner_aligns_its_keys_and_names_the_demo_setup() {
        let keys = turnstile_server::BootstrapKeys {
            admin_key: "tsa_a".into(),
            demo_key: Some("tsk_d".into()),
        };
        let text = banner(&keys, std::path::Path::new("d"));
        let columns: Vec<usize> = text
            .lines()
            .filter_map(|line| line.find("ts").filter(|_| line.contains(" key:")))
            .collect();
        assert_eq!(columns.len(), 2, "{text}");
        assert_eq!(columns[0], columns[1], "{text}");
        assert!(
            text.contains(
                "revision `demo-v1` (provider lanes: llm-subagent, openai-primary, \
                 openai-secondary)"
            ),
            "{text}"
        );
        assert!(
            text.contains("turnstile admin-key reset --data d"),
            "{text}"
        );
    }
}
