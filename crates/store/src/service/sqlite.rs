//! The SQLite service store: the main database file in WAL mode with `synchronous=FULL`, so a
//! registration acknowledged to a client survives a crash of the machine.
//!
//! Held leases and budget spend are not here: they live in the lease log (`lease_log/`), an
//! append-only file the driver writes without a transaction (`lease_log/mod.rs` says why).
//!
//! Schema (version 4, tracked with `PRAGMA user_version` of the main file; its SQL and the
//! migrations from older versions are in `schema.rs`):
//!
//! - `api_keys(hash PRIMARY KEY, role, workspace_id, principal_id, created_at_ms)`
//! - `profiles(seq INTEGER PRIMARY KEY AUTOINCREMENT, workspace_id, profile_version,
//!   profile_json, registered_at_ms)`: registration order is `seq` order.
//! - `audit(seq INTEGER PRIMARY KEY AUTOINCREMENT, workspace_id, kind, record_json,
//!   at_epoch_ms, actor_key_id NULL, note NULL, approved_by NULL)` with an index on
//!   `(workspace_id, kind, seq)`. `actor_key_id` (version 3) is the admin key that made the
//!   change; `note` and `approved_by` (version 4) are the approval on record of a revision
//!   change. An older database gains the missing columns on open (`ALTER TABLE … ADD COLUMN`,
//!   in the same transaction as the new `user_version`), and its old records read back with
//!   none.
//! - `mirror_cursor(id = 0, epoch, seq)`: replicas only, the shared feed this store mirrors
//!   and the last event applied (`docs/replicas.md`). Added with `CREATE TABLE IF NOT
//!   EXISTS` in version 3: a build without replicas never reads it.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use super::schema::{migrate, SCHEMA, SCHEMA_VERSION};
use super::types::{
    AuditKind, AuditRecord, KeyRole, ServiceStore, ServiceStoreError, StoredKey, StoredProfile,
};

/// The database file name inside the data directory.
pub const SERVICE_DB_FILE: &str = "service.sqlite3";

/// A [`ServiceStore`] in one SQLite file.
pub struct SqliteServiceStore {
    conn: Connection,
}

fn to_sql_time(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn from_sql_time(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl SqliteServiceStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ServiceStoreError> {
        Self::init(Connection::open(path.as_ref())?)
    }

    /// Opens (creating the directory if needed) `dir/service.sqlite3`.
    pub fn open_dir(dir: impl AsRef<Path>) -> Result<Self, ServiceStoreError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|source| ServiceStoreError::DataDir {
            path: dir.display().to_string(),
            source,
        })?;
        Self::open(dir.join(SERVICE_DB_FILE))
    }

    /// Opens the existing `dir/service.sqlite3` for offline maintenance, holding SQLite's
    /// exclusive lock until the store is dropped. Fails with [`ServiceStoreError::InUse`] at once
    /// while any other connection has the database open (a running service keeps one open for
    /// its whole life), and with [`ServiceStoreError::NoDatabase`] when there is no database;
    /// never creates one.
    pub fn open_dir_exclusive(dir: impl AsRef<Path>) -> Result<Self, ServiceStoreError> {
        use rusqlite::OpenFlags;
        let path = dir.as_ref().join(SERVICE_DB_FILE);
        let display = path.display().to_string();
        if !path.is_file() {
            return Err(ServiceStoreError::NoDatabase { path: display });
        }
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // A running service never lets go: fail at once rather than after a busy wait.
        conn.busy_timeout(std::time::Duration::ZERO)?;
        // Before the first access: in WAL mode this makes SQLite take the exclusive lock
        // instead of sharing the WAL index, which fails while another connection is open.
        let _mode: String =
            conn.query_row("PRAGMA locking_mode=EXCLUSIVE", [], |row| row.get(0))?;
        match conn.execute_batch("BEGIN EXCLUSIVE; COMMIT;") {
            Ok(()) => {}
            Err(rusqlite::Error::SqliteFailure(error, _))
                if matches!(
                    error.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) =>
            {
                return Err(ServiceStoreError::InUse { path: display });
            }
            Err(error) => return Err(error.into()),
        }
        Self::init(conn)
    }

    /// Replaces every admin key by `key` and appends `record` to the audit log, in one
    /// transaction; returns how many admin keys were removed. Principal keys are untouched.
    pub fn replace_admin_keys(
        &mut self,
        key: &StoredKey,
        record: &AuditRecord,
    ) -> Result<usize, ServiceStoreError> {
        let tx = self.conn.transaction()?;
        let removed = tx.execute("DELETE FROM api_keys WHERE role = 'admin'", [])?;
        tx.execute(
            "INSERT INTO api_keys (hash, role, workspace_id, principal_id, created_at_ms)
             VALUES (?1, 'admin', NULL, NULL, ?2)",
            params![key.hash, to_sql_time(key.created_at_ms)],
        )?;
        insert_audit(&tx, record)?;
        tx.commit()?;
        Ok(removed)
    }

    /// A private in-memory SQLite database (same code path as a file).
    pub fn open_in_memory() -> Result<Self, ServiceStoreError> {
        Self::init(Connection::open_in_memory()?)
    }

    /// Sets up `conn`: WAL, `synchronous=FULL`, the schema.
    fn init(conn: Connection) -> Result<Self, ServiceStoreError> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
        conn.execute_batch("PRAGMA synchronous=FULL;")?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(ServiceStoreError::SchemaTooNew {
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        conn.execute_batch(SCHEMA)?;
        migrate(&conn)?;
        Ok(Self { conn })
    }
}

fn insert_audit(conn: &Connection, record: &AuditRecord) -> Result<(), ServiceStoreError> {
    conn.execute(
        "INSERT INTO audit (workspace_id, kind, record_json, at_epoch_ms, actor_key_id, note,
                            approved_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            record.workspace_id,
            record.kind.as_str(),
            record.record_json,
            to_sql_time(record.at_epoch_ms),
            record.actor_key_id,
            record.note,
            record.approved_by,
        ],
    )?;
    Ok(())
}

impl ServiceStore for SqliteServiceStore {
    fn insert_key(&mut self, key: &StoredKey) -> Result<(), ServiceStoreError> {
        let exists: Option<i64> = self
            .conn
            .query_row(
                "SELECT 1 FROM api_keys WHERE hash = ?1",
                params![key.hash],
                |row| row.get(0),
            )
            .optional()?;
        if exists.is_some() {
            return Err(ServiceStoreError::DuplicateKey);
        }
        self.conn.execute(
            "INSERT INTO api_keys (hash, role, workspace_id, principal_id, created_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                key.hash,
                key.role.as_str(),
                key.workspace_id,
                key.principal_id,
                to_sql_time(key.created_at_ms)
            ],
        )?;
        Ok(())
    }

    fn keys(&self) -> Result<Vec<StoredKey>, ServiceStoreError> {
        let mut statement = self.conn.prepare(
            "SELECT hash, role, workspace_id, principal_id, created_at_ms FROM api_keys
             ORDER BY created_at_ms, hash",
        )?;
        let rows = statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Option<String>>(2)?,
                row.get::<_, Option<String>>(3)?,
                row.get::<_, i64>(4)?,
            ))
        })?;
        let mut keys = Vec::new();
        for row in rows {
            let (hash, role, workspace_id, principal_id, created) = row?;
            let role =
                KeyRole::parse(&role).ok_or(ServiceStoreError::InvalidValue { field: "role" })?;
            keys.push(StoredKey {
                hash,
                role,
                workspace_id,
                principal_id,
                created_at_ms: from_sql_time(created),
            });
        }
        Ok(keys)
    }

    fn revoke_key(
        &mut self,
        workspace_id: &str,
        hash: &str,
        record: &AuditRecord,
    ) -> Result<bool, ServiceStoreError> {
        let tx = self.conn.transaction()?;
        let deleted = tx.execute(
            "DELETE FROM api_keys WHERE hash = ?1 AND role = 'principal' AND workspace_id = ?2",
            params![hash, workspace_id],
        )?;
        if deleted == 0 {
            return Ok(false);
        }
        insert_audit(&tx, record)?;
        tx.commit()?;
        Ok(true)
    }

    fn has_admin_key(&self) -> Result<bool, ServiceStoreError> {
        let found: Option<i64> = self
            .conn
            .query_row(
                "SELECT 1 FROM api_keys WHERE role = 'admin' LIMIT 1",
                [],
                |row| row.get(0),
            )
            .optional()?;
        Ok(found.is_some())
    }

    fn append_profile(
        &mut self,
        profile: &StoredProfile,
        change: Option<&AuditRecord>,
    ) -> Result<(), ServiceStoreError> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO profiles (workspace_id, profile_version, profile_json, registered_at_ms)
             VALUES (?1, ?2, ?3, ?4)",
            params![
                profile.workspace_id,
                profile.profile_version,
                profile.profile_json,
                to_sql_time(profile.registered_at_ms)
            ],
        )?;
        if let Some(change) = change {
            insert_audit(&tx, change)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn profiles(&self) -> Result<Vec<StoredProfile>, ServiceStoreError> {
        let mut statement = self.conn.prepare(
            "SELECT workspace_id, profile_version, profile_json, registered_at_ms FROM profiles
             ORDER BY seq",
        )?;
        let rows = statement.query_map([], |row| {
            Ok(StoredProfile {
                workspace_id: row.get(0)?,
                profile_version: row.get(1)?,
                profile_json: row.get(2)?,
                registered_at_ms: from_sql_time(row.get(3)?),
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    fn append_audit(&mut self, records: &[AuditRecord]) -> Result<(), ServiceStoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let tx = self.conn.transaction()?;
        for record in records {
            insert_audit(&tx, record)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn audit(
        &self,
        workspace_id: &str,
        kind: AuditKind,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, ServiceStoreError> {
        let mut statement = self.conn.prepare(
            "SELECT workspace_id, record_json, at_epoch_ms, actor_key_id, note, approved_by
             FROM audit WHERE workspace_id = ?1 AND kind = ?2 ORDER BY seq DESC LIMIT ?3",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = statement.query_map(params![workspace_id, kind.as_str(), limit], |row| {
            Ok(AuditRecord {
                workspace_id: row.get(0)?,
                kind,
                record_json: row.get(1)?,
                at_epoch_ms: from_sql_time(row.get(2)?),
                actor_key_id: row.get(3)?,
                note: row.get(4)?,
                approved_by: row.get(5)?,
            })
        })?;
        let mut records = rows.collect::<Result<Vec<_>, _>>()?;
        records.reverse();
        Ok(records)
    }

    fn audit_all(&self) -> Result<Vec<AuditRecord>, ServiceStoreError> {
        let mut statement = self.conn.prepare(
            "SELECT workspace_id, kind, record_json, at_epoch_ms, actor_key_id, note, approved_by
             FROM audit ORDER BY seq",
        )?;
        let rows = statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, Option<String>>(4)?,
                row.get::<_, Option<String>>(5)?,
                row.get::<_, Option<String>>(6)?,
            ))
        })?;
        let mut records = Vec::new();
        for row in rows {
            let (workspace_id, kind, record_json, at, actor_key_id, note, approved_by) = row?;
            let kind =
                AuditKind::parse(&kind).ok_or(ServiceStoreError::InvalidValue { field: "kind" })?;
            records.push(AuditRecord {
                workspace_id,
                kind,
                record_json,
                at_epoch_ms: from_sql_time(at),
                actor_key_id,
                note,
                approved_by,
            });
        }
        Ok(records)
    }

    fn clear_identity(&mut self) -> Result<(), ServiceStoreError> {
        self.conn.execute_batch(
            "BEGIN IMMEDIATE; DELETE FROM api_keys; DELETE FROM profiles; DELETE FROM audit;
             DELETE FROM mirror_cursor; COMMIT;",
        )?;
        Ok(())
    }

    fn mirror_cursor(&self) -> Result<Option<(String, u64)>, ServiceStoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT epoch, seq FROM mirror_cursor WHERE id = 0",
                [],
                |row| Ok((row.get::<_, String>(0)?, from_sql_time(row.get(1)?))),
            )
            .optional()?)
    }

    fn set_mirror_cursor(&mut self, epoch: &str, seq: u64) -> Result<(), ServiceStoreError> {
        self.conn.execute(
            "INSERT INTO mirror_cursor (id, epoch, seq) VALUES (0, ?1, ?2)
             ON CONFLICT(id) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq",
            params![epoch, to_sql_time(seq)],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(store: &mut dyn ServiceStore) {
        assert!(!store.has_admin_key().unwrap());
        let key = StoredKey {
            hash: "ab".repeat(32),
            role: KeyRole::Admin,
            workspace_id: None,
            principal_id: None,
            created_at_ms: 1,
        };
        store.insert_key(&key).unwrap();
        assert!(matches!(
            store.insert_key(&key),
            Err(ServiceStoreError::DuplicateKey)
        ));
        assert!(store.has_admin_key().unwrap());
        assert_eq!(store.keys().unwrap(), vec![key.clone()]);

        for (i, version) in ["v1", "v2", "v1"].iter().enumerate() {
            let profile = StoredProfile {
                workspace_id: "w".into(),
                profile_version: (*version).into(),
                profile_json: "{}".into(),
                registered_at_ms: i as u64,
            };
            let change = AuditRecord {
                workspace_id: "w".into(),
                kind: AuditKind::ProfileChange,
                record_json: format!("{{\"n\":{i}}}"),
                at_epoch_ms: i as u64,
                actor_key_id: (i == 1).then(|| "key_a".to_owned()),
                note: (i == 1).then(|| "INC-7: tighter limits".to_owned()),
                approved_by: (i == 1).then(|| "ops lead".to_owned()),
            };
            store.append_profile(&profile, Some(&change)).unwrap();
        }
        let versions: Vec<String> = store
            .profiles()
            .unwrap()
            .into_iter()
            .map(|p| p.profile_version)
            .collect();
        assert_eq!(versions, ["v1", "v2", "v1"]);
        let last_two = store.audit("w", AuditKind::ProfileChange, 2).unwrap();
        assert_eq!(last_two.len(), 2);
        assert_eq!(last_two[0].record_json, "{\"n\":1}");
        assert_eq!(last_two[0].actor_key_id.as_deref(), Some("key_a"));
        assert_eq!(last_two[0].note.as_deref(), Some("INC-7: tighter limits"));
        assert_eq!(last_two[0].approved_by.as_deref(), Some("ops lead"));
        assert_eq!(last_two[1].note, None);
        assert_eq!(last_two[1].actor_key_id, None);
        assert!(store
            .audit("w", AuditKind::BreakerTransition, 10)
            .unwrap()
            .is_empty());

        // Revocation: only a principal key of that workspace, with its audit record.
        let principal = StoredKey {
            hash: "cd".repeat(32),
            role: KeyRole::Principal,
            workspace_id: Some("w".into()),
            principal_id: Some("p".into()),
            created_at_ms: 2,
        };
        store.insert_key(&principal).unwrap();
        let record = AuditRecord {
            workspace_id: "w".into(),
            kind: AuditKind::KeyRevocation,
            record_json: "{}".into(),
            at_epoch_ms: 3,
            actor_key_id: None,
            note: None,
            approved_by: None,
        };
        assert!(!store.revoke_key("other", &principal.hash, &record).unwrap());
        assert!(
            !store.revoke_key("w", &key.hash, &record).unwrap(),
            "admin keys stay"
        );
        assert!(store
            .audit("w", AuditKind::KeyRevocation, 10)
            .unwrap()
            .is_empty());
        assert!(store.revoke_key("w", &principal.hash, &record).unwrap());
        assert!(!store.revoke_key("w", &principal.hash, &record).unwrap());
        assert_eq!(store.keys().unwrap(), vec![key]);
        assert_eq!(
            store.audit("w", AuditKind::KeyRevocation, 10).unwrap(),
            vec![record.clone()]
        );

        // Replicas: every record in order, the mirror cursor, and clearing for adoption.
        let all = store.audit_all().unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(all[3], record);
        assert_eq!(store.mirror_cursor().unwrap(), None);
        store.set_mirror_cursor("e1", 3).unwrap();
        store.set_mirror_cursor("e1", 9).unwrap();
        assert_eq!(store.mirror_cursor().unwrap(), Some(("e1".to_owned(), 9)));
        store.clear_identity().unwrap();
        assert!(store.keys().unwrap().is_empty());
        assert!(store.profiles().unwrap().is_empty());
        assert!(store.audit_all().unwrap().is_empty());
        assert_eq!(store.mirror_cursor().unwrap(), None);
    }

    #[test]
    fn sqlite_and_memory_keep_the_same_invariants() {
        roundtrip(&mut SqliteServiceStore::open_in_memory().unwrap());
        roundtrip(&mut super::super::MemoryServiceStore::new());
    }

    #[test]
    fn exclusive_opening_is_refused_while_another_connection_is_open() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            SqliteServiceStore::open_dir_exclusive(dir.path()),
            Err(ServiceStoreError::NoDatabase { .. })
        ));
        assert!(!dir.path().join(SERVICE_DB_FILE).exists(), "never created");
        let mut running = SqliteServiceStore::open_dir(dir.path()).unwrap();
        running
            .insert_key(&StoredKey {
                hash: "old".into(),
                role: KeyRole::Admin,
                workspace_id: None,
                principal_id: None,
                created_at_ms: 1,
            })
            .unwrap();
        assert!(matches!(
            SqliteServiceStore::open_dir_exclusive(dir.path()),
            Err(ServiceStoreError::InUse { .. })
        ));
        drop(running);
        let mut offline = SqliteServiceStore::open_dir_exclusive(dir.path()).unwrap();
        let record = AuditRecord {
            workspace_id: String::new(),
            kind: AuditKind::AdminKeyReset,
            record_json: "{}".into(),
            at_epoch_ms: 2,
            actor_key_id: None,
            note: None,
            approved_by: None,
        };
        let new = StoredKey {
            hash: "new".into(),
            role: KeyRole::Admin,
            workspace_id: None,
            principal_id: None,
            created_at_ms: 2,
        };
        assert_eq!(offline.replace_admin_keys(&new, &record).unwrap(), 1);
        drop(offline);
        let reopened = SqliteServiceStore::open_dir(dir.path()).unwrap();
        let keys = reopened.keys().unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].hash, "new");
        assert_eq!(
            reopened
                .audit("", AuditKind::AdminKeyReset, 10)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn state_survives_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut store = SqliteServiceStore::open_dir(dir.path()).unwrap();
            store
                .append_audit(&[AuditRecord {
                    workspace_id: "w".into(),
                    kind: AuditKind::BreakerTransition,
                    record_json: "{}".into(),
                    at_epoch_ms: 5,
                    actor_key_id: None,
                    note: None,
                    approved_by: None,
                }])
                .unwrap();
        }
        let store = SqliteServiceStore::open_dir(dir.path()).unwrap();
        assert_eq!(
            store.audit("w", AuditKind::BreakerTransition, 10).unwrap()[0].at_epoch_ms,
            5
        );
    }
}
