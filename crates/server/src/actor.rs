//! The acting credential of a request: the key ID (`key_…`, see [`crate::keys::key_id`]) of
//! the API key that authenticated it.
//!
//! The gate ([`crate::auth::gate`]) attaches an [`ActingKey`] to every authenticated request;
//! handlers that make an admin change (profile registrations and rollbacks, key revocations)
//! store it with the change's audit record, so the audit log says who changed what and when.
//!
//! Invariant: a key ID names a credential, never a principal or workspace; it is written to the
//! audit log (SQLite) and returned by authenticated API answers only, never to a log line, a
//! span or a metric label. It reveals nothing usable about the key (64 bits of its hash).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::api::AppState;
use crate::error::ApiError;
use crate::keys;

/// The key ID of the API key that authenticated the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActingKey(pub String);

impl ActingKey {
    /// The acting key of a key hash.
    pub fn of_hash(hash: &[u8; 32]) -> Self {
        ActingKey(keys::key_id(&hex::encode(hash)))
    }
}

impl FromRequestParts<AppState> for ActingKey {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // Set by the gate for every request that carries a known key; absent means no key.
        parts
            .extensions
            .get::<ActingKey>()
            .cloned()
            .ok_or(ApiError::Unauthorized)
    }
}
