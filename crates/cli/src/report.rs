//! How the command line reports a failure: one line `error: …` (the error and its causes,
//! joined by `: `, newlines folded), then `hint: …` when the failing step knows what to do about
//! it, and an exit status that says what kind of failure it was ([`Failure`]).
//!
//! Invariants: without `--verbose` nothing but those lines reaches stderr, whatever
//! `RUST_BACKTRACE` says (a backtrace is captured by `anyhow` but never printed); with
//! `--verbose` the full chain and, when captured, the backtrace follow.

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
        write!(f, "{:#}", self.error)
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
        Some(hinted) => (format!("{:#}", hinted.error), Some(hinted.hint.as_str())),
        None => (format!("{error:#}"), None),
    };
    let mut lines = vec![format!("error: {}", one_line(&message))];
    if let Some(hint) = hint {
        lines.push(format!("hint: {hint}"));
    }
    (lines, failure)
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

/// Prints `error` to stderr and returns the exit status.
pub fn report(error: &anyhow::Error, verbose: bool) -> ExitCode {
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

    #[test]
    fn a_failed_result_has_its_own_exit_status() {
        let error = anyhow::Error::new(ResultFailed("the result's status is error".into()));
        assert_eq!(render(&error).1, Failure::ErrorResult);
    }
}
