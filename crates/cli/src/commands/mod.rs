//! One module per top-level subcommand.

pub mod admin_key;
pub mod bench_client;
pub mod bench_proxy;
pub mod bench_serve;
pub mod evaluate;
pub mod fake_upstream;
pub mod profile;
pub mod qualify;
pub mod roster;
pub mod serve;
