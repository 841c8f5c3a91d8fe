//! Why a call of the admission API did not succeed.
//!
//! Decides how an answer that is not a success is read: a body shaped like the core's
//! refusal (`{reason, retryable, evidence}`) is a [`ClientError::Rejected`] whatever its
//! status; otherwise 401 is [`ClientError::Unauthorized`], 404 [`ClientError::NotFound`] and
//! any other status [`ClientError::Status`] with the service's code and message.
//!
//! Invariant: no variant holds the key; a workspace or principal ID appears only where the
//! service itself put it in a message.

use turnstile_admission::{Evidence, Reason};

/// One failed call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The base URL given to [`Client::new`](crate::Client::new) is not an `http` or `https`
    /// URL with a host.
    #[error("invalid service URL {url:?}: {problem}")]
    InvalidUrl { url: String, problem: String },
    /// The key cannot be sent in an `Authorization` header (empty, or not visible ASCII).
    #[error("the key cannot be sent as a bearer token (it must be non-empty visible ASCII)")]
    InvalidKey,
    /// The admission core refused: the request never reached the provider.
    #[error("admission rejected: {reason}")]
    Rejected {
        /// Why.
        reason: Reason,
        /// Whether trying again later may succeed.
        retryable: bool,
        /// When trying again makes sense: the evidence's hint, else the `Retry-After` header.
        retry_after_ms: Option<u64>,
        /// The decision as the service recorded it.
        evidence: Box<Evidence>,
    },
    /// The service does not know the key (401).
    #[error("the service does not know this key (401 unauthorized)")]
    Unauthorized,
    /// 404: no profile for the workspace (`no-profile`), a lease the service no longer holds
    /// (`unknown-lease`), or another missing thing (`code`).
    #[error("not found ({code}): {message}")]
    NotFound { code: String, message: String },
    /// Any other answer that is not a success, with the service's error code (`reason` of its
    /// `{error, message, field?}` body) and message.
    #[error("the service answered {status} ({code}): {message}")]
    Status {
        status: u16,
        code: String,
        message: String,
        /// The request field the service named, if it named one.
        field: Option<String>,
        /// The service's bound when the field is a number above one of its settings (a 422
        /// `invalid-request` with `maximum`).
        maximum: Option<u64>,
    },
    /// The request did not reach the service or its answer did not arrive.
    #[error("transport: {0}")]
    Transport(#[from] reqwest::Error),
    /// A success answer that is not what the API documents.
    #[error("unexpected answer from the service: {0}")]
    Decode(String),
}

impl ClientError {
    /// The 404 code (`unknown-lease`, `no-profile`, …), if this is a 404.
    pub fn not_found_code(&self) -> Option<&str> {
        match self {
            ClientError::NotFound { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The bound a 422 answer gave for `field` (the number sent was above it).
    pub fn maximum_of(&self, field: &str) -> Option<u64> {
        match self {
            ClientError::Status {
                status: 422,
                field: Some(named),
                maximum,
                ..
            } if named == field => *maximum,
            _ => None,
        }
    }
}
