//! One module per top-level subcommand (product commands only; the load tools are the
//! `turnstile-bench` binary, `crates/bench`).

pub mod admin_key;
pub mod evaluate;
mod evaluate_service;
pub mod profile;
mod profile_check;
pub mod qualify;
pub mod roster;
pub mod serve;
