//! `turnstile-bench fake-upstream`: the scripted fake provider of `turnstile_proxy::fake`,
//! on its own, for the SDK tests (`clients/proxy-sdk-tests`) and manual trials.
//!
//! Prints one line, `fake-upstream listening on http://ADDR`, then serves until killed. Point
//! an OpenAI-format upstream at `http://ADDR/v1` and an Anthropic-format one at `http://ADDR`;
//! script answers with the `x-fake-script` request header (see `docs/proxy.md`).

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use clap::Args;
use turnstile_proxy::FakeUpstream;

#[derive(Debug, Args)]
pub struct FakeUpstreamArgs {
    /// Port on 127.0.0.1 (0: an ephemeral one, printed).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
}

pub fn run(args: FakeUpstreamArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let fake = FakeUpstream::start(SocketAddr::from(([127, 0, 0, 1], args.port)), true)
            .await
            .with_context(|| format!("cannot listen on 127.0.0.1:{}", args.port))?;
        println!("fake-upstream listening on http://{}", fake.addr);
        std::io::stdout().flush()?;
        let _ = tokio::signal::ctrl_c().await;
        anyhow::Ok(())
    })
}
