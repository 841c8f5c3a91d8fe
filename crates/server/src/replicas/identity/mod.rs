//! Replicas: keys, revocations, profile registrations and the audit log shared through Redis
//! (`[coordination] redis_url`; `docs/replicas.md`, "Shared keys, profiles and audit").
//!
//! The deployment's identity is one ordered change feed in Redis
//! ([`turnstile_coord::identity`]). Each replica keeps its SQLite store as a **mirror** of the
//! feed, and its key ring and registry as before, so authenticating a request and admitting
//! it cost no Redis call. The [`Mirror`] follows the feed (one read-only call every
//! `follow_every_ms`, 100 ms by default) and applies each event in feed order: a created key
//! joins the key ring, a revoked key leaves it *before* its rows are touched, a registration
//! goes through the driver like a local one (with the original instant, so every replica
//! writes the same profile-change record), an audit record is appended.
//!
//! Writes go to Redis first, as one atomic function call, then the writer catches up like any
//! follower, so its own answer reflects them:
//! - create key / revoke key: the key's hash with its tag ([`turnstile_coord::identity::key_tag`]);
//!   a revocation of a key that is not live (another replica revoked it first) is 404.
//! - register a profile: validated against a scratch registry rebuilt from the workspace's
//!   mirrored registrations, then written with a compare-and-set on the workspace's
//!   registration count; a writer that lost the race catches up and validates again, so every
//!   replica applies the same registrations in the same order and computes the same records.
//!
//! Invariants:
//! - Events are applied exactly in feed order, once each (one lock around the cursor); the
//!   cursor is stored with the mirror after each page.
//! - While Redis does not answer, keys authenticate from the mirror and every key or profile
//!   write is refused with 503 `coordination-unavailable` (nothing was written); the mirror
//!   catches up on recovery.
//! - A write that was sent and got no answer (Redis hung, the connection broke after sending)
//!   is answered 503 `coordination-outcome-unknown`, never `coordination-unavailable`: it
//!   either applied before that answer or never will (its deadline in Redis's clock has passed,
//!   [`turnstile_coord::identity::deadline`]); the feed shows which once Redis answers, and a
//!   write that applied reaches this replica and every other through it like any write.
//! - Without `redis_url` none of this exists: the store is the single process's, as before.

mod deployment;
pub(crate) mod event;
pub(crate) mod join;
mod metrics;

pub use metrics::MirrorMetrics;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use turnstile_admission::{Profile, ProfileChangeRecord, Registry};
use turnstile_coord::identity::{
    key_tag, workspace_tag, FeedEvent, IdentityStore, WriteError, Written,
};
use turnstile_coord::CoordError;
use turnstile_shell::{Approval, Clock, Command, DriverHandle};
use turnstile_store::{AuditKind, AuditRecord, KeyRole, ServiceStoreError, StoredKey};

use crate::durability::persist::StoreHandle;
use crate::http::error::ApiError;
use crate::keys::KeyRing;
use event::{
    apply_to_store, revoke_in_store, AuditDoc, AuditEventDoc, EventError, IdentityEvent, KeyDoc,
    RegistrationDoc, RevocationDoc,
};

/// Events read per call while catching up.
pub const PAGE: usize = 256;

/// How often a registration that lost the compare-and-set to another replica is tried again.
const REGISTER_TRIES: usize = 16;

/// Where the mirror stands in the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub epoch: String,
    /// The last event applied.
    pub seq: u64,
}

/// Why following the feed failed.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error(transparent)]
    Redis(#[from] CoordError),
    #[error(transparent)]
    Event(#[from] EventError),
    #[error("the feed skipped from event {cursor} to {found}")]
    Gap { cursor: u64, found: u64 },
    #[error("the feed holds fewer events ({head}) than this mirror applied ({cursor})")]
    Behind { head: u64, cursor: u64 },
    #[error("the mirror could not be written")]
    Store,
    #[error("the feed could not be seeded again: {0}")]
    Seed(String),
    #[error("the feed could not be seeded again: {0}")]
    SeedWrite(#[from] WriteError),
}

impl From<ApiError> for FollowError {
    fn from(_: ApiError) -> Self {
        FollowError::Store
    }
}

impl From<ServiceStoreError> for FollowError {
    fn from(error: ServiceStoreError) -> Self {
        FollowError::Event(EventError::Store(error))
    }
}

/// This replica's mirror of the shared identity feed.
pub struct Mirror {
    redis: IdentityStore,
    cursor: tokio::sync::Mutex<Cursor>,
    store: StoreHandle,
    keys: Arc<KeyRing>,
    driver: DriverHandle,
    clock: Clock,
    /// Names this process in the audit events it appends (it has those records already).
    origin: String,
    stopped: AtomicBool,
    /// Its counters, and whether it follows the feed (`/metrics`).
    pub metrics: Arc<MirrorMetrics>,
}

fn unavailable(error: impl std::fmt::Display) -> ApiError {
    ApiError::CoordinationUnavailable(format!(
        "coordination-unavailable: keys and profiles are shared through Redis, which did not answer ({error}); nothing was written, try again"
    ))
}

/// The answer to a write that has none: nothing written, or an outcome nobody knows yet.
fn write_failed(error: WriteError) -> ApiError {
    match error {
        WriteError::NotWritten(_) | WriteError::Late => unavailable(error),
        WriteError::OutcomeUnknown(cause) => ApiError::CoordinationOutcomeUnknown(format!(
            "coordination-outcome-unknown: keys and profiles are shared through Redis, which did not answer this write ({cause}). It either applied before this answer or never will (Redis refuses it past its deadline); once Redis answers, every replica's keys and profiles show which. Check before writing again"
        )),
    }
}

impl Mirror {
    pub fn new(
        redis: IdentityStore,
        cursor: Cursor,
        parts: (StoreHandle, Arc<KeyRing>, DriverHandle, Clock),
    ) -> Result<Arc<Self>, CoordError> {
        let (store, keys, driver, clock) = parts;
        Ok(Arc::new(Mirror {
            redis,
            cursor: tokio::sync::Mutex::new(cursor),
            store,
            keys,
            driver,
            clock,
            origin: turnstile_coord::identity::new_epoch()?,
            stopped: AtomicBool::new(false),
            metrics: Arc::new(MirrorMetrics::at_start()),
        }))
    }

    /// The follower: catches up every `every` until [`Mirror::stop`].
    pub async fn follow(self: Arc<Self>, every: Duration) {
        while !self.stopped.load(Ordering::Relaxed) {
            tokio::time::sleep(every).await;
            let _ = self.sync().await;
        }
    }

    /// Ends the follower at its next tick (shutdown).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Applies every event the feed has beyond the cursor.
    pub async fn sync(&self) -> Result<(), FollowError> {
        let mut cursor = self.cursor.lock().await;
        let result = self.sync_locked(&mut cursor).await;
        self.metrics
            .following
            .store(result.is_ok(), Ordering::Relaxed);
        if result.is_err() {
            self.metrics.follow_errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    async fn sync_locked(&self, cursor: &mut Cursor) -> Result<(), FollowError> {
        loop {
            let page = self.redis.since(cursor.seq, PAGE).await?;
            match page.epoch {
                // Redis lost the feed (restarted empty): seed it again from this mirror.
                None => return self.reseed(cursor).await,
                // Another replica seeded it again from its mirror: continue after the seed.
                Some(epoch) if epoch != cursor.epoch => {
                    *cursor = Cursor {
                        seq: join::seeded_length(&epoch),
                        epoch,
                    };
                    self.store_cursor(cursor).await?;
                    continue;
                }
                Some(_) => {}
            }
            if page.head < cursor.seq {
                return Err(FollowError::Behind {
                    head: page.head,
                    cursor: cursor.seq,
                });
            }
            let before = cursor.seq;
            for event in &page.events {
                if event.seq != cursor.seq + 1 {
                    return Err(FollowError::Gap {
                        cursor: cursor.seq,
                        found: event.seq,
                    });
                }
                self.apply(event).await?;
                cursor.seq = event.seq;
                self.metrics.events_applied.fetch_add(1, Ordering::Relaxed);
            }
            if cursor.seq != before {
                self.store_cursor(cursor).await?;
            }
            if cursor.seq >= page.head || page.events.is_empty() {
                return Ok(());
            }
        }
    }

    async fn store_cursor(&self, cursor: &Cursor) -> Result<(), FollowError> {
        let (epoch, seq) = (cursor.epoch.clone(), cursor.seq);
        self.store
            .with(move |store| store.set_mirror_cursor(&epoch, seq))
            .await??;
        Ok(())
    }

    /// Seeds the lost feed from this mirror (another replica may win the race: then this one
    /// continues after that replica's seed, assuming the mirrors agreed).
    async fn reseed(&self, cursor: &mut Cursor) -> Result<(), FollowError> {
        let items = self
            .store
            .with(|store| join::seed_items(store))
            .await?
            .map_err(|e| FollowError::Seed(e.to_string()))?;
        let epoch = join::epoch_for(items.len())?;
        let (epoch, seq) = match self.redis.seed(&epoch, &items).await? {
            turnstile_coord::identity::Seeded::Created { epoch, head } => {
                self.metrics.reseeds.fetch_add(1, Ordering::Relaxed);
                (epoch, head)
            }
            turnstile_coord::identity::Seeded::Exists { epoch, .. } => {
                let seq = join::seeded_length(&epoch);
                (epoch, seq)
            }
        };
        *cursor = Cursor { epoch, seq };
        self.store_cursor(cursor).await
    }

    /// Applies one event to the key ring, the registry (through the driver) and the mirror.
    async fn apply(&self, event: &FeedEvent) -> Result<(), FollowError> {
        match IdentityEvent::parse(&event.event)? {
            IdentityEvent::KeyCreated(doc) => {
                let key = doc.stored()?;
                let stored = key.clone();
                self.store
                    .with(move |store| apply_to_store(store, &IdentityEvent::KeyCreated(doc)))
                    .await??;
                self.keys.insert(&stored);
            }
            IdentityEvent::KeyRevoked(revocation) => {
                // Refused from now on, before anything else is written.
                self.keys.remove(&revocation.hash);
                self.store
                    .with(move |store| revoke_in_store(store, &revocation))
                    .await??;
            }
            IdentityEvent::ProfileRegistered(registration) => {
                let Ok(profile) = serde_json::from_str::<Profile>(&registration.profile_json)
                else {
                    self.metrics.apply_errors.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                };
                let answer = self
                    .driver
                    .ask(|reply| Command::Register {
                        workspace: registration.workspace_id,
                        version: registration.profile_version,
                        profile: Box::new(profile),
                        profile_json: registration.profile_json,
                        approval: Box::new(Approval {
                            actor: registration.actor_key_id,
                            note: registration.note,
                            approved_by: registration.approved_by,
                        }),
                        at: Some(registration.registered_at_ms),
                        reply,
                    })
                    .await;
                if !matches!(answer, Ok(Ok(_))) {
                    self.metrics.apply_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            IdentityEvent::Audit(audit) => {
                if audit.origin.as_deref() != Some(self.origin.as_str()) {
                    let record = audit.record.stored()?;
                    self.store
                        .with(move |store| store.append_audit(&[record]))
                        .await??;
                }
            }
        }
        Ok(())
    }

    async fn epoch(&self) -> String {
        self.cursor.lock().await.epoch.clone()
    }

    /// Creates a key for the whole deployment; answers once this replica applied it.
    pub async fn create_key(&self, key: &StoredKey) -> Result<(), ApiError> {
        let event = IdentityEvent::KeyCreated(KeyDoc::from(key))
            .to_json()
            .map_err(|_| ApiError::Storage)?;
        let workspace = match key.role {
            KeyRole::Admin => None,
            KeyRole::Principal => key.workspace_id.as_deref(),
        };
        let epoch = self.epoch().await;
        let written = self
            .redis
            .create_key(&epoch, &key.hash, &key_tag(workspace), &event)
            .await
            .map_err(write_failed)?;
        self.written(written).await.map(|_| ())
    }

    /// Revokes a principal key of `workspace` on every replica; `false` when it is not live
    /// (revoked already, maybe by another replica at the same time).
    pub async fn revoke_key(
        &self,
        workspace: &str,
        hash: &str,
        record: &AuditRecord,
    ) -> Result<bool, ApiError> {
        let event = IdentityEvent::KeyRevoked(RevocationDoc {
            workspace_id: workspace.to_owned(),
            hash: hash.to_owned(),
            record: AuditDoc::from(record),
        })
        .to_json()
        .map_err(|_| ApiError::Storage)?;
        let epoch = self.epoch().await;
        let written = self
            .redis
            .revoke_key(&epoch, hash, &key_tag(Some(workspace)), &event)
            .await
            .map_err(write_failed)?;
        match written {
            Written::Unknown => Ok(false),
            other => self.written(other).await.map(|_| true),
        }
    }

    /// Appends audit records this replica wrote (breaker transitions, pauses) to the feed, for
    /// the other replicas' mirrors. Best effort: a record that cannot be shared stays local (one
    /// whose outcome is unknown is in the feed or never will be; this replica skips its own
    /// records when it follows them).
    pub async fn share_audit(&self, records: Vec<AuditRecord>) {
        let epoch = self.epoch().await;
        for record in records {
            let event = IdentityEvent::Audit(AuditEventDoc {
                record: AuditDoc::from(&record),
                origin: Some(self.origin.clone()),
            });
            let Ok(json) = event.to_json() else { continue };
            if self.redis.append(&epoch, &json).await.is_err() {
                self.metrics.follow_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Shares what the journal sends (`crate::durability::journal::SharedAudit`), in order, until the
    /// journal is gone.
    pub async fn share_audit_from(
        self: Arc<Self>,
        mut records: tokio::sync::mpsc::UnboundedReceiver<Vec<AuditRecord>>,
    ) {
        while let Some(batch) = records.recv().await {
            self.share_audit(batch).await;
        }
    }

    /// After a successful write: catch up so this replica's answer reflects it. The write is
    /// in the feed whatever happens next; a failed catch-up is made up by the follower.
    async fn written(&self, written: Written) -> Result<Option<u64>, ApiError> {
        match written {
            Written::Appended { registration, .. } => {
                let _ = self.sync().await;
                Ok(registration)
            }
            Written::WrongEpoch { .. } => {
                let _ = self.sync().await;
                Err(unavailable("the shared feed was seeded again"))
            }
            Written::Duplicate | Written::Unknown | Written::Stale { .. } => Err(ApiError::Storage),
        }
    }

    /// Registers a profile revision for the whole deployment (see the module docs); answers
    /// like a local registration.
    pub async fn register(
        &self,
        workspace: &str,
        version: &str,
        profile: Profile,
        profile_json: String,
        approval: Approval,
    ) -> Result<Option<ProfileChangeRecord>, ApiError> {
        for _ in 0..REGISTER_TRIES {
            self.sync().await.map_err(unavailable)?;
            let epoch = self.epoch().await;
            let earlier: Vec<_> = self
                .store
                .profiles()
                .await?
                .into_iter()
                .filter(|p| p.workspace_id == workspace)
                .collect();
            let mut scratch = Registry::new();
            for stored in &earlier {
                let earlier_profile: Profile =
                    serde_json::from_str(&stored.profile_json).map_err(|_| ApiError::Storage)?;
                scratch
                    .register(
                        workspace,
                        &stored.profile_version,
                        earlier_profile,
                        stored.registered_at_ms,
                    )
                    .map_err(|_| ApiError::Storage)?;
            }
            let at = self
                .clock
                .now_ms()
                .max(earlier.last().map_or(0, |p| p.registered_at_ms));
            let record = scratch.register(workspace, version, profile.clone(), at)?;
            let change = match &record {
                Some(record) => Some(AuditDoc {
                    workspace_id: workspace.to_owned(),
                    kind: AuditKind::ProfileChange.as_str().to_owned(),
                    record_json: serde_json::to_string(record).map_err(|_| ApiError::Storage)?,
                    at_epoch_ms: record.at_epoch_ms,
                    actor_key_id: approval.actor.clone(),
                    note: approval.note.clone(),
                    approved_by: approval.approved_by.clone(),
                }),
                None => None,
            };
            let event = IdentityEvent::ProfileRegistered(RegistrationDoc {
                workspace_id: workspace.to_owned(),
                profile_version: version.to_owned(),
                profile_json: profile_json.clone(),
                registered_at_ms: at,
                actor_key_id: approval.actor.clone(),
                note: approval.note.clone(),
                approved_by: approval.approved_by.clone(),
                change,
            })
            .to_json()
            .map_err(|_| ApiError::Storage)?;
            let expected = u64::try_from(earlier.len()).unwrap_or(u64::MAX);
            let written = self
                .redis
                .register(&epoch, &workspace_tag(workspace), expected, &event)
                .await
                .map_err(write_failed)?;
            match written {
                Written::Stale { .. } => continue,
                other => {
                    self.written(other).await?;
                    return Ok(record);
                }
            }
        }
        Err(unavailable(
            "other replicas kept registering in this workspace",
        ))
    }
}
