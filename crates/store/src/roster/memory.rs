//! In-memory twin of [`super::SqliteRosterStore`], for tests and simulations.
//!
//! Cloning a `MemoryRosterStore` yields a second handle onto the *same* state, so a test can
//! inspect what the scheduler sees (for example from inside a fake reader) while the scheduler
//! owns the other handle. Queue order is kept with a monotonically increasing sequence number,
//! exactly like the SQLite store.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{
    CallId, CallOutcome, CallReceipt, CallUsage, PendingItem, RosterStore, RosterStoreError,
    SemanticRecord, StoredEvidence,
};

#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    /// generation id → (sequence, item)
    pending: BTreeMap<String, (u64, PendingItem)>,
    evidence: BTreeMap<String, StoredEvidence>,
    next_call: CallId,
    calls: Vec<CallReceipt>,
    records: BTreeMap<String, SemanticRecord>,
    cache: BTreeMap<(String, String), SemanticRecord>,
    meta: BTreeMap<String, String>,
}

/// In-memory roster store; clones share state.
#[derive(Debug, Clone, Default)]
pub struct MemoryRosterStore {
    state: Arc<Mutex<State>>,
}

impl MemoryRosterStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a test panicked while holding it; the data is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl RosterStore for MemoryRosterStore {
    fn enqueue(
        &mut self,
        evidence: &StoredEvidence,
        item: &PendingItem,
    ) -> Result<(), RosterStoreError> {
        let mut state = self.lock();
        state.next_seq += 1;
        let seq = state.next_seq;
        state
            .evidence
            .insert(evidence.generation_id.clone(), evidence.clone());
        state
            .pending
            .insert(item.generation_id.clone(), (seq, item.clone()));
        Ok(())
    }

    fn pending(&self) -> Result<Vec<PendingItem>, RosterStoreError> {
        let state = self.lock();
        let mut items: Vec<&(u64, PendingItem)> = state.pending.values().collect();
        items.sort_by_key(|(seq, _)| *seq);
        Ok(items.into_iter().map(|(_, item)| item.clone()).collect())
    }

    fn remove_pending(
        &mut self,
        generation_id: &str,
        evidence_digest: &str,
    ) -> Result<bool, RosterStoreError> {
        let mut state = self.lock();
        let matches = state
            .pending
            .get(generation_id)
            .is_some_and(|(_, item)| item.evidence_digest == evidence_digest);
        if matches {
            state.pending.remove(generation_id);
        }
        Ok(matches)
    }

    fn evidence(&self, generation_id: &str) -> Result<Option<StoredEvidence>, RosterStoreError> {
        Ok(self.lock().evidence.get(generation_id).cloned())
    }

    fn begin_call(
        &mut self,
        generation_id: &str,
        started_at: u64,
    ) -> Result<CallId, RosterStoreError> {
        let mut state = self.lock();
        state.next_call += 1;
        let id = state.next_call;
        state.calls.push(CallReceipt {
            id,
            generation_id: generation_id.to_owned(),
            started_at,
            outcome: None,
            usage: None,
            duration_ms: None,
        });
        Ok(id)
    }

    fn finish_call(
        &mut self,
        id: CallId,
        outcome: CallOutcome,
        usage: Option<CallUsage>,
        duration_ms: u64,
    ) -> Result<(), RosterStoreError> {
        let mut state = self.lock();
        let receipt = state
            .calls
            .iter_mut()
            .find(|receipt| receipt.id == id)
            .ok_or(RosterStoreError::UnknownCall(id))?;
        receipt.outcome = Some(outcome);
        receipt.usage = usage;
        receipt.duration_ms = Some(duration_ms);
        Ok(())
    }

    fn history(&self) -> Result<Vec<CallReceipt>, RosterStoreError> {
        let mut calls = self.lock().calls.clone();
        calls.sort_by_key(|receipt| (receipt.started_at, receipt.id));
        Ok(calls)
    }

    fn prune_history(&mut self, cutoff: u64) -> Result<usize, RosterStoreError> {
        let mut state = self.lock();
        let before = state.calls.len();
        state.calls.retain(|receipt| receipt.started_at > cutoff);
        Ok(before - state.calls.len())
    }

    fn put_record(&mut self, record: &SemanticRecord) -> Result<(), RosterStoreError> {
        self.lock()
            .records
            .insert(record.generation_id.clone(), record.clone());
        Ok(())
    }

    fn record(&self, generation_id: &str) -> Result<Option<SemanticRecord>, RosterStoreError> {
        Ok(self.lock().records.get(generation_id).cloned())
    }

    fn records(&self) -> Result<Vec<SemanticRecord>, RosterStoreError> {
        Ok(self.lock().records.values().cloned().collect())
    }

    fn cached(
        &self,
        evidence_digest: &str,
        configuration_digest: &str,
    ) -> Result<Option<SemanticRecord>, RosterStoreError> {
        Ok(self
            .lock()
            .cache
            .get(&(evidence_digest.to_owned(), configuration_digest.to_owned()))
            .cloned())
    }

    fn put_cached(&mut self, record: &SemanticRecord) -> Result<(), RosterStoreError> {
        if let Some(configuration) = &record.configuration_digest {
            self.lock().cache.insert(
                (record.evidence_digest.clone(), configuration.clone()),
                record.clone(),
            );
        }
        Ok(())
    }

    fn meta(&self, key: &str) -> Result<Option<String>, RosterStoreError> {
        Ok(self.lock().meta.get(key).cloned())
    }

    fn set_meta(&mut self, key: &str, value: &str) -> Result<(), RosterStoreError> {
        self.lock().meta.insert(key.to_owned(), value.to_owned());
        Ok(())
    }

    fn reset(&mut self) -> Result<(), RosterStoreError> {
        let mut state = self.lock();
        state.pending.clear();
        state.evidence.clear();
        state.records.clear();
        state.cache.clear();
        state.meta.clear();
        Ok(())
    }
}
