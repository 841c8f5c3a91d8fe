//! The `turnstile` command line: a thin clap front end over the library crates.

mod commands;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// turnstile governs the model calls of AI agents and decision engines.
#[derive(Debug, Parser)]
#[command(name = "turnstile", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Admission profiles: digests and validation.
    #[command(subcommand)]
    Profile(commands::profile::ProfileCommand),
    /// The semantic roster scheduler: status, enqueue evidence, run reads.
    Roster(commands::roster::RosterArgs),
    /// Evaluate a decision ruleset and print the RulesetResult JSON.
    Evaluate(commands::evaluate::EvaluateArgs),
    /// Run admission as an HTTP service (the main command).
    Serve(commands::serve::ServeArgs),
    /// Load-test a turnstile service: acquire + release pairs with concurrent clients.
    BenchServe(commands::bench_serve::BenchServeArgs),
    /// Qualification: run the pinned load manifest on virtual time and write result records.
    Qualify(commands::qualify::QualifyArgs),
}

/// mimalloc: the service allocates small, short-lived buffers per request from many threads;
/// measured in `docs/performance.md`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Profile(command) => commands::profile::run(command),
        Command::Roster(args) => commands::roster::run(args),
        Command::Evaluate(args) => commands::evaluate::run(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::BenchServe(args) => commands::bench_serve::run(args),
        Command::Qualify(args) => commands::qualify::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`turnstile qualify arrivals | head`): what it
        // wanted was written, so end quietly like other Unix tools.
        Err(error) if is_closed_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error:?}");
            ExitCode::FAILURE
        }
    }
}

fn is_closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
