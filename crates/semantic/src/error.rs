//! Errors of the roster scheduler.

use turnstile_store::RosterStoreError;

use crate::EvidenceError;

/// A failure of a roster operation. Reader failures are not errors: they become *invalid* or
/// *unavailable* records.
#[derive(Debug, thiserror::Error)]
pub enum SemanticError {
    /// The durable store failed.
    #[error(transparent)]
    Store(#[from] RosterStoreError),
    /// An evidence document was refused.
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    /// Evidence could not be serialized to canonical JSON.
    #[error("evidence could not be serialized: {0}")]
    Serialize(#[from] serde_json::Error),
}
