//! The closed vocabularies of admission: decisions, reasons and breaker states.
//!
//! Serde names are exactly the specification's (REFERENCE §5). A reason says *why*; whether a
//! rejection may be retried by the caller follows from the reason alone
//! ([`Reason::is_retryable_rejection`]), so no call site can disagree with another.

use serde::{Deserialize, Serialize};

/// The three answers admission gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// The request holds a lease and may call the provider now.
    Admit,
    /// The request waits in its lane's queue.
    Defer,
    /// The request is refused; it never reached the provider.
    Reject,
}

impl Decision {
    /// The spec's name, for metrics and span attributes.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Admit => "admit",
            Decision::Defer => "defer",
            Decision::Reject => "reject",
        }
    }
}

/// Why a decision was taken. A closed vocabulary: safe as a metric dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The request was admitted.
    Admitted,
    /// The principal is not named by the profile.
    Disabled,
    /// The caller cancelled the waiting request.
    Cancelled,
    /// The request's deadline passed before it could be admitted.
    DeadlineExceeded,
    /// A scope holds as many leases as its `concurrency` allows (or allows none).
    Concurrency,
    /// A request-rate bucket is empty (or its rate is 0).
    RequestsPerMinute,
    /// A token-rate bucket holds too few tokens for the estimate (or can never hold
    /// enough).
    TokensPerSecond,
    /// The invocation's attempt budget (`maxAttempts`) would be exceeded.
    Attempts,
    /// `estimate.batchSize` is above `maxBatchSize`.
    BatchSize,
    /// The invocation's money budget (`maxCostUsd`) would be exceeded.
    Cost,
    /// A money budget applies without `allowUnknownCost` and the request has no
    /// `estimate.costUsd`.
    UnknownCost,
    /// The invocation's token budget (`maxTokens`) would be exceeded.
    Tokens,
    /// A token budget applies and the request has no `estimate.tokens`.
    UnknownTokens,
    /// A queue is at its `maxQueueLength`, or the principal at its queue share.
    QueueFull,
    /// The request waited as long as a scope's `maxQueueWaitMs` allows.
    QueueTimeout,
    /// The estimate is malformed (not a finite count, or above 2^53 − 1).
    InvalidEstimate,
    /// `estimate.requestBytes` is above `maxRequestBytes`.
    RequestTooLarge,
    /// `estimate.items` is above `maxItems`.
    TooManyItems,
    /// `estimate.retainedWork` is above `maxRetainedWork`.
    RetainedWork,
    /// `maxRetainedWork` applies and the request has no `estimate.retainedWork`.
    UnknownRetainedWork,
    /// The provider asked to be left alone (Retry-After) and its pause has not ended.
    RetryAfter,
    /// The provider's circuit breaker is open.
    CircuitOpen,
    /// The profile does not configure the provider.
    UnconfiguredProvider,
    /// The workspace holds as many open budgets (invocations) as its bound allows; this request
    /// would open one more. Not in the reference vocabulary: a bound of this implementation.
    TooManyBudgets,
    /// Replicas share this lane's limits through a store that is unreachable, and the lane
    /// fails closed while it is (a money or token budget, or a `closed` degraded share). Not in
    /// the reference vocabulary: a condition of replicated deployments (`docs/replicas.md`).
    CoordinationUnavailable,
    /// The request's predicted wait (its place in the lane's order × the lane's recent service
    /// interval, or a bucket's refill) exceeds its deadline: refused at once rather than left
    /// to expire. Not in the reference vocabulary (`docs/admission.md`).
    DeadlineUnreachable,
}

impl Reason {
    /// Every reason, in the specification's order.
    pub const ALL: [Reason; 26] = [
        Reason::Admitted,
        Reason::Disabled,
        Reason::Cancelled,
        Reason::DeadlineExceeded,
        Reason::Concurrency,
        Reason::RequestsPerMinute,
        Reason::TokensPerSecond,
        Reason::Attempts,
        Reason::BatchSize,
        Reason::Cost,
        Reason::UnknownCost,
        Reason::Tokens,
        Reason::UnknownTokens,
        Reason::QueueFull,
        Reason::QueueTimeout,
        Reason::InvalidEstimate,
        Reason::RequestTooLarge,
        Reason::TooManyItems,
        Reason::RetainedWork,
        Reason::UnknownRetainedWork,
        Reason::RetryAfter,
        Reason::CircuitOpen,
        Reason::UnconfiguredProvider,
        Reason::TooManyBudgets,
        Reason::CoordinationUnavailable,
        Reason::DeadlineUnreachable,
    ];

    /// The spec's kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Admitted => "admitted",
            Reason::Disabled => "disabled",
            Reason::Cancelled => "cancelled",
            Reason::DeadlineExceeded => "deadline-exceeded",
            Reason::Concurrency => "concurrency",
            Reason::RequestsPerMinute => "requests-per-minute",
            Reason::TokensPerSecond => "tokens-per-second",
            Reason::Attempts => "attempts",
            Reason::BatchSize => "batch-size",
            Reason::Cost => "cost",
            Reason::UnknownCost => "unknown-cost",
            Reason::Tokens => "tokens",
            Reason::UnknownTokens => "unknown-tokens",
            Reason::QueueFull => "queue-full",
            Reason::QueueTimeout => "queue-timeout",
            Reason::InvalidEstimate => "invalid-estimate",
            Reason::RequestTooLarge => "request-too-large",
            Reason::TooManyItems => "too-many-items",
            Reason::RetainedWork => "retained-work",
            Reason::UnknownRetainedWork => "unknown-retained-work",
            Reason::RetryAfter => "retry-after",
            Reason::CircuitOpen => "circuit-open",
            Reason::UnconfiguredProvider => "unconfigured-provider",
            Reason::TooManyBudgets => "too-many-budgets",
            Reason::CoordinationUnavailable => "coordination-unavailable",
            Reason::DeadlineUnreachable => "deadline-unreachable",
        }
    }

    /// Whether a *rejection* with this reason may succeed if the caller tries again later.
    ///
    /// Queue overflow and queue expiry are load conditions and pass; everything that follows
    /// from the request and the profile (bounds, budgets, never-fitting buckets, a missing
    /// provider, a passed deadline, a cancellation) is permanent.
    pub fn is_retryable_rejection(self) -> bool {
        matches!(
            self,
            Reason::QueueFull
                | Reason::QueueTimeout
                | Reason::RetryAfter
                | Reason::CircuitOpen
                | Reason::TooManyBudgets
                | Reason::CoordinationUnavailable
                | Reason::DeadlineUnreachable
        )
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a provider's circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BreakerState {
    /// Calls pass; failures are counted.
    #[default]
    Closed,
    /// Calls are refused until the open period ends.
    Open,
    /// A few probe calls pass; their outcome closes or opens the breaker again.
    HalfOpen,
}

impl BreakerState {
    /// The spec's name, for metrics and span attributes.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_names_match_as_str() {
        for reason in Reason::ALL {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
        }
        assert_eq!(
            serde_json::to_string(&BreakerState::HalfOpen).unwrap(),
            "\"half-open\""
        );
    }
}
