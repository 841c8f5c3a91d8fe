//! Durable state of the semantic roster scheduler (ADR 0119).
//!
//! What is kept, and the invariants every implementation of [`RosterStore`] upholds:
//!
//! - **Pending items**: at most one per `generationId`; re-enqueueing replaces the entry and moves
//!   it to the end of the queue order. The latest evidence document of each generation is kept
//!   beside it, so a pass can compare digests.
//! - **Call history**: one [`CallReceipt`] per model call, committed durably *before* the reader is
//!   invoked (a crash can never hand capacity back). A receipt without an outcome is a call that
//!   never reported back; it still counts. The history survives process restarts and survives
//!   [`RosterStore::reset`]; only receipts inside the active hour are kept (callers prune).
//! - **Records**: the latest [`SemanticRecord`] per generation (accepted, invalid, unavailable or
//!   deferred); a newer record replaces any older meaning.
//! - **Cache**: accepted records keyed by the full (evidence digest, configuration digest) tuple.
//! - **Meta**: small named values (the band-1 round-robin cursor, the configured call limit).
//!
//! The vocabulary types live here, below the scheduler, because they are the durable shape; the
//! `turnstile-semantic` crate re-exports them and owns every rule that reads them.

mod band;
mod error;
mod memory;
mod pending;
mod receipt;
mod record;
mod sqlite;
mod store;

pub use band::Band;
pub use error::RosterStoreError;
pub use memory::MemoryRosterStore;
pub use pending::{PendingItem, StoredEvidence};
pub use receipt::{CallId, CallOutcome, CallReceipt, CallUsage};
pub use record::{ReasonCode, RecordKind, SemanticRecord};
pub use sqlite::{SqliteRosterStore, ROSTER_DB_FILE};
pub use store::{meta_keys, RosterStore};
