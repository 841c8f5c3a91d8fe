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
use turnstile_shell::telemetry::otlp::otlp_pipeline;
use turnstile_shell::Telemetry;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (overrides the config file; default 127.0.0.1:8686).
    #[arg(long)]
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
    Ok(config)
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = config(&args)?;
    // Built outside the async runtime: the OTLP HTTP exporter uses a blocking client on the
    // SDK's own threads.
    let pipeline = match &args.otlp_endpoint {
        Some(endpoint) => Some(
            otlp_pipeline(endpoint)
                .with_context(|| format!("cannot export telemetry to {endpoint}"))?,
        ),
        None => None,
    };
    let telemetry = pipeline
        .as_ref()
        .map_or_else(Telemetry::global, |p| p.telemetry.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(async move {
        let data_dir = config.data_dir.clone();
        let server = turnstile_server::start_with_telemetry(config, telemetry).await?;
        println!(
            "turnstile serve: listening on http://{}",
            server.local_addr()
        );
        println!("  state:   {}", data_dir.display());
        if let Some(keys) = server.bootstrap_keys() {
            println!();
            println!("First start: these keys are shown once and stored only as hashes.");
            println!("  admin key:                        {}", keys.admin_key);
            if let Some(demo) = &keys.demo_key {
                println!("  demo principal key (workspace demo): {demo}");
            }
            println!();
        }
        server.run_until(shutdown_signal()).await?;
        anyhow::Ok(())
    });
    drop(runtime);
    if let Some(pipeline) = pipeline {
        // Flush what is still buffered; an unreachable collector must not fail the stop.
        if let Err(error) = pipeline.tracer_provider.shutdown() {
            eprintln!("turnstile serve: flushing spans failed: {error}");
        }
        if let Err(error) = pipeline.meter_provider.shutdown() {
            eprintln!("turnstile serve: flushing metrics failed: {error}");
        }
    }
    served?;
    println!("turnstile serve: stopped");
    Ok(())
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
