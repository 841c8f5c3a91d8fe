//! The [`RosterStore`] trait: the small interface the scheduler needs from durable state.
//!
//! Implementations: [`super::SqliteRosterStore`] (WAL-mode SQLite file) and
//! [`super::MemoryRosterStore`] (its in-memory twin). Both follow the invariants in the module
//! docs of [`crate::roster`]; the shared behaviour tests live in `tests/roster_store.rs`.

use super::{
    CallId, CallOutcome, CallReceipt, CallUsage, PendingItem, RosterStoreError, SemanticRecord,
    StoredEvidence,
};

/// Well-known keys of the meta table.
pub mod meta_keys {
    /// The band-1 round-robin cursor: the generation last read from band 1.
    pub const LAST_BAND1_GENERATION: &str = "lastBand1GenerationId";
    /// The configured calls-per-hour value last used by `run` (it may only lower the hard cap).
    pub const CONFIGURED_CALLS_PER_HOUR: &str = "configuredCallsPerHour";
}

/// Durable roster state. Every method is one atomic step.
pub trait RosterStore {
    /// Stores `evidence` as the latest evidence of its generation and replaces the generation's
    /// pending entry with `item`, moving it to the end of the queue order. Atomic.
    fn enqueue(
        &mut self,
        evidence: &StoredEvidence,
        item: &PendingItem,
    ) -> Result<(), RosterStoreError>;

    /// All pending items, in queue order (oldest enqueue first).
    fn pending(&self) -> Result<Vec<PendingItem>, RosterStoreError>;

    /// Removes the pending entry of `generation_id` if, and only if, it still carries
    /// `evidence_digest`. Returns whether an entry was removed.
    fn remove_pending(
        &mut self,
        generation_id: &str,
        evidence_digest: &str,
    ) -> Result<bool, RosterStoreError>;

    /// The latest evidence stored for `generation_id`.
    fn evidence(&self, generation_id: &str) -> Result<Option<StoredEvidence>, RosterStoreError>;

    /// Durably records the start of a model call and returns its id. Must be committed before
    /// the reader is invoked.
    fn begin_call(
        &mut self,
        generation_id: &str,
        started_at: u64,
    ) -> Result<CallId, RosterStoreError>;

    /// Completes a call receipt with its outcome, usage and duration.
    fn finish_call(
        &mut self,
        id: CallId,
        outcome: CallOutcome,
        usage: Option<CallUsage>,
        duration_ms: u64,
    ) -> Result<(), RosterStoreError>;

    /// Every kept call receipt, ordered by `startedAt` then id.
    fn history(&self) -> Result<Vec<CallReceipt>, RosterStoreError>;

    /// Deletes receipts with `startedAt <= cutoff` (those outside the active hour). Returns how
    /// many were deleted.
    fn prune_history(&mut self, cutoff: u64) -> Result<usize, RosterStoreError>;

    /// Writes `record` as the generation's latest record, replacing any older one.
    fn put_record(&mut self, record: &SemanticRecord) -> Result<(), RosterStoreError>;

    /// The latest record of `generation_id`.
    fn record(&self, generation_id: &str) -> Result<Option<SemanticRecord>, RosterStoreError>;

    /// All latest records, ordered by generation id.
    fn records(&self) -> Result<Vec<SemanticRecord>, RosterStoreError>;

    /// The cached accepted record for the full (evidence, configuration) tuple.
    fn cached(
        &self,
        evidence_digest: &str,
        configuration_digest: &str,
    ) -> Result<Option<SemanticRecord>, RosterStoreError>;

    /// Caches an accepted record under its (evidence, configuration) tuple. Records without a
    /// configuration digest are ignored.
    fn put_cached(&mut self, record: &SemanticRecord) -> Result<(), RosterStoreError>;

    /// A meta value.
    fn meta(&self, key: &str) -> Result<Option<String>, RosterStoreError>;

    /// Sets a meta value.
    fn set_meta(&mut self, key: &str, value: &str) -> Result<(), RosterStoreError>;

    /// Clears everything except the call history: pending items, evidence, records, cache and
    /// meta. The rolling cap must survive a reset of the ledger or configuration.
    fn reset(&mut self) -> Result<(), RosterStoreError>;
}
