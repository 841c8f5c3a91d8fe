//! Rollouts (issue 33, item 1): a candidate profile revision tried beside the current one before
//! it binds (semantics: `turnstile_admission::rollout`, `docs/admission.md`).
//!
//! - `POST /v1/workspaces/{workspaceId}/rollouts` (admin) `{revision, profile, mode: "shadow" |
//!   "canary", canaryShare?, note?, approvedBy?}`: registers the candidate (not current) and
//!   starts the rollout; 201 the rollout. `canaryShare` (0 to 1) is required with `canary` and
//!   refused with `shadow` (422 `invalid-request` naming the field); a second rollout is 409
//!   `rollout-running` (`rollout-draining` while the last canary's slice still holds work).
//! - `GET …/rollouts/current` (admin / own principal): the running rollout and its decision
//!   comparison, counts only; 404 `no-rollout`.
//! - `POST …/rollouts/current/promote`, `…/abort` (admin) `{note?, approvedBy?}`: 200 the
//!   rollout's end record; promote makes the candidate the current revision (its
//!   profile-change record is in `GET …/profiles`, with the same approval). 404 `no-rollout`.
//! - `GET …/rollouts` (admin / own principal): the rollout records (started, promoted,
//!   aborted), oldest first, last 64, durable, each with its approval on record.
//!
//! Invariants: every start, promotion and abort is in the audit log with the acting key's ID,
//! the note and `approvedBy` (`crate::api::approval`); answers carry digests and counts, never
//! limit values or principal IDs. A rollout runs in this process only: it does not survive a
//! restart (`crate::api::rollout_record::end_interrupted` closes its record at start-up), and a
//! replica refuses to start one (409 `rollouts-unsupported`: a candidate promoted on one
//! replica would not be the deployment's revision).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use turnstile_admission::{Comparison, RolloutMode, RolloutView};
use turnstile_store::AuditKind;

use crate::api::approval;
use crate::api::profiles::{history, parse_profile, Records};
use crate::api::rollout_record::{mode_of, ModeName, RolloutRecord};
use crate::api::{validate, AppState};
use crate::http::body;
use crate::http::error::ApiError;
use crate::keys::auth::{authorize, ActingKey, Operation};
use crate::keys::Caller;

pub(crate) mod candidate;
mod drive;

pub use candidate::CandidateRevisions;

/// The running rollout as the API answers it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    pub workspace_id: String,
    pub revision: String,
    pub digest: String,
    pub mode: ModeName,
    pub canary_share: Option<f64>,
    pub started_at_epoch_ms: u64,
    pub decisions: Comparison,
}

impl Rollout {
    fn of(workspace_id: String, view: RolloutView) -> Self {
        let (mode, canary_share) = mode_of(view.mode);
        Rollout {
            workspace_id,
            revision: view.revision,
            digest: view.digest,
            mode,
            canary_share,
            started_at_epoch_ms: view.started_at_epoch_ms,
            decisions: view.decisions,
        }
    }
}

/// The start body, once `note` and `approvedBy` are taken out.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StartBody {
    revision: String,
    profile: serde_json::Value,
    mode: ModeName,
    #[serde(default)]
    canary_share: Option<f64>,
}

/// The mode a start body asks for: a share with `canary` only, within 0 to 1.
fn mode(body: &StartBody) -> Result<RolloutMode, ApiError> {
    match (body.mode, body.canary_share) {
        (ModeName::Shadow, None) => Ok(RolloutMode::Shadow),
        (ModeName::Shadow, Some(_)) => Err(ApiError::invalid(
            "canaryShare",
            "canaryShare is for mode canary only",
        )),
        (ModeName::Canary, None) => Err(ApiError::invalid(
            "canaryShare",
            "mode canary needs canaryShare, the share of principals from 0 to 1",
        )),
        (ModeName::Canary, Some(share)) if share.is_finite() && (0.0..=1.0).contains(&share) => {
            Ok(RolloutMode::Canary { share })
        }
        (ModeName::Canary, Some(_)) => Err(ApiError::invalid(
            "canaryShare",
            "canaryShare must be a number from 0 to 1",
        )),
    }
}

/// A JSON object body (after the approval is taken out) as `T`, naming a bad field.
fn fields<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let field = error.path().to_string();
        let field = if field == "." {
            "body".to_owned()
        } else {
            field
        };
        ApiError::invalid(field, error.into_inner().to_string())
    })
}

/// A profile error of the start body, its field named from the body (`profile.…`).
fn in_profile(error: ApiError) -> ApiError {
    let named = |field: String| match field.as_str() {
        "body" => "profile".to_owned(),
        _ => format!("profile.{field}"),
    };
    match error {
        ApiError::InvalidDefinition { field, message } => ApiError::InvalidDefinition {
            field: named(field),
            message,
        },
        ApiError::InvalidRequest { field, message } => ApiError::InvalidRequest {
            field: named(field),
            message,
        },
        other => other,
    }
}

/// The body as a JSON object and its approval.
fn object_and_approval(
    acting: &ActingKey,
    raw: body::RawBody,
) -> Result<(serde_json::Value, turnstile_shell::Approval), ApiError> {
    let mut value: serde_json::Value = body::parse_slice(&body::bytes(raw)?)?;
    let Some(object) = value.as_object_mut() else {
        return Err(ApiError::invalid("body", "the body must be a JSON object"));
    };
    let approval = approval::take(acting, object)?;
    Ok((value, approval))
}

pub async fn start_rollout(
    State(state): State<AppState>,
    caller: Caller,
    acting: ActingKey,
    Path(workspace_id): Path<String>,
    raw: body::RawBody,
) -> Result<Response, ApiError> {
    authorize(&state, &caller, Operation::RegisterProfile, None).await?;
    validate::id("workspaceId", &workspace_id)?;
    let (value, approval) = object_and_approval(&acting, raw)?;
    let body: StartBody = fields(value)?;
    validate::id("revision", &body.revision)?;
    let mode = mode(&body)?;
    let profile = parse_profile(body.profile, false).map_err(in_profile)?;
    for principal in profile.principals.keys() {
        validate::id("profile.principals", principal)?;
    }
    for provider in profile.providers.keys() {
        validate::id("profile.providers", provider)?;
    }
    if state.books.coordination().is_some() {
        return Err(ApiError::StateConflict {
            code: "rollouts-unsupported",
            message: "rollouts run on a single process; this service is a replica".into(),
        });
    }
    let profile_json = serde_json::to_string(&profile).map_err(|_| ApiError::Storage)?;
    let view = drive::start(
        &state,
        &workspace_id,
        &body.revision,
        profile,
        profile_json,
        mode,
    )
    .await?;
    state.candidates.started(&workspace_id, &view.revision);
    let record = RolloutRecord::started(&view);
    append(&state, record.audit(&workspace_id, &approval)).await?;
    Ok((StatusCode::CREATED, Json(Rollout::of(workspace_id, view))).into_response())
}

pub async fn current_rollout(
    State(state): State<AppState>,
    caller: Caller,
    Path(workspace_id): Path<String>,
) -> Result<Json<Rollout>, ApiError> {
    authorize(
        &state,
        &caller,
        Operation::ReadProfiles,
        Some(&workspace_id),
    )
    .await?;
    validate::id("workspaceId", &workspace_id)?;
    let view = drive::current(&state, &workspace_id)
        .await?
        .ok_or_else(no_rollout)?;
    Ok(Json(Rollout::of(workspace_id, view)))
}

/// The end of a rollout: `promote` or not (abort).
async fn end(
    state: AppState,
    caller: Caller,
    acting: ActingKey,
    workspace_id: String,
    raw: body::RawBody,
    promote: bool,
) -> Result<Json<serde_json::Value>, ApiError> {
    authorize(&state, &caller, Operation::RegisterProfile, None).await?;
    validate::id("workspaceId", &workspace_id)?;
    let (value, approval) = object_and_approval(&acting, raw)?;
    let _: EndBody = fields(value)?;
    let finished = if promote {
        drive::promote(&state, &workspace_id, approval.clone()).await?
    } else {
        drive::abort(&state, &workspace_id).await?
    };
    let record = RolloutRecord::ended(&finished);
    append(&state, record.audit(&workspace_id, &approval)).await?;
    let answer = serde_json::to_value(&record).map_err(|_| ApiError::Storage)?;
    Ok(Json(approval::on_record(answer, &approval)))
}

/// A promote or abort body: nothing but the approval.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndBody {}

pub async fn promote_rollout(
    State(state): State<AppState>,
    caller: Caller,
    acting: ActingKey,
    Path(workspace_id): Path<String>,
    raw: body::RawBody,
) -> Result<Json<serde_json::Value>, ApiError> {
    end(state, caller, acting, workspace_id, raw, true).await
}

pub async fn abort_rollout(
    State(state): State<AppState>,
    caller: Caller,
    acting: ActingKey,
    Path(workspace_id): Path<String>,
    raw: body::RawBody,
) -> Result<Json<serde_json::Value>, ApiError> {
    end(state, caller, acting, workspace_id, raw, false).await
}

/// `GET …/rollouts`: the rollout records with their approval, oldest first.
pub async fn rollout_history(
    State(state): State<AppState>,
    caller: Caller,
    Path(workspace_id): Path<String>,
) -> Result<Json<Records>, ApiError> {
    history(&state, &caller, &workspace_id, AuditKind::Rollout).await
}

/// Appends a rollout's audit row, durable before the answer.
async fn append(
    state: &AppState,
    row: Option<turnstile_store::AuditRecord>,
) -> Result<(), ApiError> {
    let row = row.ok_or(ApiError::Storage)?;
    state
        .store
        .with(move |store| store.append_audit(&[row]))
        .await?
        .map_err(|_| ApiError::Storage)
}

/// 404 `no-rollout`.
pub fn no_rollout() -> ApiError {
    ApiError::NotFound {
        code: "no-rollout",
        message: "no rollout runs in this workspace".into(),
    }
}
