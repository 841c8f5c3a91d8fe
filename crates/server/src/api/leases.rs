//! `POST /v1/leases/{leaseId}/release` and `/heartbeat`.
//!
//! A lease belongs to the principal that acquired it: another key (even of the same workspace)
//! gets 404, exactly as for a lease that never existed, so lease IDs reveal nothing. Release
//! reports the outcome to the core (breaker, Retry-After pause) and, with `actualUsage`, what
//! the call really used, which replaces the estimate in the invocation's budgets (an overrun
//! makes the invocation's next attempt fail closed); heartbeat moves the expiry to now + TTL.

use std::sync::atomic::Ordering;

use crate::http::json_answer::{json_response, JsonAnswer};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use turnstile_admission::{ActualUsage, BreakerTransition, Millis, Outcome};

use crate::api::AppState;
use crate::http::body;
use crate::http::error::ApiError;
use crate::keys::auth::{authorize, require_principal, Operation};
use crate::keys::Caller;
use turnstile_shell::{Command, LeaseToken};

/// How the provider call went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeKind {
    Success,
    Failure,
    RetryAfter,
    /// Unknown (the call was not made, or its result is not known).
    None,
}

/// What the call actually used: replaces the estimate in the invocation's budgets.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActualUsageBody {
    #[serde(default, deserialize_with = "crate::http::body::optional_whole")]
    pub tokens: Option<u64>,
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

/// The release body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReleaseBody {
    pub outcome: OutcomeKind,
    /// Required with `retry-after`, refused otherwise.
    #[serde(default, deserialize_with = "crate::http::body::optional_whole")]
    pub retry_after_ms: Option<Millis>,
    #[serde(default, deserialize_with = "optional_object")]
    pub actual_usage: Option<ActualUsageBody>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseReleased {
    pub released: bool,
    pub breaker_transitions: Vec<BreakerTransition>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    pub lease_id: String,
    pub expires_at_epoch_ms: Millis,
}

fn optional_object<'de, D>(deserializer: D) -> Result<Option<ActualUsageBody>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    if value.is_null() {
        return Ok(None);
    }
    body::object(value)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// The largest `actualUsage.tokens` accepted (2^53 - 1, exact in every JSON client).
pub const MAX_ACTUAL_TOKENS: u64 = turnstile_admission::MAX_SAFE_INTEGER;
/// The largest `actualUsage.costUsd` accepted.
pub const MAX_ACTUAL_COST_USD: f64 = 1e9;

/// The body's `actualUsage`, validated: tokens 0..=2^53-1, cost a finite number in
/// 0..=1e9 (422 `invalid-request` naming the field otherwise).
fn actual_usage(body: Option<&ActualUsageBody>) -> Result<ActualUsage, ApiError> {
    let Some(body) = body else {
        return Ok(ActualUsage::none());
    };
    let mut usage = ActualUsage::none();
    if let Some(tokens) = body.tokens {
        if tokens > MAX_ACTUAL_TOKENS {
            return Err(ApiError::invalid(
                "actualUsage.tokens",
                "actualUsage.tokens must be at most 9007199254740991",
            ));
        }
        usage = usage.tokens(tokens);
    }
    if let Some(cost) = body.cost_usd {
        let invalid = || {
            ApiError::invalid(
                "actualUsage.costUsd",
                "actualUsage.costUsd must be a finite number from 0 to 1e9",
            )
        };
        if cost > MAX_ACTUAL_COST_USD {
            return Err(invalid());
        }
        usage = usage.with_cost_usd(cost).map_err(|_| invalid())?;
    }
    Ok(usage)
}

/// Adds to a counter without ever wrapping.
fn saturating_add(counter: &std::sync::atomic::AtomicU64, value: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_add(value))
    });
}

fn token(text: &str) -> Result<LeaseToken, ApiError> {
    LeaseToken::parse(text).ok_or_else(ApiError::unknown_lease)
}

fn outcome(body: &ReleaseBody, max_retry_after_ms: Millis) -> Result<Outcome, ApiError> {
    match (body.outcome, body.retry_after_ms) {
        (OutcomeKind::RetryAfter, Some(ms)) if ms <= max_retry_after_ms => {
            Ok(Outcome::RetryAfter { retry_after_ms: ms })
        }
        (OutcomeKind::RetryAfter, Some(_)) => Err(ApiError::AboveMaximum {
            field: "retryAfterMs",
            maximum: max_retry_after_ms,
            setting: "admission.max_retry_after_ms",
        }),
        (OutcomeKind::RetryAfter, None) => Err(ApiError::invalid(
            "retryAfterMs",
            "outcome retry-after needs retryAfterMs",
        )),
        (_, Some(_)) => Err(ApiError::invalid(
            "retryAfterMs",
            "retryAfterMs is only allowed with outcome retry-after",
        )),
        (OutcomeKind::Success, None) => Ok(Outcome::Success),
        (OutcomeKind::Failure, None) => Ok(Outcome::Failure),
        (OutcomeKind::None, None) => Ok(Outcome::None),
    }
}

pub async fn release(
    State(state): State<AppState>,
    caller: Caller,
    Path(lease_id): Path<String>,
    body: crate::http::body::RawBody,
) -> Result<Response, ApiError> {
    authorize(&state, &caller, Operation::ReleaseLease, None).await?;
    let (workspace, principal) = require_principal(&caller)?;
    let request: ReleaseBody = body::parse(body)?;
    let outcome = outcome(&request, state.config.admission.max_retry_after_ms)?;
    let usage = actual_usage(request.actual_usage.as_ref())?;
    let token = token(&lease_id)?;
    let driver = &state.driver;
    let local: crate::replicas::deployment::BoxFuture<'_, _> = Box::pin(async move {
        driver
            .ask(|reply| Command::Release {
                token,
                workspace,
                principal,
                outcome,
                usage,
                forget_budget: None,
                reply,
            })
            .await
            .and_then(|result| result)
    });
    // Replicas: the shared books settle the lease around the local release.
    let transitions = state
        .books
        .release(&lease_id, outcome, usage, local)
        .await?;
    if let Some(tokens) = usage.tokens {
        saturating_add(&state.metrics.actual_tokens, tokens);
    }
    if let Some(cost) = usage.cost_usd() {
        let micro = (cost * 1_000_000.0).round().min(u64::MAX as f64) as u64;
        saturating_add(&state.metrics.actual_cost_micro_usd, micro);
    }
    if transitions.is_empty() {
        // The answer of nearly every release, the same bytes as the serde encoding below.
        return Ok(json_response(Ok(axum::body::Bytes::from_static(
            RELEASED_BODY,
        ))));
    }
    Ok(JsonAnswer(LeaseReleased {
        released: true,
        breaker_transitions: transitions,
    })
    .into_response())
}

/// `LeaseReleased { released: true, breaker_transitions: [] }` as JSON.
const RELEASED_BODY: &[u8] = br#"{"released":true,"breakerTransitions":[]}"#;

pub async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    Path(lease_id): Path<String>,
) -> Result<JsonAnswer<Heartbeat>, ApiError> {
    authorize(&state, &caller, Operation::HeartbeatLease, None).await?;
    let (workspace, principal) = require_principal(&caller)?;
    let token = token(&lease_id)?;
    let expires_at = state
        .driver
        .ask(|reply| Command::Heartbeat {
            token,
            workspace,
            principal,
            reply,
        })
        .await??;
    Ok(JsonAnswer(Heartbeat {
        lease_id,
        expires_at_epoch_ms: expires_at,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constant_release_answer_is_serdes() {
        let encoded = serde_json::to_vec(&LeaseReleased {
            released: true,
            breaker_transitions: Vec::new(),
        })
        .unwrap();
        assert_eq!(encoded, RELEASED_BODY);
    }
}
