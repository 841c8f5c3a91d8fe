//! Receipt-backed evaluation (EVALUATOR.md "Durable receipt"): the evaluator's side of
//! `decision-receipt/v2`. The store itself is `turnstile_store::ReceiptStore`.
//!
//! # Invariants
//!
//! - **Serial.** A receipt has one pending-dispatch slot, so a receipt-backed run has
//!   concurrency 1 and keeps its scheduler permit through backoff.
//! - **Written before sent.** The pending slot (`dispatched`, naming alias, target, ordinal and
//!   the alias's earlier attempts) is committed before the adapter is called. If that write
//!   fails, nothing is sent.
//! - **Never twice.** A replay never dispatches a call for an invocation that has a receipt:
//!   a different fingerprint is `replay-mismatch`; `completed` returns the stored result;
//!   `failed` / `execution-uncertain` are `execution-uncertain`; anything else waits for a
//!   terminal state up to `totalTimeoutMs + 1 s`, after which the receipt — the owner is
//!   presumed dead — becomes `execution-uncertain`.
//! - **Honest uncertainty.** With a store, a non-success whose `dispatchCertainty` is neither
//!   `terminal-response` nor `not-sent` ends the run as `execution-uncertain` (receipt and
//!   result). An admission rejection was never sent: its attempt is recorded `not-sent` with
//!   its typed reason and evidence, and the receipt ends `completed`.

mod fingerprint;
mod replay;
mod writer;

use std::sync::Arc;

use turnstile_store::ReceiptStore;

pub use fingerprint::fingerprint;
pub(crate) use replay::{begin, Begin, Replay};
pub(crate) use writer::ReceiptWriter;

/// The request's `receiptStore`: where receipts live and the project they belong to.
#[derive(Clone)]
pub struct ReceiptRun {
    pub store: Arc<dyn ReceiptStore>,
    /// The receipt's `projectId` (a host label, not a principal or workspace ID).
    pub project_id: String,
}

impl ReceiptRun {
    pub fn new(store: Arc<dyn ReceiptStore>, project_id: impl Into<String>) -> Self {
        ReceiptRun {
            store,
            project_id: project_id.into(),
        }
    }
}

impl std::fmt::Debug for ReceiptRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiptRun")
            .field("project_id", &self.project_id)
            .finish_non_exhaustive()
    }
}
