//! Replicas: what a deployment of several processes on one Redis adds, behind the traits of
//! the deployment mode chosen once at start-up (`deployment.rs`): the limits shared through
//! Redis (`shared.rs`), and the keys, profiles and audit log shared through a feed
//! (`identity/`).
//!
//! Invariant: no request handler asks which mode runs; a single process gets the trivial
//! implementations.

pub(crate) mod deployment;
pub(crate) mod identity;
pub(crate) mod shared;
