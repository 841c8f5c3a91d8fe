//! The evaluator driver's audit history: the profile-change records and breaker transitions of
//! each workspace, answered like the service's `GET …/profiles` and `GET …/breakers`.
//!
//! The service keeps its history through the shell's [`Journal`] (its store); the evaluator's
//! driver keeps it through [`HistoryJournal`], in memory, from the same calls: every
//! registration that changed a workspace's current revision (its
//! [`ProfileChangeRecord`]) and every breaker transition, at admission or at release.
//!
//! # Invariants
//!
//! - **Bounded like the service.** Per workspace, the last [`PROFILE_HISTORY_LIMIT`] records and
//!   the last [`BREAKER_HISTORY_LIMIT`] transitions (64 each, the service's `HISTORY_LIMIT`),
//!   oldest first.
//! - **One history per driver.** Every clone of an [`AdmissionDriver`](crate::AdmissionDriver)
//!   (every evaluation sharing it) reads the same history.
//! - **Written before the answer.** The driver calls the journal before it answers the command
//!   that caused the record, so a caller that awaited a registration or a release reads it.
//! - Records carry what the service's records carry: a profile-change record names its workspace
//!   (it is audit, not evidence); a transition names the provider lane, never a principal.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use turnstile_admission::{
    BreakerTransition, ProfileChangeRecord, BREAKER_HISTORY_LIMIT, PROFILE_HISTORY_LIMIT,
};
use turnstile_shell::{Done, Journal, LeaseEvent, Registration};

/// The history of one workspace.
#[derive(Debug, Default)]
struct WorkspaceHistory {
    profiles: VecDeque<ProfileChangeRecord>,
    breakers: VecDeque<BreakerTransition>,
}

/// The histories of every workspace of one driver, shared by its journal and its handles.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    workspaces: Arc<Mutex<HashMap<String, WorkspaceHistory>>>,
}

impl History {
    /// The journal that fills this history (handed to the driver task).
    pub(crate) fn journal(&self) -> HistoryJournal {
        HistoryJournal {
            history: self.clone(),
        }
    }

    /// The last profile-change records of a workspace, oldest first (empty for an unknown one).
    pub(crate) fn profiles(&self, workspace_id: &str) -> Vec<ProfileChangeRecord> {
        self.read(workspace_id, |h| h.profiles.iter().cloned().collect())
    }

    /// The last breaker transitions of a workspace, oldest first (empty for an unknown one).
    pub(crate) fn breakers(&self, workspace_id: &str) -> Vec<BreakerTransition> {
        self.read(workspace_id, |h| h.breakers.iter().cloned().collect())
    }

    fn read<T: Default>(&self, workspace_id: &str, f: impl FnOnce(&WorkspaceHistory) -> T) -> T {
        let workspaces = self
            .workspaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        workspaces.get(workspace_id).map(f).unwrap_or_default()
    }

    fn write(&self, workspace_id: &str, f: impl FnOnce(&mut WorkspaceHistory)) {
        let mut workspaces = self
            .workspaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f(workspaces.entry(workspace_id.to_owned()).or_default());
    }
}

/// Appends `item`, dropping the oldest once `limit` are kept.
fn push_bounded<T>(list: &mut VecDeque<T>, item: T, limit: usize) {
    if list.len() == limit {
        list.pop_front();
    }
    list.push_back(item);
}

/// The evaluator driver's journal: keeps history, no leases (in-process holders release on
/// drop), and acknowledges every registration at once.
#[derive(Debug)]
pub(crate) struct HistoryJournal {
    history: History,
}

impl Journal for HistoryJournal {
    fn profile_registered(&mut self, registration: Registration, done: Done) {
        if let Some(record) = registration.change {
            self.history.write(&registration.workspace, |h| {
                push_bounded(&mut h.profiles, record, PROFILE_HISTORY_LIMIT);
            });
        }
        done(Ok(()));
    }

    fn breaker_transitions(&mut self, workspace: &str, transitions: &[BreakerTransition]) {
        self.history.write(workspace, |h| {
            for transition in transitions {
                push_bounded(&mut h.breakers, transition.clone(), BREAKER_HISTORY_LIMIT);
            }
        });
    }

    fn keeps_leases(&self) -> bool {
        false
    }

    fn lease_events(&mut self, _events: Vec<LeaseEvent>, done: Done) {
        done(Ok(()));
    }
}
