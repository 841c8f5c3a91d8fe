//! The durable shapes of the admission service and the [`ServiceStore`] trait.

/// What an API key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyRole {
    /// Manages profiles and keys of every workspace.
    Admin,
    /// Acts as one principal of one workspace.
    Principal,
}

impl KeyRole {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRole::Admin => "admin",
            KeyRole::Principal => "principal",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "admin" => Some(KeyRole::Admin),
            "principal" => Some(KeyRole::Principal),
            _ => None,
        }
    }
}

/// An API key as stored: its hash and what it grants. Never the key itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    /// Lowercase hex sha256 of the key.
    pub hash: String,
    /// What the key grants.
    pub role: KeyRole,
    /// Set for principal keys.
    pub workspace_id: Option<String>,
    /// Set for principal keys.
    pub principal_id: Option<String>,
    /// When it was created.
    pub created_at_ms: u64,
}

/// One accepted profile registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProfile {
    /// The workspace.
    pub workspace_id: String,
    /// The revision registered.
    pub profile_version: String,
    /// The profile document as registered (JSON).
    pub profile_json: String,
    /// When it was registered.
    pub registered_at_ms: u64,
}

/// Which audit stream a record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditKind {
    /// `decision-admission-profile-change/v1`.
    ProfileChange,
    /// A breaker transition record.
    BreakerTransition,
    /// A principal key was revoked (`turnstile-key-revocation/v1`).
    KeyRevocation,
    /// The admin keys were replaced offline (`turnstile-admin-key-reset/v1`); a service-level
    /// record, stored under the empty workspace ID.
    AdminKeyReset,
    /// A provider lane was paused by a Retry-After (`turnstile-provider-pause/v1`).
    ProviderPause,
    /// A rollout of a candidate profile revision started, was promoted or aborted
    /// (`turnstile-rollout/v1`).
    Rollout,
}

impl AuditKind {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::ProfileChange => "profile-change",
            AuditKind::BreakerTransition => "breaker-transition",
            AuditKind::KeyRevocation => "key-revocation",
            AuditKind::AdminKeyReset => "admin-key-reset",
            AuditKind::ProviderPause => "provider-pause",
            AuditKind::Rollout => "rollout",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(value: &str) -> Option<Self> {
        [
            AuditKind::ProfileChange,
            AuditKind::BreakerTransition,
            AuditKind::KeyRevocation,
            AuditKind::AdminKeyReset,
            AuditKind::ProviderPause,
            AuditKind::Rollout,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == value)
    }
}

/// One audit record: the JSON document the service emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// The workspace (empty for service-level records).
    pub workspace_id: String,
    /// Which audit stream.
    pub kind: AuditKind,
    /// The record as the service emitted it (JSON).
    pub record_json: String,
    /// When it was recorded.
    pub at_epoch_ms: u64,
    /// The key ID (`key_…`) of the admin key that made the change, for changes an admin made
    /// through the API (profile registrations and rollbacks, key revocations). `None` for
    /// records the service made itself (breaker transitions, pauses, first start) and for
    /// records written before the column existed (schema version 2).
    pub actor_key_id: Option<String>,
    /// The operator's note on a revision change (profile registration, rollback, rollout
    /// start, promote, abort), as the acting admin wrote it. `None` when none was given and for
    /// records written before the column existed (schema version 3).
    pub note: Option<String>,
    /// Who approved a revision change, as the acting admin named them (a person or ticket, free
    /// text; never a principal ID). `None` as for [`AuditRecord::note`].
    pub approved_by: Option<String>,
}

/// A failure of a service store.
#[derive(Debug, thiserror::Error)]
pub enum ServiceStoreError {
    /// The SQLite database could not be opened, migrated, read or written.
    #[error("service database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored value does not belong to its closed vocabulary.
    #[error("service database holds an invalid {field}")]
    InvalidValue {
        /// The column that holds the value.
        field: &'static str,
    },
    /// The database was written by a newer schema than this build understands.
    #[error("service database schema version {found} is newer than supported version {supported}")]
    SchemaTooNew {
        /// The database's schema version.
        found: i64,
        /// The newest version this build understands.
        supported: i64,
    },
    /// Creating the data directory failed.
    #[error("could not create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// Why it could not be created.
        source: std::io::Error,
    },
    /// A key with the same hash is already stored.
    #[error("an API key with this hash is already stored")]
    DuplicateKey,
    /// Exclusive (offline) access was asked for, but another connection, such as a running
    /// service, has the database open.
    #[error("{path} is in use (is a turnstile service running on it?)")]
    InUse {
        /// The database file.
        path: String,
    },
    /// Offline maintenance was asked for on a directory without a service database.
    #[error("no service database at {path}")]
    NoDatabase {
        /// The data directory.
        path: String,
    },
}

/// Durable state of the admission service. See the module docs for the invariants.
pub trait ServiceStore: Send {
    /// Stores a new key (hash only). Fails with [`ServiceStoreError::DuplicateKey`] on a reused
    /// hash.
    fn insert_key(&mut self, key: &StoredKey) -> Result<(), ServiceStoreError>;
    /// Every stored key.
    fn keys(&self) -> Result<Vec<StoredKey>, ServiceStoreError>;
    /// Deletes the principal key with `hash` of `workspace_id` and appends `record` to the
    /// audit log, in one transaction. Returns `false` (and writes nothing) when no such key is
    /// stored. Admin keys are never revoked this way.
    fn revoke_key(
        &mut self,
        workspace_id: &str,
        hash: &str,
        record: &AuditRecord,
    ) -> Result<bool, ServiceStoreError>;
    /// Whether any admin key exists (first start detection).
    fn has_admin_key(&self) -> Result<bool, ServiceStoreError>;
    /// Appends a registration and, when the current revision changed, its profile-change
    /// record, in one transaction.
    fn append_profile(
        &mut self,
        profile: &StoredProfile,
        change: Option<&AuditRecord>,
    ) -> Result<(), ServiceStoreError>;
    /// Every registration, oldest first.
    fn profiles(&self) -> Result<Vec<StoredProfile>, ServiceStoreError>;
    /// Appends audit records (one transaction).
    fn append_audit(&mut self, records: &[AuditRecord]) -> Result<(), ServiceStoreError>;
    /// The last `limit` records of one kind for one workspace, oldest first.
    fn audit(
        &self,
        workspace_id: &str,
        kind: AuditKind,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, ServiceStoreError>;
    /// Every audit record of every workspace and kind, oldest first (seeding a replicas'
    /// shared feed from this store).
    fn audit_all(&self) -> Result<Vec<AuditRecord>, ServiceStoreError>;
    /// Replicas: forgets every key, registration and audit record and the mirror cursor, in
    /// one transaction, before this store mirrors a deployment's shared feed from its start.
    fn clear_identity(&mut self) -> Result<(), ServiceStoreError>;
    /// Replicas: the shared feed this store mirrors (its epoch) and the last event applied.
    fn mirror_cursor(&self) -> Result<Option<(String, u64)>, ServiceStoreError>;
    /// Replicas: records that every event up to `seq` of the feed `epoch` is applied.
    fn set_mirror_cursor(&mut self, epoch: &str, seq: u64) -> Result<(), ServiceStoreError>;
}
