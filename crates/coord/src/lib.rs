//! turnstile-coord: limits shared across `turnstile serve` replicas through Redis.
//!
//! A provider's limits are per account, not per process. Each replica's core admits locally
//! as before; the [`Coordinator`] then admits the same lease against the shared limits in one
//! Redis Function call (an acquire operation of `ts_batch_v4`, [`batcher`]: a replica's
//! acquires and releases of one workspace that arrive while a call is in flight go to Redis
//! together in the next call): concurrency as leases with a liveness expiry, the
//! core's fixed-point request and token buckets, the provider pause, and integer micro-dollar
//! budgets, for the principal, workspace and provider scopes of the lane; in the same call,
//! fair turns on contended scopes (the next free slot goes to the waiting principal holding
//! fewest) and the provider's shared circuit breaker with its half-open probe lease
//! ([`breaker`]). `docs/replicas.md` has the data model, each function, the failure modes and
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
#![forbid(unsafe_code)]

pub mod batcher;
pub mod breaker;
pub mod coordinator;
pub mod direct;
pub mod error;
pub mod health;
pub mod identity;
pub mod keys;
pub mod lane_keys;
pub mod link;
mod metrics;
pub mod protocol;
pub(crate) mod resp;
pub mod share;
pub mod spec;
pub mod store;
pub mod testing;
pub mod verdict;

pub use breaker::{BreakerState, Outcome};
pub use coordinator::{
    Admission, CoordConfig, Coordinator, HeldShared, Mode, DEFAULT_TURN_WINDOW_MS,
};
pub use error::CoordError;
pub use health::Health;
pub use identity::IdentityStore;
pub use link::Topology;
pub use metrics::CoordMetrics;
pub use share::{DegradedShare, InvalidShare};
pub use spec::{BreakerSpec, BucketSpec, LaneSpec, ScopeLimits};
pub use store::RedisStore;
pub use verdict::Verdict;
