//! The in-memory receipt store: the SQLite store's twin for tests and single-process hosts.
//!
//! Revisions are kept as encoded rows (canonical JSON, MAC when keyed), exactly as the SQLite
//! store keeps them, and every read goes through the same chain verification (O(revisions));
//! a write verifies the tail link it builds on (O(1)). One mutex guards
//! the map; a condition variable wakes [`ReceiptStore::wait_for_terminal`] on every write, so
//! waiting never polls.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::document::{Receipt, ReceiptKey};
use super::error::ReceiptError;
use super::integrity::{encode, verify_chain, verify_link, IntegrityKey, StoredRevision};
use super::store::{ReceiptClaim, ReceiptStore};
use super::successor::{check_document, check_successor};

/// Receipts in process memory.
#[derive(Debug, Default)]
pub struct MemoryReceiptStore {
    rows: Mutex<HashMap<ReceiptKey, Vec<StoredRevision>>>,
    written: Condvar,
    integrity: Option<IntegrityKey>,
}

impl MemoryReceiptStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store that signs every revision and verifies every read with `key`.
    pub fn with_integrity(key: IntegrityKey) -> Self {
        MemoryReceiptStore {
            integrity: Some(key),
            ..Self::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ReceiptKey, Vec<StoredRevision>>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every stored revision of `key`, verified, oldest first.
    pub fn history(&self, key: &ReceiptKey) -> Result<Vec<Receipt>, ReceiptError> {
        let rows = self.lock();
        let mut out = Vec::new();
        let mut previous = None;
        for row in rows.get(key).map(Vec::as_slice).unwrap_or_default() {
            out.push(verify_link(self.integrity.as_ref(), key, previous, row)?);
            previous = Some(row);
        }
        Ok(out)
    }
}

impl ReceiptStore for MemoryReceiptStore {
    fn read(&self, key: &ReceiptKey) -> Result<Option<Receipt>, ReceiptError> {
        let rows = self.lock();
        let chain = rows.get(key).map(Vec::as_slice).unwrap_or_default();
        verify_chain(self.integrity.as_ref(), key, chain)
    }

    fn acquire(
        &self,
        key: &ReceiptKey,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<ReceiptClaim, ReceiptError> {
        let mut rows = self.lock();
        if let Some(chain) = rows.get(key) {
            if let Some(receipt) = verify_chain(self.integrity.as_ref(), key, chain)? {
                return Ok(ReceiptClaim {
                    owner: false,
                    receipt,
                });
            }
        }
        let receipt = Receipt::acquired(key, fingerprint, now_ms);
        check_document(&receipt)?;
        let row = encode(self.integrity.as_ref(), None, &receipt)?;
        rows.insert(key.clone(), vec![row]);
        drop(rows);
        self.written.notify_all();
        Ok(ReceiptClaim {
            owner: true,
            receipt,
        })
    }

    fn compare_and_swap(
        &self,
        key: &ReceiptKey,
        expected_revision: u64,
        next: &Receipt,
    ) -> Result<bool, ReceiptError> {
        let mut rows = self.lock();
        let chain = rows.get_mut(key).ok_or(ReceiptError::NotFound)?;
        // The tail link is verified on every write (O(1)); the whole chain on every read.
        let Some(last) = chain.last() else {
            return Err(ReceiptError::NotFound);
        };
        let previous = chain.len().checked_sub(2).and_then(|i| chain.get(i));
        if previous.is_none() && last.revision != 1 {
            return Err(ReceiptError::Gap {
                expected: 1,
                found: last.revision,
            });
        }
        let latest = verify_link(self.integrity.as_ref(), key, previous, last)?;
        if latest.revision != expected_revision {
            return Ok(false);
        }
        check_successor(&latest, next)?;
        let row = encode(self.integrity.as_ref(), chain.last(), next)?;
        chain.push(row);
        drop(rows);
        self.written.notify_all();
        Ok(true)
    }

    fn wait_for_terminal(
        &self,
        key: &ReceiptKey,
        timeout: Duration,
    ) -> Result<Option<Receipt>, ReceiptError> {
        let until = Instant::now() + timeout;
        let mut rows = self.lock();
        loop {
            let chain = rows.get(key).map(Vec::as_slice).unwrap_or_default();
            let latest = verify_chain(self.integrity.as_ref(), key, chain)?;
            let now = Instant::now();
            match latest {
                Some(receipt) if receipt.state.is_terminal() => return Ok(Some(receipt)),
                latest if now >= until => return Ok(latest),
                _ => {}
            }
            rows = self
                .written
                .wait_timeout(rows, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}
