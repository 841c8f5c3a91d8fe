//! Semantic records: what the dashboard shows for a generation.

use serde::{Deserialize, Serialize};

use super::{Band, CallUsage};

/// The kind of a per-generation record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// The reader produced a valid record.
    Accepted,
    /// The reader answered with something that failed validation.
    Invalid,
    /// No reader was available, or the endpoint failed.
    Unavailable,
    /// The rolling-hour cap was exhausted; `eligibleAfter` says when capacity returns.
    Deferred,
}

/// Why a record is not an accepted reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// The rolling-hour call cap is exhausted.
    RateCap,
    /// No reader is configured.
    NoReader,
    /// The reader's endpoint failed (network, HTTP status, timeout).
    ReaderUnavailable,
    /// The model's answer did not meet the record contract.
    InvalidAnswer,
}

/// The latest record of one generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SemanticRecord {
    /// The generation.
    pub generation_id: String,
    /// Kind of record.
    pub kind: RecordKind,
    /// Digest of the evidence the record is about.
    pub evidence_digest: String,
    /// Digest of the reader configuration that produced it, when a reader was involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration_digest: Option<String>,
    /// Band of the evidence.
    pub band: Band,
    /// Epoch ms at which the record was written.
    pub written_at: u64,
    /// One-line reading (accepted records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headline: Option<String>,
    /// Longer reading (accepted records), or a short non-secret explanation of a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Why the record is not accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<ReasonCode>,
    /// For deferred records: epoch ms at which capacity returns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible_after: Option<u64>,
    /// True when the record was served from the (evidence, configuration) cache.
    #[serde(default)]
    pub from_cache: bool,
    /// Token usage of the call that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<CallUsage>,
}
