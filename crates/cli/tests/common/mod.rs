//! What the `turnstile` crate's tests add to the test kit (`turnstile_testkit`): the path of
//! the `turnstile` binary, which only this crate's tests can name, handed to the kit's
//! process helpers.
#![allow(dead_code)]

use std::path::Path;

use turnstile_testkit::{ServeProcess, Turnstile};

/// The `turnstile` binary cargo built for these tests.
pub const TURNSTILE: Turnstile = Turnstile(env!("CARGO_BIN_EXE_turnstile"));

/// `turnstile serve` on `data` with `config` ([`Turnstile::serve`]).
pub fn start(data: &Path, config: &Path, first: bool) -> ServeProcess {
    TURNSTILE.serve(data, config, first)
}

/// `turnstile serve` with extra arguments, e.g. `--redis-url` ([`Turnstile::serve_with`]).
pub fn start_with(data: &Path, config: &Path, first: bool, extra: &[&str]) -> ServeProcess {
    TURNSTILE.serve_with(data, config, first, extra)
}
