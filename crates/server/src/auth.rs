//! Authentication: the caller's identity comes from its API key and nothing else.
//!
//! `Authorization: Bearer <key>`. A missing, malformed or unknown key is 401; a valid key that
//! may not perform the call is 403 (see [`require_admin`], [`require_principal`],
//! [`require_workspace_reader`]).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use crate::api::AppState;
use crate::error::ApiError;
use crate::keys::Caller;

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .ok_or(ApiError::Unauthorized)?;
        let key = header
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|key| !key.is_empty() && key.len() <= 256)
            .ok_or(ApiError::Unauthorized)?;
        state.keys.lookup(key).ok_or(ApiError::Unauthorized)
    }
}

/// Admin-only calls.
pub fn require_admin(caller: &Caller) -> Result<(), ApiError> {
    match caller {
        Caller::Admin => Ok(()),
        Caller::Principal { .. } => Err(ApiError::Forbidden("this call needs an admin key")),
    }
}

/// Principal-only calls: the principal and its workspace.
pub fn require_principal(caller: &Caller) -> Result<(Arc<str>, Arc<str>), ApiError> {
    match caller {
        Caller::Principal {
            workspace,
            principal,
        } => Ok((workspace.clone(), principal.clone())),
        Caller::Admin => Err(ApiError::Forbidden(
            "this call needs a principal key (admin keys do not act as a principal)",
        )),
    }
}

/// Read-only workspace calls: an admin, or a principal of that workspace.
pub fn require_workspace_reader(caller: &Caller, workspace_id: &str) -> Result<(), ApiError> {
    match caller {
        Caller::Admin => Ok(()),
        Caller::Principal { workspace, .. } if &**workspace == workspace_id => Ok(()),
        Caller::Principal { .. } => Err(ApiError::Forbidden(
            "this principal key belongs to another workspace",
        )),
    }
}
