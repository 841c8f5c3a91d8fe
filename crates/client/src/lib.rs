//! turnstile-client: the Rust client of turnstile's admission API, the twin of the Python and
//! TypeScript clients (`clients/`).
//!
//! - [`Client`] holds the service's base URL and one key: [`Client::workspace`] (which
//!   workspace the key acts in and its current profile revision), [`Client::snapshot`] (its
//!   aggregate counts and provider lanes), [`Client::acquire`], [`Client::release_budget`],
//!   [`Client::retry_after`], and [`Client::check_lanes`] (before a run: can this key admit
//!   calls on these provider lanes? [`LaneCheckError`] says why not). A `deadlineMs` or
//!   `retryAfterMs` above the service's setting is sent at the setting, learned from the
//!   service's 422 `maximum` and remembered by the client, its clones and their leases.
//! - [`Lease`] is a granted permit: heartbeated in the background every third of its TTL,
//!   released exactly once, with [`Lease::release`] or (outcome `none`) when dropped.
//! - [`ClientError`] says why a call did not succeed: a typed admission [`Rejected`] with the
//!   service's evidence, an unknown key, a missing profile or lease, another status with the
//!   service's reason, or the transport.
//!
//! [`Secret`] holds a key before it becomes a client (a flag, an environment variable) and
//! never prints.
//!
//! The wire types are the admission core's ([`turnstile_admission::Evidence`],
//! [`turnstile_admission::BreakerTransition`], …): what the service writes, read back by the
//! same definitions. The key is never printed (`Debug` shows no key) and never put in an error.
//!
//! [`Rejected`]: ClientError::Rejected
#![forbid(unsafe_code)]

mod bounds;
mod client;
mod error;
mod lanes;
mod lease;
mod secret;
mod wire;

pub use client::{AcquireRequest, Client, WorkspaceInfo, WorkspaceSnapshot};
pub use error::ClientError;
pub use lanes::LaneCheckError;
pub use lease::Lease;
pub use secret::Secret;
