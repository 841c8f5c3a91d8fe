//! The sync thread of `Machine` durability: one `fdatasync` for every batch written while the
//! previous one ran (group commit), then their completions, in write order.
//!
//! Invariant: a batch's `done` runs only after a sync of the file it was written to that
//! started after its write returned; completions run in the order batches were written.

use std::fs::File;
use std::sync::mpsc;
use std::sync::Arc;

use super::{Done, LeaseLogError};

struct Job {
    file: Arc<File>,
    done: Done,
}

/// A handle to the sync thread (it ends when the handle is dropped).
pub struct Syncer {
    tx: mpsc::Sender<Job>,
}

impl Syncer {
    pub fn spawn() -> Result<Self, LeaseLogError> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("turnstile-lease-sync".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut jobs = vec![first];
                    jobs.extend(rx.try_iter());
                    // Each distinct file once (a rotation puts two in one group), in order.
                    let mut synced: Vec<(Arc<File>, Result<(), String>)> = Vec::new();
                    for job in &jobs {
                        if !synced.iter().any(|(f, _)| Arc::ptr_eq(f, &job.file)) {
                            let result = job.file.sync_data().map_err(|e| e.to_string());
                            synced.push((job.file.clone(), result));
                        }
                    }
                    for job in jobs {
                        let result = synced
                            .iter()
                            .find(|(f, _)| Arc::ptr_eq(f, &job.file))
                            .map(|(_, r)| r.clone())
                            .unwrap_or(Ok(()));
                        (job.done)(result);
                    }
                }
            })
            .map_err(LeaseLogError::Thread)?;
        Ok(Syncer { tx })
    }

    /// Runs `done` once `file` was synced after this call.
    pub fn sync(&self, file: Arc<File>, done: Done) {
        if let Err(mpsc::SendError(job)) = self.tx.send(Job { file, done }) {
            (job.done)(Err(LeaseLogError::SyncGone.to_string()));
        }
    }
}
