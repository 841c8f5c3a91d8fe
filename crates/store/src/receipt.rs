//! Durable decision receipts (`decision-receipt/v2`, EVALUATOR.md "Durable receipt").
//!
//! A receipt is the idempotency record of one invocation: which invocation it is (`projectId`,
//! `invocationId`, `fingerprint`), where execution stands (`state`), what has been observed
//! (`evaluations`, `remoteHandles`), the one call that may be in flight (`pending`) and, once
//! completed, the `result`. Every write is a new **revision**; revisions are kept, one row each.
//!
//! Invariants every [`ReceiptStore`] upholds (checked by [`check_successor`], shared by all
//! implementations, so the stores cannot disagree):
//!
//! - Revisions of a key are 1, 2, 3, … without gaps; a write names the revision it replaces
//!   ([`ReceiptStore::compare_and_swap`]) and loses (returns `false`) when that is stale.
//! - A write that breaks the state machine of [`ReceiptState`] or an immutability rule
//!   (identity and fingerprint fixed, `updatedAtEpochMs` never goes back, `evaluations`
//!   immutable once written, `remoteHandles` append-only, `result` only when `completed`,
//!   `completedAtEpochMs` set exactly in terminal states) is an error, never stored.
//! - [`ReceiptStore::acquire`] creates revision 1 (`acquired`) for exactly one caller: the
//!   **owner**. Everyone else gets the existing receipt back.
//! - With an [`IntegrityKey`], every revision carries an HMAC-SHA256 over its canonical JSON
//!   chained to the previous revision's MAC; every read verifies the whole chain, and a tampered,
//!   unsigned or gapped chain is an error ([`ReceiptError`]), never a receipt.
//!
//! The store is ignorant of the evaluator's types: results, evaluations and attempts travel as
//! JSON values, so this crate stays below `turnstile-decision`.

mod document;
mod error;
mod group;
mod integrity;
mod memory;
mod sqlite;
mod state;
mod store;
mod successor;

pub use document::{Pending, Receipt, ReceiptKey, RECEIPT_SCHEMA};
pub use error::ReceiptError;
pub use group::{GroupCommitStats, GroupCommitStore};
pub use integrity::IntegrityKey;
pub use memory::MemoryReceiptStore;
pub use sqlite::{
    CasWrite, SqliteReceiptOptions, SqliteReceiptStore, Synchronous, RECEIPT_DB_FILE,
};
pub use state::ReceiptState;
pub use store::{ReceiptClaim, ReceiptStore};
pub use successor::check_successor;
