//! What an adapter reports about one call.
//!
//! `usage` fields are `null` when unknown, never 0. `dispatchCertainty` says whether a failed
//! call reached the provider; `retryAfterMs` carries a provider's Retry-After.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::reason::{AttemptReason, DispatchCertainty, Status};

/// Token and money usage of one call; `None` (null) when unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedUsage {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

/// How sure the answer is, as the provider or model states it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Uncertainty {
    /// `provider`, `model-self-report`, …
    pub source: String,
    /// The confidence profile the numbers follow.
    pub profile: String,
    /// `vendor-claimed`, `uncalibrated`, …
    pub calibration: String,
    #[serde(default)]
    pub confidence: Option<f64>,
    #[serde(default)]
    pub distribution: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub calibration_ref: Option<String>,
}

/// An adapter's report of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observation {
    pub status: Status,
    #[serde(default = "reason_none")]
    pub reason: AttemptReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<Uncertainty>,
    #[serde(default)]
    pub actual_model: Option<String>,
    #[serde(default)]
    pub usage: ObservedUsage,
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_certainty: Option<DispatchCertainty>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

fn reason_none() -> AttemptReason {
    AttemptReason::None
}

impl Observation {
    /// A successful answer.
    pub fn success(value: Value) -> Self {
        Observation {
            status: Status::Success,
            reason: AttemptReason::None,
            value: Some(value),
            uncertainty: None,
            actual_model: None,
            usage: ObservedUsage::default(),
            request_id: None,
            dispatch_certainty: None,
            http_status: None,
            retry_after_ms: None,
        }
    }

    /// A failure with a reason.
    pub fn error(reason: AttemptReason, certainty: DispatchCertainty) -> Self {
        Observation {
            status: Status::Error,
            reason,
            value: None,
            uncertainty: None,
            actual_model: None,
            usage: ObservedUsage::default(),
            request_id: None,
            dispatch_certainty: Some(certainty),
            http_status: None,
            retry_after_ms: None,
        }
    }

    pub fn with_status(mut self, status: Status) -> Self {
        self.status = status;
        self
    }

    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.actual_model = Some(model.into());
        self
    }

    pub fn with_retry_after(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    pub fn with_uncertainty(mut self, uncertainty: Uncertainty) -> Self {
        self.uncertainty = Some(uncertainty);
        self
    }
}
