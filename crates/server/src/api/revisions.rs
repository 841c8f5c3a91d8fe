//! One registered profile revision: `GET /v1/workspaces/{workspaceId}/profiles/{profileVersion}`
//! (admin only).
//!
//! Answers the revision's limits as first registered, its digest and registration instant: what
//! the console diffs, and what it sends back unchanged to `PUT …/profiles/{profileVersion}` to
//! roll back (the registry records that as a `rollback` profile-change record, in the normal
//! audit log). 404 `unknown-revision` for a revision never registered in this workspace.
//!
//! Invariant: limit values (and the principal IDs a profile names) reach admin keys only.

use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;
use turnstile_admission::Profile;

use crate::api::{validate, AppState};
use crate::http::error::ApiError;
use crate::keys::auth::{authorize, Operation};
use crate::keys::Caller;

/// A registered revision.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    pub workspace_id: String,
    pub profile_version: String,
    /// The canonical digest of `{providers, workspace}` (as in profile-change records).
    pub digest: String,
    pub registered_at_epoch_ms: u64,
    pub profile: Profile,
}

pub async fn profile_revision(
    State(state): State<AppState>,
    caller: Caller,
    Path((workspace_id, profile_version)): Path<(String, String)>,
) -> Result<Json<Revision>, ApiError> {
    authorize(&state, &caller, Operation::ReadProfileRevision, None).await?;
    validate::id("workspaceId", &workspace_id)?;
    validate::id("profileVersion", &profile_version)?;
    let unknown = || ApiError::NotFound {
        code: "unknown-revision",
        message: "no such profile revision in this workspace".into(),
    };
    let stored = state
        .store
        .profiles()
        .await?
        .into_iter()
        .find(|p| p.workspace_id == workspace_id && p.profile_version == profile_version)
        .ok_or_else(unknown)?;
    let profile: Profile =
        serde_json::from_str(&stored.profile_json).map_err(|_| ApiError::Storage)?;
    let digest = profile.digest().map_err(|_| ApiError::Storage)?;
    Ok(Json(Revision {
        workspace_id,
        profile_version,
        digest,
        registered_at_epoch_ms: stored.registered_at_ms,
        profile,
    }))
}
