//! Errors of the evaluator's admission driver.
//!
//! Messages never carry a principal or workspace ID: a rejection names its reason only, and a
//! registry error is one of the registry's typed variants.

use turnstile_admission::{RegistryError, Rejection};

/// Why `acquire` did not yield a lease.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdmissionError {
    /// The admission core refused the request (immediately, on expiry, or on cancellation);
    /// the rejection carries the reason, its retryability and the evidence.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The registry could not take the request (no profile registered for the workspace).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The driver is shutting down or has stopped; nothing was admitted.
    #[error("the admission driver is not running")]
    Unavailable,
}

impl AdmissionError {
    /// The rejection, when the core refused.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            AdmissionError::Rejected(rejection) => Some(rejection),
            AdmissionError::Registry(_) | AdmissionError::Unavailable => None,
        }
    }
}
