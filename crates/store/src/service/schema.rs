//! The SQLite service store's schema and its migrations: the tables of the current version
//! ([`SCHEMA`], created with `IF NOT EXISTS`, so a new file is current at once) and the steps
//! that bring a file written by an older release up to [`SCHEMA_VERSION`].
//!
//! Invariants: a migration only adds (columns that older rows read back as `NULL`, tables), so
//! a data directory of any earlier version opens with every key, registration and audit record
//! it held; the steps and the new `user_version` commit in one transaction; a file of a newer
//! version than [`SCHEMA_VERSION`] is refused before anything is written (`sqlite.rs`). The
//! versions: 2 (keys, profiles, audit), 3 (`audit.actor_key_id`, `mirror_cursor`), 4
//! (`audit.note`, `audit.approved_by`: the approval on record of a revision change).

use rusqlite::Connection;

use super::types::ServiceStoreError;

/// The version this build writes (`PRAGMA user_version`).
pub(super) const SCHEMA_VERSION: i64 = 4;

/// Every table and index of [`SCHEMA_VERSION`].
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS api_keys (
    hash TEXT PRIMARY KEY NOT NULL,
    role TEXT NOT NULL,
    workspace_id TEXT,
    principal_id TEXT,
    created_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS profiles (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id TEXT NOT NULL,
    profile_version TEXT NOT NULL,
    profile_json TEXT NOT NULL,
    registered_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    record_json TEXT NOT NULL,
    at_epoch_ms INTEGER NOT NULL,
    actor_key_id TEXT,
    note TEXT,
    approved_by TEXT
);
CREATE INDEX IF NOT EXISTS audit_by_workspace ON audit(workspace_id, kind, seq);
CREATE TABLE IF NOT EXISTS mirror_cursor (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    epoch TEXT NOT NULL,
    seq INTEGER NOT NULL
);
";

/// Brings an older main file up to [`SCHEMA_VERSION`] (idempotent: `CREATE TABLE IF NOT
/// EXISTS` above already made the current tables of a new file).
pub(super) fn migrate(conn: &Connection) -> Result<(), ServiceStoreError> {
    let mut steps = String::from("BEGIN IMMEDIATE;");
    // Version 2 → 3: who made a change; 3 → 4: the note and approver of a revision change.
    // Old rows keep NULL (nothing known).
    for column in ["actor_key_id", "note", "approved_by"] {
        let present = conn
            .prepare("SELECT 1 FROM pragma_table_info('audit') WHERE name = ?1")?
            .exists([column])?;
        if !present {
            steps.push_str(&format!("ALTER TABLE audit ADD COLUMN {column} TEXT;"));
        }
    }
    steps.push_str(&format!("PRAGMA user_version={SCHEMA_VERSION}; COMMIT;"));
    conn.execute_batch(&steps)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{
        AuditKind, AuditRecord, ServiceStore, SqliteServiceStore, StoredProfile, SERVICE_DB_FILE,
    };

    #[test]
    fn a_version_2_database_gains_the_actor_column_and_keeps_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SERVICE_DB_FILE);
        {
            // The audit table as schema version 2 wrote it.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE audit (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    workspace_id TEXT NOT NULL,
                    kind TEXT NOT NULL,
                    record_json TEXT NOT NULL,
                    at_epoch_ms INTEGER NOT NULL
                );
                INSERT INTO audit (workspace_id, kind, record_json, at_epoch_ms)
                VALUES ('w', 'profile-change', '{\"old\":true}', 7);
                PRAGMA user_version=2;",
            )
            .unwrap();
        }
        let mut store = SqliteServiceStore::open(&path).unwrap();
        let new = AuditRecord {
            workspace_id: "w".into(),
            kind: AuditKind::ProfileChange,
            record_json: "{}".into(),
            at_epoch_ms: 8,
            actor_key_id: Some("key_0123456789abcdef".into()),
            note: None,
            approved_by: None,
        };
        store
            .append_profile(
                &StoredProfile {
                    workspace_id: "w".into(),
                    profile_version: "v2".into(),
                    profile_json: "{}".into(),
                    registered_at_ms: 8,
                },
                Some(&new),
            )
            .unwrap();
        drop(store);
        let store = SqliteServiceStore::open(&path).unwrap();
        let records = store.audit("w", AuditKind::ProfileChange, 10).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].record_json, "{\"old\":true}");
        assert_eq!(records[0].actor_key_id, None, "an old record has no actor");
        assert_eq!(records[1], new);
        let version: i64 = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    /// A data directory written by the previous release (schema version 3, exactly main's
    /// `SCHEMA` before version 4) opens, keeps every key, registration, record and actor, and
    /// gains the approval columns: old records read back with no note and no approver.
    #[test]
    fn a_version_3_database_gains_the_approval_columns_and_keeps_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SERVICE_DB_FILE);
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "PRAGMA journal_mode=WAL;
                CREATE TABLE api_keys (
                    hash TEXT PRIMARY KEY NOT NULL,
                    role TEXT NOT NULL,
                    workspace_id TEXT,
                    principal_id TEXT,
                    created_at_ms INTEGER NOT NULL
                );
                CREATE TABLE profiles (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    workspace_id TEXT NOT NULL,
                    profile_version TEXT NOT NULL,
                    profile_json TEXT NOT NULL,
                    registered_at_ms INTEGER NOT NULL
                );
                CREATE TABLE audit (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    workspace_id TEXT NOT NULL,
                    kind TEXT NOT NULL,
                    record_json TEXT NOT NULL,
                    at_epoch_ms INTEGER NOT NULL,
                    actor_key_id TEXT
                );
                CREATE INDEX audit_by_workspace ON audit(workspace_id, kind, seq);
                CREATE TABLE mirror_cursor (
                    id INTEGER PRIMARY KEY CHECK (id = 0),
                    epoch TEXT NOT NULL,
                    seq INTEGER NOT NULL
                );
                INSERT INTO api_keys VALUES ('aa', 'admin', NULL, NULL, 1);
                INSERT INTO profiles (workspace_id, profile_version, profile_json,
                                      registered_at_ms)
                VALUES ('w', 'v1', '{}', 2);
                INSERT INTO audit (workspace_id, kind, record_json, at_epoch_ms, actor_key_id)
                VALUES ('w', 'profile-change', '{\"v\":1}', 2, 'key_0123456789abcdef');
                INSERT INTO mirror_cursor VALUES (0, 'e', 4);
                PRAGMA user_version=3;",
            )
            .unwrap();
        }
        let mut store = SqliteServiceStore::open(&path).unwrap();
        let new = AuditRecord {
            workspace_id: "w".into(),
            kind: AuditKind::ProfileChange,
            record_json: "{\"v\":2}".into(),
            at_epoch_ms: 3,
            actor_key_id: Some("key_fedcba9876543210".into()),
            note: Some("CHG-12 canary went fine".into()),
            approved_by: Some("Dana (SRE on call)".into()),
        };
        let profile = StoredProfile {
            workspace_id: "w".into(),
            profile_version: "v2".into(),
            profile_json: "{}".into(),
            registered_at_ms: 3,
        };
        store.append_profile(&profile, Some(&new)).unwrap();
        drop(store);
        let store = SqliteServiceStore::open(&path).unwrap();
        assert_eq!(store.keys().unwrap().len(), 1);
        assert_eq!(store.profiles().unwrap().len(), 2);
        assert_eq!(store.mirror_cursor().unwrap(), Some(("e".to_owned(), 4)));
        let records = store.audit("w", AuditKind::ProfileChange, 10).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].record_json, "{\"v\":1}");
        assert_eq!(
            records[0].actor_key_id.as_deref(),
            Some("key_0123456789abcdef")
        );
        assert_eq!(
            (records[0].note.clone(), records[0].approved_by.clone()),
            (None, None)
        );
        assert_eq!(records[1], new);
        assert_eq!(store.audit_all().unwrap()[1], new);
        let version: i64 = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }
}
