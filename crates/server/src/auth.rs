//! Authentication: the caller's identity comes from its API key and nothing else.
//!
//! `Authorization: Bearer <key>` (the scheme is case-insensitive, RFC 9110 §11.1). A missing,
//! malformed or unknown key is 401; a valid key that may not perform the call is 403 (see
//! [`require_admin`], [`require_principal`], [`require_workspace_reader`]).
//!
//! [`gate`] runs before every handler: it authenticates once, takes one of the key's
//! `http.max_requests_per_key` request slots for the whole request (429 `key-busy` and the
//! connection closed past it), and on a connection of the operators' reserved slice lets only
//! health, metrics, the OpenAPI document and admin-key calls through (503 `overloaded`).

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::AppState;
use crate::error::ApiError;
use crate::keys::{self, Caller};
use crate::metrics::Cut;

/// The key of an `Authorization` header, if it has the Bearer scheme (any case).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let header = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = header.trim().split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty() && key.len() <= 256).then_some(key)
}

/// The caller and its key hash, if the request carries a known key.
fn authenticate(headers: &HeaderMap, state: &AppState) -> Option<([u8; 32], Caller)> {
    let hash = keys::hash(bearer(headers)?);
    state.keys.lookup_hash(&hash).map(|caller| (hash, caller))
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(caller.clone());
        }
        authenticate(&parts.headers, state)
            .map(|(_, caller)| caller)
            .ok_or(ApiError::Unauthorized)
    }
}

/// Routes any client may call on a connection of the reserved slice.
const OPERATOR_PATHS: [&str; 4] = ["/healthz", "/readyz", "/metrics", "/openapi.json"];

/// Marks a connection of the operators' reserved slice.
#[derive(Debug, Clone, Copy)]
pub struct ReservedSlice;

/// Authenticates once, holds a per-key request slot, and guards the reserved slice.
pub async fn gate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let authenticated = authenticate(request.headers(), &state);
    if request.extensions().get::<ReservedSlice>().is_some() {
        let operator = OPERATOR_PATHS.contains(&request.uri().path())
            || matches!(authenticated, Some((_, Caller::Admin)));
        if !operator {
            state.metrics.cut(Cut::Overloaded);
            return ApiError::Overloaded.into_response();
        }
    }
    let Some((hash, caller)) = authenticated else {
        return next.run(request).await;
    };
    let Some(_slot) = state.key_slots.take(hash) else {
        state.metrics.cut(Cut::KeyCap);
        return ApiError::KeyBusy("this key has http.max_requests_per_key requests in flight")
            .into_response();
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
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
