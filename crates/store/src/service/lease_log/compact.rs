//! The compaction thread: folds closed segments into the snapshot, off the driver.
//!
//! Invariants: it reads only segments the writer closed (numbers ≤ the one it was given) and
//! the snapshot, which only it writes after the log was opened; the snapshot replaces the old
//! one by rename before the covered segments are deleted, so at every instant the snapshot
//! plus the segments above it describe every acknowledged change. A failed compaction leaves
//! the files as they were (counted); the next one, or the next start, covers them.
//!
//! It also repairs the segment after a failed write (issue 34, item 7): while the writer
//! refuses every batch, it retries with a backoff from [`REPAIR_FIRST_WAIT`] doubling up to
//! [`REPAIR_MAX_WAIT`] to append a probe of zeros (proof that writes succeed again; a crash
//! leaves them as a torn tail the reader ignores) and cut the segment back to its last
//! acknowledged byte, then tells the writer (`LeaseLogStats::is_failing`). The writer touches
//! the file only once told, so the two never write it at once.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

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
    /// Cut this segment back to this length once writes succeed again.
    Repair(Arc<File>, u64),
}

/// The first wait before a repair is tried.
pub const REPAIR_FIRST_WAIT: Duration = Duration::from_millis(50);
/// The longest wait between two tries of a repair.
pub const REPAIR_MAX_WAIT: Duration = Duration::from_secs(2);
/// The probe's size: more than a typical batch.
const PROBE_BYTES: usize = 4096;

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
                let run = |job: Job| match job {
                    Job::Barrier(done) => {
                        let _ = done.send(());
                        None
                    }
                    Job::Through(through) => {
                        let result = compact(&dir, through, durability);
                        let counter = match result {
                            Ok(()) => &stats.compactions,
                            Err(_) => &stats.compaction_failures,
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    Job::Repair(file, len) => Some((file, len)),
                };
                while let Ok(job) = rx.recv() {
                    let Some((file, len)) = run(job) else {
                        continue;
                    };
                    let mut wait = REPAIR_FIRST_WAIT;
                    loop {
                        match rx.recv_timeout(wait) {
                            // Only barriers can come while the writer refuses batches.
                            Ok(job) => {
                                run(job);
                                continue;
                            }
                            Err(mpsc::RecvTimeoutError::Disconnected) => return,
                            Err(mpsc::RecvTimeoutError::Timeout) => {}
                        }
                        if repair(&file, len, durability).is_ok() {
                            stats.mark_repaired();
                            break;
                        }
                        wait = (wait * 2).min(REPAIR_MAX_WAIT);
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

    /// Asks for `file` to be cut back to `len` once writes succeed again.
    pub fn repair(&self, file: Arc<File>, len: u64) {
        let _ = self.tx.send(Job::Repair(file, len));
    }

    /// Returns once every compaction asked for so far has run.
    pub fn wait_idle(&self) {
        let (done, wait) = mpsc::channel();
        if self.tx.send(Job::Barrier(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

/// Appends a probe to `file` and cuts it back to `len` (synced at `Machine`).
fn repair(file: &File, len: u64, durability: LeaseDurability) -> std::io::Result<()> {
    let mut writer = file;
    writer.write_all(&[0; PROBE_BYTES])?;
    file.set_len(len)?;
    if durability == LeaseDurability::Machine {
        file.sync_data()?;
    }
    Ok(())
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
