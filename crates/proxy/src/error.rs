//! Answers the proxy makes itself, in the provider's own error format, so the official SDKs
//! raise their usual exceptions and apply their usual retry rules.
//!
//! - OpenAI: `{"error": {"message", "type", "param", "code"}}`.
//! - Anthropic: `{"type": "error", "error": {"type", "message"}}`.
//!
//! Refusals carry `retry-after` (whole seconds, rounded up) and `retry-after-ms` (the core's
//! real remaining time) when waiting can help, and `x-should-retry: false` when it cannot: the
//! SDKs obey that header before any status rule. Every proxy-made answer names the turnstile
//! reason in `x-turnstile-reason` (and `code` for OpenAI), so it is never mistaken for a
//! provider failure.
//!
//! | condition | status | OpenAI `type` / Anthropic `type` | retry headers |
//! |---|---|---|---|
//! | queue-full, queue-timeout, deadline-exceeded, deadline-unreachable (retryable) | 429 | `rate_limit_error` | `retry-after`, `retry-after-ms` |
//! | retry-after (lane paused after an upstream 429) | 429 | `rate_limit_error` | `retry-after`, `retry-after-ms` |
//! | circuit-open | 503 | `api_error` / `overloaded_error` | `retry-after`, `retry-after-ms` |
//! | coordination-unavailable (replicas: Redis unreachable and the lane fails closed) | 503 | `api_error` / `overloaded_error` | `retry-after`, `retry-after-ms` |
//! | attempts, cost, tokens, unknown-cost, unknown-tokens (budget) | 429 | `insufficient_quota` / `rate_limit_error` | `x-should-retry: false` |
//! | disabled | 403 | `permission_error` | `x-should-retry: false` |
//! | can never fit (concurrency, rates, request size, invalid estimate, …) | 400 | `invalid_request_error` | `x-should-retry: false` |
//! | unknown model | 404 | `invalid_request_error` (code `model_not_found`) / `not_found_error` | `x-should-retry: false` |
//! | malformed body, bad field, bad header | 400 | `invalid_request_error` | `x-should-retry: false` |
//! | body over `proxy.max_request_bytes` | 413 | `invalid_request_error` / `request_too_large` | `x-should-retry: false` |
//! | no key / unknown key | 401 | `authentication_error` | |
//! | admin key, workspace without a profile | 403 | `permission_error` | `x-should-retry: false` |
//! | upstream unreachable (never sent) | 502 | `api_error` | (breaker failure) |
//! | upstream broke off after the request was sent, or its head was too slow | 502 / 504 | `api_error` | `x-should-retry: false` (breaker failure) |
//! | an upstream 5xx (forwarded as is) | the upstream's | the upstream's body | `x-should-retry: false` unless the upstream said otherwise |
//! | service shutting down | 503 | `api_error` / `overloaded_error` | `retry-after: 1` |

use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use turnstile_admission::{Reason, Rejection};

use crate::format::ApiFormat;

/// The header naming the turnstile reason of a proxy-made answer.
pub const REASON_HEADER: &str = "x-turnstile-reason";

/// A proxy-made error answer.
#[derive(Debug, Clone)]
pub struct ProxyError {
    pub status: StatusCode,
    /// OpenAI's `error.type`.
    pub openai_type: &'static str,
    /// Anthropic's `error.type`.
    pub anthropic_type: &'static str,
    pub message: String,
    pub param: Option<&'static str>,
    /// OpenAI's `error.code` and `x-turnstile-reason`.
    pub code: &'static str,
    /// `Some(ms)`: `retry-after` / `retry-after-ms`; `None`: `x-should-retry: false` unless
    /// `retry` says otherwise.
    pub retry_after_ms: Option<u64>,
    /// Whether an SDK may retry (false adds `x-should-retry: false`).
    pub retry: bool,
}

impl ProxyError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let (openai_type, anthropic_type) = match status.as_u16() {
            400 | 404 | 413 => ("invalid_request_error", "invalid_request_error"),
            401 => ("authentication_error", "authentication_error"),
            403 => ("permission_error", "permission_error"),
            429 => ("rate_limit_error", "rate_limit_error"),
            503 => ("api_error", "overloaded_error"),
            _ => ("api_error", "api_error"),
        };
        ProxyError {
            status,
            openai_type,
            anthropic_type,
            message: message.into(),
            param: None,
            code,
            retry_after_ms: None,
            retry: false,
        }
    }

    pub fn invalid(param: Option<&'static str>, message: impl Into<String>) -> Self {
        ProxyError {
            param,
            ..Self::new(StatusCode::BAD_REQUEST, "invalid-request", message)
        }
    }

    pub fn unknown_model(model: &str) -> Self {
        let shown: String = model.chars().take(128).collect();
        let mut error = Self::new(
            StatusCode::NOT_FOUND,
            "model_not_found",
            format!("The model `{shown}` does not exist or is not routed by this gateway"),
        );
        error.anthropic_type = "not_found_error";
        error.param = Some("model");
        error
    }

    pub fn too_large(limit: usize) -> Self {
        let mut error = Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            format!("the request body is larger than {limit} bytes (proxy.max_request_bytes)"),
        );
        error.anthropic_type = "request_too_large";
        error
    }

    pub fn body_timeout() -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "body-timeout",
            "the request body did not arrive in time",
        )
    }

    pub fn unauthorized() -> Self {
        let mut error = Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or unknown API key (a turnstile principal key, as Bearer or x-api-key)",
        );
        error.retry = true;
        error
    }

    pub fn forbidden(message: &'static str) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn shutting_down() -> Self {
        let mut error = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting-down",
            "the gateway is shutting down",
        );
        error.retry_after_ms = Some(1000);
        error.retry = true;
        error
    }

    /// An upstream failure. `resendable`: the request never reached the upstream, so an SDK
    /// may send it again; otherwise `x-should-retry: false` (a second call could be billed
    /// twice).
    pub fn upstream(
        status: StatusCode,
        code: &'static str,
        message: &'static str,
        resendable: bool,
    ) -> Self {
        let mut error = Self::new(status, code, message);
        error.retry = resendable;
        error
    }

    /// An admission refusal.
    pub fn refused(rejection: &Rejection) -> Self {
        let reason = rejection.reason;
        let hint = rejection.evidence.retry_after_ms;
        let message = format!("turnstile admission refused this call: {reason}");
        let code = reason.as_str();
        let mut error = match reason {
            Reason::CircuitOpen | Reason::CoordinationUnavailable => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
            }
            Reason::Disabled => Self::new(StatusCode::FORBIDDEN, code, message),
            Reason::Attempts
            | Reason::Cost
            | Reason::Tokens
            | Reason::UnknownCost
            | Reason::UnknownTokens => {
                let mut error = Self::new(StatusCode::TOO_MANY_REQUESTS, code, message);
                error.openai_type = "insufficient_quota";
                error
            }
            _ if rejection.retryable => Self::new(StatusCode::TOO_MANY_REQUESTS, code, message),
            _ => Self::new(StatusCode::BAD_REQUEST, code, message),
        };
        if rejection.retryable {
            error.retry = true;
            error.retry_after_ms = Some(hint.unwrap_or(1000));
        }
        error
    }

    /// The answer in `format`.
    pub fn response(&self, format: ApiFormat) -> Response {
        let body = match format {
            ApiFormat::Openai => json!({"error": {
                "message": self.message,
                "type": self.openai_type,
                "param": self.param,
                "code": self.code,
            }}),
            ApiFormat::Anthropic => json!({"type": "error", "error": {
                "type": self.anthropic_type,
                "message": self.message,
            }}),
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(
            HeaderName::from_static(REASON_HEADER),
            HeaderValue::from_static(self.code),
        );
        if let Some(ms) = self.retry_after_ms {
            retry_headers(headers, ms);
        }
        if !self.retry {
            headers.insert(
                HeaderName::from_static("x-should-retry"),
                HeaderValue::from_static("false"),
            );
        }
        response
    }
}

/// Sets `retry-after` (whole seconds, rounded up, at least 1) and `retry-after-ms`.
pub fn retry_headers(headers: &mut axum::http::HeaderMap, ms: u64) {
    let seconds = ms.div_ceil(1000).max(1);
    headers.insert(axum::http::header::RETRY_AFTER, HeaderValue::from(seconds));
    headers.insert(
        HeaderName::from_static("retry-after-ms"),
        HeaderValue::from(ms),
    );
}
