//! Attempt records: one per try (and per failed capability check), numbered from 1 per alias
//! across all of its targets.

use serde::{Deserialize, Serialize};
use turnstile_admission::{BreakerTransition, Evidence};

use crate::adapter::Adapter;
use crate::artifact::Pin;
use crate::binding::AliasTarget;
use crate::observation::ObservedUsage;
use crate::reason::{AttemptReason, DispatchCertainty, Status, Termination};

/// The record of one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    pub ordinal: u32,
    pub adapter: String,
    pub adapter_version: String,
    pub requested_model: String,
    pub actual_model: Option<String>,
    pub subagent: Option<Pin>,
    pub status: Status,
    pub reason: AttemptReason,
    pub duration_ms: u64,
    pub usage: ObservedUsage,
    pub request_id: Option<String>,
    /// The backoff slept after this attempt before the next try.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<Termination>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_certainty: Option<DispatchCertainty>,
    /// The admission evidence (scheduled runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Evidence>,
    /// The breaker transitions this attempt's release caused (closed → open after a failure,
    /// half-open → closed after a probe's success), oldest first; empty (absent) when none.
    /// Transitions at admission are in `admission.breakerTransitions`. Names the provider lane,
    /// never a principal or workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breaker_transitions: Vec<BreakerTransition>,
}

impl AttemptRecord {
    /// The record of try `ordinal` of `target`, before anything is known about it: an error
    /// without a reason, with the adapter's version (the target's pinned one when there is no
    /// adapter).
    pub(crate) fn new(target: &AliasTarget, ordinal: u32, adapter: Option<&dyn Adapter>) -> Self {
        AttemptRecord {
            ordinal,
            adapter: target.adapter.clone(),
            adapter_version: adapter.map_or_else(
                || target.adapter_version.clone(),
                |a| a.version().to_owned(),
            ),
            requested_model: target.model.clone(),
            actual_model: None,
            subagent: target.subagent.clone(),
            status: Status::Error,
            reason: AttemptReason::None,
            duration_ms: 0,
            usage: ObservedUsage::default(),
            request_id: None,
            retry_delay_ms: None,
            termination: None,
            dispatch_certainty: None,
            admission: None,
            breaker_transitions: Vec::new(),
        }
    }
}
