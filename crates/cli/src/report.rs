//! How the command line reports a failure: one line `error: …` (the error and its causes,
//! joined by `: `, each said once, newlines folded), then `hint: …` when the failing step
//! knows what to do about it, and an exit status that says what kind of failure it was
//! ([`Failure`]).
//!
//! Invariants: without `--verbose` nothing but those lines reaches stderr, whatever
//! `RUST_BACKTRACE` says (a backtrace is captured by `anyhow` but never printed); with
//! `--verbose` the full chain and, when captured, the backtrace follow. A command whose reader
//! went away (a closed pipe) ends quietly with success, like other Unix tools ([`exit`]).

use std::fmt;
use std::process::ExitCode;

/// Exit statuses of `turnstile` (documented in the README and `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The command failed: unreadable input, invalid file, service error (exit 1).
    Command,
    /// `evaluate` printed a result whose status is `error` or `cancelled` (exit 3).
    ErrorResult,
}

impl Failure {
    pub fn exit_code(self) -> ExitCode {
        match self {
            Failure::Command => ExitCode::from(1),
            Failure::ErrorResult => ExitCode::from(3),
        }
    }
}

/// An error with advice for the user, printed as `hint: …` under the error line.
#[derive(Debug)]
pub struct Hinted {
    pub error: anyhow::Error,
    pub hint: String,
}

impl fmt::Display for Hinted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&chain_message(&self.error))
    }
}

impl std::error::Error for Hinted {}

/// A completed command whose result says it failed (not an error of the command itself).
#[derive(Debug)]
pub struct ResultFailed(pub String);

impl fmt::Display for ResultFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ResultFailed {}

/// Attaches a hint to an error.
pub trait HintExt<T> {
    fn hint(self, hint: impl Into<String>) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> HintExt<T> for Result<T, E> {
    fn hint(self, hint: impl Into<String>) -> anyhow::Result<T> {
        self.map_err(|error| {
            anyhow::Error::new(Hinted {
                error: error.into(),
                hint: hint.into(),
            })
        })
    }
}

/// The lines printed for `error` (without `--verbose`) and the exit status.
pub fn render(error: &anyhow::Error) -> (Vec<String>, Failure) {
    let failure = if error.downcast_ref::<ResultFailed>().is_some() {
        Failure::ErrorResult
    } else {
        Failure::Command
    };
    let (message, hint) = match error.downcast_ref::<Hinted>() {
        Some(hinted) => (chain_message(&hinted.error), Some(hinted.hint.as_str())),
        None => (chain_message(error), None),
    };
    let mut lines = vec![format!("error: {}", one_line(&message))];
    if let Some(hint) = hint {
        lines.push(format!("hint: {hint}"));
    }
    (lines, failure)
}

/// The error and its causes joined by `: ` (as `{:#}` joins them), leaving out a cause the
/// message already ends with: an error whose text names its cause (`"cannot open …: {0}"`)
/// and also returns it as its `source()` (thiserror's `#[from]`) would say it twice.
fn chain_message(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.is_empty() {
            message = text;
        } else if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
    }
    message
}

/// Folds a multi-line message into one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// With `--verbose`, asks `anyhow` to capture backtraces for the details (unless the operator's
/// `RUST_BACKTRACE` / `RUST_LIB_BACKTRACE` already decide). Call it while the process is still
/// single-threaded.
pub fn capture_backtraces(verbose: bool) {
    if verbose
        && std::env::var_os("RUST_BACKTRACE").is_none()
        && std::env::var_os("RUST_LIB_BACKTRACE").is_none()
    {
        std::env::set_var("RUST_LIB_BACKTRACE", "1");
    }
}

/// The exit status of a command's `result`, its failure printed to stderr.
pub fn exit(result: anyhow::Result<()>, verbose: bool) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`turnstile qualify arrivals | head`): what it
        // wanted was written, so end quietly like other Unix tools.
        Err(error) if is_closed_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => report(&error, verbose),
    }
}

fn is_closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Prints `error` to stderr and returns the exit status.
fn report(error: &anyhow::Error, verbose: bool) -> ExitCode {
    let (lines, failure) = render(error);
    for line in &lines {
        eprintln!("{line}");
    }
    if verbose {
        let inner = error
            .downcast_ref::<Hinted>()
            .map_or(error, |hinted| &hinted.error);
        eprintln!("\ndetails (--verbose):\n{inner:?}");
    }
    failure.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn a_chain_is_one_line_and_the_hint_follows() {
        let error: anyhow::Result<()> = Err(anyhow::anyhow!("line one\nline two"))
            .context("cannot read f.json")
            .hint("check the path");
        let (lines, failure) = render(&error.unwrap_err());
        assert_eq!(
            lines,
            vec![
                "error: cannot read f.json: line one line two".to_owned(),
                "hint: check the path".to_owned()
            ]
        );
        assert_eq!(failure, Failure::Command);
    }

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("cannot start: {0}")]
        Start(#[from] Inner),
    }

    #[derive(Debug, thiserror::Error)]
    enum Inner {
        #[error("cannot open the store: {0}")]
        Open(#[from] std::io::Error),
    }

    #[test]
    fn a_cause_the_message_already_names_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = anyhow::Error::new(Outer::from(Inner::from(io)));
        // `{:#}` says each cause again after the message that already holds it.
        assert_eq!(
            format!("{error:#}"),
            "cannot start: cannot open the store: no such file: cannot open the store: no such file: no such file"
        );
        assert_eq!(
            render(&error).0,
            vec!["error: cannot start: cannot open the store: no such file".to_owned()]
        );
        // A context names no cause: the cause follows it.
        let error = anyhow::Error::new(Inner::from(std::io::Error::other("disk full")))
            .context("writing f.json");
        assert_eq!(
            render(&error).0,
            vec!["error: writing f.json: cannot open the store: disk full".to_owned()]
        );
    }

    #[test]
    fn a_failed_result_has_its_own_exit_status() {
        let error = anyhow::Error::new(ResultFailed("the result's status is error".into()));
        assert_eq!(render(&error).1, Failure::ErrorResult);
    }
}
