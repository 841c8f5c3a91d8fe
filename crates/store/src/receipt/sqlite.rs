//! The SQLite receipt store: one row per revision, WAL, and one `BEGIN IMMEDIATE` transaction per
//! acquire or compare-and-swap, so several processes can share one file.
//!
//! Schema (version 1, `PRAGMA user_version` is left to the file's other tables):
//!
//! ```sql
//! receipt_revisions(project_id, invocation_id, revision, state, document, mac,
//!                   PRIMARY KEY (project_id, invocation_id, revision)) WITHOUT ROWID
//! ```
//!
//! # Why this is safe across processes
//!
//! - `BEGIN IMMEDIATE` takes SQLite's write lock before the read that decides the write, so a
//!   read-decide-write sequence is never interleaved with another writer's; `busy_timeout`
//!   makes a contending process wait for the lock instead of failing at once.
//! - The primary key makes a second revision 1 (or a second revision n) impossible even if a
//!   bug skipped the lock: the insert fails and the transaction rolls back.
//! - WAL lets readers (`read`, `wait_for_terminal`) proceed during a write.
//!
//! `synchronous=FULL` by default: a revision is on disk when the call returns. Group commit
//! ([`SqliteReceiptStore::compare_and_swap_batch`], used by
//! [`GroupCommitStore`](super::GroupCommitStore)) writes many revisions in one transaction and
//! pays one fsync for all of them.
//!
//! `wait_for_terminal` polls (SQLite cannot notify another process) every `poll_interval`.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, Transaction, TransactionBehavior};

use super::document::{Receipt, ReceiptKey};
use super::error::ReceiptError;
use super::integrity::{encode, verify_chain, verify_link, IntegrityKey, StoredRevision};
use super::store::{ReceiptClaim, ReceiptStore};
use super::successor::{check_document, check_successor};

/// The file name used inside a data directory.
pub const RECEIPT_DB_FILE: &str = "receipts.sqlite3";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS receipt_revisions (
    project_id    TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    revision      INTEGER NOT NULL,
    state         TEXT NOT NULL,
    document      TEXT NOT NULL,
    mac           TEXT,
    PRIMARY KEY (project_id, invocation_id, revision)
) WITHOUT ROWID;
";

/// SQLite's `synchronous` setting for the receipt file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// fsync on every commit: a returned write survives power loss.
    #[default]
    Full,
    /// WAL with fsync at checkpoints: survives a process crash, not a power loss.
    Normal,
}

/// How the SQLite store is opened.
#[derive(Debug, Clone)]
pub struct SqliteReceiptOptions {
    /// Signs and verifies every revision when set.
    pub integrity: Option<IntegrityKey>,
    /// What a returned write survives.
    pub synchronous: Synchronous,
    /// How long a writer waits for another process's lock.
    pub busy_timeout: Duration,
    /// How often `wait_for_terminal` re-reads.
    pub poll_interval: Duration,
}

impl Default for SqliteReceiptOptions {
    fn default() -> Self {
        SqliteReceiptOptions {
            integrity: None,
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            poll_interval: Duration::from_millis(25),
        }
    }
}

/// One compare-and-swap of a batch.
#[derive(Debug, Clone)]
pub struct CasWrite {
    /// The receipt to replace.
    pub key: ReceiptKey,
    /// The revision the write replaces; stale means the write loses.
    pub expected_revision: u64,
    /// The new revision.
    pub next: Receipt,
}

/// Receipts in a SQLite file.
#[derive(Debug)]
pub struct SqliteReceiptStore {
    conn: Mutex<Connection>,
    options: SqliteReceiptOptions,
}

fn to_sql(value: u64) -> Result<i64, ReceiptError> {
    i64::try_from(value).map_err(|_| ReceiptError::Invariant {
        rule: "revisions fit a signed 64-bit integer",
    })
}

impl SqliteReceiptStore {
    /// Opens (or creates) the file at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ReceiptError> {
        Self::open_with(path, SqliteReceiptOptions::default())
    }

    /// Opens (or creates) the file at `path`.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: SqliteReceiptOptions,
    ) -> Result<Self, ReceiptError> {
        let path = path.as_ref();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| ReceiptError::DataDir {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let conn = Connection::open(path)?;
        conn.busy_timeout(options.busy_timeout)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        let synchronous = match options.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", synchronous)?;
        conn.execute_batch(SCHEMA)?;
        Ok(SqliteReceiptStore {
            conn: Mutex::new(conn),
            options,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(&self) -> Option<&IntegrityKey> {
        self.options.integrity.as_ref()
    }

    fn rows(conn: &Connection, key: &ReceiptKey) -> Result<Vec<StoredRevision>, ReceiptError> {
        let mut statement = conn.prepare_cached(
            "SELECT revision, document, mac FROM receipt_revisions
             WHERE project_id = ?1 AND invocation_id = ?2 ORDER BY revision",
        )?;
        let rows = statement.query_map(params![key.project_id, key.invocation_id], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Option<String>>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (revision, document, mac) = row?;
            out.push(StoredRevision {
                revision: u64::try_from(revision).unwrap_or(0),
                document,
                mac,
            });
        }
        Ok(out)
    }

    /// The last two rows (the tail of the chain), newest last.
    fn tail(
        conn: &Connection,
        key: &ReceiptKey,
    ) -> Result<(Option<StoredRevision>, Option<StoredRevision>), ReceiptError> {
        let mut statement = conn.prepare_cached(
            "SELECT revision, document, mac FROM receipt_revisions
             WHERE project_id = ?1 AND invocation_id = ?2 ORDER BY revision DESC LIMIT 2",
        )?;
        let mut rows = statement
            .query_map(params![key.project_id, key.invocation_id], |row| {
                Ok(StoredRevision {
                    revision: u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                    document: row.get(1)?,
                    mac: row.get(2)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let latest = rows.first().cloned();
        let previous = rows.drain(..).nth(1);
        Ok((previous, latest))
    }

    fn insert(
        tx: &Transaction<'_>,
        receipt: &Receipt,
        row: &StoredRevision,
    ) -> Result<(), ReceiptError> {
        tx.prepare_cached(
            "INSERT INTO receipt_revisions
             (project_id, invocation_id, revision, state, document, mac)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            receipt.project_id,
            receipt.invocation_id,
            to_sql(receipt.revision)?,
            receipt.state.as_str(),
            row.document,
            row.mac,
        ])?;
        Ok(())
    }

    /// One compare-and-swap inside an open transaction.
    fn cas_in(
        &self,
        tx: &Transaction<'_>,
        key: &ReceiptKey,
        expected_revision: u64,
        next: &Receipt,
    ) -> Result<bool, ReceiptError> {
        let (previous, latest) = Self::tail(tx, key)?;
        let Some(latest_row) = latest else {
            return Err(ReceiptError::NotFound);
        };
        // The tail link is verified on every write; the whole chain on every read.
        if previous.is_none() && latest_row.revision != 1 {
            return Err(ReceiptError::Gap {
                expected: 1,
                found: latest_row.revision,
            });
        }
        let latest = verify_link(self.key(), key, previous.as_ref(), &latest_row)?;
        if latest.revision != expected_revision {
            return Ok(false);
        }
        if next.project_id != key.project_id || next.invocation_id != key.invocation_id {
            return Err(ReceiptError::Invariant {
                rule: "a receipt is written under its own key",
            });
        }
        check_successor(&latest, next)?;
        let row = encode(self.key(), Some(&latest_row), next)?;
        Self::insert(tx, next, &row)?;
        Ok(true)
    }

    /// Group commit: applies every write in one transaction (one fsync). Each write gets its own
    /// answer; a stale or illegal write does not stop the others.
    pub fn compare_and_swap_batch(
        &self,
        writes: &[CasWrite],
    ) -> Result<Vec<Result<bool, ReceiptError>>, ReceiptError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut answers = Vec::with_capacity(writes.len());
        for write in writes {
            tx.execute_batch("SAVEPOINT receipt_write")?;
            let answer = self.cas_in(&tx, &write.key, write.expected_revision, &write.next);
            if answer.is_err() {
                tx.execute_batch("ROLLBACK TO receipt_write")?;
            }
            tx.execute_batch("RELEASE receipt_write")?;
            answers.push(answer);
        }
        tx.commit()?;
        Ok(answers)
    }

    /// Every stored revision of `key`, verified, oldest first.
    pub fn history(&self, key: &ReceiptKey) -> Result<Vec<Receipt>, ReceiptError> {
        let conn = self.lock();
        let rows = Self::rows(&conn, key)?;
        let mut out = Vec::with_capacity(rows.len());
        let mut previous = None;
        for row in &rows {
            out.push(verify_link(self.key(), key, previous, row)?);
            previous = Some(row);
        }
        Ok(out)
    }
}

impl ReceiptStore for SqliteReceiptStore {
    fn read(&self, key: &ReceiptKey) -> Result<Option<Receipt>, ReceiptError> {
        let conn = self.lock();
        let rows = Self::rows(&conn, key)?;
        verify_chain(self.key(), key, &rows)
    }

    fn acquire(
        &self,
        key: &ReceiptKey,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<ReceiptClaim, ReceiptError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let rows = Self::rows(&tx, key)?;
        if let Some(receipt) = verify_chain(self.key(), key, &rows)? {
            tx.commit()?;
            return Ok(ReceiptClaim {
                owner: false,
                receipt,
            });
        }
        let receipt = Receipt::acquired(key, fingerprint, now_ms);
        check_document(&receipt)?;
        let row = encode(self.key(), None, &receipt)?;
        Self::insert(&tx, &receipt, &row)?;
        tx.commit()?;
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
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let swapped = self.cas_in(&tx, key, expected_revision, next)?;
        if swapped {
            tx.commit()?;
        }
        Ok(swapped)
    }

    fn wait_for_terminal(
        &self,
        key: &ReceiptKey,
        timeout: Duration,
    ) -> Result<Option<Receipt>, ReceiptError> {
        let until = Instant::now() + timeout;
        loop {
            let latest = self.read(key)?;
            let now = Instant::now();
            match latest {
                Some(receipt) if receipt.state.is_terminal() => return Ok(Some(receipt)),
                latest if now >= until => return Ok(latest),
                _ => std::thread::sleep(self.options.poll_interval.min(until - now)),
            }
        }
    }
}
