//! Workspace administration: profiles, their audit history, breaker history and snapshots
//! (principal keys are in [`crate::api::keys`]).
//!
//! - `PUT /v1/workspaces/{workspaceId}/profiles/{profileVersion}` (admin): 201 with the
//!   profile-change record, 200 `{unchanged: true}` when the revision is already current, 409
//!   for a reused revision with different limits, 422 naming the field for invalid limits.
//! - `GET .../profiles`, `GET .../breakers`, `GET .../pauses`, `GET .../snapshot`: an admin, or
//!   a principal of that workspace (403 for another workspace's key). Records carry digests and
//!   states, never limit values or principal IDs.
//! - Replicas (`[coordination] redis_url`): a registration (or rollback) is the deployment's,
//!   through the shared feed (`crate::replicas::identity`): every replica enforces it, with the same
//!   records; 503 `coordination-unavailable` while Redis does not answer.
//! - Who changed what, on whose approval: the `PUT` body may carry `note` and `approvedBy` beside
//!   the profile (`crate::api::approval`: bounded, 422 `invalid-request` naming the field); a
//!   profile-change record answered by `PUT` or listed by `GET …/profiles` carries `actorKeyId`
//!   (the key ID of the admin key that registered it), `note` and `approvedBy` (`null` for the
//!   first start's demo profile and for records stored before the audit log kept them).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use turnstile_admission::Profile;
use turnstile_store::AuditKind;

use crate::api::{approval, validate, AppState};
use crate::http::body;
use crate::http::error::ApiError;
use crate::keys::auth::ActingKey;
use crate::keys::auth::{authorize, Operation};
use crate::keys::Caller;
use crate::replicas::deployment::NewRevision;
use turnstile_shell::{Command, WorkspaceSnapshot};

/// Audit records returned by the history endpoints.
pub const HISTORY_LIMIT: usize = 64;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unchanged {
    pub unchanged: bool,
    pub profile_version: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Records {
    pub records: Vec<serde_json::Value>,
}

pub async fn put_profile(
    State(state): State<AppState>,
    caller: Caller,
    acting: ActingKey,
    Path((workspace_id, profile_version)): Path<(String, String)>,
    body: crate::http::body::RawBody,
) -> Result<Response, ApiError> {
    authorize(&state, &caller, Operation::RegisterProfile, None).await?;
    validate::id("workspaceId", &workspace_id)?;
    validate::id("profileVersion", &profile_version)?;
    let bytes = crate::http::body::bytes(body)?;
    let mut document: serde_json::Value = body::parse_slice(&bytes)?;
    let approval = match document.as_object_mut() {
        Some(object) => approval::take(&acting, object)?,
        None => approval::approval(&acting, None, None)?,
    };
    let profile = parse_profile(document, true)?;
    for principal in profile.principals.keys() {
        validate::id("principals", principal)?;
    }
    for provider in profile.providers.keys() {
        validate::id("providers", provider)?;
    }
    let profile_json =
        serde_json::to_string(&profile).map_err(|_| ApiError::InvalidDefinition {
            field: "body".into(),
            message: "profile cannot be encoded".into(),
        })?;
    let version = profile_version.clone();
    let answered = approval.clone();
    // Replicas: registered for the whole deployment, in one order on every replica.
    let record = state
        .identity
        .register(NewRevision {
            workspace: workspace_id,
            version,
            profile,
            profile_json,
            approval,
        })
        .await?;
    Ok(match record {
        Some(record) => {
            let record = serde_json::to_value(record).map_err(|_| ApiError::Storage)?;
            let record = approval::on_record(record, &answered);
            (StatusCode::CREATED, Json(record)).into_response()
        }
        None => (
            StatusCode::OK,
            Json(Unchanged {
                unchanged: true,
                profile_version,
            }),
        )
            .into_response(),
    })
}

/// The profile document, strictly: any top-level key other than `workspace`, `providers` and
/// `principals` is refused, naming it, before serde would (`note` and `approvedBy` were taken
/// out before: `crate::api::approval`; `with_approval` says whether the request allows them
/// beside the profile, for the message), and so is any key of a principal list entry other
/// than `id` and `limits` (the core's list form ignores such keys: see
/// [`limits_are_objects`]).
pub(crate) fn parse_profile(
    value: serde_json::Value,
    with_approval: bool,
) -> Result<Profile, ApiError> {
    let as_definition = |error: ApiError| match error {
        ApiError::InvalidRequest { field, message } => ApiError::InvalidDefinition {
            field,
            message: format!("invalid-definition: {message}"),
        },
        other => other,
    };
    if let Some(object) = value.as_object() {
        if let Some(unknown) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "workspace" | "providers" | "principals"))
        {
            return Err(ApiError::InvalidDefinition {
                field: unknown.clone(),
                message: format!(
                    "invalid-definition: unknown field `{unknown}`, expected one of `workspace`, `providers`, `principals`{}",
                    if with_approval { ", `note`, `approvedBy`" } else { "" }
                ),
            });
        }
    }
    limits_are_objects(&value)?;
    serde_path_to_error::deserialize(value)
        .map_err(|error| {
            let field = error.path().to_string();
            let field = if field == "." {
                "body".to_owned()
            } else {
                field
            };
            ApiError::invalid(field, error.into_inner().to_string())
        })
        .map_err(as_definition)
}

/// Serde's derived `Limits` also accepts a JSON *array* (positional fields), so `[1, 2]`
/// would silently mean `{concurrency: 1, requestsPerMinute: 2}`. Every limits position must be
/// an object. The core's principal list form (`[{id, limits}]`, the load manifests') ignores
/// other keys of an entry (a manifest's `class`, `weight`); here they are refused, naming the
/// key.
fn limits_are_objects(value: &serde_json::Value) -> Result<(), ApiError> {
    fn limits(value: &serde_json::Value, field: String) -> Result<(), ApiError> {
        let Some(object) = value.as_object() else {
            return Err(not_object(field));
        };
        match object.get("circuitBreaker") {
            None | Some(serde_json::Value::Null) | Some(serde_json::Value::Object(_)) => Ok(()),
            Some(_) => Err(not_object(format!("{field}.circuitBreaker"))),
        }
    }
    fn not_object(field: String) -> ApiError {
        ApiError::InvalidDefinition {
            message: format!("invalid-definition: {field} must be an object of limits"),
            field,
        }
    }
    let Some(root) = value.as_object() else {
        return Ok(()); // serde reports the wrong type with its own message
    };
    if let Some(workspace) = root.get("workspace") {
        limits(workspace, "workspace".into())?;
    }
    if let Some(providers) = root.get("providers").and_then(|p| p.as_object()) {
        for (id, provider) in providers {
            limits(provider, format!("providers.{id}"))?;
        }
    }
    match root.get("principals") {
        Some(serde_json::Value::Object(principals)) => {
            for (id, principal) in principals {
                limits(principal, format!("principals.{id}"))?;
            }
        }
        Some(serde_json::Value::Array(entries)) => {
            for (index, entry) in entries.iter().enumerate() {
                let unknown = entry.as_object().and_then(|entry| {
                    entry
                        .keys()
                        .find(|k| !matches!(k.as_str(), "id" | "limits"))
                });
                if let Some(unknown) = unknown {
                    return Err(ApiError::InvalidDefinition {
                        field: format!("principals[{index}].{unknown}"),
                        message: format!(
                            "invalid-definition: unknown field `{unknown}` in principals[{index}], expected `id`, `limits`"
                        ),
                    });
                }
                match entry.get("limits") {
                    Some(l) => limits(l, format!("principals[{index}].limits"))?,
                    None => return Err(not_object(format!("principals[{index}].limits"))),
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The last [`HISTORY_LIMIT`] audit records of one kind, oldest first; a revision change's
/// (profile change, rollout) with its approval on record.
pub(crate) async fn history(
    state: &AppState,
    caller: &Caller,
    workspace_id: &str,
    kind: AuditKind,
) -> Result<Json<Records>, ApiError> {
    let operation = match kind {
        AuditKind::BreakerTransition | AuditKind::ProviderPause => Operation::ReadBreakers,
        _ => Operation::ReadProfiles,
    };
    authorize(state, caller, operation, Some(workspace_id)).await?;
    validate::id("workspaceId", workspace_id)?;
    let records = state
        .store
        .audit(workspace_id, kind, HISTORY_LIMIT)
        .await?
        .into_iter()
        .filter_map(|r| {
            let record = serde_json::from_str(&r.record_json).ok()?;
            Some(match kind {
                AuditKind::ProfileChange | AuditKind::Rollout => {
                    approval::on_record(record, &approval::of_stored(&r))
                }
                _ => record,
            })
        })
        .collect();
    Ok(Json(Records { records }))
}

pub async fn profile_history(
    State(state): State<AppState>,
    caller: Caller,
    Path(workspace_id): Path<String>,
) -> Result<Json<Records>, ApiError> {
    history(&state, &caller, &workspace_id, AuditKind::ProfileChange).await
}

pub async fn breaker_history(
    State(state): State<AppState>,
    caller: Caller,
    Path(workspace_id): Path<String>,
) -> Result<Json<Records>, ApiError> {
    history(&state, &caller, &workspace_id, AuditKind::BreakerTransition).await
}

/// `GET …/pauses`: the Retry-After pauses of the workspace's provider lanes, oldest first
/// (last 64, durable: `turnstile-provider-pause/v1` records).
pub async fn pause_history(
    State(state): State<AppState>,
    caller: Caller,
    Path(workspace_id): Path<String>,
) -> Result<Json<Records>, ApiError> {
    history(&state, &caller, &workspace_id, AuditKind::ProviderPause).await
}

pub async fn snapshot(
    State(state): State<AppState>,
    caller: Caller,
    Path(workspace_id): Path<String>,
) -> Result<Json<WorkspaceSnapshot>, ApiError> {
    authorize(
        &state,
        &caller,
        Operation::ReadSnapshot,
        Some(&workspace_id),
    )
    .await?;
    validate::id("workspaceId", &workspace_id)?;
    state
        .driver
        .ask(|reply| Command::Snapshot {
            workspace: workspace_id,
            reply,
        })
        .await?
        .map(Json)
        .ok_or_else(ApiError::no_profile)
}
