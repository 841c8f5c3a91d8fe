//! Principal keys of a workspace (admin only).
//!
//! - `POST /v1/workspaces/{workspaceId}/keys` `{principalId}`: a new principal key, shown once
//!   (201 with the key and its `keyId`).
//! - `GET /v1/workspaces/{workspaceId}/keys`: the workspace's keys by `keyId` (never the key nor
//!   its hash), with their principal and creation time, and the revocation history.
//! - `DELETE /v1/workspaces/{workspaceId}/keys/{keyId}`: revokes a key. The revocation and its
//!   audit record commit in one transaction; from the answer on, the key authenticates nobody
//!   (401). Leases it holds are not released (the key can no longer release them): they are
//!   reclaimed when their TTL runs out, like a crashed client's. 404 `unknown-key` for a key that
//!   does not exist, belongs to another workspace, or was revoked already.
//!
//! Replicas (`[coordination] redis_url`): keys and revocations are the deployment's, written
//! through the shared feed (`crate::replicas::identity`): a key created on one replica authenticates on
//! every replica, a revoked key is refused by every replica within one follow interval; both
//! answer 503 `coordination-unavailable` while Redis does not answer.
//!
//! Invariant: a key's plaintext exists only in the creation answer; everything else names a key
//! by its `keyId`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use turnstile_store::{AuditKind, AuditRecord, KeyRole, StoredKey};

use crate::api::{validate, AppState};
use crate::http::body;
use crate::http::error::ApiError;
use crate::keys::auth::ActingKey;
use crate::keys::auth::{authorize, Operation};
use crate::keys::{self, Caller};

/// Schema of a key-revocation audit record.
pub const KEY_REVOCATION_SCHEMA: &str = "turnstile-key-revocation/v1";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewKeyBody {
    pub principal_id: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewKey {
    /// Shown once; only its hash is stored.
    pub key: String,
    /// Names the key in listings and revocations.
    pub key_id: String,
    pub workspace_id: String,
    pub principal_id: String,
}

/// One key in a listing.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyInfo {
    pub key_id: String,
    pub principal_id: String,
    pub created_at_epoch_ms: u64,
}

/// A revocation, as recorded in the audit log (no principal ID).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Revocation {
    pub schema: String,
    pub key_id: String,
    pub revoked_at_epoch_ms: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyListing {
    pub workspace_id: String,
    pub keys: Vec<KeyInfo>,
    /// Oldest first.
    pub revocations: Vec<Revocation>,
}

pub async fn create_key(
    State(state): State<AppState>,
    caller: Caller,
    Path(workspace_id): Path<String>,
    body: crate::http::body::RawBody,
) -> Result<(StatusCode, Json<NewKey>), ApiError> {
    authorize(&state, &caller, Operation::CreateKey, None).await?;
    validate::id("workspaceId", &workspace_id)?;
    let request: NewKeyBody = body::parse(body)?;
    validate::id("principalId", &request.principal_id)?;
    let key = keys::generate(KeyRole::Principal).map_err(|_| ApiError::Storage)?;
    let stored = keys::stored(
        &key,
        KeyRole::Principal,
        Some(&workspace_id),
        Some(&request.principal_id),
        state.clock.now_ms(),
    );
    // Replicas: created for the whole deployment (every replica's key ring has it once it
    // follows the feed; this one before answering).
    state.identity.create_key(&stored).await?;
    Ok((
        StatusCode::CREATED,
        Json(NewKey {
            key,
            key_id: keys::key_id(&stored.hash),
            workspace_id,
            principal_id: request.principal_id,
        }),
    ))
}

pub async fn list_keys(
    State(state): State<AppState>,
    caller: Caller,
    Path(workspace_id): Path<String>,
) -> Result<Json<KeyListing>, ApiError> {
    authorize(&state, &caller, Operation::ListKeys, None).await?;
    validate::id("workspaceId", &workspace_id)?;
    let keys = principal_keys_of(state.store.keys().await?, &workspace_id)
        .map(|k| KeyInfo {
            key_id: keys::key_id(&k.hash),
            principal_id: k.principal_id.unwrap_or_default(),
            created_at_epoch_ms: k.created_at_ms,
        })
        .collect();
    let revocations = state
        .store
        // Every revocation: there are at most as many as keys an admin created, and a listing
        // that silently dropped the oldest would hide a revoked key.
        .audit(&workspace_id, AuditKind::KeyRevocation, usize::MAX)
        .await?
        .into_iter()
        .filter_map(|r| serde_json::from_str(&r.record_json).ok())
        .collect();
    Ok(Json(KeyListing {
        workspace_id,
        keys,
        revocations,
    }))
}

pub async fn revoke_key(
    State(state): State<AppState>,
    caller: Caller,
    acting: ActingKey,
    Path((workspace_id, key_id)): Path<(String, String)>,
) -> Result<Json<Revocation>, ApiError> {
    authorize(&state, &caller, Operation::RevokeKey, None).await?;
    validate::id("workspaceId", &workspace_id)?;
    let unknown = || ApiError::NotFound {
        code: "unknown-key",
        message: "no such key in this workspace: it was revoked, or never created here".into(),
    };
    // Replicas: look the key up in an up-to-date mirror (refused while Redis is down).
    state.identity.sync().await?;
    let stored = principal_keys_of(state.store.keys().await?, &workspace_id)
        .find(|k| keys::key_id(&k.hash) == key_id)
        .ok_or_else(unknown)?;
    let revocation = Revocation {
        schema: KEY_REVOCATION_SCHEMA.to_owned(),
        key_id,
        revoked_at_epoch_ms: state.clock.now_ms(),
    };
    let record = AuditRecord {
        workspace_id: workspace_id.clone(),
        kind: AuditKind::KeyRevocation,
        record_json: serde_json::to_string(&revocation).map_err(|_| ApiError::Storage)?,
        at_epoch_ms: revocation.revoked_at_epoch_ms,
        actor_key_id: Some(acting.key_id()),
        note: None,
        approved_by: None,
    };
    // Replicas: revoked on every replica within one follow interval; this one before
    // answering.
    let revoked = state
        .identity
        .revoke_key(&workspace_id, &stored.hash, record)
        .await?;
    if !revoked {
        // Revoked concurrently by another request (or another replica).
        return Err(unknown());
    }
    state.keys.remove(&stored.hash);
    Ok(Json(revocation))
}

/// The principal keys of one workspace among `stored`.
fn principal_keys_of(
    stored: Vec<StoredKey>,
    workspace_id: &str,
) -> impl Iterator<Item = StoredKey> + '_ {
    stored.into_iter().filter(move |k| {
        k.role == KeyRole::Principal && k.workspace_id.as_deref() == Some(workspace_id)
    })
}
