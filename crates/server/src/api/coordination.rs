//! `POST /v1/budgets/{budgetId}/release` and `POST /v1/providers/{providerId}/retry-after`:
//! the calls a principal makes about its workspace's shared state.
//!
//! Budgets are per `budgetId` within the caller's workspace. A provider pause is bounded by
//! `admission.max_retry_after_ms`, so no key can pause a provider lane indefinitely, and only a
//! provider the workspace profile configures can be paused.

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use turnstile_admission::Millis;

use crate::api::{validate, AppState};
use crate::http::body;
use crate::http::error::ApiError;
use crate::keys::auth::{authorize, require_principal, Operation};
use crate::keys::Caller;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReleased {
    /// Whether the invocation had spent anything.
    pub released: bool,
}

pub async fn release_budget(
    State(state): State<AppState>,
    caller: Caller,
    Path(budget_id): Path<String>,
) -> Result<Json<BudgetReleased>, ApiError> {
    authorize(&state, &caller, Operation::ReleaseBudget, None).await?;
    let (workspace, _) = require_principal(&caller)?;
    validate::budget_id("budgetId", &budget_id)?;
    let released = state.driver.release_budget(&workspace, &budget_id).await?;
    // Replicas: the invocation's shared budget lines go too.
    state.books.release_budget(&workspace, &budget_id).await;
    Ok(Json(BudgetReleased { released }))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryAfterBody {
    #[serde(deserialize_with = "crate::http::body::whole")]
    pub retry_after_ms: Millis,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Paused {
    pub paused_until_epoch_ms: Millis,
}

pub async fn retry_after(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<String>,
    body: crate::http::body::RawBody,
) -> Result<Json<Paused>, ApiError> {
    authorize(&state, &caller, Operation::PauseProvider, None).await?;
    let (workspace, _) = require_principal(&caller)?;
    validate::id("providerId", &provider_id)?;
    let request: RetryAfterBody = body::parse(body)?;
    let max = state.config.admission.max_retry_after_ms;
    if request.retry_after_ms > max {
        return Err(ApiError::AboveMaximum {
            field: "retryAfterMs",
            maximum: max,
            setting: "admission.max_retry_after_ms",
        });
    }
    let mut until = state
        .driver
        .retry_after(&workspace, &provider_id, request.retry_after_ms)
        .await?;
    // Replicas: the pause is shared (monotonic max in Redis); the answer is the later end.
    let now = state.clock.now_ms();
    if let Some(remaining) = state
        .books
        .pause(&workspace, &provider_id, request.retry_after_ms, now)
        .await
    {
        until = until.max(now.saturating_add(remaining));
    }
    Ok(Json(Paused {
        paused_until_epoch_ms: until,
    }))
}
