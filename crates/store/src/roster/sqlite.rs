//! The SQLite roster store: one database file in WAL mode with `synchronous=FULL`, so a call
//! receipt is durable once `begin_call` returns.
//!
//! Schema (version 1, tracked with `PRAGMA user_version`):
//!
//! | table | key | holds |
//! |---|---|---|
//! | `roster_pending` | `generation_id` | digest, band, pending_since, `seq` (queue order) |
//! | `roster_evidence` | `generation_id` | latest canonical evidence JSON and digest |
//! | `roster_calls` | `id` | generation_id, started_at, outcome?, usage JSON?, duration_ms? |
//! | `roster_records` | `generation_id` | latest record as JSON |
//! | `roster_cache` | (evidence_digest, configuration_digest) | accepted record as JSON |
//! | `roster_meta` | `key` | text value |
//!
//! `reset` deletes from every table except `roster_calls`. Times are epoch ms stored as
//! INTEGER; values above `i64::MAX` are refused rather than wrapped.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use super::{
    Band, CallId, CallOutcome, CallReceipt, CallUsage, PendingItem, RosterStore, RosterStoreError,
    SemanticRecord, StoredEvidence,
};

const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS roster_pending (
    generation_id   TEXT PRIMARY KEY,
    evidence_digest TEXT NOT NULL,
    band            INTEGER NOT NULL,
    pending_since   INTEGER NOT NULL,
    seq             INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS roster_evidence (
    generation_id   TEXT PRIMARY KEY,
    evidence_digest TEXT NOT NULL,
    canonical_json  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS roster_calls (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    generation_id TEXT NOT NULL,
    started_at    INTEGER NOT NULL,
    outcome       TEXT,
    usage         TEXT,
    duration_ms   INTEGER
);
CREATE INDEX IF NOT EXISTS roster_calls_started_at ON roster_calls (started_at);
CREATE TABLE IF NOT EXISTS roster_records (
    generation_id TEXT PRIMARY KEY,
    body          TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS roster_cache (
    evidence_digest      TEXT NOT NULL,
    configuration_digest TEXT NOT NULL,
    body                 TEXT NOT NULL,
    PRIMARY KEY (evidence_digest, configuration_digest)
);
CREATE TABLE IF NOT EXISTS roster_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
";

/// The file name used inside a data directory.
pub const ROSTER_DB_FILE: &str = "roster.sqlite3";

/// Roster state in a SQLite database file.
#[derive(Debug)]
pub struct SqliteRosterStore {
    conn: Connection,
}

fn to_sql_time(field: &'static str, value: u64) -> Result<i64, RosterStoreError> {
    i64::try_from(value).map_err(|_| RosterStoreError::InvalidValue {
        field,
        value: value.to_string(),
    })
}

fn from_sql_time(field: &'static str, value: i64) -> Result<u64, RosterStoreError> {
    u64::try_from(value).map_err(|_| RosterStoreError::InvalidValue {
        field,
        value: value.to_string(),
    })
}

impl SqliteRosterStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, RosterStoreError> {
        let conn = Connection::open(path)?;
        Self::init(conn)
    }

    /// Opens (creating the directory if needed) `dir/roster.sqlite3`.
    pub fn open_dir(dir: impl AsRef<Path>) -> Result<Self, RosterStoreError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|source| RosterStoreError::DataDir {
            path: dir.display().to_string(),
            source,
        })?;
        Self::open(dir.join(ROSTER_DB_FILE))
    }

    /// A private in-memory SQLite database (same code path as a file, nothing on disk).
    pub fn open_in_memory() -> Result<Self, RosterStoreError> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<Self, RosterStoreError> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // `journal_mode` returns a row, so it is read rather than executed.
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
        conn.execute_batch("PRAGMA synchronous=FULL;")?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(RosterStoreError::SchemaTooNew {
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        conn.execute_batch(SCHEMA)?;
        conn.execute_batch(&format!("PRAGMA user_version={SCHEMA_VERSION};"))?;
        Ok(Self { conn })
    }
}

fn band_from_sql(value: i64) -> Result<Band, RosterStoreError> {
    u8::try_from(value)
        .ok()
        .and_then(|number| Band::try_from(number).ok())
        .ok_or(RosterStoreError::InvalidValue {
            field: "band",
            value: value.to_string(),
        })
}

impl RosterStore for SqliteRosterStore {
    fn enqueue(
        &mut self,
        evidence: &StoredEvidence,
        item: &PendingItem,
    ) -> Result<(), RosterStoreError> {
        let pending_since = to_sql_time("pending_since", item.pending_since)?;
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO roster_evidence (generation_id, evidence_digest, canonical_json)
             VALUES (?1, ?2, ?3)
             ON CONFLICT(generation_id) DO UPDATE SET
               evidence_digest = excluded.evidence_digest,
               canonical_json = excluded.canonical_json",
            params![
                evidence.generation_id,
                evidence.evidence_digest,
                evidence.canonical_json
            ],
        )?;
        let seq: i64 = tx.query_row(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM roster_pending",
            [],
            |row| row.get(0),
        )?;
        tx.execute(
            "INSERT OR REPLACE INTO roster_pending
               (generation_id, evidence_digest, band, pending_since, seq)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                item.generation_id,
                item.evidence_digest,
                i64::from(item.band.number()),
                pending_since,
                seq
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn pending(&self) -> Result<Vec<PendingItem>, RosterStoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT generation_id, evidence_digest, band, pending_since
             FROM roster_pending ORDER BY seq",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, i64>(3)?,
            ))
        })?;
        let mut items = Vec::new();
        for row in rows {
            let (generation_id, evidence_digest, band, pending_since) = row?;
            items.push(PendingItem {
                generation_id,
                evidence_digest,
                band: band_from_sql(band)?,
                pending_since: from_sql_time("pending_since", pending_since)?,
            });
        }
        Ok(items)
    }

    fn remove_pending(
        &mut self,
        generation_id: &str,
        evidence_digest: &str,
    ) -> Result<bool, RosterStoreError> {
        let removed = self.conn.execute(
            "DELETE FROM roster_pending WHERE generation_id = ?1 AND evidence_digest = ?2",
            params![generation_id, evidence_digest],
        )?;
        Ok(removed > 0)
    }

    fn evidence(&self, generation_id: &str) -> Result<Option<StoredEvidence>, RosterStoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT evidence_digest, canonical_json FROM roster_evidence
                 WHERE generation_id = ?1",
                params![generation_id],
                |row| {
                    Ok(StoredEvidence {
                        generation_id: generation_id.to_owned(),
                        evidence_digest: row.get(0)?,
                        canonical_json: row.get(1)?,
                    })
                },
            )
            .optional()?)
    }

    fn begin_call(
        &mut self,
        generation_id: &str,
        started_at: u64,
    ) -> Result<CallId, RosterStoreError> {
        let started_at = to_sql_time("started_at", started_at)?;
        // Autocommit: with WAL and synchronous=FULL the receipt is durable when this returns.
        self.conn.execute(
            "INSERT INTO roster_calls (generation_id, started_at) VALUES (?1, ?2)",
            params![generation_id, started_at],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    fn finish_call(
        &mut self,
        id: CallId,
        outcome: CallOutcome,
        usage: Option<CallUsage>,
        duration_ms: u64,
    ) -> Result<(), RosterStoreError> {
        let usage = usage
            .map(|usage| serde_json::to_string(&usage))
            .transpose()?;
        let duration_ms = to_sql_time("duration_ms", duration_ms)?;
        let updated = self.conn.execute(
            "UPDATE roster_calls SET outcome = ?2, usage = ?3, duration_ms = ?4 WHERE id = ?1",
            params![id, outcome.as_str(), usage, duration_ms],
        )?;
        if updated == 0 {
            return Err(RosterStoreError::UnknownCall(id));
        }
        Ok(())
    }

    fn history(&self) -> Result<Vec<CallReceipt>, RosterStoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, generation_id, started_at, outcome, usage, duration_ms
             FROM roster_calls ORDER BY started_at, id",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, Option<String>>(3)?,
                row.get::<_, Option<String>>(4)?,
                row.get::<_, Option<i64>>(5)?,
            ))
        })?;
        let mut receipts = Vec::new();
        for row in rows {
            let (id, generation_id, started_at, outcome, usage, duration_ms) = row?;
            let outcome = match outcome {
                None => None,
                Some(text) => Some(CallOutcome::parse(&text).ok_or(
                    RosterStoreError::InvalidValue {
                        field: "outcome",
                        value: text,
                    },
                )?),
            };
            let usage = usage
                .map(|text| serde_json::from_str::<CallUsage>(&text))
                .transpose()?;
            let duration_ms = duration_ms
                .map(|value| from_sql_time("duration_ms", value))
                .transpose()?;
            receipts.push(CallReceipt {
                id,
                generation_id,
                started_at: from_sql_time("started_at", started_at)?,
                outcome,
                usage,
                duration_ms,
            });
        }
        Ok(receipts)
    }

    fn prune_history(&mut self, cutoff: u64) -> Result<usize, RosterStoreError> {
        let cutoff = i64::try_from(cutoff).unwrap_or(i64::MAX);
        Ok(self.conn.execute(
            "DELETE FROM roster_calls WHERE started_at <= ?1",
            params![cutoff],
        )?)
    }

    fn put_record(&mut self, record: &SemanticRecord) -> Result<(), RosterStoreError> {
        let body = serde_json::to_string(record)?;
        self.conn.execute(
            "INSERT OR REPLACE INTO roster_records (generation_id, body) VALUES (?1, ?2)",
            params![record.generation_id, body],
        )?;
        Ok(())
    }

    fn record(&self, generation_id: &str) -> Result<Option<SemanticRecord>, RosterStoreError> {
        let body: Option<String> = self
            .conn
            .query_row(
                "SELECT body FROM roster_records WHERE generation_id = ?1",
                params![generation_id],
                |row| row.get(0),
            )
            .optional()?;
        Ok(body.map(|text| serde_json::from_str(&text)).transpose()?)
    }

    fn records(&self) -> Result<Vec<SemanticRecord>, RosterStoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT body FROM roster_records ORDER BY generation_id")?;
        let rows = stmt.query_map([], |row| row.get::<_, String>(0))?;
        let mut records = Vec::new();
        for row in rows {
            records.push(serde_json::from_str(&row?)?);
        }
        Ok(records)
    }

    fn cached(
        &self,
        evidence_digest: &str,
        configuration_digest: &str,
    ) -> Result<Option<SemanticRecord>, RosterStoreError> {
        let body: Option<String> = self
            .conn
            .query_row(
                "SELECT body FROM roster_cache
                 WHERE evidence_digest = ?1 AND configuration_digest = ?2",
                params![evidence_digest, configuration_digest],
                |row| row.get(0),
            )
            .optional()?;
        Ok(body.map(|text| serde_json::from_str(&text)).transpose()?)
    }

    fn put_cached(&mut self, record: &SemanticRecord) -> Result<(), RosterStoreError> {
        let Some(configuration) = &record.configuration_digest else {
            return Ok(());
        };
        let body = serde_json::to_string(record)?;
        self.conn.execute(
            "INSERT OR REPLACE INTO roster_cache (evidence_digest, configuration_digest, body)
             VALUES (?1, ?2, ?3)",
            params![record.evidence_digest, configuration, body],
        )?;
        Ok(())
    }

    fn meta(&self, key: &str) -> Result<Option<String>, RosterStoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT value FROM roster_meta WHERE key = ?1",
                params![key],
                |row| row.get(0),
            )
            .optional()?)
    }

    fn set_meta(&mut self, key: &str, value: &str) -> Result<(), RosterStoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO roster_meta (key, value) VALUES (?1, ?2)",
            params![key, value],
        )?;
        Ok(())
    }

    fn reset(&mut self) -> Result<(), RosterStoreError> {
        self.conn.execute_batch(
            "BEGIN;
             DELETE FROM roster_pending;
             DELETE FROM roster_evidence;
             DELETE FROM roster_records;
             DELETE FROM roster_cache;
             DELETE FROM roster_meta;
             COMMIT;",
        )?;
        Ok(())
    }
}
