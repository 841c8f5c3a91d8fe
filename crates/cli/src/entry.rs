//! The shape of a turnstile binary's `main` (`turnstile`, `turnstile-bench`): the allocator is
//! configured, then the arguments are parsed, then the command runs, and its result becomes one
//! exit status.
//!
//! Invariants: the allocator's set-up (`allocator.rs`) runs before anything else, while the process is
//! single-threaded (mimalloc's option setters are not thread-safe), and so does the choice to
//! capture backtraces under `--verbose` (it sets an environment variable); every failure leaves
//! through `report.rs`, so both binaries report alike.

use std::process::ExitCode;

/// Runs a binary: `verbose` reads the parsed arguments' `--verbose`, `run` runs the command.
pub fn main<C: clap::Parser>(
    verbose: fn(&C) -> bool,
    run: fn(C) -> anyhow::Result<()>,
) -> ExitCode {
    crate::allocator::configure();
    let cli = C::parse();
    let verbose = verbose(&cli);
    crate::report::capture_backtraces(verbose);
    crate::report::exit(run(cli), verbose)
}
