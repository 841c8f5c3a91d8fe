//! `turnstile serve`: admission as an HTTP service on embedded defaults.
//!
//! Loopback on port 8686, state in `./turnstile-data/`, the example profile in workspace `demo`.
//! The first start prints a generated admin key and the demo principal's key once; only their
//! hashes are stored. Stops gracefully on Ctrl-C / SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use turnstile_server::Config;

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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let data_dir = config.data_dir.clone();
        let server = turnstile_server::start(config).await?;
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
        println!("turnstile serve: stopped");
        anyhow::Ok(())
    })
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
