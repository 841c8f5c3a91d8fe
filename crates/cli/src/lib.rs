//! What the turnstile binaries share (`turnstile` and the tools' `turnstile-bench`): the
//! process's allocator, how a command's failure is reported, and a command's OTLP export.
//!
//! Invariants: each binary's `main` is [`main`], which configures the allocator before any
//! thread exists, so the service runs on the same allocator settings whichever binary hosts it
//! (`turnstile serve`, or `turnstile-bench serve`'s in-process service), and ends through one
//! report of the result, so every failure reads the same (one `error:` line, a `hint:` line
//! where there is advice).

mod allocator;
mod entry;
mod otlp;
mod report;

pub use entry::main;
/// A command's OTLP/HTTP export of spans and metrics, flushed at its end (`serve`, `evaluate`).
pub use otlp::OtlpExport;
pub use report::{HintExt, ResultFailed};
