//! Group commit: many writers, one transaction (and one fsync) per batch.
//!
//! [`GroupCommitStore`] wraps a [`SqliteReceiptStore`]. Every `compare_and_swap` is handed to one
//! committer thread over a channel and the caller blocks until its batch committed. The
//! committer takes the first waiting write, then everything else already queued (up to
//! `max_batch`), and applies them with
//! [`SqliteReceiptStore::compare_and_swap_batch`]. No timer: a batch is whatever queued while the
//! previous one was being committed, so a lone writer pays no added latency and a busy store
//! amortizes the fsync over many receipts.
//!
//! Invariants: a caller's answer is sent only after its batch committed (durability is the
//! SQLite store's); each write keeps its own answer (a stale or illegal write never fails its
//! neighbours); reads, acquires and waits go straight to the SQLite store. Dropping the last
//! handle closes the channel and the committer exits after the batch in hand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::document::{Receipt, ReceiptKey};
use super::error::ReceiptError;
use super::sqlite::{CasWrite, SqliteReceiptStore};
use super::store::{ReceiptClaim, ReceiptStore};

type Reply = Sender<Result<bool, ReceiptError>>;

/// Counters of a group committer.
#[derive(Debug, Default)]
pub struct GroupCommitStats {
    /// Transactions committed.
    pub batches: AtomicU64,
    /// Writes applied (stale and refused ones included).
    pub writes: AtomicU64,
}

/// A [`ReceiptStore`] that batches compare-and-swaps into shared transactions.
#[derive(Debug)]
pub struct GroupCommitStore {
    store: Arc<SqliteReceiptStore>,
    queue: Mutex<Sender<(CasWrite, Reply)>>,
    stats: Arc<GroupCommitStats>,
}

impl GroupCommitStore {
    /// Starts the committer thread; at most `max_batch` writes per transaction.
    pub fn new(store: Arc<SqliteReceiptStore>, max_batch: usize) -> Result<Self, ReceiptError> {
        let (sender, receiver) = mpsc::channel();
        let stats = Arc::new(GroupCommitStats::default());
        let worker_store = Arc::clone(&store);
        let worker_stats = Arc::clone(&stats);
        std::thread::Builder::new()
            .name("receipt-group-commit".into())
            .spawn(move || commit_loop(&worker_store, &receiver, max_batch.max(1), &worker_stats))
            .map_err(ReceiptError::CommitterSpawn)?;
        Ok(GroupCommitStore {
            store,
            queue: Mutex::new(sender),
            stats,
        })
    }

    /// Batches and writes so far.
    pub fn stats(&self) -> &GroupCommitStats {
        &self.stats
    }
}

fn commit_loop(
    store: &SqliteReceiptStore,
    receiver: &Receiver<(CasWrite, Reply)>,
    max_batch: usize,
    stats: &GroupCommitStats,
) {
    while let Ok(first) = receiver.recv() {
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match receiver.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let (writes, replies): (Vec<CasWrite>, Vec<Reply>) = batch.into_iter().unzip();
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats
            .writes
            .fetch_add(writes.len() as u64, Ordering::Relaxed);
        match store.compare_and_swap_batch(&writes) {
            Ok(answers) => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(answer);
                }
            }
            Err(error) => {
                // The transaction itself failed: nothing of the batch was written.
                let message = error.to_string();
                for reply in replies {
                    let _ = reply.send(Err(ReceiptError::BatchFailed(message.clone())));
                }
            }
        }
    }
}

impl ReceiptStore for GroupCommitStore {
    fn read(&self, key: &ReceiptKey) -> Result<Option<Receipt>, ReceiptError> {
        self.store.read(key)
    }

    fn acquire(
        &self,
        key: &ReceiptKey,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<ReceiptClaim, ReceiptError> {
        self.store.acquire(key, fingerprint, now_ms)
    }

    fn compare_and_swap(
        &self,
        key: &ReceiptKey,
        expected_revision: u64,
        next: &Receipt,
    ) -> Result<bool, ReceiptError> {
        let (reply, answer) = mpsc::channel();
        let write = CasWrite {
            key: key.clone(),
            expected_revision,
            next: next.clone(),
        };
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send((write, reply))
            .map_err(|_| ReceiptError::CommitterGone)?;
        answer.recv().map_err(|_| ReceiptError::CommitterGone)?
    }

    fn wait_for_terminal(
        &self,
        key: &ReceiptKey,
        timeout: Duration,
    ) -> Result<Option<Receipt>, ReceiptError> {
        self.store.wait_for_terminal(key, timeout)
    }
}
