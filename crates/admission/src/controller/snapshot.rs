//! Read-only views of a controller: the aggregate [`Snapshot`], workspace and principal
//! [`Counts`], their high-water marks, and cost counters.
//!
//! # Invariants
//!
//! - Views never name a principal or workspace (provider IDs are lane names).
//! - The peaks are sampled at the end of every entry point that can change a count (after its
//!   pump), so they are the largest totals any caller could observe; they never go down.
//!
//! # Complexity
//!
//! Counts and peaks are O(1); a snapshot is O(providers).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::breaker::BreakerTransition;
use crate::reason::BreakerState;
use crate::time::Millis;

use super::Controller;

/// Active leases and queued waiters of a scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Leases held.
    pub active: u64,
    /// Waiters queued.
    pub queued: u64,
}

/// Aggregate counts of a controller. Provider IDs are lane names, not tenant identities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Leases held in the workspace.
    pub active: u64,
    /// Waiters queued in the workspace.
    pub queued: u64,
    /// The largest workspace-wide `active` seen at the end of any operation.
    #[serde(default)]
    pub peak_active: u64,
    /// The largest workspace-wide `queued` seen at the end of any operation.
    #[serde(default)]
    pub peak_queued: u64,
    /// Retry-After coordinations this controller has seen.
    pub retry_pressure: u64,
    /// Budgets (invocations) that have spent something and are not released.
    pub open_budgets: u64,
    /// Per provider, by provider ID.
    pub providers: BTreeMap<String, ProviderSnapshot>,
}

/// The counts and state of one provider lane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSnapshot {
    /// Leases held on this provider.
    pub active: u64,
    /// Waiters queued for this provider.
    pub queued: u64,
    /// Its breaker's state.
    pub breaker_state: BreakerState,
    /// While a Retry-After pause lasts: the instant it ends.
    pub paused_until: Option<Millis>,
}

impl Controller {
    /// Aggregate counts.
    pub fn snapshot(&self) -> Snapshot {
        let totals = self.totals();
        Snapshot {
            active: totals.active,
            queued: totals.queued,
            peak_active: self.peak.active,
            peak_queued: self.peak.queued,
            retry_pressure: self.retry_pressure,
            open_budgets: self.budgets.open_invocations() as u64,
            providers: self
                .scopes
                .providers
                .iter()
                .map(|p| {
                    (
                        p.extra.id.clone(),
                        ProviderSnapshot {
                            active: u64::from(p.scope().active),
                            queued: u64::from(p.scope().queued),
                            breaker_state: p.extra.breaker.state(),
                            paused_until: (p.extra.paused_until > self.now)
                                .then_some(p.extra.paused_until),
                        },
                    )
                })
                .collect(),
        }
    }

    /// Workspace-wide counts, without building a snapshot.
    pub fn totals(&self) -> Counts {
        let workspace = &self.scopes.workspace;
        Counts {
            active: u64::from(workspace.active),
            queued: u64::from(workspace.queued),
        }
    }

    /// The high-water marks of [`Controller::totals`] over the controller's life.
    pub fn peak_totals(&self) -> Counts {
        self.peak
    }

    /// Records the current totals in the high-water marks (end of every entry point).
    pub(super) fn note_peaks(&mut self) {
        let totals = self.totals();
        self.peak.active = self.peak.active.max(totals.active);
        self.peak.queued = self.peak.queued.max(totals.queued);
    }

    /// Counts of one principal (for tests and operators' own tooling); zero when unknown.
    pub fn principal_counts(&self, principal_id: &str) -> Counts {
        self.scopes
            .principals
            .find(principal_id)
            .map(|i| {
                let scope = self.scopes.principals[i].scope();
                Counts {
                    active: u64::from(scope.active),
                    queued: u64::from(scope.queued),
                }
            })
            .unwrap_or_default()
    }

    /// Pump passes run and ring entries looked at, over the controller's life. The cost of the
    /// pump is proportional to the entries looked at; operators and tests use this to check that
    /// a handoff does not scan lanes.
    pub fn pump_stats(&self) -> (u64, u64) {
        (self.pass, self.lanes_visited)
    }

    /// Number of lanes with state (waiters or leases); for leak checks.
    pub fn lane_count(&self) -> usize {
        self.lanes.iter().filter(|lane| !lane.is_idle()).count()
    }

    /// Number of providers and principals the controller keeps state for (the profile's, and
    /// those of earlier profiles); requests naming other IDs never add to it.
    pub fn scope_count(&self) -> usize {
        self.scopes.providers.len() + self.scopes.principals.len()
    }

    /// Principals whose counters and buckets are kept now (busy ones, those whose buckets are
    /// not full again yet, and at most [`super::IDLE_PRINCIPALS_KEPT`] more idle ones); the
    /// others read as fresh state (see `scopes.rs`).
    pub fn principal_states_kept(&self) -> usize {
        self.scopes.principals.states_kept()
    }

    /// Principal states forgotten for idleness, over the controller's life.
    pub fn principal_states_evicted(&self) -> u64 {
        self.scopes.principals.evicted()
    }

    /// The last [`super::BREAKER_HISTORY_LIMIT`] breaker transitions, oldest first.
    pub fn breaker_transitions(&self) -> Vec<BreakerTransition> {
        self.breaker_history.iter().cloned().collect()
    }
}
