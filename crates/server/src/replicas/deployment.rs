//! The deployment mode, chosen once at start-up (`crate::assemble`): a single process, or a
//! replica sharing its limits and identity through Redis. Handlers never ask which one it is;
//! they call the two traits here, whose implementations the start-up installs:
//!
//! | trait | single process | replica |
//! |---|---|---|
//! | [`IdentityStore`]: key creation and revocation, profile registration | [`LocalIdentity`]: the SQLite store, the key ring and the driver | [`crate::replicas::identity::Mirror`]: written through the shared feed, applied here before the answer |
//! | [`SharedBooks`]: the shared side of a release, a budget release and a pause | [`SingleNode`]: nothing to share | [`crate::replicas::shared::CoordLimits`]: the coordinator |
//!
//! Admission itself takes the shell's one step with the installed
//! [`SharedLimits`](turnstile_shell::SharedLimits) (`None` on a single process), so the same
//! handler serves both modes.
//!
//! Invariants: a write answered by an [`IdentityStore`] is applied on this process before the
//! answer (a key created is usable at once); a lease released through [`SharedBooks::release`]
//! leaves the shared books only if the local release succeeds (a refused release, e.g. another
//! principal's token, changes nothing anywhere).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use turnstile_admission::ProfileChangeRecord;
use turnstile_admission::{ActualUsage, BreakerTransition, Millis, Outcome, Profile};
use turnstile_shell::{Approval, Command, DriverError, DriverHandle};
use turnstile_store::{AuditRecord, StoredKey};

use crate::durability::persist::StoreHandle;
use crate::http::error::ApiError;
use crate::keys::KeyRing;

/// A boxed future (both traits are object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a local release answers: the breaker transitions it caused.
pub type ReleaseAnswer = Result<Vec<BreakerTransition>, DriverError>;

/// A profile revision to register, as the profile route has it.
pub struct NewRevision {
    /// The workspace.
    pub workspace: String,
    /// The revision's version.
    pub version: String,
    /// The profile.
    pub profile: Profile,
    /// The profile as stored (canonical JSON).
    pub profile_json: String,
    /// The acting key's ID, the note and the approver (the audit log's approval on record).
    pub approval: Approval,
}

/// Where keys, revocations and profile registrations are written.
pub trait IdentityStore: Send + Sync {
    /// Creates a principal or admin key; usable on this process once this answers.
    fn create_key<'a>(&'a self, key: &'a StoredKey) -> BoxFuture<'a, Result<(), ApiError>>;

    /// Brings this process's view of the keys up to date before a lookup that must not act on
    /// a stale one (a revocation).
    fn sync(&self) -> BoxFuture<'_, Result<(), ApiError>>;

    /// Revokes a principal key of `workspace`; `false` when it is not live (revoked already).
    fn revoke_key<'a>(
        &'a self,
        workspace: &'a str,
        hash: &'a str,
        record: AuditRecord,
    ) -> BoxFuture<'a, Result<bool, ApiError>>;

    /// Registers a profile revision (`None`: the same as the current one).
    fn register(
        &self,
        revision: NewRevision,
    ) -> BoxFuture<'_, Result<Option<ProfileChangeRecord>, ApiError>>;
}

/// The shared side of what the lease and budget routes do, beyond admission.
pub trait SharedBooks: Send + Sync {
    /// Releases the lease `lease_id` through `local` (the driver's release), taking it out of
    /// the shared books first and settling it there with `outcome` and `usage` once the local
    /// release succeeded (back in if it was refused).
    fn release<'a>(
        &'a self,
        lease_id: &'a str,
        outcome: Outcome,
        usage: ActualUsage,
        local: BoxFuture<'a, ReleaseAnswer>,
    ) -> BoxFuture<'a, ReleaseAnswer>;

    /// Forgets an invocation's shared budget lines.
    fn release_budget<'a>(&'a self, workspace: &'a str, budget_id: &'a str) -> BoxFuture<'a, ()>;

    /// How this process coordinates, for `/readyz` (`None`: a single process).
    fn coordination(&self) -> Option<Coordinating>;

    /// Pauses `provider` for every replica; answers how long the shared pause still lasts
    /// (`None`: nothing is shared).
    fn pause<'a>(
        &'a self,
        workspace: &'a str,
        provider: &'a str,
        retry_after_ms: Millis,
        now: Millis,
    ) -> BoxFuture<'a, Option<Millis>>;
}

/// A replica's coordination as `/readyz` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coordinating {
    /// `healthy`, `degraded` or `reconciling`.
    pub health: &'static str,
    /// Whether it admits anything (a degraded replica with a `closed` share does not).
    pub serving: bool,
    /// When not healthy, the kind of its last failed Redis call, from a closed vocabulary
    /// (`/readyz` is public: never Redis's own text).
    pub failure: Option<&'static str>,
}

/// A single process's identity: the SQLite store, the key ring and the driver's registry.
pub struct LocalIdentity {
    /// The store thread.
    pub store: StoreHandle,
    /// The key ring requests authenticate against.
    pub keys: Arc<KeyRing>,
    /// The driver (profile registrations).
    pub driver: DriverHandle,
}

impl IdentityStore for LocalIdentity {
    fn create_key<'a>(&'a self, key: &'a StoredKey) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            self.store.insert_key(key.clone()).await?;
            self.keys.insert(key);
            Ok(())
        })
    }

    fn sync(&self) -> BoxFuture<'_, Result<(), ApiError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn revoke_key<'a>(
        &'a self,
        workspace: &'a str,
        hash: &'a str,
        record: AuditRecord,
    ) -> BoxFuture<'a, Result<bool, ApiError>> {
        Box::pin(self.store.revoke_key(workspace, hash, record))
    }

    fn register(
        &self,
        revision: NewRevision,
    ) -> BoxFuture<'_, Result<Option<ProfileChangeRecord>, ApiError>> {
        Box::pin(async move {
            Ok(self
                .driver
                .ask(|reply| Command::Register {
                    workspace: revision.workspace,
                    version: revision.version,
                    profile: Box::new(revision.profile),
                    profile_json: revision.profile_json,
                    approval: Box::new(revision.approval),
                    at: None,
                    reply,
                })
                .await??)
        })
    }
}

/// A single process: nothing is shared.
pub struct SingleNode;

impl SharedBooks for SingleNode {
    fn coordination(&self) -> Option<Coordinating> {
        None
    }

    fn release<'a>(
        &'a self,
        _lease_id: &'a str,
        _outcome: Outcome,
        _usage: ActualUsage,
        local: BoxFuture<'a, ReleaseAnswer>,
    ) -> BoxFuture<'a, ReleaseAnswer> {
        local
    }

    fn release_budget<'a>(&'a self, _workspace: &'a str, _budget_id: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }

    fn pause<'a>(
        &'a self,
        _workspace: &'a str,
        _provider: &'a str,
        _retry_after_ms: Millis,
        _now: Millis,
    ) -> BoxFuture<'a, Option<Millis>> {
        Box::pin(std::future::ready(None))
    }
}
