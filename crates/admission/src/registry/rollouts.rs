//! A workspace's rollout in the registry (semantics: `crate::rollout`): starting, reading,
//! promoting and aborting it, and routing every operation of the workspace through it while it
//! runs (arrivals compared, grants and releases followed on both sides, canary slices decided
//! by the candidate).
//!
//! # Invariants
//!
//! - Without a rollout every operation goes to the workspace's controller unchanged.
//! - A real answer is always the deciding controller's own answer (a canary decision's evidence
//!   also names the candidate revision); the other side only reads or takes facts.
//! - Every grant of one side is forced into the other side's books and its release follows it
//!   (`mirrors`), so each side counts the whole workspace's load.
//! - Only the active controller's breaker transitions and evicted budgets reach the registry's
//!   outboxes; the candidate's are dropped (the same outcomes reach the active).
//! - Per operation the routing costs O(1): a hash of the principal (canary), hash-map lookups
//!   of lease IDs, one read-only decision of the other side.

use std::collections::VecDeque;

use foldhash::HashMap;

use crate::budget::ActualUsage;
use crate::controller::{Acquired, AdmissionRequest, Controller, Released, Resolution};
use crate::evidence::{Evidence, LeaseId, Outcome, Rejection, WaiterId};
use crate::profile::Profile;
use crate::rollout::{
    canary_hash, canary_seed, canary_threshold, valid_share, Comparison, FinishedRollout,
    RolloutDecision, RolloutError, RolloutMode, RolloutOutcome, RolloutView, ROLLOUT_HISTORY_LIMIT,
};
use crate::time::Millis;

use super::revisions::{Digests, ProfileRevisions};
use super::{ProfileChangeRecord, Registry, RegistryError, WorkspaceEntry};

/// How far apart the IDs of a workspace's controllers start (bits): a rollout's candidate
/// counts from `rollout number << ID_BASE_BITS`.
const ID_BASE_BITS: u32 = 40;

/// A running (or, for a canary, draining) rollout of one workspace.
pub(super) struct RolloutState {
    revision: String,
    digest: String,
    /// The candidate revision's profile as given (its principals only), for promote.
    profile: Profile,
    mode: RolloutMode,
    seed: u64,
    threshold: u128,
    started_at: Millis,
    comparison: Comparison,
    /// False once promoted or aborted: the candidate only serves its remaining waiters.
    live: bool,
    candidate: Controller,
    /// The active's leases, with their forced twins in the candidate.
    active_to_candidate: HashMap<LeaseId, LeaseId>,
    /// The candidate's real leases (canary), with their forced twins in the active.
    candidate_to_active: HashMap<LeaseId, LeaseId>,
}

impl RolloutState {
    fn view(&self) -> RolloutView {
        RolloutView {
            revision: self.revision.clone(),
            digest: self.digest.clone(),
            mode: self.mode,
            started_at_epoch_ms: self.started_at,
            decisions: self.comparison.clone(),
        }
    }

    fn finish(&self, outcome: RolloutOutcome, now: Millis) -> FinishedRollout {
        FinishedRollout {
            revision: self.revision.clone(),
            digest: self.digest.clone(),
            mode: self.mode,
            outcome,
            started_at_epoch_ms: self.started_at,
            ended_at_epoch_ms: now,
            decisions: self.comparison.clone(),
        }
    }

    /// Whether a live canary puts the request under the candidate: its principal is in the
    /// slice, and the active controller knows its lane (so it can count the grant; a principal
    /// or provider only the candidate names stays with the active until a promote).
    fn decides(&self, active: &Controller, request: &AdmissionRequest) -> bool {
        self.live
            && matches!(self.mode, RolloutMode::Canary { .. })
            && u128::from(canary_hash(self.seed, &request.principal_id)) < self.threshold
            && active.knows_lane(&request.principal_id, &request.provider_id)
    }

    /// Whether the candidate still holds real work (canary leases or waiters).
    fn holds_work(&self) -> bool {
        !self.candidate_to_active.is_empty() || self.candidate.has_waiters()
    }

    /// Moves both controllers' new resolutions to `resolved`, each grant forced into the other
    /// side at once (before the other side can pump again), a canary's named.
    fn settle(&mut self, active: &mut Controller, resolved: &mut VecDeque<Resolution>) {
        while let Some(resolution) = active.poll_resolution() {
            if let Ok(lease) = &resolution.outcome {
                let now = active.now();
                if let Some(twin) = mirror(active, &mut self.candidate, lease.id, now) {
                    self.active_to_candidate.insert(lease.id, twin);
                }
            }
            resolved.push_back(resolution);
        }
        while let Some(mut resolution) = self.candidate.poll_resolution() {
            match &mut resolution.outcome {
                Ok(lease) => {
                    let now = self.candidate.now();
                    if let Some(twin) = mirror(&self.candidate, active, lease.id, now) {
                        self.candidate_to_active.insert(lease.id, twin);
                    }
                    self.name(&mut lease.evidence);
                }
                Err(rejection) => self.name(&mut rejection.evidence),
            }
            resolved.push_back(resolution);
        }
    }

    fn name(&self, evidence: &mut Evidence) {
        evidence.candidate = true;
    }
}

/// Forces the grant `lease` of `from` into `to`; returns `to`'s twin.
fn mirror(from: &Controller, to: &mut Controller, lease: LeaseId, now: Millis) -> Option<LeaseId> {
    to.force_grant(&from.grant_fact(lease)?, now)
}

impl WorkspaceEntry {
    /// An arrival ([`Controller::acquire`], or `try_now`: [`Controller::try_acquire`]).
    pub(super) fn admit(
        &mut self,
        request: AdmissionRequest,
        now: Millis,
        try_now: bool,
    ) -> Acquired {
        let decide = |c: &mut Controller, request, now| {
            if try_now {
                match c.try_acquire(request, now) {
                    Ok(lease) => Acquired::Admitted(lease),
                    Err(rejection) => Acquired::Rejected(rejection),
                }
            } else {
                c.acquire(request, now)
            }
        };
        let Some(state) = self.rollout.as_deref_mut() else {
            return decide(&mut self.controller, request, now);
        };
        if !state.live {
            let acquired = decide(&mut self.controller, request, now);
            if let Acquired::Admitted(lease) = &acquired {
                if let Some(twin) = mirror(&self.controller, &mut state.candidate, lease.id, now) {
                    state.active_to_candidate.insert(lease.id, twin);
                }
            }
            state.settle(&mut self.controller, &mut self.resolved);
            return acquired;
        }
        if state.decides(&self.controller, &request) {
            let active = self.controller.would_decide(&request, now, try_now);
            let mut acquired = decide(&mut state.candidate, request, now);
            state
                .comparison
                .note(RolloutDecision::of(&acquired), active);
            match &mut acquired {
                Acquired::Admitted(lease) => {
                    if let Some(twin) =
                        mirror(&state.candidate, &mut self.controller, lease.id, now)
                    {
                        state.candidate_to_active.insert(lease.id, twin);
                    }
                    state.name(&mut lease.evidence);
                }
                Acquired::Queued { evidence, .. } => state.name(evidence),
                Acquired::Rejected(rejection) => state.name(&mut rejection.evidence),
            }
            state.settle(&mut self.controller, &mut self.resolved);
            return acquired;
        }
        let candidate = state.candidate.would_decide(&request, now, try_now);
        let acquired = decide(&mut self.controller, request, now);
        state
            .comparison
            .note(candidate, RolloutDecision::of(&acquired));
        if let Acquired::Admitted(lease) = &acquired {
            if let Some(twin) = mirror(&self.controller, &mut state.candidate, lease.id, now) {
                state.active_to_candidate.insert(lease.id, twin);
            }
        }
        state.settle(&mut self.controller, &mut self.resolved);
        acquired
    }

    /// Cancels a waiter in the controller that holds it.
    pub(super) fn cancel(&mut self, waiter: WaiterId, now: Millis) -> Option<Rejection> {
        let Some(state) = self.rollout.as_deref_mut() else {
            return self.controller.cancel(waiter, now);
        };
        let rejection = if state.candidate.holds_waiter(waiter) {
            let mut rejection = state.candidate.cancel(waiter, now);
            if let Some(rejection) = &mut rejection {
                state.name(&mut rejection.evidence);
            }
            rejection
        } else {
            self.controller.cancel(waiter, now)
        };
        state.settle(&mut self.controller, &mut self.resolved);
        rejection
    }

    /// Releases a lease in the controller that granted it, and its twin in the other.
    pub(super) fn release(
        &mut self,
        lease: LeaseId,
        outcome: Outcome,
        usage: ActualUsage,
        now: Millis,
    ) -> Option<Released> {
        let Some(state) = self.rollout.as_deref_mut() else {
            return self
                .controller
                .release_with_usage(lease, outcome, usage, now);
        };
        // The owner first: what its pump admits is counted on the other side before the twin's
        // release lets that side pump, so one freed permit is never granted twice.
        if let Some(twin) = state.candidate_to_active.remove(&lease) {
            let released = state
                .candidate
                .release_with_usage(lease, outcome, usage, now);
            state.settle(&mut self.controller, &mut self.resolved);
            self.controller
                .release_with_usage(twin, outcome, usage, now);
            state.settle(&mut self.controller, &mut self.resolved);
            return released;
        }
        let released = self
            .controller
            .release_with_usage(lease, outcome, usage, now);
        state.settle(&mut self.controller, &mut self.resolved);
        if let Some(twin) = state.active_to_candidate.remove(&lease) {
            state
                .candidate
                .release_with_usage(twin, outcome, usage, now);
            state.settle(&mut self.controller, &mut self.resolved);
        }
        released
    }

    /// A fact of the workspace (a pause, an announced quota, a released budget, time passing)
    /// applied to both controllers; answers the active's result.
    pub(super) fn on_both<T>(&mut self, mut fact: impl FnMut(&mut Controller) -> T) -> T {
        let Some(state) = self.rollout.as_deref_mut() else {
            return fact(&mut self.controller);
        };
        fact(&mut state.candidate);
        state.settle(&mut self.controller, &mut self.resolved);
        let answer = fact(&mut self.controller);
        state.settle(&mut self.controller, &mut self.resolved);
        answer
    }

    /// The next resolved waiter of either controller (in the order they were resolved).
    pub(super) fn poll_resolution(&mut self) -> Option<Resolution> {
        self.resolved
            .pop_front()
            .or_else(|| self.controller.poll_resolution())
    }

    /// The earlier of both controllers' next timeouts.
    pub(super) fn poll_timeout(&self) -> Option<Millis> {
        let active = self.controller.poll_timeout();
        let candidate = self
            .rollout
            .as_deref()
            .and_then(|s| s.candidate.poll_timeout());
        match (active, candidate) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// After every operation: drops the candidate's own outboxes, and a finished canary's
    /// candidate once it holds no real work.
    pub(super) fn tidy(&mut self) {
        let Some(state) = self.rollout.as_deref_mut() else {
            return;
        };
        while state.candidate.poll_transition().is_some() {}
        drop(state.candidate.take_evicted_budgets());
        if !state.live && !state.holds_work() {
            self.rollout = None;
        }
    }

    /// Whether a live rollout runs.
    pub(super) fn rollout_live(&self) -> bool {
        self.rollout.as_deref().is_some_and(|s| s.live)
    }
}

impl Registry {
    /// Starts a rollout of `revision` (`profile`) in `workspace_id` at `now`: the revision is
    /// checked and kept like any registration but not made current; see `crate::rollout`.
    pub fn start_rollout(
        &mut self,
        workspace_id: &str,
        revision: &str,
        profile: Profile,
        mode: RolloutMode,
        now: Millis,
    ) -> Result<RolloutView, RolloutError> {
        let threshold = match mode {
            RolloutMode::Shadow => 0,
            RolloutMode::Canary { share } if valid_share(share) => canary_threshold(share),
            RolloutMode::Canary { .. } => return Err(RolloutError::InvalidShare),
        };
        let (bounds, deadline_refusals) = (self.budget_bounds, !self.deadline_refusals_off);
        let entry = self
            .workspaces
            .get_mut(workspace_id)
            .ok_or(RolloutError::UnknownWorkspace)?;
        if let Some(state) = &entry.rollout {
            return Err(if state.live {
                RolloutError::AlreadyRunning
            } else {
                RolloutError::Draining
            });
        }
        if entry.revisions.current() == revision {
            return Err(RolloutError::CandidateIsCurrent {
                revision: revision.to_owned(),
            });
        }
        profile.validate().map_err(RegistryError::from)?;
        let digests = Digests::of(&profile)?;
        entry.revisions.check(revision, &digests)?;
        let mut principals = entry.revisions.principals().clone();
        principals.extend(profile.principals.clone());
        let merged = Profile {
            workspace: profile.workspace.clone(),
            providers: profile.providers.clone(),
            principals,
        };
        let now = now.max(entry.controller.now());
        let mut candidate = Controller::new(merged, now).map_err(RegistryError::from)?;
        candidate.set_budget_bounds(bounds);
        candidate.set_deadline_refusals(deadline_refusals);
        entry.rollouts_started += 1;
        candidate.set_id_base(entry.rollouts_started << ID_BASE_BITS);
        let followed = candidate.follow(&entry.controller, now);
        entry.revisions.stage(revision, &profile, &digests);
        let digest = ProfileRevisions::profile_digest(&digests).to_owned();
        let state = RolloutState {
            revision: revision.to_owned(),
            seed: canary_seed(&digest),
            digest,
            profile,
            mode,
            threshold,
            started_at: now,
            comparison: Comparison::default(),
            live: true,
            candidate,
            active_to_candidate: followed.into_iter().collect(),
            candidate_to_active: HashMap::default(),
        };
        let view = state.view();
        entry.rollout = Some(Box::new(state));
        self.reschedule(workspace_id);
        Ok(view)
    }

    /// The revision that made a decision of a workspace, read from its evidence: a canary
    /// candidate's (while the rollout runs or its slice drains) or the current revision.
    pub fn revision_of(&self, workspace_id: &str, evidence: &Evidence) -> Option<&str> {
        let entry = self.workspaces.get(workspace_id)?;
        match entry.rollout.as_deref() {
            Some(state) if evidence.candidate => Some(&state.revision),
            _ => Some(entry.revisions.current()),
        }
    }

    /// The running rollout of a workspace, with its comparison so far.
    pub fn rollout(&self, workspace_id: &str) -> Option<RolloutView> {
        let state = self.workspaces.get(workspace_id)?.rollout.as_deref()?;
        state.live.then(|| state.view())
    }

    /// The last [`ROLLOUT_HISTORY_LIMIT`] finished rollouts of a workspace, oldest first.
    pub fn rollouts(&self, workspace_id: &str) -> Vec<FinishedRollout> {
        self.workspaces
            .get(workspace_id)
            .map(|e| e.finished.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Makes the running rollout's candidate the current revision, exactly as registering it
    /// would (the profile-change record is returned), and ends the rollout.
    pub fn promote_rollout(
        &mut self,
        workspace_id: &str,
        now: Millis,
    ) -> Result<(FinishedRollout, Option<ProfileChangeRecord>), RolloutError> {
        let mut state = self.take_live(workspace_id)?;
        state.live = false;
        let (revision, profile) = (state.revision.clone(), state.profile.clone());
        let Some(entry) = self.workspaces.get_mut(workspace_id) else {
            return Err(RolloutError::UnknownWorkspace);
        };
        entry.rollout = Some(state);
        match self.register(workspace_id, &revision, profile, now) {
            Ok(change) => {
                let finished = self.end(workspace_id, RolloutOutcome::Promoted, now)?;
                Ok((finished, change))
            }
            Err(error) => {
                if let Some(state) = self
                    .workspaces
                    .get_mut(workspace_id)
                    .and_then(|e| e.rollout.as_deref_mut())
                {
                    state.live = true;
                }
                Err(error.into())
            }
        }
    }

    /// Ends the running rollout; the active revision is untouched.
    pub fn abort_rollout(
        &mut self,
        workspace_id: &str,
        now: Millis,
    ) -> Result<FinishedRollout, RolloutError> {
        let mut state = self.take_live(workspace_id)?;
        state.live = false;
        if let Some(entry) = self.workspaces.get_mut(workspace_id) {
            entry.rollout = Some(state);
        }
        self.end(workspace_id, RolloutOutcome::Aborted, now)
    }

    fn take_live(&mut self, workspace_id: &str) -> Result<Box<RolloutState>, RolloutError> {
        let entry = self
            .workspaces
            .get_mut(workspace_id)
            .ok_or(RolloutError::UnknownWorkspace)?;
        if !entry.rollout_live() {
            return Err(RolloutError::NoRollout);
        }
        entry.rollout.take().ok_or(RolloutError::NoRollout)
    }

    /// Records the end of the (no longer live) rollout and keeps its candidate only while it
    /// holds real work.
    fn end(
        &mut self,
        workspace_id: &str,
        outcome: RolloutOutcome,
        now: Millis,
    ) -> Result<FinishedRollout, RolloutError> {
        let entry = self
            .workspaces
            .get_mut(workspace_id)
            .ok_or(RolloutError::UnknownWorkspace)?;
        let state = entry.rollout.as_deref().ok_or(RolloutError::NoRollout)?;
        let finished = state.finish(outcome, now.max(entry.controller.now()));
        if entry.finished.len() == ROLLOUT_HISTORY_LIMIT {
            entry.finished.pop_front();
        }
        entry.finished.push_back(finished.clone());
        // A promote's new limits may have let the active admit: the candidate counts it.
        if let Some(state) = entry.rollout.as_deref_mut() {
            state.settle(&mut entry.controller, &mut entry.resolved);
        }
        entry.tidy();
        self.reschedule(workspace_id);
        Ok(finished)
    }
}

/// The history of finished rollouts a workspace keeps.
pub(super) type RolloutHistory = VecDeque<FinishedRollout>;

/// Resolutions moved out of a workspace's controllers while a rollout runs, not yet polled.
pub(super) type Resolved = VecDeque<Resolution>;
