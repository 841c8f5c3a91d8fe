//! How an invocation ends: the part of a `RulesetResult` that says what was decided.
//!
//! A [`Conclusion`] comes from one of three places, and only one: a refusal before any call
//! ([`Conclusion::error`]), an interruption ([`Conclusion::of_stop`]), or the composition of
//! the evaluations ([`crate::compose::compose`]). Invariants: an error or a stop carries no
//! outcome (`null`) and no matched rules; a `detail` never names a principal or workspace.

use serde_json::Value;

use crate::reason::{ResultReason, RulesetStatus};
use crate::stop::Stop;

/// The `detail` of an invocation whose dispatch may have reached the provider.
pub(crate) const UNCERTAIN_DETAIL: &str =
    "a call of this invocation may have reached the provider; it is never dispatched again";

/// The decided part of a RulesetResult: status, reason, outcome, matched rules and detail.
#[derive(Debug, Clone, PartialEq)]
pub struct Conclusion {
    pub status: RulesetStatus,
    pub reason: ResultReason,
    pub outcome: Value,
    pub matched_rules: Vec<String>,
    pub detail: Option<String>,
}

impl Conclusion {
    /// An error without an outcome.
    pub(crate) fn error(reason: ResultReason, detail: Option<String>) -> Self {
        Conclusion {
            status: RulesetStatus::Error,
            reason,
            outcome: Value::Null,
            matched_rules: Vec::new(),
            detail,
        }
    }

    /// The end of an interrupted invocation.
    pub(crate) fn of_stop(stop: Stop) -> Self {
        match stop {
            Stop::Cancelled => Conclusion {
                status: RulesetStatus::Cancelled,
                ..Conclusion::error(ResultReason::Cancelled, None)
            },
            Stop::TotalDeadline => Conclusion::error(ResultReason::Timeout, None),
            Stop::Uncertain => Conclusion::error(
                ResultReason::ExecutionUncertain,
                Some(UNCERTAIN_DETAIL.to_owned()),
            ),
            Stop::ReceiptFailed => Conclusion::error(
                ResultReason::ReceiptUnavailable,
                Some("the receipt could not be written; nothing further was dispatched".to_owned()),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_concludes_without_an_outcome_and_with_its_reason() {
        for (stop, status, reason, detail) in [
            (
                Stop::Cancelled,
                RulesetStatus::Cancelled,
                ResultReason::Cancelled,
                false,
            ),
            (
                Stop::TotalDeadline,
                RulesetStatus::Error,
                ResultReason::Timeout,
                false,
            ),
            (
                Stop::Uncertain,
                RulesetStatus::Error,
                ResultReason::ExecutionUncertain,
                true,
            ),
            (
                Stop::ReceiptFailed,
                RulesetStatus::Error,
                ResultReason::ReceiptUnavailable,
                true,
            ),
        ] {
            let conclusion = Conclusion::of_stop(stop);
            assert_eq!((conclusion.status, conclusion.reason), (status, reason));
            assert_eq!(conclusion.outcome, Value::Null);
            assert!(conclusion.matched_rules.is_empty());
            assert_eq!(conclusion.detail.is_some(), detail, "{stop:?}");
        }
    }
}
