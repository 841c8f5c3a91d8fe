//! turnstile-testkit: what turnstile's tests share, kept out of the product (a dev-only crate,
//! `publish = false`; every crate's tests reach it as a dev-dependency).
//!
//! Always:
//!
//! - [`RedisServer`]: a real `redis-server` (or the binary [`SERVER_ENV`] names, e.g.
//!   `valkey-server`) on a free loopback port, empty, without persistence; stopped on drop.
//! - [`RedisCluster`]: a Redis Cluster of such servers, formed and waited for.
//! - [`ServerInfo`] / [`ServerKind`]: which implementation answers.
//! - [`repo_file`]: a file of the repository (examples, fixtures, docs).
//! - [`StubHttp`]: a recording HTTP/1.1 stub on loopback (an OTLP receiver, a slow provider
//!   that counts its calls).
//!
//! With the `service` feature (the service's and the CLI's tests):
//!
//! - [`TestServer`]: the service in this process on a free loopback port, and the calls most
//!   tests make through it; [`test_profile`] in workspace [`WORKSPACE`], an [`admission`] body,
//!   a [`chat`] request, a [`config_file`].
//! - [`Turnstile`] / [`ServeProcess`]: `turnstile serve` as a process (the binary's path is
//!   passed in by the `turnstile` crate's tests), killed on drop.
//! - [`replica`]: replicas of one deployment on a Redis, and load through them.
//! - [`http`], [`get_text`], [`post_text`]: HTTP/1.1 by hand over a fresh loopback connection.
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
//! - Without the `service` feature nothing here depends on turnstile's crates: the low crates'
//!   tests (coord) use it without a cycle and without building the service.
//! - Every service, process and Redis a test starts stops when its handle drops, also when the
//!   test panics.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cluster;
mod info;
mod metrics_text;
mod repo;
mod server;
mod stub_http;

pub use cluster::RedisCluster;
pub use info::{ServerInfo, ServerKind};
pub use metrics_text::metric_total;
pub use repo::repo_file;
pub use server::{server_binary, RedisServer, RedisServerError, DEFAULT_SERVER, SERVER_ENV};
pub use stub_http::{Recorded, StubAnswer, StubHttp};

#[cfg(feature = "service")]
mod eventually;
#[cfg(feature = "service")]
mod fixtures;
#[cfg(feature = "service")]
mod process;
#[cfg(feature = "service")]
mod raw_http;
#[cfg(feature = "service")]
pub mod replica;
#[cfg(feature = "service")]
mod service;

#[cfg(feature = "service")]
pub use eventually::{eventually, runtime, EVENTUALLY_WITHIN};
#[cfg(feature = "service")]
pub use fixtures::{admission, chat, config_file, test_profile, WORKSPACE};
#[cfg(feature = "service")]
pub use process::{ServeProcess, Turnstile};
#[cfg(feature = "service")]
pub use raw_http::{exchange, get_text, http, post_text};
#[cfg(feature = "service")]
pub use service::TestServer;
