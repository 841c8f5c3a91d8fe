//! Call receipts: the durable history of model calls that the rolling-hour cap counts.
//!
//! A receipt is written with `outcome: None` before the reader is invoked and completed
//! afterwards. A receipt that never completes (the process died mid-call) still counts.

use serde::{Deserialize, Serialize};
use turnstile_admission::ProviderUsage;

/// Identifier of a stored call receipt.
pub type CallId = i64;

/// How a model call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The model answered and the answer met the record contract.
    Accepted,
    /// The model answered but the answer did not meet the contract.
    Invalid,
    /// The endpoint could not be reached or refused the call.
    Unavailable,
}

impl CallOutcome {
    /// The serde name, also used as the SQLite column value.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Accepted => "accepted",
            CallOutcome::Invalid => "invalid",
            CallOutcome::Unavailable => "unavailable",
        }
    }

    /// Parses the serde name.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "accepted" => Some(CallOutcome::Accepted),
            "invalid" => Some(CallOutcome::Invalid),
            "unavailable" => Some(CallOutcome::Unavailable),
            _ => None,
        }
    }
}

/// Token usage reported by the endpoint for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallUsage {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Input tokens served from the provider's prompt cache.
    pub cached_input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
    /// Reasoning tokens, when the provider reports them.
    pub reasoning_tokens: u64,
}

impl From<ProviderUsage> for CallUsage {
    /// What the endpoint reported, a count it did not report as 0.
    fn from(reported: ProviderUsage) -> CallUsage {
        CallUsage {
            input_tokens: reported.input.unwrap_or(0),
            cached_input_tokens: reported.cached_input.unwrap_or(0),
            output_tokens: reported.output.unwrap_or(0),
            reasoning_tokens: reported.reasoning.unwrap_or(0),
        }
    }
}

/// One model call: `{generationId, startedAt, outcome?, usage?, durationMs?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallReceipt {
    /// Store identifier.
    pub id: CallId,
    /// The generation that was read.
    pub generation_id: String,
    /// Epoch ms at which the call started (the receipt was committed).
    pub started_at: u64,
    /// How the call ended; `None` while in flight or if it never reported back.
    pub outcome: Option<CallOutcome>,
    /// Token usage, when reported.
    pub usage: Option<CallUsage>,
    /// Wall time of the call in ms, when it finished.
    pub duration_ms: Option<u64>,
}
