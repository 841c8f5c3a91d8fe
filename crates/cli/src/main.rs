//! The `turnstile` command line: a thin clap front end over the library crates.
//!
//! Invariants: commands are listed in `--help` in the order a user needs them (`serve` first);
//! nothing is written into the service's data directory unless a command is asked to (`serve`,
//! `admin-key reset`, or an explicit `--data` / `--out`); a failure prints one `error:` line (and
//! a `hint:` line where there is advice) and exits non-zero, with details and a backtrace only
//! under `--verbose` (`report.rs`). `--help` lists product commands only: the load tools and the
//! fake upstream are the `turnstile-bench` binary (`crates/bench`).

mod commands;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// `turnstile --version`: the crate version and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("TURNSTILE_COMMIT"),
    ")"
);

/// turnstile governs the model calls of AI agents and decision engines.
///
/// Exit status: 0 success; 1 the command failed (one `error:` line on stderr, and a `hint:`
/// line where there is advice); 2 invalid arguments; 3 `evaluate` printed a result whose status
/// is `error` or `cancelled`.
#[derive(Debug, Parser)]
#[command(name = "turnstile", version = VERSION, about)]
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
    /// Offline key recovery: mint a new admin key for a stopped service's data directory.
    #[command(subcommand)]
    AdminKey(commands::admin_key::AdminKeyCommand),
}

fn main() -> ExitCode {
    turnstile_cli::main(|cli: &Cli| cli.verbose, run)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => commands::serve::run(args),
        Command::Profile(command) => commands::profile::run(command),
        Command::Evaluate(args) => commands::evaluate::run(args),
        Command::Roster(args) => commands::roster::run(args),
        Command::Qualify(args) => commands::qualify::run(args),
        Command::AdminKey(command) => commands::admin_key::run(command),
    }
}
