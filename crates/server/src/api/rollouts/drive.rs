//! The rollout routes' calls into the driver (`turnstile_shell`'s rollout commands), each
//! answered with the core's view or record, and the core's refusals as typed API errors
//! (`From<RolloutError> for ApiError`, `crate::http::error`).

use turnstile_admission::{FinishedRollout, Profile, RolloutMode, RolloutView};
use turnstile_shell::{Approval, DriverError};

use crate::api::AppState;
use crate::http::error::ApiError;

/// A driver error as the API answers it (a refused rollout: `From<RolloutError>`).
fn answered(error: DriverError) -> ApiError {
    ApiError::from(error)
}

/// Starts a rollout of `revision` in `workspace`.
pub async fn start(
    state: &AppState,
    workspace: &str,
    revision: &str,
    profile: Profile,
    profile_json: String,
    mode: RolloutMode,
) -> Result<RolloutView, ApiError> {
    state
        .driver
        .start_rollout(workspace, revision, (profile, profile_json), mode)
        .await
        .map_err(answered)
}

/// The running rollout of `workspace`, if any.
pub async fn current(state: &AppState, workspace: &str) -> Result<Option<RolloutView>, ApiError> {
    state.driver.rollout(workspace).await.map_err(answered)
}

/// Promotes the running rollout's candidate, journaled as a registration with `approval`
/// (answered once durable).
pub async fn promote(
    state: &AppState,
    workspace: &str,
    approval: Approval,
) -> Result<FinishedRollout, ApiError> {
    let (finished, _change) = state
        .driver
        .promote_rollout(workspace, approval)
        .await
        .map_err(answered)?;
    Ok(finished)
}

/// Aborts the running rollout.
pub async fn abort(state: &AppState, workspace: &str) -> Result<FinishedRollout, ApiError> {
    state
        .driver
        .abort_rollout(workspace)
        .await
        .map_err(answered)
}
