//! The workspaces a key may see: `GET /v1/workspaces` (the console's workspace field suggests
//! them).
//!
//! - Who: an admin key gets every workspace with a registered profile, each with its current
//!   revision, by workspace ID; a principal key gets its own workspace only (its revision
//!   `null` while the workspace has no profile), never another's ID.
//! - The list is the driver's registry (the same in single and replica mode: replicas follow
//!   every profile through the shared feed).
//!
//! Invariant: workspace IDs leave the service only in this authenticated answer; the handler
//! logs nothing and adds no metric label.

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use crate::api::AppState;
use crate::http::error::ApiError;
use crate::keys::auth::{authorize, Operation};
use crate::keys::Caller;

/// One workspace of the listing.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceEntry {
    workspace_id: String,
    /// The current revision (`None`: no profile registered yet).
    profile_version: Option<String>,
}

/// The answer of `GET /v1/workspaces`.
#[derive(Debug, Serialize)]
pub struct WorkspaceList {
    workspaces: Vec<WorkspaceEntry>,
}

pub async fn list_workspaces(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<WorkspaceList>, ApiError> {
    authorize(&state, &caller, Operation::ListWorkspaces, None).await?;
    let registered = state.driver.workspaces().await?;
    let workspaces = match &caller {
        Caller::Admin => registered
            .into_iter()
            .map(|(workspace_id, version)| WorkspaceEntry {
                workspace_id,
                profile_version: Some(version),
            })
            .collect(),
        Caller::Principal { workspace, .. } => vec![WorkspaceEntry {
            workspace_id: workspace.to_string(),
            profile_version: registered
                .into_iter()
                .find(|(id, _)| *id == **workspace)
                .map(|(_, version)| version),
        }],
    };
    Ok(Json(WorkspaceList { workspaces }))
}
