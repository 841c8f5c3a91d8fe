//! The registry: one controller per workspace, immutable profile revisions, rollback and audit
//! (REFERENCE §6).
//!
//! # Rules
//!
//! - A `profileVersion` is immutable: registering the same revision for a workspace with a
//!   different `{providers, workspace}` digest, or for a principal with different limits, fails
//!   closed with [`RegistryError::Conflict`] (`invalid-definition`) and changes nothing.
//! - The most recently registered revision supplies the current limits. Registering an earlier
//!   revision again is a rollback and reproduces that revision's digest.
//! - Principal limits accumulate: a principal keeps the limits of the newest registration that
//!   named it, so the controller knows every principal's reservation up front.
//! - Every change of current revision emits one `decision-admission-profile-change/v1` record
//!   (kind `initial`, `change` or `rollback`); re-registering the current revision emits none.
//!   Records carry digests, never limit values.
//! - Histories are bounded: 64 profile-change records and 64 breaker transitions per workspace,
//!   4096 tracked revisions and 4096 tracked principal revisions per workspace (the oldest that
//!   is not current is forgotten first).
//! - The revisions, principals and change records of a workspace are kept by
//!   `registry/revisions.rs`, its rollout by `registry/rollouts.rs` (no registration while
//!   one runs); this file keeps the controllers, the event outboxes and the timers.
//! - The registry does not switch clocks: the host owns the one clock and passes `now`
//!   (REFERENCE §6's clock-switch rule is dropped; see `docs/admission.md`).
//!
//! # Events
//!
//! Events leave quinn-style, never through callbacks: after every operation the registry moves
//! the controller's new breaker transitions into one outbox, each tagged with its workspace,
//! and the host drains it with [`Registry::poll_transition`]. The outbox is bounded
//! ([`TRANSITION_OUTBOX_LIMIT`]): beyond it the oldest transition is dropped and counted
//! ([`Registry::transitions_dropped`]), so a host that never polls cannot grow it. Profile
//! changes are the return value of [`Registry::register`].
//!
//! # Restarts
//!
//! A host that journals grants rebuilds the accounting of a previous process after it replayed
//! the registrations: [`Registry::restore_spend`] then [`Registry::reinstate`] (see
//! `controller/reinstate.rs`); and the lane state it journaled: [`Registry::restore_pause`],
//! [`Registry::restore_breaker`], [`Registry::drain_buckets_since`] (`controller/restore.rs`),
//! or, after a clean stop, [`Registry::restore_bucket_levels`] with the levels
//! [`Registry::bucket_levels`] read (`controller/levels.rs`).
//! None of them decides, queues or emits anything.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use foldhash::HashMap;

use crate::breaker::BreakerTransition;
use crate::budget::{ActualUsage, BudgetBounds};
use crate::controller::{
    Acquired, AdmissionRequest, Controller, Counts, LaneView, LeaseCharge, Released, Resolution,
    Snapshot, TRANSITION_OUTBOX_LIMIT,
};
use crate::evidence::{Lease, LeaseId, Outcome, Rejection, WaiterId};
use crate::limits::Limits;
use crate::profile::{Profile, ProfileError};
use crate::provider_quota::ProviderQuota;
use crate::time::Millis;

mod restart;
mod revisions;
mod rollouts;

use revisions::{Digests, ProfileRevisions};
pub use revisions::{
    ProfileChangeKind, ProfileChangeRecord, PROFILE_CHANGE_SCHEMA, PROFILE_HISTORY_LIMIT,
    TRACKED_PRINCIPALS_LIMIT, TRACKED_REVISIONS_LIMIT,
};
use rollouts::{Resolved, RolloutHistory, RolloutState};

/// A registration that cannot be accepted; maps to `invalid-definition`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RegistryError {
    /// The revision is already registered with different limits.
    #[error("invalid-definition: profileVersion {profile_version} conflicts with the limits already registered under it")]
    Conflict {
        /// The revision registered again.
        profile_version: String,
    },
    /// The revision is already registered for a principal with different limits.
    #[error("invalid-definition: profileVersion {profile_version} conflicts with the principal limits already registered under it")]
    PrincipalConflict {
        /// The revision registered again.
        profile_version: String,
    },
    /// The profile breaks a limits rule.
    #[error("invalid-definition: {0}")]
    InvalidProfile(#[from] ProfileError),
    /// The profile cannot be digested (a non-finite number).
    #[error("invalid-definition: profile cannot be digested")]
    Undigestable,
    /// No profile has been registered for the workspace.
    #[error("no admission profile is registered for this workspace")]
    UnknownWorkspace,
    /// A Retry-After names a provider the workspace profile does not configure; nothing was
    /// paused and no state was kept for it.
    #[error("unconfigured-provider: the workspace profile does not configure this provider")]
    UnconfiguredProvider,
    /// A rollout runs in the workspace: no revision is registered until it is promoted or
    /// aborted (`crate::rollout`).
    #[error("rollout-running: a rollout runs in this workspace; promote or abort it first")]
    RolloutRunning,
}

struct WorkspaceEntry {
    controller: Controller,
    revisions: ProfileRevisions,
    /// The running rollout (or a finished canary's candidate still serving its slice).
    rollout: Option<Box<RolloutState>>,
    finished: RolloutHistory,
    rollouts_started: u64,
    resolved: Resolved,
}

/// Controllers by workspace, with their profile history and the tagged event outbox.
#[derive(Default)]
pub struct Registry {
    workspaces: HashMap<String, WorkspaceEntry>,
    /// Breaker transitions not yet polled, each with its workspace.
    transitions: VecDeque<(String, BreakerTransition)>,
    transitions_dropped: u64,
    /// Every workspace's next `poll_timeout`, ordered, so the earliest is found in O(log n).
    timeouts: BTreeSet<(Millis, String)>,
    scheduled: HashMap<String, Millis>,
    /// Applied to every controller, present and future.
    budget_bounds: BudgetBounds,
    /// Set when controllers must *not* refuse at once what their lane predicts cannot meet its
    /// deadline (the default is to refuse).
    deadline_refusals_off: bool,
    /// Budgets forgotten for idleness, summed over every workspace.
    budgets_evicted: u64,
    /// (workspace, budget ID) of budgets forgotten for idleness, not yet polled; bounded at
    /// [`EVICTED_BUDGETS_OUTBOX_LIMIT`] (the oldest dropped first).
    evicted_budgets: VecDeque<(String, String)>,
}

/// Evicted budget IDs kept for a host that has not polled them yet.
pub const EVICTED_BUDGETS_OUTBOX_LIMIT: usize = 65_536;

impl Registry {
    /// An empty registry: no workspace, default budget bounds.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bounds every workspace's budget ledger (idle eviction, cap on open budgets); see
    /// [`BudgetBounds`]. Applies to existing workspaces and to those registered later.
    pub fn set_budget_bounds(&mut self, bounds: BudgetBounds) {
        self.budget_bounds = bounds;
        for entry in self.workspaces.values_mut() {
            entry.controller.set_budget_bounds(bounds);
        }
    }

    /// Turns deadline-aware refusal (`deadline-unreachable`) on or off in every workspace,
    /// existing and registered later (on by default; off serves as the "what would have
    /// happened" run of the qualification harness).
    pub fn set_deadline_refusals(&mut self, on: bool) {
        self.deadline_refusals_off = !on;
        for entry in self.workspaces.values_mut() {
            entry.controller.set_deadline_refusals(on);
        }
    }

    /// The oldest budget forgotten for idleness and not yet polled, as (workspace, budget ID):
    /// a host that persists budget spend forgets it too.
    pub fn poll_evicted_budget(&mut self) -> Option<(String, String)> {
        self.evicted_budgets.pop_front()
    }

    fn collect_evicted(&mut self, workspace_id: &str) {
        let Some(entry) = self.workspaces.get_mut(workspace_id) else {
            return;
        };
        for budget in entry.controller.take_evicted_budgets() {
            self.budgets_evicted += 1;
            if self.evicted_budgets.len() == EVICTED_BUDGETS_OUTBOX_LIMIT {
                self.evicted_budgets.pop_front();
            }
            self.evicted_budgets
                .push_back((workspace_id.to_owned(), budget));
        }
    }

    /// Budgets forgotten for idleness, over the registry's life, in every workspace.
    pub fn budgets_evicted(&self) -> u64 {
        self.budgets_evicted
    }

    /// Registers `profile` as revision `profile_version` of `workspace_id`; see the module docs
    /// for every rule. Returns the profile-change record when the current revision changed.
    pub fn register(
        &mut self,
        workspace_id: &str,
        profile_version: &str,
        profile: Profile,
        now: Millis,
    ) -> Result<Option<ProfileChangeRecord>, RegistryError> {
        profile.validate()?;
        let digests = Digests::of(&profile)?;
        let existing = self.workspaces.get(workspace_id);
        if existing.is_some_and(WorkspaceEntry::rollout_live) {
            return Err(RegistryError::RolloutRunning);
        }
        let existing = existing.map(|e| &e.revisions);
        if let Some(revisions) = existing {
            revisions.check(profile_version, &digests)?;
        }

        let mut principals = existing.map(|r| r.principals().clone()).unwrap_or_default();
        principals.extend(profile.principals.clone());
        let merged = Profile {
            workspace: profile.workspace.clone(),
            providers: profile.providers.clone(),
            principals,
        };
        merged.validate()?;

        match self.workspaces.get_mut(workspace_id) {
            None => {
                let mut controller = Controller::new(merged.clone(), now)?;
                controller.set_budget_bounds(self.budget_bounds);
                controller.set_deadline_refusals(!self.deadline_refusals_off);
                self.workspaces.insert(
                    workspace_id.to_owned(),
                    WorkspaceEntry {
                        controller,
                        revisions: ProfileRevisions::default(),
                        rollout: None,
                        finished: RolloutHistory::new(),
                        rollouts_started: 0,
                        resolved: Resolved::new(),
                    },
                );
            }
            Some(entry) => entry.controller.set_profile(merged.clone(), now)?,
        }

        let Some(entry) = self.workspaces.get_mut(workspace_id) else {
            return Err(RegistryError::UnknownWorkspace);
        };
        let record = entry.revisions.accept(
            workspace_id,
            profile_version,
            profile,
            merged.principals,
            digests,
            now,
        );
        self.collect_evicted(workspace_id);
        self.collect_transitions(workspace_id);
        self.reschedule(workspace_id);
        Ok(record)
    }

    /// Re-files a workspace's next timeout after anything that may have changed it.
    fn reschedule(&mut self, workspace_id: &str) {
        let next = self
            .workspaces
            .get(workspace_id)
            .and_then(WorkspaceEntry::poll_timeout);
        let previous = match next {
            Some(at) => self.scheduled.insert(workspace_id.to_owned(), at),
            None => self.scheduled.remove(workspace_id),
        };
        if previous == next {
            return;
        }
        if let Some(at) = previous {
            self.timeouts.remove(&(at, workspace_id.to_owned()));
        }
        if let Some(at) = next {
            self.timeouts.insert((at, workspace_id.to_owned()));
        }
    }

    /// Handles every workspace whose timeout is due at `now`; returns their IDs so the host can
    /// drain their resolutions. Costs O(log n) per due workspace, nothing for the others.
    pub fn handle_due(&mut self, now: Millis) -> Vec<String> {
        let mut due = Vec::new();
        while let Some((at, workspace_id)) = self.timeouts.first().cloned() {
            if at > now {
                break;
            }
            if let Some(entry) = self.workspaces.get_mut(&workspace_id) {
                entry.on_both(|c| c.handle_timeout(now));
                entry.tidy();
            }
            self.collect_evicted(&workspace_id);
            self.collect_transitions(&workspace_id);
            self.reschedule(&workspace_id);
            // A controller always moves its timeout past `now` when handled; guard anyway.
            if self.scheduled.get(&workspace_id).is_some_and(|&t| t <= now) {
                if let Some(t) = self.scheduled.remove(&workspace_id) {
                    self.timeouts.remove(&(t, workspace_id.clone()));
                }
            }
            due.push(workspace_id);
        }
        due
    }

    /// The current revision of a workspace.
    pub fn current_profile_version(&self, workspace_id: &str) -> Option<&str> {
        self.workspaces
            .get(workspace_id)
            .map(|e| e.revisions.current())
    }

    /// The digest of a registered revision.
    pub fn revision_digest(&self, workspace_id: &str, profile_version: &str) -> Option<&str> {
        self.workspaces
            .get(workspace_id)?
            .revisions
            .digest(profile_version)
    }

    /// The workspace and provider limits of a registered revision.
    pub fn revision_limits(
        &self,
        workspace_id: &str,
        profile_version: &str,
    ) -> Option<(&Limits, &BTreeMap<String, Limits>)> {
        self.workspaces
            .get(workspace_id)?
            .revisions
            .limits(profile_version)
    }

    /// The last [`PROFILE_HISTORY_LIMIT`] profile-change records, oldest first.
    pub fn profile_history(&self, workspace_id: &str) -> Vec<ProfileChangeRecord> {
        self.workspaces
            .get(workspace_id)
            .map(|e| e.revisions.history())
            .unwrap_or_default()
    }

    /// The oldest breaker transition not yet polled, with the workspace it happened in.
    pub fn poll_transition(&mut self) -> Option<(String, BreakerTransition)> {
        self.transitions.pop_front()
    }

    /// Transitions dropped unpolled because an outbox held [`TRANSITION_OUTBOX_LIMIT`] (the
    /// registry's, or a controller's within one operation).
    pub fn transitions_dropped(&self) -> u64 {
        let in_controllers: u64 = self
            .workspaces
            .values()
            .map(|e| e.controller.transitions_dropped())
            .sum();
        self.transitions_dropped + in_controllers
    }

    /// Moves a controller's new transitions into the outbox, tagged with its workspace.
    fn collect_transitions(&mut self, workspace_id: &str) {
        let Some(entry) = self.workspaces.get_mut(workspace_id) else {
            return;
        };
        while let Some(transition) = entry.controller.poll_transition() {
            if self.transitions.len() == TRANSITION_OUTBOX_LIMIT {
                self.transitions.pop_front();
                self.transitions_dropped += 1;
            }
            self.transitions
                .push_back((workspace_id.to_owned(), transition));
        }
    }

    /// Runs `operation` on a workspace (its controller, and a rollout's candidate, see
    /// `registry/rollouts.rs`), then collects its breaker transitions.
    fn with_controller<T>(
        &mut self,
        workspace_id: &str,
        operation: impl FnOnce(&mut WorkspaceEntry) -> T,
    ) -> Result<T, RegistryError> {
        let entry = self
            .workspaces
            .get_mut(workspace_id)
            .ok_or(RegistryError::UnknownWorkspace)?;
        let result = operation(entry);
        entry.tidy();
        self.collect_evicted(workspace_id);
        self.collect_transitions(workspace_id);
        self.reschedule(workspace_id);
        Ok(result)
    }

    /// Asks a workspace's controller for a permit ([`Controller::acquire`]).
    pub fn acquire(
        &mut self,
        workspace_id: &str,
        request: AdmissionRequest,
        now: Millis,
    ) -> Result<Acquired, RegistryError> {
        self.with_controller(workspace_id, |e| e.admit(request, now, false))
    }

    /// Admit now or refuse at once ([`Controller::try_acquire`]); never queues.
    pub fn try_acquire(
        &mut self,
        workspace_id: &str,
        request: AdmissionRequest,
        now: Millis,
    ) -> Result<Result<Lease, Rejection>, RegistryError> {
        self.with_controller(workspace_id, |e| match e.admit(request, now, true) {
            Acquired::Admitted(lease) => Ok(lease),
            Acquired::Rejected(rejection) => Err(rejection),
            // Never: a try-now answer is `try_acquire`'s, admitted or refused.
            Acquired::Queued { .. } => {
                Err(Rejection::refusal(crate::reason::Reason::Concurrency, 0))
            }
        })
    }

    /// Cancels a queued request ([`Controller::cancel`]); `None` when it was already resolved.
    pub fn cancel(
        &mut self,
        workspace_id: &str,
        waiter: WaiterId,
        now: Millis,
    ) -> Result<Option<Rejection>, RegistryError> {
        self.with_controller(workspace_id, |e| e.cancel(waiter, now))
    }

    /// Releases a lease with its outcome ([`Controller::release`]).
    pub fn release(
        &mut self,
        workspace_id: &str,
        lease: LeaseId,
        outcome: Outcome,
        now: Millis,
    ) -> Result<Option<Released>, RegistryError> {
        self.with_controller(workspace_id, |e| {
            e.release(lease, outcome, ActualUsage::none(), now)
        })
    }

    /// [`Registry::release`] with what the call actually used (corrects the invocation's
    /// budget lines; see [`ActualUsage`]).
    pub fn release_with_usage(
        &mut self,
        workspace_id: &str,
        lease: LeaseId,
        outcome: Outcome,
        usage: ActualUsage,
        now: Millis,
    ) -> Result<Option<Released>, RegistryError> {
        self.with_controller(workspace_id, |e| e.release(lease, outcome, usage, now))
    }

    /// Pauses a provider lane of a workspace; returns the instant the pause ends. An unknown
    /// workspace or a provider its profile does not configure is an error and changes nothing.
    pub fn coordinate_retry_after(
        &mut self,
        workspace_id: &str,
        provider_id: &str,
        retry_after_ms: Millis,
        now: Millis,
    ) -> Result<Millis, RegistryError> {
        self.with_controller(workspace_id, |e| {
            e.on_both(|c| c.coordinate_retry_after(provider_id, retry_after_ms, now))
        })?
        .map_err(|_| RegistryError::UnconfiguredProvider)
    }

    /// Takes what a provider answer announced of the account's quota for a provider lane of a
    /// workspace ([`Controller::observe_provider_quota`]). An unknown workspace or a provider
    /// its profile does not configure is an error and changes nothing.
    pub fn observe_provider_quota(
        &mut self,
        workspace_id: &str,
        provider_id: &str,
        quota: &ProviderQuota,
        now: Millis,
    ) -> Result<(), RegistryError> {
        self.with_controller(workspace_id, |e| {
            e.on_both(|c| c.observe_provider_quota(provider_id, quota, now))
        })?
        .map_err(|_| RegistryError::UnconfiguredProvider)
    }

    /// Forgets one invocation's budget counters ([`Controller::release_budget`]); returns
    /// whether it had spent anything.
    pub fn release_budget(
        &mut self,
        workspace_id: &str,
        budget_id: &str,
        now: Millis,
    ) -> Result<bool, RegistryError> {
        self.with_controller(workspace_id, |e| {
            e.on_both(|c| c.release_budget(budget_id, now))
        })
    }

    /// Processes everything due at `now` in one workspace ([`Controller::handle_timeout`]).
    pub fn handle_timeout(&mut self, workspace_id: &str, now: Millis) -> Result<(), RegistryError> {
        self.with_controller(workspace_id, |e| e.on_both(|c| c.handle_timeout(now)))
    }

    /// The next resolved waiter of a workspace, if any.
    pub fn poll_resolution(&mut self, workspace_id: &str) -> Option<Resolution> {
        self.workspaces
            .get_mut(workspace_id)
            .and_then(WorkspaceEntry::poll_resolution)
    }

    /// The earliest `poll_timeout` of any workspace, in O(1).
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.timeouts.first().map(|(at, _)| *at)
    }

    /// One workspace's next timeout.
    pub fn poll_timeout_of(&self, workspace_id: &str) -> Option<Millis> {
        self.scheduled.get(workspace_id).copied()
    }

    /// Every workspace with a registered profile and its current revision, by workspace ID.
    pub fn workspaces(&self) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = self
            .workspaces
            .iter()
            .map(|(id, entry)| (id.clone(), entry.revisions.current().to_owned()))
            .collect();
        all.sort_unstable();
        all
    }

    /// A workspace's aggregate counts ([`Controller::snapshot`]).
    pub fn snapshot(&self, workspace_id: &str) -> Option<Snapshot> {
        self.workspaces
            .get(workspace_id)
            .map(|e| e.controller.snapshot())
    }

    /// The live view of a workspace's provider lanes at `now` (`None` without a profile).
    pub fn lane_views(&self, workspace_id: &str, now: Millis) -> Option<Vec<LaneView>> {
        self.workspaces
            .get(workspace_id)
            .map(|e| e.controller.lane_views(now))
    }

    /// Workspace-wide counts.
    pub fn totals(&self, workspace_id: &str) -> Option<Counts> {
        self.workspaces
            .get(workspace_id)
            .map(|e| e.controller.totals())
    }

    /// The high-water marks of a workspace's totals ([`Controller::peak_totals`]).
    pub fn peak_totals(&self, workspace_id: &str) -> Option<Counts> {
        self.workspaces
            .get(workspace_id)
            .map(|e| e.controller.peak_totals())
    }

    /// Whether a profile is registered for the workspace.
    pub fn has_workspace(&self, workspace_id: &str) -> bool {
        self.workspaces.contains_key(workspace_id)
    }

    /// The newest instant a workspace's controller has seen (hosts release an unclaimed lease
    /// at that instant).
    pub fn now_of(&self, workspace_id: &str) -> Option<Millis> {
        self.workspaces
            .get(workspace_id)
            .map(|e| e.controller.now())
    }

    /// The profile in force for a workspace: the current revision's workspace and provider
    /// limits with every principal ever registered.
    pub fn profile(&self, workspace_id: &str) -> Option<&Profile> {
        self.workspaces
            .get(workspace_id)
            .map(|e| e.controller.profile())
    }

    /// A workspace's last breaker transitions ([`Controller::breaker_transitions`]).
    pub fn breaker_transitions(&self, workspace_id: &str) -> Vec<BreakerTransition> {
        self.workspaces
            .get(workspace_id)
            .map(|e| e.controller.breaker_transitions())
            .unwrap_or_default()
    }

    /// What a held lease of a workspace holds and charged ([`Controller::lease_charge`]).
    pub fn lease_charge(&self, workspace_id: &str, lease: LeaseId) -> Option<LeaseCharge> {
        self.workspaces
            .get(workspace_id)?
            .controller
            .lease_charge(lease)
    }

    /// Workspace IDs with a registered profile.
    pub fn workspace_ids(&self) -> impl Iterator<Item = &str> {
        self.workspaces.keys().map(String::as_str)
    }
}
