//! Admission evidence (REFERENCE §5): metadata only, bounded, and never an ID of a principal or
//! workspace.
//!
//! The type system enforces the last rule: [`Evidence`] has no field that could hold an ID, and
//! estimates are copied only from a validated estimate, so malformed host values never appear.

use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};

use crate::breaker::BreakerTransition;
use crate::budget::BudgetCap;
use crate::controller::caller_quota::CallerQuota;
use crate::reason::{BreakerState, Decision, Reason};
use crate::time::Millis;

/// What one admission decision looked like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Evidence {
    /// Admit, defer or reject.
    pub decision: Decision,
    /// Why.
    pub reason: Reason,
    /// Time spent queued at the decision (0 for immediate decisions).
    pub queue_delay_ms: Millis,
    /// This principal's active leases, including an admitted one.
    pub active: u64,
    /// Other requests waiting in this principal's lane (never the request itself).
    pub queued: u64,
    /// The checked token estimate (none when absent or malformed).
    pub estimated_tokens: Option<u64>,
    /// The checked cost estimate in USD (none when absent or malformed).
    pub estimated_cost_usd: Option<f64>,
    /// Retry-After coordinations this controller has seen.
    pub retry_pressure: u64,
    /// The provider lane's breaker state after the decision.
    pub breaker_state: BreakerState,
    /// The real remaining time until the blocking condition can change, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<Millis>,
    /// On a `deadline-unreachable` refusal: the wait the lane predicted for the request, in
    /// milliseconds (never 0: a wait that refuses is longer than the time left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_wait_ms: Option<NonZeroU64>,
    /// Breaker transitions this attempt caused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breaker_transitions: Vec<BreakerTransition>,
    /// On an admit: this attempt opened its budget (invocation), either the first attempt of a
    /// `budgetId` or the first after it was released or forgotten for idleness. Absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub budget_opened: bool,
    /// On a `too-many-budgets` refusal: which cap refused, the principal's own
    /// (`maxOpenBudgets`) or the workspace's. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_cap: Option<BudgetCap>,
    /// The provider's announced quota (its rate-limit headers) held this request back at some
    /// point. Absent otherwise; never the account's figures.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub provider_quota: bool,
    /// Replicated deployments only: whether the replica decided with the shared limits or
    /// alone on its declared share (the core never sets it; the host that coordinates does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordination: Option<Coordination>,
    /// The caller's own request and token limits as this decision left them (the principal's
    /// buckets only, never the account's). Not serialized: hosts write it as the answer's
    /// `x-ratelimit-*` headers, never into a record.
    #[serde(skip)]
    pub caller: CallerQuota,
    /// Decided by a canary rollout's candidate revision rather than the current one
    /// (`crate::rollout`). Not serialized (a flag keeps a refusal small): hosts name the
    /// revision that decided with [`crate::Registry::revision_of`].
    #[serde(skip)]
    pub candidate: bool,
}

/// How a replica coordinated a decision with the others (`docs/replicas.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Coordination {
    /// Through the shared store: the limits are the deployment's.
    Shared,
    /// The store was unreachable: the replica enforced its declared share alone.
    Degraded,
}

impl Evidence {
    /// Evidence that knows only its decision, its reason and the retry pressure: zero counts,
    /// no estimate, a closed breaker, no hint. Every evidence value starts here; the controller
    /// fills in what it knows about the lane.
    pub fn new(decision: Decision, reason: Reason, retry_pressure: u64) -> Self {
        Evidence {
            decision,
            reason,
            queue_delay_ms: 0,
            active: 0,
            queued: 0,
            estimated_tokens: None,
            estimated_cost_usd: None,
            retry_pressure,
            breaker_state: BreakerState::Closed,
            retry_after_ms: None,
            predicted_wait_ms: None,
            breaker_transitions: Vec::new(),
            budget_opened: false,
            budget_cap: None,
            provider_quota: false,
            coordination: None,
            caller: CallerQuota::NONE,
            candidate: false,
        }
    }
}

/// A refusal: the request never reached the provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("admission rejected: {reason}")]
pub struct Rejection {
    /// Why the request was refused.
    pub reason: Reason,
    /// Whether trying again later may succeed.
    pub retryable: bool,
    /// What the decision looked like.
    pub evidence: Evidence,
}

impl Rejection {
    /// The one constructor of a refusal that looked at no lane (an unknown provider or
    /// principal, a waiter the core no longer knows): `reject` evidence with `reason`, the
    /// controller's retry pressure and nothing else; retryable exactly when the reason is
    /// ([`Reason::is_retryable_rejection`]).
    pub fn refusal(reason: Reason, retry_pressure: u64) -> Self {
        Rejection {
            reason,
            retryable: reason.is_retryable_rejection(),
            evidence: Evidence::new(Decision::Reject, reason, retry_pressure),
        }
    }
}

/// Identifies a granted lease within its controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeaseId(pub u64);

/// Identifies a queued request within its controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WaiterId(pub u64);

/// A granted permit to call the provider. Release it exactly once with
/// `Controller::release`; a second release does nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// The ID to release it with.
    pub id: LeaseId,
    /// What the admission looked like.
    pub evidence: Evidence,
}

/// How an attempt ended, reported when its lease is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Outcome {
    /// The provider answered: failures reset, a non-closed breaker closes.
    Success,
    /// The provider failed: counts toward the breaker threshold.
    Failure,
    /// The provider asked to be left alone: pauses the provider lane, breaker untouched.
    #[serde(rename_all = "camelCase")]
    RetryAfter {
        /// How long the provider asked to be left alone, in ms.
        retry_after_ms: Millis,
    },
    /// Nothing is known (a dropped lease): only counts are given back.
    #[default]
    None,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_reject_evidence_whose_retryability_follows_the_reason() {
        let refusal = Rejection::refusal(Reason::UnconfiguredProvider, 3);
        assert_eq!(refusal.evidence.decision, Decision::Reject);
        assert_eq!(refusal.evidence.reason, Reason::UnconfiguredProvider);
        assert_eq!(refusal.evidence.retry_pressure, 3);
        assert!(!refusal.retryable);
        assert_eq!((refusal.evidence.active, refusal.evidence.queued), (0, 0));
        assert!(Rejection::refusal(Reason::QueueFull, 0).retryable);
    }
}
