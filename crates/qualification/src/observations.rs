//! Deterministic observations of a load run (REFERENCE §7).
//!
//! Every field is a pure function of the manifest and the target under virtual time, so a fresh
//! run must reproduce a retained record's observations exactly. Ratios are rounded to 6 decimals.
//! Invariant: `shed + completed + failed + cancelled == arrivals`. The blocks added after v2
//! (`fairShare`, `deadlineRefusals`) are absent unless the run has them, so a v1 or v2
//! record's bytes, and its digest, are what they were.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::deadline_ab::DeadlineRefusals;
use crate::fair_share::FairShareObservations;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observations {
    pub arrivals: u64,
    pub attempts: u64,
    pub completed: u64,
    pub failed: u64,
    pub shed: u64,
    pub cancelled: u64,
    pub shed_reasons: BTreeMap<String, u64>,
    pub maximum_active_calls: u64,
    pub maximum_queued_calls: u64,
    pub maximum_eligible_lane_wait_ms: u64,
    pub retry_amplification_ratio: f64,
    pub maximum_cancellation_latency_ms: u64,
    pub quiet_principal_admission_ratio: f64,
    pub noisy_principal_admission_ratio: f64,
    pub virtual_duration_ms: u64,
    /// Who was served what while they all waited, per principal and band: only for a manifest
    /// that shapes the order ([`crate::manifest::Manifest::shapes_order`]), so v1 and v2
    /// records are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share: Option<FairShareObservations>,
    /// The deadline-refusal A/B ([`crate::deadline_ab`]): for a manifest that shapes the order,
    /// or a run that refused any attempt `deadline-unreachable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_refusals: Option<DeadlineRefusals>,
}

/// Rounds to 6 decimals, as the reference does.
pub fn round6(value: f64) -> f64 {
    (value * 1_000_000.0).round() / 1_000_000.0
}

/// `numerator / denominator` rounded; 0 when there is nothing to divide.
pub fn ratio(numerator: u64, denominator: u64) -> f64 {
    if denominator == 0 {
        0.0
    } else {
        round6(numerator as f64 / denominator as f64)
    }
}
