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
//!   the answer into a status code (`http/status.rs`). A handler waiting on a queued admission
//!   holds a drop guard that cancels its waiter if the client goes away.
//! - The accept loop (`http/serve.rs`) runs hyper's HTTP/1 connection builder with a timer, so the
//!   header read timeout really fires, under a connection cap, with graceful shutdown.
//! - Durable state (keys as hashes, profile registrations, audit records) lives in SQLite
//!   through `turnstile_store::ServiceStore`, written by one store thread in command order
//!   (`durability/persist.rs`). Held leases and budget spend are appended to the lease log by
//!   the driver's journal before their replies (`durability/journal.rs`), and put back at start
//!   (`durability/recover.rs`), so a crash of the process frees no slot.
//! - Start-up (`assemble/`) decides the deployment mode once: a single node, or a replica whose
//!   keys, profiles and limits are shared through Redis (`replicas/`).
//!
//! # Layout
//!
//! - `api/`: the handlers, one file per resource; `http/`: everything around them (accept
//!   loop, gate, routes, bodies, errors, statuses, the hot routes' answers, the console).
//! - `keys.rs` + `keys/`: API keys, authentication and the role table.
//! - `durability/`: the data directory's lock, the store thread, the journal, the checkpoint
//!   and recovery.
//! - `replicas/`: the deployment mode, the shared limits and the shared keys and profiles.
//! - `assemble/`: start-up; `bootstrap.rs`: the first start; `config.rs`: `turnstile.toml`;
//!   `metrics.rs`: the service's own counters.
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
mod bootstrap;
mod config;
mod durability;
mod http;
mod keys;
mod listen;
mod metrics;
mod replicas;

// Start-up and the running service.
pub use assemble::{start, start_with_telemetry};
pub use http::serve::{Restored, RunningServer, ServerError, Stopped};

// Configuration (`turnstile.toml`).
pub use config::{
    AdmissionConfig, BudgetsConfig, Config, ConfigError, CoordinationConfig, HttpConfig,
    LeaseConfig, LeaseDurability,
};
/// The listen address as written on the command line or in the file.
pub use listen::{parse_listen, ListenError};

// What a start reports: the first start's keys and demo set-up, what came back from the
// previous process, how a replica met the deployment's shared keys.
pub use bootstrap::{
    BootstrapError, BootstrapKeys, DEMO_PRINCIPAL, DEMO_PROFILE, DEMO_PROFILE_VERSION,
    DEMO_WORKSPACE,
};
pub use durability::checkpoint::CheckpointError;
pub use durability::recover::{BucketRule, CheckpointIgnored, LaneStateRestored, RecoverError};
pub use replicas::identity::event::EventError;
pub use replicas::identity::join::{JoinError, Joining};

// The data directory's lock (`turnstile admin-key reset` takes it too) and API keys.
pub use durability::data_lock::{DataDirLock, DataLockError, LOCK_FILE};
pub use keys::{generate as generate_key, key_id, stored as stored_key, RandomError};

// The HTTP surface: who may call what, the routes, the OpenAPI document.
pub use api::ops::OPENAPI;
pub use http::routes::ROUTES;
pub use keys::auth::{access, Access, Operation, Role};
