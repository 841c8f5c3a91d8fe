//! The data directory's exclusive lock: one `turnstile serve` per data directory.
//!
//! Two processes on one data directory would each admit the full quota of every provider (8
//! calls running where 4 are allowed). At start-up the service takes an OS file lock
//! (`flock`, through `std::fs::File::try_lock`) on the data directory itself and holds it for
//! the life of the process: a directory cannot be deleted while it holds the service's files,
//! so a cleanup job that removes files cannot lift the lock (issue 34, item 5: with the lock on
//! a file only, deleting `<data>/turnstile.lock` let a second process start and compact the
//! lease log under the first). It also takes the same lock on `<data>/turnstile.lock`, which
//! holds the holder's PID for the error message of the next one, and which excludes a process
//! of an earlier version (those lock only that file) during an upgrade.
//!
//! Invariants:
//! - While a [`DataDirLock`] lives, no other process (and no other lock in this process) can
//!   take the lock on the same directory.
//! - A lock is released by the operating system when its holder exits, however it exits
//!   (SIGKILL included), so a stale lock file of a dead process never blocks a start: only a
//!   *held* lock refuses.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "turnstile.lock";

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DataLockError {
    /// Another live process holds the directory.
    #[error("the data directory {} is in use by another turnstile process (pid {}); stop it or choose another --data directory", dir.display(), pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string()))]
    Held {
        /// The data directory.
        dir: PathBuf,
        /// The holder's process ID, when the lock file names it.
        pid: Option<u32>,
    },
    /// The lock file could not be opened or written.
    #[error("cannot lock the data directory {}: {source}", dir.display())]
    Io {
        /// The data directory.
        dir: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
}

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    _dir: File,
    _file: File,
    path: PathBuf,
}

/// Takes `file`'s exclusive lock without waiting: `Ok(false)` when another holds it.
fn try_lock(file: &File) -> std::io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(source)) => Err(source),
    }
}

impl DataDirLock {
    /// Takes the lock of `dir` (created if missing) or says who holds it.
    pub fn acquire(dir: &Path) -> Result<Self, DataLockError> {
        let io = |source| DataLockError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        // The directory first: it cannot be removed while in use, whatever happens to the file.
        let directory = File::open(dir).map_err(io)?;
        let held_dir = !try_lock(&directory).map_err(io)?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        if held_dir || !try_lock(&file).map_err(io)? {
            // The holder's PID, unless its lock file was deleted (then it is unknown).
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(DataLockError::Held {
                dir: dir.to_path_buf(),
                pid: text.trim().parse().ok(),
            });
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(DataDirLock {
            _dir: directory,
            _file: file,
            path,
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_with_the_holders_pid() {
        let dir = tempfile::tempdir().unwrap();
        let held = DataDirLock::acquire(dir.path()).unwrap();
        match DataDirLock::acquire(dir.path()) {
            Err(DataLockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("expected Held, got {other:?}"),
        }
        drop(held);
        // Released: the next start succeeds, and a leftover lock file does not block it.
        assert!(held_file_exists(dir.path()));
        DataDirLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn deleting_the_lock_file_does_not_lift_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let held = DataDirLock::acquire(dir.path()).unwrap();
        std::fs::remove_file(held.path()).unwrap();
        match DataDirLock::acquire(dir.path()) {
            Err(DataLockError::Held { pid, .. }) => {
                assert_eq!(pid, None, "the PID went with the file")
            }
            other => panic!("expected Held, got {other:?}"),
        }
        drop(held);
        DataDirLock::acquire(dir.path()).unwrap();
    }

    fn held_file_exists(dir: &Path) -> bool {
        dir.join(LOCK_FILE).exists()
    }
}
