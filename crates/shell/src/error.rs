//! What the driver answers when a command cannot be carried out. Admission refusals are not
//! errors: they are [`Rejection`](turnstile_admission::Rejection)s with evidence.

use turnstile_admission::{RegistryError, RolloutError};

/// A command the driver could not carry out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DriverError {
    /// No lease with this token is held by this owner (released, expired, or never granted).
    #[error("unknown-lease: no such lease is held by this caller")]
    UnknownLease,
    /// The registry refused (no profile for the workspace, an unconfigured provider, a
    /// conflicting or invalid profile revision).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A rollout operation was refused (one already runs, none runs, a bad share, or its
    /// candidate revision cannot be registered).
    #[error(transparent)]
    Rollout(#[from] RolloutError),
    /// The journal could not make a registration durable; the registry has applied it.
    #[error("the journal could not record the change: {0}")]
    Journal(String),
    /// The driver is draining or has stopped.
    #[error("the driver is shutting down")]
    ShuttingDown,
}
