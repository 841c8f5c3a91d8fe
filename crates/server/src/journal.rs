//! The service's [`Journal`]: the driver's durable side effects go to the store thread.
//!
//! The driver calls this from its task, in registry order; the store thread applies operations
//! in send order, so the durable order of registrations and transitions is the registry's. A
//! registration is acknowledged to its client only after its transaction committed (the
//! completion runs on the store thread). Breaker transitions are written under the workspace
//! the core tagged them with.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use turnstile_admission::BreakerTransition;
use turnstile_shell::journal::Done;
use turnstile_shell::{Journal, Registration};
use turnstile_store::service::{AuditKind, AuditRecord, StoredProfile};

use crate::metrics::Metrics;
use crate::persist::{StoreHandle, StoreOp};

/// Journals into the SQLite store thread.
pub struct StoreJournal {
    store: StoreHandle,
    metrics: Arc<Metrics>,
}

impl StoreJournal {
    pub fn new(store: StoreHandle, metrics: Arc<Metrics>) -> Self {
        StoreJournal { store, metrics }
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
            self.metrics.store_errors.fetch_add(1, Ordering::Relaxed);
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
                })
            })
            .collect();
        if !self.store.send(StoreOp::AppendAudit(records)) {
            self.metrics.store_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}
