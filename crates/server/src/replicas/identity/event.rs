//! The events of the shared identity feed (replicas, `docs/replicas.md`): what one replica
//! writes and every replica applies to its SQLite mirror, as JSON.
//!
//! Invariants: a key travels as its hash, never its secret; an event carries exactly what the
//! mirror stores (the same rows on every replica), including each audit record's `actorKeyId`,
//! `note` and `approvedBy` and its instant as the writing replica recorded it. The approval
//! fields are read with defaults, so an event written by a release without them still applies.

use serde::{Deserialize, Serialize};
use turnstile_store::{
    AuditKind, AuditRecord, KeyRole, ServiceStore, ServiceStoreError, StoredKey, StoredProfile,
};

/// A key as stored: its hash and what it grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyDoc {
    pub hash: String,
    pub role: String,
    pub workspace_id: Option<String>,
    pub principal_id: Option<String>,
    pub created_at_ms: u64,
}

/// An audit record as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditDoc {
    pub workspace_id: String,
    pub kind: String,
    pub record_json: String,
    pub at_epoch_ms: u64,
    pub actor_key_id: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
    #[serde(default)]
    pub approved_by: Option<String>,
}

/// A revocation: the key's hash, its workspace and the revocation's audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevocationDoc {
    pub workspace_id: String,
    pub hash: String,
    pub record: AuditDoc,
}

/// A profile registration, as the registering replica validated it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistrationDoc {
    pub workspace_id: String,
    pub profile_version: String,
    pub profile_json: String,
    pub registered_at_ms: u64,
    pub actor_key_id: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
    #[serde(default)]
    pub approved_by: Option<String>,
    /// Its profile-change record (`None`: the current revision did not change, or a seeded
    /// registration whose record travels as its own [`IdentityEvent::Audit`]).
    pub change: Option<AuditDoc>,
}

/// An audit record appended on its own, with the replica that wrote it (which has it already).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEventDoc {
    pub record: AuditDoc,
    pub origin: Option<String>,
}

/// One event of the feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum IdentityEvent {
    KeyCreated(KeyDoc),
    KeyRevoked(RevocationDoc),
    ProfileRegistered(RegistrationDoc),
    Audit(AuditEventDoc),
}

/// An event that cannot be read or applied.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The event's JSON is not an identity event.
    #[error("identity event is not valid: {0}")]
    Malformed(String),
    /// Applying it to the mirror's store failed.
    #[error(transparent)]
    Store(#[from] ServiceStoreError),
}

impl IdentityEvent {
    pub fn to_json(&self) -> Result<String, EventError> {
        serde_json::to_string(self).map_err(|e| EventError::Malformed(e.to_string()))
    }

    pub fn parse(json: &str) -> Result<Self, EventError> {
        serde_json::from_str(json).map_err(|e| EventError::Malformed(e.to_string()))
    }
}

impl From<&StoredKey> for KeyDoc {
    fn from(key: &StoredKey) -> Self {
        KeyDoc {
            hash: key.hash.clone(),
            role: key.role.as_str().to_owned(),
            workspace_id: key.workspace_id.clone(),
            principal_id: key.principal_id.clone(),
            created_at_ms: key.created_at_ms,
        }
    }
}

impl KeyDoc {
    pub fn stored(&self) -> Result<StoredKey, EventError> {
        Ok(StoredKey {
            hash: self.hash.clone(),
            role: KeyRole::parse(&self.role)
                .ok_or_else(|| EventError::Malformed(format!("role {}", self.role)))?,
            workspace_id: self.workspace_id.clone(),
            principal_id: self.principal_id.clone(),
            created_at_ms: self.created_at_ms,
        })
    }
}

impl From<&AuditRecord> for AuditDoc {
    fn from(record: &AuditRecord) -> Self {
        AuditDoc {
            workspace_id: record.workspace_id.clone(),
            kind: record.kind.as_str().to_owned(),
            record_json: record.record_json.clone(),
            at_epoch_ms: record.at_epoch_ms,
            actor_key_id: record.actor_key_id.clone(),
            note: record.note.clone(),
            approved_by: record.approved_by.clone(),
        }
    }
}

impl AuditDoc {
    pub fn stored(&self) -> Result<AuditRecord, EventError> {
        Ok(AuditRecord {
            workspace_id: self.workspace_id.clone(),
            kind: AuditKind::parse(&self.kind)
                .ok_or_else(|| EventError::Malformed(format!("audit kind {}", self.kind)))?,
            record_json: self.record_json.clone(),
            at_epoch_ms: self.at_epoch_ms,
            actor_key_id: self.actor_key_id.clone(),
            note: self.note.clone(),
            approved_by: self.approved_by.clone(),
        })
    }
}

impl RegistrationDoc {
    pub fn stored(&self) -> StoredProfile {
        StoredProfile {
            workspace_id: self.workspace_id.clone(),
            profile_version: self.profile_version.clone(),
            profile_json: self.profile_json.clone(),
            registered_at_ms: self.registered_at_ms,
        }
    }
}

/// Applies `event` to a store directly (start-up, before the registry and the driver exist).
/// Applying an event twice is harmless for keys (a duplicate is skipped).
pub fn apply_to_store(
    store: &mut dyn ServiceStore,
    event: &IdentityEvent,
) -> Result<(), EventError> {
    match event {
        IdentityEvent::KeyCreated(key) => match store.insert_key(&key.stored()?) {
            Ok(()) | Err(ServiceStoreError::DuplicateKey) => Ok(()),
            Err(error) => Err(error.into()),
        },
        IdentityEvent::KeyRevoked(revocation) => {
            revoke_in_store(store, revocation)?;
            Ok(())
        }
        IdentityEvent::ProfileRegistered(registration) => {
            let change = registration
                .change
                .as_ref()
                .map(AuditDoc::stored)
                .transpose()?;
            store.append_profile(&registration.stored(), change.as_ref())?;
            Ok(())
        }
        IdentityEvent::Audit(audit) => {
            store.append_audit(&[audit.record.stored()?])?;
            Ok(())
        }
    }
}

/// Deletes the revoked key and records the revocation; a key this mirror never had still gets
/// its record (the audit log is the deployment's).
pub fn revoke_in_store(
    store: &mut dyn ServiceStore,
    revocation: &RevocationDoc,
) -> Result<(), EventError> {
    let record = revocation.record.stored()?;
    if !store.revoke_key(&revocation.workspace_id, &revocation.hash, &record)? {
        store.append_audit(&[record])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_as_json_and_carry_no_secret() {
        let key = StoredKey {
            hash: "ab".repeat(32),
            role: KeyRole::Principal,
            workspace_id: Some("w".into()),
            principal_id: Some("p".into()),
            created_at_ms: 5,
        };
        let event = IdentityEvent::KeyCreated(KeyDoc::from(&key));
        let json = event.to_json().unwrap();
        assert!(json.contains("\"event\":\"key-created\""), "{json}");
        let back = IdentityEvent::parse(&json).unwrap();
        assert_eq!(back, event);
        let IdentityEvent::KeyCreated(doc) = back else {
            panic!()
        };
        assert_eq!(doc.stored().unwrap(), key);
        assert!(IdentityEvent::parse("{\"event\":\"nope\"}").is_err());
    }
}
