//! Typed API errors: every failure the HTTP surface can answer, with its status and a stable
//! machine-readable code. Bodies are `{"error": code, "message": text, "field"?: name,
//! "maximum"?: number}`: `maximum` is the service's bound when a number is above it
//! ([`ApiError::AboveMaximum`]), so a client can retry at the bound without reading the text.
//!
//! Invariant: no variant answers 5xx for anything a client sent; 5xx means the service itself
//! (store, shutdown, a handler that panicked) could not answer.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use turnstile_admission::{RegistryError, RolloutError};
use turnstile_shell::DriverError;

/// One failure of an API call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// No key, or a key nobody knows.
    #[error("missing or unknown API key")]
    Unauthorized,
    /// The key is valid but may not do this.
    #[error("{0}")]
    Forbidden(&'static str),
    /// The route, lease or workspace does not exist (or is not the caller's).
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
    /// The route exists but not with this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The body is not JSON.
    #[error("request body is not valid JSON: {0}")]
    MalformedJson(String),
    /// The body is JSON but a field is missing, unknown, of the wrong type or out of range.
    #[error("{message}")]
    InvalidRequest { field: String, message: String },
    /// A number of the request is above one of the service's settings: 422 `invalid-request`
    /// naming the field, with the bound as `maximum`.
    #[error("{field} must be at most {maximum} ({setting})")]
    AboveMaximum {
        field: &'static str,
        maximum: u64,
        setting: &'static str,
    },
    /// The body exceeds the configured cap.
    #[error("request body exceeds the configured limit")]
    BodyTooLarge,
    /// The body did not arrive in time: whole within `http.body_read_timeout_ms`, or at
    /// `http.body_min_bytes_per_sec` at least.
    #[error("{0}")]
    BodyTimeout(&'static str),
    /// A body was sent without `Content-Type: application/json`.
    #[error("the request body must be sent as Content-Type: application/json")]
    UnsupportedMediaType,
    /// The key has too many requests (or admissions) in flight.
    #[error("{0}")]
    KeyBusy(&'static str),
    /// The general connection pool is full; this connection is kept for operators.
    #[error("the service is at its connection limit; only health, metrics and admin calls are served on this connection")]
    Overloaded,
    /// A profile revision reused with different limits.
    #[error("{0}")]
    Conflict(String),
    /// The workspace's state does not allow this now (a rollout runs, or cannot run here);
    /// `code` says which.
    #[error("{message}")]
    StateConflict { code: &'static str, message: String },
    /// A profile that breaks a limits rule.
    #[error("{message}")]
    InvalidDefinition { field: String, message: String },
    /// The service is shutting down.
    #[error("the service is shutting down")]
    ShuttingDown,
    /// The durable store failed; the request may not have taken effect.
    #[error("the durable store failed")]
    Storage,
    /// The handler panicked (a bug): caught, counted and logged ([`crate::http::panics`]); the
    /// request may or may not have taken effect.
    #[error("the service failed while answering this request (counted in turnstile_http_handler_panics_total and logged)")]
    Internal,
    /// Replicas: a key or profile write needs the shared store (Redis), which did not answer;
    /// nothing was written. Retryable.
    #[error("{0}")]
    CoordinationUnavailable(String),
    /// Replicas: a key or profile write was sent to the shared store (Redis), which did not
    /// answer: it applied before this answer or never will (its deadline in Redis's clock has
    /// passed); the feed shows which once Redis answers.
    #[error("{0}")]
    CoordinationOutcomeUnknown(String),
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    maximum: Option<u64>,
}

impl ApiError {
    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound { code, .. } => code,
            ApiError::MethodNotAllowed => "method-not-allowed",
            ApiError::MalformedJson(_) => "malformed-json",
            ApiError::InvalidRequest { .. } | ApiError::AboveMaximum { .. } => "invalid-request",
            ApiError::BodyTooLarge => "body-too-large",
            ApiError::BodyTimeout(_) => "body-timeout",
            ApiError::UnsupportedMediaType => "unsupported-media-type",
            ApiError::KeyBusy(_) => "key-busy",
            ApiError::Overloaded => "overloaded",
            ApiError::Conflict(_) | ApiError::InvalidDefinition { .. } => "invalid-definition",
            ApiError::StateConflict { code, .. } => code,
            ApiError::ShuttingDown => "shutting-down",
            ApiError::Storage => "storage-error",
            ApiError::Internal => "internal-error",
            ApiError::CoordinationUnavailable(_) => "coordination-unavailable",
            ApiError::CoordinationOutcomeUnknown(_) => "coordination-outcome-unknown",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::MalformedJson(_) => StatusCode::BAD_REQUEST,
            ApiError::InvalidRequest { .. }
            | ApiError::AboveMaximum { .. }
            | ApiError::InvalidDefinition { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::KeyBusy(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Conflict(_) | ApiError::StateConflict { .. } => StatusCode::CONFLICT,
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::ShuttingDown
            | ApiError::Storage
            | ApiError::CoordinationUnavailable(_)
            | ApiError::CoordinationOutcomeUnknown(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// An invalid field with a message.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidRequest {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn unknown_lease() -> Self {
        ApiError::NotFound {
            code: "unknown-lease",
            message: "no such lease: it was released, reclaimed after its TTL, or never granted"
                .into(),
        }
    }

    pub fn no_profile() -> Self {
        ApiError::NotFound {
            code: "no-profile",
            message: "no admission profile is registered for this workspace".into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (field, maximum) = match &self {
            ApiError::InvalidRequest { field, .. } | ApiError::InvalidDefinition { field, .. } => {
                (Some(field.as_str()), None)
            }
            ApiError::AboveMaximum { field, maximum, .. } => (Some(*field), Some(*maximum)),
            _ => (None, None),
        };
        let body = ErrorBody {
            error: self.code(),
            message: self.to_string(),
            field,
            maximum,
        };
        let mut response = (self.status(), Json(body)).into_response();
        match &self {
            ApiError::Unauthorized => {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::BodyTooLarge | ApiError::BodyTimeout(_) | ApiError::UnsupportedMediaType => {
                // The rest of the body is never read, so the connection cannot carry another
                // request; saying so keeps a client from reusing it (and racing the close).
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            ApiError::KeyBusy(_) | ApiError::Overloaded => {
                // Refused before the body was read: close, so a flood does not keep sockets.
                let headers = response.headers_mut();
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::ShuttingDown
            | ApiError::Storage
            | ApiError::CoordinationUnavailable(_)
            | ApiError::CoordinationOutcomeUnknown(_) => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

impl From<RegistryError> for ApiError {
    /// A refused registration or an operation on a workspace without a profile.
    fn from(error: RegistryError) -> Self {
        match error {
            RegistryError::Conflict { .. } | RegistryError::PrincipalConflict { .. } => {
                ApiError::Conflict(error.to_string())
            }
            RegistryError::RolloutRunning => ApiError::StateConflict {
                code: "rollout-running",
                message: error.to_string(),
            },
            RegistryError::InvalidProfile(profile_error) => ApiError::InvalidDefinition {
                field: profile_error.field().to_owned(),
                message: format!("invalid-definition: {profile_error}"),
            },
            RegistryError::Undigestable => ApiError::InvalidDefinition {
                field: "body".into(),
                message: error.to_string(),
            },
            RegistryError::UnknownWorkspace => ApiError::no_profile(),
            RegistryError::UnconfiguredProvider => ApiError::NotFound {
                code: "unconfigured-provider",
                message: "the workspace profile does not configure this provider".into(),
            },
        }
    }
}

impl From<RolloutError> for ApiError {
    /// A refused rollout operation (issue 33): one at a time (409 `rollout-running`, or
    /// `rollout-draining` while the last canary's slice holds work), none running (404
    /// `no-rollout`), a bad share or a candidate that is current already (422
    /// `invalid-request` naming the field); a candidate that cannot be registered answers as a
    /// registration does.
    fn from(error: RolloutError) -> Self {
        match error {
            RolloutError::UnknownWorkspace => ApiError::no_profile(),
            RolloutError::AlreadyRunning => ApiError::StateConflict {
                code: "rollout-running",
                message: "a rollout already runs in this workspace: promote or abort it first"
                    .into(),
            },
            RolloutError::Draining => ApiError::StateConflict {
                code: "rollout-draining",
                message: "the last canary's principals still hold leases or waiters; try again \
                          shortly"
                    .into(),
            },
            RolloutError::NoRollout => ApiError::NotFound {
                code: "no-rollout",
                message: "no rollout runs in this workspace".into(),
            },
            RolloutError::CandidateIsCurrent { revision } => ApiError::invalid(
                "revision",
                format!("the candidate revision {revision} is the current revision"),
            ),
            RolloutError::InvalidShare => {
                ApiError::invalid("canaryShare", "canaryShare must be a number from 0 to 1")
            }
            RolloutError::Registry(error) => ApiError::from(error),
        }
    }
}

impl From<DriverError> for ApiError {
    fn from(error: DriverError) -> Self {
        match error {
            DriverError::UnknownLease => ApiError::unknown_lease(),
            DriverError::Registry(error) => ApiError::from(error),
            DriverError::Rollout(error) => ApiError::from(error),
            DriverError::Journal(_) => ApiError::Storage,
            DriverError::ShuttingDown => ApiError::ShuttingDown,
        }
    }
}
