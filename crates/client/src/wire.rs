//! The admission API's bodies as this client sends and reads them (`docs/server.md`, the
//! OpenAPI document): camelCase JSON; the evidence and breaker transitions are the core's own
//! types, so they read exactly what the service writes (`crates/server/src/http/lease_answer.rs`).
//!
//! Decides how an answer becomes a value or a [`ClientError`] ([`read`]). Unknown fields of an
//! answer are ignored (a newer service may add some); a missing documented field is a
//! [`ClientError::Decode`].

use reqwest::header::RETRY_AFTER;
use reqwest::{Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use turnstile_admission::{ActualUsage, BreakerTransition, Estimate, Evidence, Outcome, Rejection};

use crate::error::ClientError;

/// `POST /v1/admissions`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AdmissionBody<'a> {
    pub provider_id: &'a str,
    pub budget_id: &'a str,
    pub estimate: &'a Estimate,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

/// A granted admission.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LeaseAnswer {
    pub lease_id: String,
    pub expires_at_epoch_ms: u64,
    pub ttl_ms: u64,
    pub evidence: Evidence,
}

/// `POST /v1/leases/{id}/release`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReleaseBody {
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual_usage: Option<UsageBody>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UsageBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl ReleaseBody {
    pub fn new(outcome: Outcome, usage: ActualUsage) -> Self {
        let (outcome, retry_after_ms) = match outcome {
            Outcome::Success => ("success", None),
            Outcome::Failure => ("failure", None),
            Outcome::RetryAfter { retry_after_ms } => ("retry-after", Some(retry_after_ms)),
            Outcome::None => ("none", None),
        };
        let actual_usage = (!usage.is_none()).then(|| UsageBody {
            tokens: usage.tokens,
            cost_usd: usage.cost_usd(),
        });
        ReleaseBody {
            outcome,
            retry_after_ms,
            actual_usage,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Released {
    #[allow(dead_code)]
    pub released: bool,
    pub breaker_transitions: Vec<BreakerTransition>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HeartbeatAnswer {
    pub expires_at_epoch_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BudgetReleased {
    pub released: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RetryAfterBody {
    pub retry_after_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Paused {
    pub paused_until_epoch_ms: u64,
}

/// The service's error body.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    field: Option<String>,
    #[serde(default)]
    maximum: Option<u64>,
}

/// Reads a success as `T`, anything else as its [`ClientError`].
pub(crate) async fn read<T: DeserializeOwned>(response: Response) -> Result<T, ClientError> {
    let status = response.status();
    if status.is_success() {
        let bytes = response.bytes().await?;
        return serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode(e.to_string()));
    }
    let header_hint = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|seconds| seconds.saturating_mul(1_000));
    let bytes = response.bytes().await?;
    Err(failure(status, header_hint, &bytes))
}

/// The error of a non-success answer (see `error.rs`).
pub(crate) fn failure(status: StatusCode, header_hint: Option<u64>, body: &[u8]) -> ClientError {
    if let Ok(rejection) = serde_json::from_slice::<Rejection>(body) {
        return ClientError::Rejected {
            reason: rejection.reason,
            retryable: rejection.retryable,
            retry_after_ms: rejection.evidence.retry_after_ms.or(header_hint),
            evidence: Box::new(rejection.evidence),
        };
    }
    if status == StatusCode::UNAUTHORIZED {
        return ClientError::Unauthorized;
    }
    let parsed = serde_json::from_slice::<ErrorBody>(body).ok();
    let (code, message, field, maximum) = match parsed {
        Some(body) => (body.error, body.message, body.field, body.maximum),
        None => (
            String::from("unknown"),
            String::from_utf8_lossy(body).chars().take(200).collect(),
            None,
            None,
        ),
    };
    if status == StatusCode::NOT_FOUND {
        return ClientError::NotFound { code, message };
    }
    ClientError::Status {
        status: status.as_u16(),
        code,
        message,
        field,
        maximum,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstile_admission::Reason;

    #[test]
    fn a_release_body_names_the_outcome_and_only_the_usage_reported() {
        let body = ReleaseBody::new(
            Outcome::RetryAfter {
                retry_after_ms: 1500,
            },
            ActualUsage::none(),
        );
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"outcome":"retry-after","retryAfterMs":1500}"#
        );
        let usage = ActualUsage::none().tokens(7).with_cost_usd(0.25).unwrap();
        let body = ReleaseBody::new(Outcome::Success, usage);
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"outcome":"success","actualUsage":{"tokens":7,"costUsd":0.25}}"#
        );
    }

    #[test]
    fn a_refusal_body_is_a_rejection_whatever_its_status_and_an_error_body_is_not() {
        let refusal = serde_json::to_vec(&Rejection::refusal(Reason::QueueFull, 2)).unwrap();
        match failure(StatusCode::TOO_MANY_REQUESTS, Some(3_000), &refusal) {
            ClientError::Rejected {
                reason,
                retryable,
                retry_after_ms,
                ..
            } => assert_eq!(
                (reason, retryable, retry_after_ms),
                (Reason::QueueFull, true, Some(3_000))
            ),
            other => panic!("{other:?}"),
        }
        let body = br#"{"error":"invalid-request","message":"deadlineMs must be at most 5","field":"deadlineMs","maximum":5}"#;
        let above = failure(StatusCode::UNPROCESSABLE_ENTITY, None, body);
        match &above {
            ClientError::Status {
                status,
                code,
                field,
                ..
            } => {
                assert_eq!(
                    (*status, code.as_str(), field.as_deref()),
                    (422, "invalid-request", Some("deadlineMs"))
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            (
                above.maximum_of("deadlineMs"),
                above.maximum_of("retryAfterMs")
            ),
            (Some(5), None)
        );
        let missing = br#"{"error":"unknown-lease","message":"no such lease"}"#;
        assert_eq!(
            failure(StatusCode::NOT_FOUND, None, missing).not_found_code(),
            Some("unknown-lease")
        );
        assert!(matches!(
            failure(
                StatusCode::UNAUTHORIZED,
                None,
                br#"{"error":"unauthorized","message":"x"}"#
            ),
            ClientError::Unauthorized
        ));
    }
}
