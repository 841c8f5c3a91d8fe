//! The in-memory service store: the same invariants as SQLite, nothing on disk (tests).

use super::types::{
    AuditKind, AuditRecord, KeyRole, ServiceStore, ServiceStoreError, StoredKey, StoredProfile,
};

/// A [`ServiceStore`] in memory.
#[derive(Debug, Default)]
pub struct MemoryServiceStore {
    keys: Vec<StoredKey>,
    profiles: Vec<StoredProfile>,
    audit: Vec<AuditRecord>,
    cursor: Option<(String, u64)>,
}

impl MemoryServiceStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ServiceStore for MemoryServiceStore {
    fn insert_key(&mut self, key: &StoredKey) -> Result<(), ServiceStoreError> {
        if self.keys.iter().any(|k| k.hash == key.hash) {
            return Err(ServiceStoreError::DuplicateKey);
        }
        self.keys.push(key.clone());
        Ok(())
    }

    fn keys(&self) -> Result<Vec<StoredKey>, ServiceStoreError> {
        Ok(self.keys.clone())
    }

    fn revoke_key(
        &mut self,
        workspace_id: &str,
        hash: &str,
        record: &AuditRecord,
    ) -> Result<bool, ServiceStoreError> {
        let Some(index) = self.keys.iter().position(|k| {
            k.hash == hash
                && k.role == KeyRole::Principal
                && k.workspace_id.as_deref() == Some(workspace_id)
        }) else {
            return Ok(false);
        };
        self.keys.remove(index);
        self.audit.push(record.clone());
        Ok(true)
    }

    fn has_admin_key(&self) -> Result<bool, ServiceStoreError> {
        Ok(self.keys.iter().any(|k| k.role == KeyRole::Admin))
    }

    fn append_profile(
        &mut self,
        profile: &StoredProfile,
        change: Option<&AuditRecord>,
    ) -> Result<(), ServiceStoreError> {
        self.profiles.push(profile.clone());
        if let Some(change) = change {
            self.audit.push(change.clone());
        }
        Ok(())
    }

    fn profiles(&self) -> Result<Vec<StoredProfile>, ServiceStoreError> {
        Ok(self.profiles.clone())
    }

    fn append_audit(&mut self, records: &[AuditRecord]) -> Result<(), ServiceStoreError> {
        self.audit.extend_from_slice(records);
        Ok(())
    }

    fn audit(
        &self,
        workspace_id: &str,
        kind: AuditKind,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, ServiceStoreError> {
        let matching: Vec<&AuditRecord> = self
            .audit
            .iter()
            .filter(|r| r.workspace_id == workspace_id && r.kind == kind)
            .collect();
        let skip = matching.len().saturating_sub(limit);
        Ok(matching.into_iter().skip(skip).cloned().collect())
    }

    fn audit_all(&self) -> Result<Vec<AuditRecord>, ServiceStoreError> {
        Ok(self.audit.clone())
    }

    fn clear_identity(&mut self) -> Result<(), ServiceStoreError> {
        self.keys.clear();
        self.profiles.clear();
        self.audit.clear();
        self.cursor = None;
        Ok(())
    }

    fn mirror_cursor(&self) -> Result<Option<(String, u64)>, ServiceStoreError> {
        Ok(self.cursor.clone())
    }

    fn set_mirror_cursor(&mut self, epoch: &str, seq: u64) -> Result<(), ServiceStoreError> {
        self.cursor = Some((epoch.to_owned(), seq));
        Ok(())
    }
}
