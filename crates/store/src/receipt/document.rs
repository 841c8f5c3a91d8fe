//! The `decision-receipt/v2` document and its key.
//!
//! Field names are the spec's (camelCase). Results, evaluations, attempts and remote handles are
//! opaque JSON values here: the evaluator owns their shape.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::state::ReceiptState;

/// The schema name every receipt carries.
pub const RECEIPT_SCHEMA: &str = "decision-receipt/v2";

/// Identifies one invocation's receipt.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReceiptKey {
    /// The project the invocation belongs to.
    pub project_id: String,
    /// The invocation, unique within its project.
    pub invocation_id: String,
}

impl ReceiptKey {
    /// The key of one invocation of one project.
    pub fn new(project_id: impl Into<String>, invocation_id: impl Into<String>) -> Self {
        ReceiptKey {
            project_id: project_id.into(),
            invocation_id: invocation_id.into(),
        }
    }
}

/// The one pending-dispatch slot: the call that may be in flight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pending {
    /// The alias whose call may be in flight.
    pub alias: String,
    /// The index of the target called among the alias's targets.
    pub target_index: u32,
    /// The attempt's ordinal within the alias.
    pub ordinal: u32,
    /// The alias's attempt records so far (the pending one not included).
    pub attempts: Vec<Value>,
}

/// One revision of a receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Receipt {
    /// Always [`RECEIPT_SCHEMA`].
    pub schema: String,
    /// 1, 2, 3, … without gaps; each write is a new revision.
    pub revision: u64,
    /// When the invocation was acquired (fixed).
    pub acquired_at_epoch_ms: u64,
    /// When this revision was written (never goes back).
    pub updated_at_epoch_ms: u64,
    /// When the invocation ended; set exactly in terminal states.
    pub completed_at_epoch_ms: Option<u64>,
    /// The project (fixed).
    pub project_id: String,
    /// The invocation (fixed).
    pub invocation_id: String,
    /// The invocation's fingerprint (fixed).
    pub fingerprint: String,
    /// Where execution stands.
    pub state: ReceiptState,
    /// The stored result (state `completed` only).
    pub result: Option<Value>,
    /// Provider handles, append-only.
    pub remote_handles: Vec<Value>,
    /// alias → DecisionResult, immutable once written.
    pub evaluations: BTreeMap<String, Value>,
    /// The one call that may be in flight.
    pub pending: Option<Pending>,
}

impl Receipt {
    /// Revision 1 of a freshly acquired invocation.
    pub fn acquired(key: &ReceiptKey, fingerprint: &str, now_ms: u64) -> Self {
        Receipt {
            schema: RECEIPT_SCHEMA.to_owned(),
            revision: 1,
            acquired_at_epoch_ms: now_ms,
            updated_at_epoch_ms: now_ms,
            completed_at_epoch_ms: None,
            project_id: key.project_id.clone(),
            invocation_id: key.invocation_id.clone(),
            fingerprint: fingerprint.to_owned(),
            state: ReceiptState::Acquired,
            result: None,
            remote_handles: Vec::new(),
            evaluations: BTreeMap::new(),
            pending: None,
        }
    }

    /// The key this receipt is stored under.
    pub fn key(&self) -> ReceiptKey {
        ReceiptKey::new(self.project_id.clone(), self.invocation_id.clone())
    }

    /// The next revision in `state` at `now_ms`: everything else copied, `updatedAtEpochMs`
    /// never going back, `completedAtEpochMs` set on entering a terminal state.
    pub fn successor(&self, state: ReceiptState, now_ms: u64) -> Receipt {
        let updated = self.updated_at_epoch_ms.max(now_ms);
        Receipt {
            revision: self.revision.saturating_add(1),
            updated_at_epoch_ms: updated,
            completed_at_epoch_ms: if state.is_terminal() {
                Some(updated)
            } else {
                None
            },
            state,
            ..self.clone()
        }
    }
}
