//! `POST /v1/admissions`: ask for a permit; wait up to the deadline for an answer.
//!
//! The caller's principal and workspace come from its key. The body names only the provider
//! lane, the invocation budget, the estimate and how long the caller is prepared to wait
//! (`deadlineMs`, relative, at most `admission.max_wait_ms`). While queued, the handler holds a
//! cancel guard: a client that disconnects is removed from the queue at once.

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use turnstile_admission::{Estimate, Evidence, Millis, Rejection};

use crate::api::rollouts::candidate;
use crate::api::{validate, AppState};
use crate::http::body;
use crate::http::error::ApiError;
use crate::http::lease_answer;
use crate::http::status::{carries_retry_after, retry_after_seconds, status_for_rejection};
use crate::keys::auth::{authorize, require_principal, Operation};
use crate::keys::Caller;
use crate::metrics::Cut;
use turnstile_shell::{Acquire, AcquireReply, Wait};

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdmissionBody {
    pub provider_id: String,
    pub budget_id: String,
    /// Required; `{}` is an empty estimate. Malformed numbers are `invalid-estimate` (422).
    #[serde(deserialize_with = "body::object")]
    pub estimate: Estimate,
    /// Milliseconds the caller will wait for a permit; absent means `admission.default_wait_ms`.
    #[serde(default, deserialize_with = "body::optional_whole")]
    pub deadline_ms: Option<Millis>,
}

impl body::SelfChecked for AdmissionBody {
    /// A lenient estimate field reads anything that is not a number as NaN (an object or an
    /// array among them, whose keys the derived parse did not check).
    fn read_loosely(&self) -> bool {
        // Destructured whole: a new estimate field must be added here.
        let Estimate {
            tokens,
            cost_usd,
            request_bytes,
            items,
            attempts,
            batch_size,
            retained_work,
        } = &self.estimate;
        [
            tokens,
            cost_usd,
            request_bytes,
            items,
            attempts,
            batch_size,
            retained_work,
        ]
        .into_iter()
        .flatten()
        .any(|value| value.is_nan())
    }
}

pub async fn acquire(
    State(state): State<AppState>,
    caller: Caller,
    body: crate::http::body::RawBody,
) -> Result<Response, ApiError> {
    authorize(&state, &caller, Operation::Acquire, None).await?;
    let (workspace, principal) = require_principal(&caller)?;
    // Every object of the body is a derived struct that refuses unknown fields (the estimate
    // is read with `body::object`): duplicates are refused without a separate pass.
    let request: AdmissionBody = body::parse_self_checked(body)?;
    // Held while the request waits: one key cannot fill the queues of the whole service.
    let Some(_pending) = state.pending.take((workspace.clone(), principal.clone())) else {
        state.metrics.cut(Cut::PendingCap);
        return Err(ApiError::KeyBusy(
            "this principal has admission.max_pending_per_key admission requests waiting",
        ));
    };
    validate::id("providerId", &request.provider_id)?;
    validate::budget_id("budgetId", &request.budget_id)?;
    let max_wait = state.config.admission.max_wait_ms;
    let wait_ms = request
        .deadline_ms
        .unwrap_or(state.config.admission.default_wait_ms);
    if wait_ms > max_wait {
        return Err(ApiError::AboveMaximum {
            field: "deadlineMs",
            maximum: max_wait,
            setting: "admission.max_wait_ms",
        });
    }

    let span = state.telemetry.admission_requested(&request.provider_id);
    let workspace_id = workspace.clone();
    let request = Acquire {
        workspace,
        principal,
        provider_id: request.provider_id,
        budget_id: request.budget_id,
        estimate: request.estimate,
        // 0 means "only if free now": the core answers at once, with the real reason.
        wait: Wait::For(wait_ms),
        span: Some(span),
    };
    // Locally, then (replicas) against the shared limits: the shell's one admission step. A
    // client that disconnects while queued drops this future: the request is cancelled.
    match state
        .driver
        .acquire_shared(request, state.shared.as_deref())
        .await?
    {
        AcquireReply::Admitted(mut grant) => {
            grant.accept();
            if let Some(revision) = candidate_of(&state, &workspace_id, &grant.evidence) {
                // A canary's candidate decided: the answer names it (`rollouts/candidate.rs`).
                return Ok(candidate::lease_response(
                    &revision,
                    &grant.token.to_string(),
                    grant.expires_at.unwrap_or(Millis::MAX),
                    grant.ttl_ms.unwrap_or(state.config.leases.ttl_ms),
                    &grant.evidence,
                ));
            }
            // The `LeaseBody` bytes, written without building one (`lease_answer.rs`).
            Ok(lease_answer::lease_response(
                &grant.token.to_string(),
                grant.expires_at.unwrap_or(Millis::MAX),
                grant.ttl_ms.unwrap_or(state.config.leases.ttl_ms),
                &grant.evidence,
            ))
        }
        AcquireReply::Rejected(rejection) => {
            let revision = candidate_of(&state, &workspace_id, &rejection.evidence);
            Ok(named_rejection(rejection, revision.as_deref()))
        }
        AcquireReply::NoProfile => Err(ApiError::no_profile()),
        AcquireReply::ShuttingDown => Err(ApiError::ShuttingDown),
        AcquireReply::Internal => Err(ApiError::Storage),
    }
}

/// The candidate revision that decided `evidence`, when a canary's candidate did (the common
/// answer takes no lock).
fn candidate_of(state: &AppState, workspace: &str, evidence: &Evidence) -> Option<String> {
    if !evidence.candidate {
        return None;
    }
    state.candidates.of(workspace)
}

/// A typed rejection: `{reason, retryable, evidence}` with the reason's status, and
/// `Retry-After` on 429 / 503; its evidence names the candidate revision that decided it, if
/// one did.
fn named_rejection(rejection: Rejection, revision: Option<&str>) -> Response {
    let status = status_for_rejection(&rejection);
    let hint = rejection.evidence.retry_after_ms;
    let caller = rejection.evidence.caller;
    let mut response = match revision {
        None => (status, Json(rejection)).into_response(),
        Some(revision) => {
            let body = serde_json::to_value(&rejection).unwrap_or(serde_json::Value::Null);
            (status, Json(candidate::named(body, revision))).into_response()
        }
    };
    lease_answer::caller_headers(&mut response, &caller);
    if carries_retry_after(status) {
        if let Ok(value) = HeaderValue::from_str(&retry_after_seconds(hint).to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
    }
    response
}
