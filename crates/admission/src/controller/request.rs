//! The request a caller asks the controller with ([`AdmissionRequest`]): who asks, on which
//! provider lane, for which invocation's budget, with what estimate and by when.
//!
//! # Invariants
//!
//! - The principal selects the lane and is never copied into evidence.
//! - The request only carries what the caller said: checking the estimate and the deadline is
//!   the controller's (`admit.rs`), never the request's.

use serde::{Deserialize, Serialize};

use crate::estimate::Estimate;
use crate::time::Millis;

/// One request for a permit to call a provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// The authenticated caller; selects the lane, never appears in evidence.
    pub principal_id: String,
    /// The provider lane (the adapter ID a binding target names).
    pub provider_id: String,
    /// The invocation whose attempt, cost and token budgets this request spends.
    pub budget_id: String,
    /// What the call is expected to cost (tokens, dollars, bytes, …); empty when unknown.
    #[serde(default)]
    pub estimate: Estimate,
    /// Absolute instant after which the request must not be admitted.
    #[serde(default)]
    pub deadline: Option<Millis>,
}

impl AdmissionRequest {
    /// A request without an estimate or a deadline.
    pub fn new(
        principal_id: impl Into<String>,
        provider_id: impl Into<String>,
        budget_id: impl Into<String>,
    ) -> Self {
        AdmissionRequest {
            principal_id: principal_id.into(),
            provider_id: provider_id.into(),
            budget_id: budget_id.into(),
            estimate: Estimate::default(),
            deadline: None,
        }
    }

    /// The request with `estimate`.
    pub fn with_estimate(mut self, estimate: Estimate) -> Self {
        self.estimate = estimate;
        self
    }

    /// The request with an absolute deadline.
    pub fn with_deadline(mut self, deadline: Millis) -> Self {
        self.deadline = Some(deadline);
        self
    }
}
