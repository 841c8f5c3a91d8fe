//! The compaction thread: folds closed segments into the snapshot, off the driver.
//!
//! Invariants: it reads only segments the writer closed (numbers ≤ the one it was given) and
//! the snapshot, which only it writes after the log was opened; the snapshot replaces the old
//! one by rename before the covered segments are deleted, so at every instant the snapshot
//! plus the segments above it describe every acknowledged change. A failed compaction leaves
//! the files as they were (counted); the next one, or the next start, covers them.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;

use super::{
    read_snapshot, replay_segment, segments, write_snapshot, LeaseLogError, LeaseLogStats,
    LeaseState,
};
use crate::service::leases::LeaseDurability;

enum Job {
    /// Fold every segment ≤ this number into the snapshot.
    Through(u64),
    /// Answer once every earlier job ran.
    Barrier(mpsc::Sender<()>),
}

/// A handle to the compaction thread (it ends when the handle is dropped).
pub struct Compactor {
    tx: mpsc::Sender<Job>,
}

impl Compactor {
    pub fn spawn(
        dir: PathBuf,
        durability: LeaseDurability,
        stats: Arc<LeaseLogStats>,
    ) -> Result<Self, LeaseLogError> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("turnstile-lease-compact".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    match job {
                        Job::Barrier(done) => {
                            let _ = done.send(());
                        }
                        Job::Through(through) => {
                            let result = compact(&dir, through, durability);
                            let counter = match result {
                                Ok(()) => &stats.compactions,
                                Err(_) => &stats.compaction_failures,
                            };
                            counter.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
            .map_err(LeaseLogError::Thread)?;
        Ok(Compactor { tx })
    }

    /// Asks for segments ≤ `through` to be folded into the snapshot.
    pub fn compact_through(&self, through: u64) {
        let _ = self.tx.send(Job::Through(through));
    }

    /// Returns once every compaction asked for so far has run.
    pub fn wait_idle(&self) {
        let (done, wait) = mpsc::channel();
        if self.tx.send(Job::Barrier(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

/// Reads the snapshot and the segments above it up to `through`, writes the new snapshot and
/// deletes what it covers.
fn compact(
    dir: &std::path::Path,
    through: u64,
    durability: LeaseDurability,
) -> Result<(), LeaseLogError> {
    let mut state = LeaseState::default();
    let base = read_snapshot(dir, &mut state)?;
    if through <= base {
        return Ok(());
    }
    for (n, path) in segments(dir)? {
        if n > base && n <= through {
            replay_segment(&path, n, &mut state)?;
        }
    }
    write_snapshot(dir, &mut state, through, durability)
}
