//! The `turnstile` command line: a thin clap front end over the library crates.
//!
//! Invariants: commands are listed in `--help` in the order a user needs them (`serve` first);
//! nothing is written into the service's data directory unless a command is asked to (`serve`,
//! `admin-key reset`, or an explicit `--data` / `--out`); a failure prints one `error:` line (and
//! a `hint:` line where there is advice) and exits non-zero, with details and a backtrace only
//! under `--verbose` (`report.rs`).

mod allocator;
mod commands;
mod report;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// turnstile governs the model calls of AI agents and decision engines.
///
/// Exit status: 0 success; 1 the command failed (one `error:` line on stderr, and a `hint:`
/// line where there is advice); 2 invalid arguments; 3 `evaluate` printed a result whose status
/// is `error` or `cancelled`.
#[derive(Debug, Parser)]
#[command(name = "turnstile", version, about)]
struct Cli {
    /// On failure, print every cause and a backtrace (otherwise: one error line and a hint).
    #[arg(long, short, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run admission as an HTTP service (the main command).
    Serve(commands::serve::ServeArgs),
    /// Admission profiles: check a profile file, print its digest.
    #[command(subcommand)]
    Profile(commands::profile::ProfileCommand),
    /// Evaluate a decision ruleset and print the RulesetResult JSON (exit 3 on an error result).
    Evaluate(commands::evaluate::EvaluateArgs),
    /// The semantic roster scheduler: status, enqueue evidence, run reads.
    Roster(commands::roster::RosterArgs),
    /// Qualification: run the pinned load manifest on virtual time and print every bound.
    Qualify(commands::qualify::QualifyArgs),
    /// Load-test a turnstile service: acquire + release pairs with concurrent clients.
    BenchServe(commands::bench_serve::BenchServeArgs),
    /// Benchmark proxy mode: added latency, calls/s and service CPU per call against a fake upstream.
    BenchProxy(commands::bench_proxy::BenchProxyArgs),
    /// A scripted fake OpenAI/Anthropic upstream for tests (see docs/proxy.md).
    #[command(hide = true)]
    FakeUpstream(commands::fake_upstream::FakeUpstreamArgs),
    /// Offline key recovery: mint a new admin key for a stopped service's data directory.
    #[command(subcommand)]
    AdminKey(commands::admin_key::AdminKeyCommand),
}

fn main() -> ExitCode {
    allocator::configure();
    let cli = Cli::parse();
    if cli.verbose
        && std::env::var_os("RUST_BACKTRACE").is_none()
        && std::env::var_os("RUST_LIB_BACKTRACE").is_none()
    {
        // Still single-threaded: asks anyhow to capture backtraces for the details.
        std::env::set_var("RUST_LIB_BACKTRACE", "1");
    }
    let result = match cli.command {
        Command::Serve(args) => commands::serve::run(args),
        Command::Profile(command) => commands::profile::run(command),
        Command::Evaluate(args) => commands::evaluate::run(args),
        Command::Roster(args) => commands::roster::run(args),
        Command::Qualify(args) => commands::qualify::run(args),
        Command::BenchServe(args) => commands::bench_serve::run(args),
        Command::BenchProxy(args) => commands::bench_proxy::run(args),
        Command::FakeUpstream(args) => commands::fake_upstream::run(args),
        Command::AdminKey(command) => commands::admin_key::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`turnstile qualify arrivals | head`): what it
        // wanted was written, so end quietly like other Unix tools.
        Err(error) if is_closed_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => report::report(&error, cli.verbose),
    }
}

fn is_closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
