//! The closed vocabularies of evaluation results (EVALUATOR.md), with the spec's serde names.
//!
//! - [`Status`]: the status of an adapter observation, an attempt and a `DecisionResult`.
//! - [`AttemptReason`]: why an attempt or an evaluation ended as it did.
//! - [`RulesetStatus`] / [`ResultReason`]: the status and reason of a `RulesetResult`.
//! - [`Termination`]: which signal cut an attempt short.
//! - [`DispatchCertainty`]: whether a failed call reached the provider.
//!
//! [`map_admission_reason`] is the one place where an admission rejection becomes an attempt
//! reason.

use serde::{Deserialize, Serialize};
use turnstile_admission::Reason;

/// Status of an observation, an attempt and an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Success,
    Abstained,
    Error,
    Unsupported,
    Cancelled,
}

/// Why an attempt or an evaluation ended as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttemptReason {
    None,
    Timeout,
    NetworkTransient,
    RateLimited,
    Overloaded,
    ServiceError,
    Authentication,
    InvalidRequest,
    InvalidOutput,
    MissingConfidence,
    ConfidenceProfileMismatch,
    LowConfidence,
    BudgetExhausted,
    ExecutorUnavailable,
    UnsupportedCapability,
    Cancelled,
    ExecutionUncertain,
    /// The receipt could not be written before a dispatch, so nothing was sent (our addition:
    /// the spec's evaluator has no failing store).
    ReceiptUnavailable,
}

impl AttemptReason {
    /// Reasons that a retry of the same target may cure.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            AttemptReason::Timeout
                | AttemptReason::NetworkTransient
                | AttemptReason::RateLimited
                | AttemptReason::Overloaded
                | AttemptReason::ServiceError
        )
    }

    /// Reasons that say the provider itself is unhealthy (count toward its breaker).
    pub fn is_provider_failure(self) -> bool {
        self.is_retryable()
    }
}

/// Status of a `RulesetResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RulesetStatus {
    /// Rules matched and agreed.
    Completed,
    /// No rule matched: `defaultOutcome`.
    Defaulted,
    /// An evaluation failed or outcomes conflicted: `failureOutcome`.
    Review,
    /// Validation failed, or an error-policy conflict, or the total deadline passed.
    Error,
    /// The caller's signal fired.
    Cancelled,
}

/// Reason of a `RulesetResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResultReason {
    None,
    NoMatch,
    EvaluationFailed,
    ConflictingOutcomes,
    InvalidDefinition,
    DigestMismatch,
    InvalidInput,
    InvalidOutput,
    Cancelled,
    Timeout,
    /// A call may have reached the provider and its outcome is unknown (receipt-backed runs).
    ExecutionUncertain,
    /// The invocation id was used before with different input or pins.
    ReplayMismatch,
    /// The receipt store failed, so the run stopped before dispatching more (our addition).
    ReceiptUnavailable,
}

/// Which signal ended an attempt early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Termination {
    /// The caller's signal.
    CallerCancelled,
    /// The invocation's total deadline.
    TotalDeadline,
    /// The target's per-attempt timeout.
    TargetTimeout,
}

/// Whether a call reached the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchCertainty {
    /// Never sent (admission rejection, connection refused).
    NotSent,
    /// The provider answered with a terminal response.
    TerminalResponse,
    /// Sent, outcome unknown (a timeout after sending).
    Unknown,
}

/// The attempt status and reason for an admission rejection (EVALUATOR.md, step 4).
pub fn map_admission_reason(reason: Reason) -> (Status, AttemptReason) {
    match reason {
        Reason::Cancelled => (Status::Cancelled, AttemptReason::Cancelled),
        Reason::DeadlineExceeded | Reason::DeadlineUnreachable | Reason::QueueTimeout => {
            (Status::Error, AttemptReason::Timeout)
        }
        Reason::RequestsPerMinute | Reason::TokensPerSecond | Reason::RetryAfter => {
            (Status::Error, AttemptReason::RateLimited)
        }
        Reason::Attempts
        | Reason::Cost
        | Reason::UnknownCost
        | Reason::Tokens
        | Reason::UnknownTokens => (Status::Error, AttemptReason::BudgetExhausted),
        Reason::Admitted
        | Reason::Disabled
        | Reason::Concurrency
        | Reason::BatchSize
        | Reason::QueueFull
        | Reason::TooManyBudgets
        | Reason::InvalidEstimate
        | Reason::RequestTooLarge
        | Reason::TooManyItems
        | Reason::RetainedWork
        | Reason::UnknownRetainedWork
        | Reason::CircuitOpen
        | Reason::CoordinationUnavailable
        | Reason::UnconfiguredProvider => (Status::Error, AttemptReason::Overloaded),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_reasons_map_as_specified() {
        let cases = [
            (Reason::Cancelled, AttemptReason::Cancelled),
            (Reason::DeadlineExceeded, AttemptReason::Timeout),
            (Reason::QueueTimeout, AttemptReason::Timeout),
            (Reason::RequestsPerMinute, AttemptReason::RateLimited),
            (Reason::TokensPerSecond, AttemptReason::RateLimited),
            (Reason::RetryAfter, AttemptReason::RateLimited),
            (Reason::Attempts, AttemptReason::BudgetExhausted),
            (Reason::Cost, AttemptReason::BudgetExhausted),
            (Reason::UnknownCost, AttemptReason::BudgetExhausted),
            (Reason::Tokens, AttemptReason::BudgetExhausted),
            (Reason::UnknownTokens, AttemptReason::BudgetExhausted),
            (Reason::BatchSize, AttemptReason::Overloaded),
            (Reason::QueueFull, AttemptReason::Overloaded),
            (Reason::TooManyBudgets, AttemptReason::Overloaded),
            (Reason::UnconfiguredProvider, AttemptReason::Overloaded),
        ];
        for (admission, expected) in cases {
            assert_eq!(map_admission_reason(admission).1, expected, "{admission}");
        }
    }

    #[test]
    fn serde_names_are_kebab_case() {
        let json = serde_json::to_string(&AttemptReason::ConfidenceProfileMismatch).unwrap();
        assert_eq!(json, "\"confidence-profile-mismatch\"");
        let json = serde_json::to_string(&Termination::TargetTimeout).unwrap();
        assert_eq!(json, "\"target-timeout\"");
    }
}
