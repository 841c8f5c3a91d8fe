//! A one-time import of the interim lease file (`service.leases.sqlite3`, SQLite tables
//! `leases` and `budget_spend`), which journaled leases before the lease log existed.
//!
//! Invariant: the file is removed only after its rows are in a written snapshot, so a crash
//! during the import leaves either the file (imported again) or the snapshot.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::{LeaseLogError, LeaseState};
use crate::service::leases::{StoredLease, StoredSpend};

/// The interim lease file's name in the data directory.
pub const LEGACY_FILE: &str = "service.leases.sqlite3";

/// An imported legacy file, to remove once the snapshot holds its rows.
pub struct Imported {
    path: PathBuf,
}

impl Imported {
    /// Removes the file and SQLite's companions (`-wal`, `-shm`).
    pub fn remove(self) -> Result<(), LeaseLogError> {
        for suffix in ["-wal", "-shm", ""] {
            let path = PathBuf::from(format!("{}{suffix}", self.path.display()));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(LeaseLogError::io(&path, e)),
            }
        }
        Ok(())
    }
}

fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// Reads the legacy file's held leases and spend into `state`; `None` when there is none.
pub fn import(data_dir: &Path, state: &mut LeaseState) -> Result<Option<Imported>, LeaseLogError> {
    let path = data_dir.join(LEGACY_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    let failed = |source: rusqlite::Error| LeaseLogError::Legacy {
        path: path.display().to_string(),
        source,
    };
    // Read-write: SQLite folds a leftover WAL into what it reads.
    let conn =
        Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE).map_err(failed)?;
    let has_tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'
             AND name IN ('leases', 'budget_spend')",
            [],
            |row| row.get(0),
        )
        .map_err(failed)?;
    if has_tables == 2 {
        let mut statement = conn
            .prepare(
                "SELECT token, workspace_id, principal_id, provider_id, budget_id, attempts,
                 tokens, cost_usd, admitted_at_ms, expires_at_ms FROM leases ORDER BY seq",
            )
            .map_err(failed)?;
        let leases = statement
            .query_map([], |row| {
                Ok(StoredLease {
                    token: row.get(0)?,
                    workspace_id: row.get(1)?,
                    principal_id: row.get(2)?,
                    provider_id: row.get(3)?,
                    budget_id: row.get(4)?,
                    attempts: count(row.get(5)?),
                    tokens: row.get::<_, Option<i64>>(6)?.map(count),
                    cost_usd: row.get(7)?,
                    admitted_at_ms: count(row.get(8)?),
                    expires_at_ms: row.get::<_, Option<i64>>(9)?.map(count),
                })
            })
            .map_err(failed)?;
        for lease in leases {
            state.restore_lease(lease.map_err(failed)?);
        }
        let mut statement = conn
            .prepare(
                "SELECT workspace_id, budget_id, principal_id, provider_id, attempts, tokens,
                 cost_usd FROM budget_spend",
            )
            .map_err(failed)?;
        let lines = statement
            .query_map([], |row| {
                Ok(StoredSpend {
                    workspace_id: row.get(0)?,
                    budget_id: row.get(1)?,
                    principal_id: row.get(2)?,
                    provider_id: row.get(3)?,
                    attempts: count(row.get(4)?),
                    tokens: count(row.get(5)?),
                    cost_usd: row.get(6)?,
                })
            })
            .map_err(failed)?;
        for line in lines {
            state.restore_spend(line.map_err(failed)?);
        }
    }
    Ok(Some(Imported { path }))
}
