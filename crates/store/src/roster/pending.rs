//! Pending items and the evidence documents they refer to.

use serde::{Deserialize, Serialize};

use super::Band;

/// A generation waiting to be read: `{generationId, evidenceDigest, band, pendingSince}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingItem {
    /// The generation to read.
    pub generation_id: String,
    /// Digest (`sha256:…`) of the evidence this entry was enqueued for.
    pub evidence_digest: String,
    /// Band of that evidence.
    pub band: Band,
    /// Epoch ms since which this digest has been pending (kept across re-enqueues of the same
    /// digest, reset by a new one).
    pub pending_since: u64,
}

/// The latest evidence document of a generation, as canonical JSON, with its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredEvidence {
    /// The generation the evidence describes.
    pub generation_id: String,
    /// `sha256:` + hex digest of `canonical_json`.
    pub evidence_digest: String,
    /// Canonical (sorted keys, compact) JSON of the evidence document.
    pub canonical_json: String,
}
