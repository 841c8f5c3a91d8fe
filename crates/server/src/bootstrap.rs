//! Start-up: reload durable state into a fresh registry, and on first start create the admin
//! key, the demo workspace and its principal key.
//!
//! Reload re-registers every stored registration in its original order with its original
//! timestamp, which rebuilds current profiles, known revisions (so a later rollback or a
//! conflicting reuse is judged exactly as before the restart) and principal limits. The
//! profile-change records this replay produces are discarded: the durable audit log already
//! holds the originals.
//!
//! Invariant: a first start is detected by the absence of any admin key; the generated keys
//! are returned once (for the banner) and only their hashes are stored.

use turnstile_admission::{Profile, Registry};
use turnstile_store::{AuditKind, AuditRecord, KeyRole, ServiceStore, StoredProfile};

use crate::keys::{self, RandomError};

/// The example profile registered in the demo workspace on first start.
pub const DEMO_PROFILE: &str = include_str!("../../../examples/profile.json");
/// The workspace of the demo profile and key.
pub const DEMO_WORKSPACE: &str = "demo";
/// The revision the demo profile is registered as.
pub const DEMO_PROFILE_VERSION: &str = "demo-v1";
/// The principal of the demo key.
pub const DEMO_PRINCIPAL: &str = "demo";

/// Keys generated on first start, printed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapKeys {
    /// The admin key (stored only as its hash).
    pub admin_key: String,
    /// The key of principal `demo` in workspace `demo` (when the demo is enabled).
    pub demo_key: Option<String>,
}

/// A start-up failure.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The service store failed.
    #[error(transparent)]
    Store(#[from] turnstile_store::ServiceStoreError),
    /// A stored registration can no longer be read or registered; the service refuses to start
    /// rather than run with a profile other than the one acknowledged.
    #[error("stored registration #{index} cannot be reloaded: {reason}")]
    Replay {
        /// Its position among the stored registrations.
        index: usize,
        /// Why it cannot be reloaded.
        reason: String,
    },
    /// The system's random source failed.
    #[error(transparent)]
    Random(#[from] RandomError),
    /// The embedded demo profile does not validate.
    #[error("the embedded demo profile is invalid: {0}")]
    DemoProfile(String),
}

/// Re-registers every stored registration, oldest first.
pub fn replay(store: &dyn ServiceStore, registry: &mut Registry) -> Result<usize, BootstrapError> {
    let profiles = store.profiles()?;
    for (index, stored) in profiles.iter().enumerate() {
        let profile: Profile =
            serde_json::from_str(&stored.profile_json).map_err(|e| BootstrapError::Replay {
                index,
                reason: e.to_string(),
            })?;
        registry
            .register(
                &stored.workspace_id,
                &stored.profile_version,
                profile,
                stored.registered_at_ms,
            )
            .map_err(|e| BootstrapError::Replay {
                index,
                reason: e.to_string(),
            })?;
    }
    Ok(profiles.len())
}

/// On first start (no admin key stored): creates the admin key and, with `demo`, registers the
/// example profile in workspace `demo` and creates a key for principal `demo`.
pub fn first_start(
    store: &mut dyn ServiceStore,
    registry: &mut Registry,
    demo: bool,
    now: u64,
) -> Result<Option<BootstrapKeys>, BootstrapError> {
    if store.has_admin_key()? {
        return Ok(None);
    }
    let mut demo_key = None;
    if demo {
        let profile: Profile = serde_json::from_str(DEMO_PROFILE)
            .map_err(|e| BootstrapError::DemoProfile(e.to_string()))?;
        let profile_json = serde_json::to_string(&profile)
            .map_err(|e| BootstrapError::DemoProfile(e.to_string()))?;
        let record = registry
            .register(DEMO_WORKSPACE, DEMO_PROFILE_VERSION, profile, now)
            .map_err(|e| BootstrapError::DemoProfile(e.to_string()))?;
        let change = record.and_then(|r| {
            serde_json::to_string(&r).ok().map(|json| AuditRecord {
                workspace_id: DEMO_WORKSPACE.into(),
                kind: AuditKind::ProfileChange,
                record_json: json,
                at_epoch_ms: r.at_epoch_ms,
                // The service itself, at first start: no key acted.
                actor_key_id: None,
                note: None,
                approved_by: None,
            })
        });
        store.append_profile(
            &StoredProfile {
                workspace_id: DEMO_WORKSPACE.into(),
                profile_version: DEMO_PROFILE_VERSION.into(),
                profile_json,
                registered_at_ms: now,
            },
            change.as_ref(),
        )?;
        let key = keys::generate(KeyRole::Principal)?;
        store.insert_key(&keys::stored(
            &key,
            KeyRole::Principal,
            Some(DEMO_WORKSPACE),
            Some(DEMO_PRINCIPAL),
            now,
        ))?;
        demo_key = Some(key);
    }
    // The admin key goes last: its presence marks a completed first start.
    let admin_key = keys::generate(KeyRole::Admin)?;
    store.insert_key(&keys::stored(&admin_key, KeyRole::Admin, None, None, now))?;
    Ok(Some(BootstrapKeys {
        admin_key,
        demo_key,
    }))
}
