//! turnstile-coord: limits shared across `turnstile serve` replicas through Redis.
//!
//! A provider's limits are per account, not per process. Each replica's core admits locally
//! as before; the [`Coordinator`] then admits the same lease against the shared limits in one
//! Redis Function call (an acquire operation of a batch, `batcher`: a replica's
//! acquires and releases of one workspace that arrive while a call is in flight go to Redis
//! together in the next call): concurrency as leases with a liveness expiry, the
//! core's fixed-point request and token buckets, the provider pause, and integer micro-dollar
//! budgets, for the principal, workspace and provider scopes of the lane; in the same call,
//! fair turns on contended scopes (the next free slot goes to the waiting principal holding
//! fewest) and the provider's shared circuit breaker with its half-open probe lease
//! (`breaker`). `docs/replicas.md` has the data model, each function, the failure modes and
//! their costs.
//!
//! # Invariants
//!
//! - Server time only: every function reads Redis `TIME`; no replica clock enters Redis.
//! - All keys of a workspace share one hash tag; no tenant ID appears in any key.
//! - One round trip per admission and per release (an operation rides in exactly one batched
//!   call); a replica renews all its leases in one
//!   pipelined call; client heartbeats cost none.
//! - When Redis fails or hangs, no call waits longer than the timeout, the replica is degraded
//!   ([`Health`]) and enforces its declared [`DegradedShare`]; money and token budgets fail
//!   closed.
//!
//! # Layout
//!
//! The crate's API is what this file re-exports, plus two public modules: [`identity`] (the
//! replicated identity feed) and [`spec`] (a lane's shared limits). Inside:
//! `coordinator` (the replica's side: admissions, releases, renewals, health), `batcher` and
//! `direct` (per-workspace batching on a lane's own connection), `protocol` (the contract
//! with the Lua library: names, encoding, decoding), `lane_keys` (a lane's pre-encoded
//! calls, the one production encoder of an acquire and a release), `store` and `link` (the
//! transport). With the `testing` feature (dev-dependencies only), `testing` opens the
//! protocol's reference encoding and the conformance hooks to integration tests.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod batcher;
mod breaker;
mod coordinator;
mod direct;
mod error;
mod eviction;
mod health;
pub mod identity;
mod keys;
mod lane_keys;
mod link;
mod metrics;
mod protocol;
mod resp;
mod share;
pub mod spec;
mod stats;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod verdict;

pub use breaker::Outcome;
pub use coordinator::{
    Admission, CoordConfig, Coordinator, HeldShared, Mode, BOOKS_RECONCILE_MS,
    DEFAULT_TURN_WINDOW_MS, PROBE_EVERY_MAX_MS, TURN_NEXT_POLL_MS,
};
pub use error::CoordError;
pub use health::Health;
pub use identity::IdentityStore;
pub use keys::{ScopeName, WorkspaceKeys};
pub use link::Topology;
pub use metrics::CoordMetrics;
pub use share::{DegradedShare, InvalidShare};
pub use spec::{BreakerSpec, BucketSpec, LaneSpec, ScopeLimits};
pub use stats::FcallStats;
pub use store::RedisStore;
