//! The acting credential of a request: the key ID (`key_…`, see [`crate::keys::key_id`]) of
//! the API key that authenticated it.
//!
//! The gate ([`crate::gate`]) attaches an [`ActingKey`] to every authenticated request (inside
//! [`crate::auth::Authenticated`]);
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

/// The API key that authenticated the request, by its hash (the key ID is derived only when a
/// handler records it: the gate runs for every request, the audit for few).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActingKey([u8; 32]);

impl ActingKey {
    /// The acting key of a key hash.
    pub fn of_hash(hash: &[u8; 32]) -> Self {
        ActingKey(*hash)
    }

    /// Its key ID (`key_…`).
    pub fn key_id(&self) -> String {
        keys::key_id(&hex::encode(&self.0[..8]))
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
            .get::<crate::auth::Authenticated>()
            .map(|authenticated| authenticated.acting)
            .ok_or(ApiError::Unauthorized)
    }
}
