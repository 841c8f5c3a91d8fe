//! The `turnstile-bench` command line: turnstile's tools beside the product, as
//! `redis-benchmark` stands beside `redis-server`. `serve` load-tests the admission service,
//! `proxy` measures what proxy mode adds to a model call, `fake-upstream` runs the scripted fake
//! provider on its own (for the SDK tests and manual trials).
//!
//! Invariants: the process runs on the allocator of the `turnstile` binary (`turnstile_cli`), so
//! an in-process service measures as `turnstile serve` runs; flags, outputs and JSON field names
//! are those of the former `turnstile bench-serve`, `bench-proxy` and `fake-upstream`; a failure
//! prints one `error:` line and exits 1 (details under `--verbose`), as `turnstile` does.

mod fake_upstream;
mod proxy;
mod serve;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// turnstile-bench: load generators for a turnstile service and a scripted fake upstream.
///
/// Exit status: 0 success; 1 the tool failed (one `error:` line on stderr), including a load
/// test in which no call succeeded; 2 invalid arguments.
#[derive(Debug, Parser)]
#[command(name = "turnstile-bench", version, about)]
struct Cli {
    /// On failure, print every cause and a backtrace (otherwise: one error line).
    #[arg(long, short, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load-test a turnstile service: acquire + release pairs with concurrent clients.
    Serve(serve::ServeArgs),
    /// Benchmark proxy mode: added latency, calls/s and service CPU per call against a fake upstream.
    Proxy(proxy::ProxyArgs),
    /// A scripted fake OpenAI/Anthropic upstream for tests (see docs/proxy.md).
    FakeUpstream(fake_upstream::FakeUpstreamArgs),
}

fn main() -> ExitCode {
    turnstile_cli::main(|cli: &Cli| cli.verbose, run)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Proxy(args) => proxy::run(args),
        Command::FakeUpstream(args) => fake_upstream::run(args),
    }
}
