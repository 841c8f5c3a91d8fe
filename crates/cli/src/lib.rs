//! What the turnstile binaries share (`turnstile` and the tools' `turnstile-bench`): the
//! process's allocator and how a command's failure is reported.
//!
//! Invariants: each binary's `main` is [`main`], which configures the allocator before any
//! thread exists, so the service runs on the same allocator settings whichever binary hosts it
//! (`turnstile serve`, or `turnstile-bench serve`'s in-process service), and ends through one
//! report of the result, so every failure reads the same (one `error:` line, a `hint:` line
//! where there is advice).

mod allocator;
mod entry;
mod report;

pub use entry::main;
pub use report::{HintExt, ResultFailed};
