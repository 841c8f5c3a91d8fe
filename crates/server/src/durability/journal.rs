//! The service's [`Journal`]: the driver's durable side effects go to the store thread.
//!
//! The driver calls this from its task, in registry order; the store thread applies operations
//! in send order, so the durable order of registrations and transitions is the registry's. A
//! registration is acknowledged to its client only after its transaction committed (the
//! completion runs on the store thread). Breaker transitions are written under the workspace
//! the core tagged them with; so are Retry-After pauses (`turnstile-provider-pause/v1`: the
//! console's pause history). Both are history, written just after the answer that caused
//! them; what a restart puts back (each lane's pause, its open breaker) comes from their
//! `Paused` and `Breaker` lease events instead, which are durable before the answer.
//!
//! Lease events (grants, releases, budget releases, pauses, breaker transitions) do not go to
//! the store thread: one driver batch is one append to the [`LeaseLog`], written from the
//! driver task itself (a `write(2)` of a few hundred bytes), and the batch's held-back replies
//! go out once the log says the batch is durable, so a grant is answered only once it is
//! (`docs/server.md`, "Durability").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use turnstile_admission::BreakerTransition;
use turnstile_shell::Done;
use turnstile_shell::{Journal, LeaseEvent, LeaseToken, Pause, Registration, PAUSE_RECORD_SCHEMA};
use turnstile_store::{
    AuditKind, AuditRecord, LeaseChangeRef, LeaseLog, StoredLeaseRef, StoredProfile,
};

use crate::durability::persist::{StoreHandle, StoreOp};
use crate::metrics::Metrics;

/// Journals registrations and transitions into the SQLite store thread, leases into the
/// lease log.
pub struct StoreJournal {
    store: StoreHandle,
    leases: LeaseLog,
    metrics: Arc<Metrics>,
    /// Replicas: a lease that leaves the driver's table without a release by its holder (TTL
    /// reclaim, an undelivered grant) is released in the shared limits too.
    coord: Option<Arc<turnstile_coord::Coordinator>>,
    /// Replicas: breaker transitions and pauses also go to the shared feed.
    shared_audit: SharedAudit,
    /// The latest grant handed to the lease log (for the bucket checkpoint of a clean stop).
    last_grant: LastGrant,
}

/// The lease log's latest grant instant, as the journal appends grants: what the log held at
/// the start, raised by every grant since. Shared with the shutdown, which writes it into the
/// bucket checkpoint (`crate::durability::checkpoint`) once the driver stopped.
#[derive(Clone, Debug, Default)]
pub struct LastGrant(Arc<AtomicU64>);

impl LastGrant {
    /// Starts at the log's latest grant when it was opened (`None`: it never granted).
    pub fn new(at: Option<u64>) -> Self {
        let last = LastGrant::default();
        if let Some(at) = at {
            last.note(at);
        }
        last
    }

    /// Stored plus one, so 0 means "no grant".
    fn note(&self, at: u64) {
        self.0.fetch_max(at.saturating_add(1), Ordering::Relaxed);
    }

    /// The latest grant so far (`None`: none).
    pub fn get(&self) -> Option<u64> {
        self.0.load(Ordering::Relaxed).checked_sub(1)
    }
}

/// Replicas: where the journal shares the audit records it writes (breaker transitions,
/// pauses) with the other replicas' mirrors. Registrations and revocations reach the feed
/// through their own writes.
///
/// A channel, made before the driver (which journals from its start) and read by the mirror
/// once it exists ([`crate::replicas::identity::Mirror::share_audit_from`]): records written in between
/// wait in the channel, and no late-set cell breaks the construction order.
#[derive(Clone, Default)]
pub struct SharedAudit(Option<tokio::sync::mpsc::UnboundedSender<Vec<AuditRecord>>>);

impl SharedAudit {
    /// A sharing journal's end and the mirror's end.
    pub fn channel() -> (Self, tokio::sync::mpsc::UnboundedReceiver<Vec<AuditRecord>>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (SharedAudit(Some(tx)), rx)
    }

    fn share(&self, records: &[AuditRecord]) {
        if let Some(tx) = &self.0 {
            if !records.is_empty() {
                let _ = tx.send(records.to_vec());
            }
        }
    }
}

impl StoreJournal {
    pub fn new(store: StoreHandle, leases: LeaseLog, metrics: Arc<Metrics>) -> Self {
        StoreJournal {
            store,
            leases,
            metrics,
            coord: None,
            shared_audit: SharedAudit::default(),
            last_grant: LastGrant::default(),
        }
    }

    /// Raises `last_grant` with every grant appended to the lease log.
    pub fn with_last_grant(mut self, last_grant: LastGrant) -> Self {
        self.last_grant = last_grant;
        self
    }

    /// Replicas: shares breaker transitions and pauses through the identity feed.
    pub fn with_shared_audit(mut self, shared: SharedAudit) -> Self {
        self.shared_audit = shared;
        self
    }

    /// Releases the shared lease of every lease the driver lets go of (the release route
    /// claims its lease first, so this finds only reclaims).
    pub fn with_coordination(mut self, coord: Option<Arc<turnstile_coord::Coordinator>>) -> Self {
        self.coord = coord;
        self
    }

    /// The store thread is gone (the service is stopping): counted and logged.
    fn store_thread_gone(&self) {
        self.metrics.store_errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!(target: "turnstile::store", "the store thread is gone: a write was lost");
    }
}

impl Journal for StoreJournal {
    fn profile_registered(&mut self, registration: Registration, done: Done) {
        let change = registration.change.as_ref().and_then(|record| {
            serde_json::to_string(record).ok().map(|json| AuditRecord {
                workspace_id: registration.workspace.clone(),
                kind: AuditKind::ProfileChange,
                record_json: json,
                at_epoch_ms: record.at_epoch_ms,
                actor_key_id: registration.approval.actor.clone(),
                note: registration.approval.note.clone(),
                approved_by: registration.approval.approved_by.clone(),
            })
        });
        let profile = StoredProfile {
            workspace_id: registration.workspace,
            profile_version: registration.profile_version,
            profile_json: registration.profile_json,
            registered_at_ms: registration.at,
        };
        let op = StoreOp::AppendProfile {
            profile,
            change,
            done: Box::new(move |result| done(result.map_err(|e| e.to_string()))),
        };
        // A store thread that is gone drops `done`: the caller hears the service is stopping.
        if !self.store.send(op) {
            self.store_thread_gone();
        }
    }

    fn breaker_transitions(&mut self, workspace: &str, transitions: &[BreakerTransition]) {
        let records: Vec<AuditRecord> = transitions
            .iter()
            .filter_map(|t| {
                serde_json::to_string(t).ok().map(|json| AuditRecord {
                    workspace_id: workspace.to_owned(),
                    kind: AuditKind::BreakerTransition,
                    record_json: json,
                    at_epoch_ms: t.at_epoch_ms,
                    actor_key_id: None,
                    note: None,
                    approved_by: None,
                })
            })
            .collect();
        self.shared_audit.share(&records);
        if !self.store.send(StoreOp::AppendAudit(records)) {
            self.store_thread_gone();
        }
    }

    fn provider_paused(&mut self, workspace: &str, pause: &Pause) {
        let Some(record) = pause_record(workspace, pause) else {
            return;
        };
        self.shared_audit.share(std::slice::from_ref(&record));
        if !self.store.send(StoreOp::AppendAudit(vec![record])) {
            self.store_thread_gone();
        }
    }

    fn lease_events(&mut self, events: Vec<LeaseEvent>, done: Done) {
        if let Some(coord) = &self.coord {
            for event in &events {
                if let LeaseEvent::Released { token, .. } = event {
                    if let Some(held) = coord.claim(&token.to_string()) {
                        let coord = coord.clone();
                        tokio::spawn(async move { coord.finish(held, 0, None, None, 0).await });
                    }
                }
            }
        }
        for event in &events {
            if let LeaseEvent::Granted(held) = event {
                self.last_grant.note(held.lease.admitted_at);
            }
        }
        self.leases.append(events.iter().map(lease_change), done);
    }
}

/// The audit record of a pause: the feed's pause with its schema (`turnstile-provider-pause/v1`).
pub fn pause_record(workspace: &str, pause: &Pause) -> Option<AuditRecord> {
    let mut value = serde_json::to_value(pause).ok()?;
    value
        .as_object_mut()?
        .insert("schema".into(), PAUSE_RECORD_SCHEMA.into());
    Some(AuditRecord {
        workspace_id: workspace.to_owned(),
        kind: AuditKind::ProviderPause,
        record_json: value.to_string(),
        at_epoch_ms: pause.at_epoch_ms,
        actor_key_id: None,
        note: None,
        approved_by: None,
    })
}

/// The record of a lease event, borrowed from it (no copy of its IDs).
fn lease_change(event: &LeaseEvent) -> LeaseChangeRef<'_, LeaseToken> {
    match event {
        LeaseEvent::Granted(held) => LeaseChangeRef::Granted(StoredLeaseRef {
            token: &held.token,
            workspace_id: &held.workspace,
            principal_id: &held.principal,
            provider_id: &held.lease.provider_id,
            budget_id: held.lease.budget_id.as_deref(),
            attempts: held.lease.charge.attempts,
            tokens: held.lease.charge.tokens,
            cost_usd: held.lease.charge.cost_usd,
            admitted_at_ms: held.lease.admitted_at,
            expires_at_ms: held.expires_at,
        }),
        LeaseEvent::Released { token, usage } => LeaseChangeRef::Released {
            token,
            actual_tokens: usage.tokens,
            actual_cost_usd: usage.cost_usd(),
        },
        LeaseEvent::Paused {
            workspace,
            provider,
            until_epoch_ms,
        } => LeaseChangeRef::Paused {
            workspace_id: workspace,
            provider_id: provider,
            until_epoch_ms: *until_epoch_ms,
        },
        LeaseEvent::Breaker {
            workspace,
            transition,
        } => LeaseChangeRef::Breaker {
            workspace_id: workspace,
            provider_id: &transition.provider_id,
            from: transition.from.as_str(),
            to: transition.to.as_str(),
            at_epoch_ms: transition.at_epoch_ms,
            failures: transition.failures,
        },
        LeaseEvent::BudgetReleased { workspace, budget } => LeaseChangeRef::BudgetReleased {
            workspace_id: workspace,
            budget_id: budget,
        },
    }
}
