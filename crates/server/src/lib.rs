//! turnstile-server: the HTTP admission service (`turnstile serve`), a sidecar that gives hosts
//! in any language turnstile's admission control.
//!
//! # Shape
//!
//! - One **driver** task ([`driver`]) owns the sans-IO [`turnstile_admission::Registry`]. It is
//!   the only reader of the clock, arms exactly one timer (at the earliest of the core's
//!   `poll_timeout()` and the next lease expiry), receives commands over a channel and answers
//!   each through a oneshot. Nothing polls.
//! - HTTP handlers ([`api`]) authenticate, parse and validate, send one command and translate
//!   the answer into a status code ([`status`]). A handler waiting on a queued admission holds a
//!   drop guard that cancels its waiter if the client goes away.
//! - The accept loop ([`serve`]) runs hyper's HTTP/1 connection builder with a timer, so the
//!   header read timeout really fires, under a connection cap, with graceful shutdown.
//! - Durable state (keys as hashes, profile registrations, audit records) lives in SQLite
//!   through `turnstile_store::ServiceStore`, written by one store thread in command order
//!   ([`persist`]). Held leases and budget spend are appended to the lease log by the
//!   driver's journal before their replies ([`journal`]), and put back at start
//!   ([`recover`]), so a crash of the process frees no slot.
//!
//! # Invariants
//!
//! - Identity comes from the API key only; no body field is ever taken as a principal or
//!   workspace identity.
//! - No principal or workspace ID is written to a log line or a metric label.
//! - Every lease is released exactly once: by its holder, by TTL reclaim, or at once when the
//!   client that asked for it is gone.
#![forbid(unsafe_code)]

pub mod actor;
pub mod api;
mod assemble;
pub mod auth;
pub mod body;
pub mod bootstrap;
pub mod checkpoint;
pub mod config;
pub mod conn;
pub mod data_lock;
pub mod deployment;
pub mod error;
pub mod gate;
pub mod hot_routes;
pub mod identity;
pub mod journal;
pub mod json_answer;
pub mod key_cache;
pub mod keys;
pub mod lease_answer;
pub mod metrics;
pub mod persist;
pub mod recover;
pub mod routes;
pub mod serve;
pub mod shared;
pub mod slot_held_body;
pub mod slots;
pub mod status;
pub mod ui;

pub use assemble::{start, start_with_telemetry};
pub use bootstrap::BootstrapKeys;
pub use config::{Config, ConfigError};
pub use serve::{Restored, RunningServer, ServerError};
