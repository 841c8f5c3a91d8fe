//! A rollout's audit record, `turnstile-rollout/v1` (issue 33): one for its start, one for its
//! end (promoted or aborted), each stored in the audit log (kind `rollout`) with the approval on
//! record (`crate::api::approval`), listed by `GET …/rollouts`.
//!
//! Invariants: a record carries the candidate's revision and digest, the mode and share, the
//! instants and (at the end) the final decision counts; never limit values or principal IDs.
//! A rollout is not carried across a restart (the core keeps it in memory only, and the
//! candidate revision was never current): at start-up every workspace whose last rollout record
//! is a start gets an `aborted` record from the service itself ([`end_interrupted`]: no actor,
//! its note says why), so the audit log never shows a rollout running that no process runs.

use serde::{Deserialize, Serialize};
use turnstile_admission::{Comparison, FinishedRollout, RolloutMode, RolloutOutcome, RolloutView};
use turnstile_shell::Approval;
use turnstile_store::{AuditKind, AuditRecord, ServiceStore, ServiceStoreError};

/// The record's schema.
pub const ROLLOUT_RECORD_SCHEMA: &str = "turnstile-rollout/v1";

/// The note of the record that ends a rollout a restart interrupted.
pub const INTERRUPTED_NOTE: &str = "ended by a restart of the service: a rollout does not \
survive a restart; start it again to keep comparing";

/// What happened to the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutEvent {
    /// It started.
    Started,
    /// Its candidate became the current revision.
    Promoted,
    /// It ended; the current revision stayed.
    Aborted,
}

/// `turnstile-rollout/v1`, as stored (the approval travels beside it, in the audit row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutRecord {
    pub schema: String,
    pub event: RolloutEvent,
    pub revision: String,
    pub digest: String,
    pub mode: ModeName,
    pub canary_share: Option<f64>,
    pub started_at_epoch_ms: u64,
    pub ended_at_epoch_ms: Option<u64>,
    pub decisions: Option<Comparison>,
    pub at_epoch_ms: u64,
}

/// A rollout's mode as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModeName {
    /// The candidate decides nothing.
    Shadow,
    /// The candidate decides for a share of the principals.
    Canary,
}

/// The API's `(mode, canaryShare)` of a core mode.
pub fn mode_of(mode: RolloutMode) -> (ModeName, Option<f64>) {
    match mode {
        RolloutMode::Shadow => (ModeName::Shadow, None),
        RolloutMode::Canary { share } => (ModeName::Canary, Some(share)),
    }
}

impl RolloutRecord {
    /// The record of a rollout that started.
    pub fn started(view: &RolloutView) -> Self {
        let (mode, canary_share) = mode_of(view.mode);
        RolloutRecord {
            schema: ROLLOUT_RECORD_SCHEMA.to_owned(),
            event: RolloutEvent::Started,
            revision: view.revision.clone(),
            digest: view.digest.clone(),
            mode,
            canary_share,
            started_at_epoch_ms: view.started_at_epoch_ms,
            ended_at_epoch_ms: None,
            decisions: None,
            at_epoch_ms: view.started_at_epoch_ms,
        }
    }

    /// The record of a rollout that ended.
    pub fn ended(finished: &FinishedRollout) -> Self {
        let (mode, canary_share) = mode_of(finished.mode);
        RolloutRecord {
            schema: ROLLOUT_RECORD_SCHEMA.to_owned(),
            event: match finished.outcome {
                RolloutOutcome::Promoted => RolloutEvent::Promoted,
                RolloutOutcome::Aborted => RolloutEvent::Aborted,
            },
            revision: finished.revision.clone(),
            digest: finished.digest.clone(),
            mode,
            canary_share,
            started_at_epoch_ms: finished.started_at_epoch_ms,
            ended_at_epoch_ms: Some(finished.ended_at_epoch_ms),
            decisions: Some(finished.decisions.clone()),
            at_epoch_ms: finished.ended_at_epoch_ms,
        }
    }

    /// This record as an audit row of `workspace`, with its approval.
    pub fn audit(&self, workspace: &str, approval: &Approval) -> Option<AuditRecord> {
        Some(AuditRecord {
            workspace_id: workspace.to_owned(),
            kind: AuditKind::Rollout,
            record_json: serde_json::to_string(self).ok()?,
            at_epoch_ms: self.at_epoch_ms,
            actor_key_id: approval.actor.clone(),
            note: approval.note.clone(),
            approved_by: approval.approved_by.clone(),
        })
    }
}

/// Start-up: ends, in the audit log, every rollout a previous process left running (see the
/// module docs); returns how many. Reads the audit log once.
pub fn end_interrupted(store: &mut dyn ServiceStore, now: u64) -> Result<usize, ServiceStoreError> {
    let mut last: Vec<(String, RolloutRecord)> = Vec::new();
    for row in store.audit_all()? {
        if row.kind != AuditKind::Rollout {
            continue;
        }
        let Ok(record) = serde_json::from_str::<RolloutRecord>(&row.record_json) else {
            continue;
        };
        match last.iter_mut().find(|(w, _)| *w == row.workspace_id) {
            Some(entry) => entry.1 = record,
            None => last.push((row.workspace_id, record)),
        }
    }
    let service = Approval {
        actor: None,
        note: Some(INTERRUPTED_NOTE.to_owned()),
        approved_by: None,
    };
    let ended: Vec<AuditRecord> = last
        .into_iter()
        .filter(|(_, record)| record.event == RolloutEvent::Started)
        .filter_map(|(workspace, started)| {
            RolloutRecord {
                event: RolloutEvent::Aborted,
                ended_at_epoch_ms: Some(now),
                at_epoch_ms: now,
                ..started
            }
            .audit(&workspace, &service)
        })
        .collect();
    store.append_audit(&ended)?;
    Ok(ended.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstile_store::MemoryServiceStore;

    fn view(revision: &str, at: u64) -> RolloutView {
        RolloutView {
            revision: revision.into(),
            digest: "sha256:00".into(),
            mode: RolloutMode::Canary { share: 0.25 },
            started_at_epoch_ms: at,
            decisions: Comparison::default(),
        }
    }

    #[test]
    fn a_rollout_left_running_is_ended_once_at_start_up() {
        let mut store = MemoryServiceStore::new();
        let who = Approval {
            actor: Some("key_0123456789abcdef".into()),
            note: Some("try v2".into()),
            approved_by: Some("Dana".into()),
        };
        let started = RolloutRecord::started(&view("v2", 5));
        let finished = RolloutRecord {
            event: RolloutEvent::Aborted,
            ..RolloutRecord::started(&view("v1", 1))
        };
        let rows: Vec<AuditRecord> = [("a", &finished), ("b", &finished), ("b", &started)]
            .into_iter()
            .filter_map(|(w, r)| r.audit(w, &who))
            .collect();
        store.append_audit(&rows).unwrap();
        assert_eq!(end_interrupted(&mut store, 9).unwrap(), 1, "only b's runs");
        let b = store.audit("b", AuditKind::Rollout, 10).unwrap();
        let last: RolloutRecord = serde_json::from_str(&b[2].record_json).unwrap();
        assert_eq!(last.event, RolloutEvent::Aborted);
        assert_eq!(
            (last.revision.as_str(), last.ended_at_epoch_ms),
            ("v2", Some(9))
        );
        assert_eq!(last.canary_share, Some(0.25));
        assert_eq!(b[2].actor_key_id, None);
        assert_eq!(b[2].note.as_deref(), Some(INTERRUPTED_NOTE));
        assert_eq!(end_interrupted(&mut store, 10).unwrap(), 0, "once");
    }
}
