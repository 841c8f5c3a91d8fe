//! The HTTP status of every admission reason, and the `Retry-After` header.
//!
//! The rule: the status says what kind of condition answered, `retryable` in the body (from
//! [`Reason::is_retryable_rejection`]) says whether the same request may succeed later.
//!
//! | reason | status |
//! |---|---|
//! | `admitted` | 200 |
//! | `queue-full`, `queue-timeout`, `deadline-exceeded`, `deadline-unreachable`, `too-many-budgets` | 429 + `Retry-After` |
//! | `retry-after`, `circuit-open`, `coordination-unavailable` | 503 + `Retry-After` |
//! | `disabled` | 403 |
//! | `cancelled` | 409 (only a client that already left can cause it) |
//! | `concurrency`, `requests-per-minute`, `tokens-per-second` | 422: as a *rejection* these mean the request can never fit (zero ceiling, estimate above a bucket's capacity); a rate limit that binds now defers, and a deferral that runs out of time ends as `queue-timeout` or `deadline-exceeded` (429). A *retryable* one is a `deadlineMs: 0` request that was not free now: 429 + `Retry-After` ([`status_for_rejection`]) |
//! | `attempts`, `cost`, `tokens`, `unknown-cost`, `unknown-tokens` | 422 (the budget of this `budgetId` cannot pay for the request) |
//! | `invalid-estimate`, `batch-size`, `request-too-large`, `too-many-items`, `retained-work`, `unknown-retained-work`, `unconfigured-provider` | 422 |
//!
//! `Retry-After` is whole seconds, rounded up from the evidence's `retryAfterMs` hint (the real
//! remaining time when the blocking condition has a known end; an estimate for `queue-full`),
//! at least 1; the body keeps the millisecond hint.

use axum::http::StatusCode;
use turnstile_admission::{Millis, Reason, Rejection};

/// The status of an admission answer with this reason.
pub fn status_for(reason: Reason) -> StatusCode {
    match reason {
        Reason::Admitted => StatusCode::OK,
        Reason::QueueFull
        | Reason::QueueTimeout
        | Reason::DeadlineExceeded
        | Reason::DeadlineUnreachable
        | Reason::TooManyBudgets => StatusCode::TOO_MANY_REQUESTS,
        Reason::RetryAfter | Reason::CircuitOpen | Reason::CoordinationUnavailable => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        Reason::Disabled => StatusCode::FORBIDDEN,
        Reason::Cancelled => StatusCode::CONFLICT,
        Reason::Concurrency
        | Reason::RequestsPerMinute
        | Reason::TokensPerSecond
        | Reason::Attempts
        | Reason::Cost
        | Reason::Tokens
        | Reason::UnknownCost
        | Reason::UnknownTokens
        | Reason::InvalidEstimate
        | Reason::BatchSize
        | Reason::RequestTooLarge
        | Reason::TooManyItems
        | Reason::RetainedWork
        | Reason::UnknownRetainedWork
        | Reason::UnconfiguredProvider => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

/// The status of a rejection: its reason's, except that a retryable refusal with a reason that
/// otherwise means "can never fit" (a zero-wait request that was not free now) is a 429.
pub fn status_for_rejection(rejection: &Rejection) -> StatusCode {
    match status_for(rejection.reason) {
        StatusCode::UNPROCESSABLE_ENTITY if rejection.retryable => StatusCode::TOO_MANY_REQUESTS,
        status => status,
    }
}

/// Whether an answer with this status carries a `Retry-After` header.
pub fn carries_retry_after(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE
}

/// `Retry-After` seconds for a millisecond hint: rounded up, at least 1.
pub fn retry_after_seconds(hint_ms: Option<Millis>) -> u64 {
    hint_ms.map_or(1, |ms| ms.div_ceil(1000).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_a_status_and_retryable_ones_are_never_422() {
        for reason in Reason::ALL {
            let status = status_for(reason);
            if reason.is_retryable_rejection() {
                assert!(carries_retry_after(status), "{reason}");
            }
        }
        assert_eq!(retry_after_seconds(None), 1);
        assert_eq!(retry_after_seconds(Some(1)), 1);
        assert_eq!(retry_after_seconds(Some(1001)), 2);
    }
}
