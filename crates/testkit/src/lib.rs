//! turnstile-testkit: what turnstile's tests share, kept out of the product (a dev-only crate,
//! `publish = false`; every crate's tests reach it as a dev-dependency).
//!
//! - [`RedisServer`]: a real `redis-server` (or the binary [`SERVER_ENV`] names, e.g.
//!   `valkey-server`) on a free loopback port, empty, without persistence; stopped on drop.
//! - [`RedisCluster`]: a Redis Cluster of such servers, formed and waited for.
//! - [`ServerInfo`] / [`ServerKind`]: which implementation answers.
//!
//! The binary is `redis-server` unless [`SERVER_ENV`] (`TURNSTILE_TEST_REDIS_SERVER`) names
//! another: the same tests then run, unchanged, against Valkey (`docs/replicas.md`, "Valkey").
//! Every start asks the server `INFO server` and checks that a binary named `valkey…` runs
//! Valkey (`server_name:valkey`) and any other runs Redis, so a misconfigured run fails
//! instead of testing the same server twice.
//!
//! # Invariants
//!
//! - A missing server binary is an error ([`RedisServerError::Spawn`]), never a skip.
//! - Nothing here depends on turnstile's crates: any crate's tests can use it without a cycle.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cluster;
mod info;
mod server;

pub use cluster::RedisCluster;
pub use info::{ServerInfo, ServerKind};
pub use server::{server_binary, RedisServer, RedisServerError, DEFAULT_SERVER, SERVER_ENV};
