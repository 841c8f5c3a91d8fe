//! turnstile-server: the HTTP admission service (`turnstile serve`), a sidecar that gives hosts
//! in any language turnstile's admission control.
//!
//! # Shape
//!
//! - One **driver** task (`turnstile_shell`'s driver) owns the sans-IO
//!   [`turnstile_admission::Registry`]. It is the only reader of the clock, arms exactly one
//!   timer (at the earliest of the core's `poll_timeout()` and the next lease expiry), receives
//!   commands over a channel and answers each through a oneshot. Nothing polls.
//! - HTTP handlers (`api/`) authenticate, parse and validate, send one command and translate
//!   the answer into a status code (`status.rs`). A handler waiting on a queued admission holds
//!   a drop guard that cancels its waiter if the client goes away.
//! - The accept loop (`serve.rs`) runs hyper's HTTP/1 connection builder with a timer, so the
//!   header read timeout really fires, under a connection cap, with graceful shutdown.
//! - Durable state (keys as hashes, profile registrations, audit records) lives in SQLite
//!   through `turnstile_store::ServiceStore`, written by one store thread in command order
//!   (`persist.rs`). Held leases and budget spend are appended to the lease log by the
//!   driver's journal before their replies (`journal.rs`), and put back at start
//!   (`recover.rs`), so a crash of the process frees no slot.
//! - Start-up (`assemble/`) decides the deployment mode once: a single node, or a replica whose
//!   keys, profiles and limits are shared through Redis (`deployment.rs`, `identity/`).
//!
//! # API
//!
//! Every module is private; what other crates use is re-exported here: [`start`] (or
//! [`start_with_telemetry`]) a [`Config`] into a [`RunningServer`]; what a start reports
//! ([`BootstrapKeys`], [`Restored`], [`Joining`]); the data directory's lock ([`DataDirLock`],
//! which `turnstile admin-key reset` takes too) and the making of API keys ([`generate_key`],
//! [`stored_key`], [`key_id`]); and the HTTP surface's tables ([`ROUTES`], [`OPENAPI`], the
//! role table [`access`]).
//!
//! # Invariants
//!
//! - Identity comes from the API key only; no body field is ever taken as a principal or
//!   workspace identity.
//! - No principal or workspace ID is written to a log line or a metric label.
//! - Every lease is released exactly once: by its holder, by TTL reclaim, or at once when the
//!   client that asked for it is gone.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Every module is private: the crate's API is what is re-exported below.
mod api;
mod assemble;
mod auth;
mod body;
mod bootstrap;
mod checkpoint;
mod config;
mod conn;
mod data_lock;
mod deployment;
mod error;
mod gate;
mod hot_routes;
mod identity;
mod journal;
mod json_answer;
mod key_cache;
mod keys;
mod lease_answer;
mod metrics;
mod persist;
mod recover;
mod routes;
mod serve;
mod shared;
mod slot_held_body;
mod slots;
mod status;
mod ui;

// Start-up and the running service.
pub use assemble::{start, start_with_telemetry};
pub use serve::{Restored, RunningServer, ServerError, Stopped};

// Configuration (`turnstile.toml`).
pub use config::{
    AdmissionConfig, BudgetsConfig, Config, ConfigError, CoordinationConfig, HttpConfig,
    LeaseConfig, LeaseDurability,
};

// What a start reports: the first start's keys and demo set-up, what came back from the
// previous process, how a replica met the deployment's shared keys.
pub use bootstrap::{
    BootstrapError, BootstrapKeys, DEMO_PRINCIPAL, DEMO_PROFILE, DEMO_PROFILE_VERSION,
    DEMO_WORKSPACE,
};
pub use checkpoint::CheckpointError;
pub use identity::join::{JoinError, Joining};
pub use recover::{BucketRule, CheckpointIgnored, LaneStateRestored, RecoverError};

// The data directory's lock (`turnstile admin-key reset` takes it too) and API keys.
pub use data_lock::{DataDirLock, DataLockError, LOCK_FILE};
pub use keys::{generate as generate_key, key_id, stored as stored_key, RandomError};

// The HTTP surface: who may call what, the routes, the OpenAPI document.
pub use api::ops::OPENAPI;
pub use auth::{access, Access, Operation, Role};
pub use routes::ROUTES;
