//! The fairness window of a workspace: `GET /v1/workspaces/{workspaceId}/fairness`.
//!
//! Each principal's grants, share of grants, mean queue delay and tokens served over the last
//! five minutes (per-minute buckets kept by the driver: `turnstile_shell::fairness`; tokens are
//! the estimates, replaced by the usage a release reports), its `weight` and `priority` in the
//! profile in force, each provider lane's `fairness` mode, and the grants and tokens of each
//! minute. The console's Fairness view reads it; the browser does not aggregate.
//!
//! - Who: an admin key (any workspace: every principal), or a principal key of that workspace
//!   (the totals, the minutes, the lanes and its own row only: other principals' IDs never
//!   reach it); 403 for another workspace's key. 404 `no-profile` for a workspace without a profile.
//!
//! Invariant: principal IDs leave the driver only in this authenticated answer; the handler
//! logs nothing and adds no metric label.

use axum::extract::{Path, State};
use axum::Json;
use turnstile_shell::{Command, FairnessView};

use crate::api::{validate, AppState};
use crate::http::error::ApiError;
use crate::keys::auth::{authorize, Operation};
use crate::keys::Caller;

pub async fn fairness(
    State(state): State<AppState>,
    caller: Caller,
    Path(workspace_id): Path<String>,
) -> Result<Json<FairnessView>, ApiError> {
    authorize(
        &state,
        &caller,
        Operation::ReadFairness,
        Some(&workspace_id),
    )
    .await?;
    validate::id("workspaceId", &workspace_id)?;
    let mut view = state
        .driver
        .ask(|reply| Command::Fairness {
            workspace: workspace_id,
            reply,
        })
        .await?
        .ok_or_else(ApiError::no_profile)?;
    if let Caller::Principal { principal, .. } = &caller {
        view.principals.retain(|p| *p.principal_id == **principal);
    }
    Ok(Json(view))
}
