//! The admission controller of one workspace: a deterministic, sans-IO state machine.
//!
//! # How a request flows
//!
//! [`Controller::acquire`] runs *preflight* (provider configured, principal known, deadline,
//! estimate well-formed, per-request bounds, unknown cost / tokens / retained work), then the
//! *never-fit* checks (a zero ceiling, a zero request rate, a token estimate above a bucket's
//! capacity, a budget already too small), then *queue admission* (queue lengths and queue
//! shares). A request that passes becomes a waiter at the back of its lane and the *pump* runs:
//! if the waiter is admitted at once, `acquire` returns the lease; otherwise it returns the
//! waiter's ID and the deferral evidence, and the waiter is resolved later, delivered through
//! [`Controller::poll_resolution`].
//!
//! # The pump and fairness
//!
//! Lanes with waiters sit in a ring. The pump looks at the ring front's head only, tries to
//! admit it, and moves that lane to the back: at most one new permit per lane per round. A head
//! rejected on revalidation is dropped and the lane's next waiter is considered at once. The pump
//! stops after a full round without an admission, as soon as a workspace-wide condition blocks
//! everyone, or when every queued waiter belongs to a provider already found blocked in this
//! pass. That keeps a handoff O(1) in the number of lanes when a shared ceiling is what binds.
//!
//! # Time
//!
//! Nothing polls. Every entry point takes `now`; expiries (deadline or queue dwell, whichever is
//! first) sit in an ordered set and fire exactly at their instant for every waiter, not only for
//! lane heads. The pump records the earliest instant at which a blocked head can change (a
//! bucket refilled enough for *its* need, a breaker's open period ending, a Retry-After pause
//! ending); [`Controller::poll_timeout`] is the minimum of that and the next expiry. Releases,
//! cancellations and profile changes pump at once.
//!
//! # Invariants
//!
//! - Active counts never exceed any scope's `concurrency`; queued counts never exceed any
//!   scope's `maxQueueLength` at the moment a waiter joins.
//! - Every waiter is resolved exactly once (admitted, rejected, cancelled or expired); every
//!   lease is released at most once; after everything is released or cancelled all counters
//!   are zero.
//! - A rejected request is never admitted later.
//! - Evidence never carries a principal or workspace ID.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use serde::{Deserialize, Serialize};

use crate::breaker::{Breaker, BreakerGate, BreakerTransition};
use crate::budget::{ActualUsage, BudgetLedger, ScopeKey};
use crate::estimate::{CheckedEstimate, Estimate};
use crate::evidence::{Evidence, Lease, LeaseId, Outcome, Rejection, WaiterId};
use crate::lane::{Lane, LaneKey};
use crate::limits::Limits;
use crate::profile::{Profile, ProfileError};
use crate::reason::{BreakerState, Decision, Reason};
use crate::scope::{ScopeState, TokenHolder};
use crate::time::Millis;

/// Idle lanes kept for reuse (the reference keeps at most 1024 idle scopes).
pub const IDLE_LANES_KEPT: usize = 1024;

/// Breaker transitions kept in [`Controller::breaker_transitions`].
pub const BREAKER_HISTORY_LIMIT: usize = 64;

/// One request for a permit to call a provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// The authenticated caller; selects the lane, never appears in evidence.
    pub principal_id: String,
    /// The provider lane (the adapter ID a binding target names).
    pub provider_id: String,
    /// The invocation whose attempt, cost and token budgets this request spends.
    pub budget_id: String,
    #[serde(default)]
    pub estimate: Estimate,
    /// Absolute instant after which the request must not be admitted.
    #[serde(default)]
    pub deadline: Option<Millis>,
}

impl AdmissionRequest {
    pub fn new(
        principal_id: impl Into<String>,
        provider_id: impl Into<String>,
        budget_id: impl Into<String>,
    ) -> Self {
        AdmissionRequest {
            principal_id: principal_id.into(),
            provider_id: provider_id.into(),
            budget_id: budget_id.into(),
            estimate: Estimate::default(),
            deadline: None,
        }
    }

    pub fn with_estimate(mut self, estimate: Estimate) -> Self {
        self.estimate = estimate;
        self
    }

    pub fn with_deadline(mut self, deadline: Millis) -> Self {
        self.deadline = Some(deadline);
        self
    }
}

/// The immediate answer to [`Controller::acquire`].
#[derive(Debug, Clone, PartialEq)]
pub enum Acquired {
    Admitted(Lease),
    /// Waiting; resolved later through [`Controller::poll_resolution`].
    Queued {
        waiter: WaiterId,
        evidence: Evidence,
    },
    Rejected(Rejection),
}

/// The final answer for a waiter.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub waiter: WaiterId,
    pub outcome: Result<Lease, Rejection>,
}

/// What releasing a lease changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Released {
    /// Breaker transitions the outcome caused.
    pub breaker_transitions: Vec<BreakerTransition>,
}

/// Aggregate counts of a controller. Provider IDs are lane names, not tenant identities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub active: u64,
    pub queued: u64,
    pub retry_pressure: u64,
    pub open_budgets: u64,
    pub providers: BTreeMap<String, ProviderSnapshot>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSnapshot {
    pub active: u64,
    pub queued: u64,
    pub breaker_state: BreakerState,
    pub paused_until: Option<Millis>,
}

/// Limits are shared (`Arc`) so the pump can hold them across mutations of the same state
/// without copying them for every head it looks at.
struct PrincipalState {
    limits: Option<Arc<Limits>>,
    scope: ScopeState,
}

struct ProviderState {
    id: String,
    limits: Option<Arc<Limits>>,
    scope: ScopeState,
    breaker: Breaker,
    paused_until: Millis,
}

struct Waiter {
    lane: LaneKey,
    budget_id: String,
    estimate: CheckedEstimate,
    deadline: Option<Millis>,
    enqueued_at: Millis,
    expires_at: Option<Millis>,
    last_reason: Reason,
    last_wake: Option<Millis>,
    transitions: Vec<BreakerTransition>,
}

struct LeaseRecord {
    lane: LaneKey,
    probe: bool,
    admitted_at: Millis,
    /// The invocation charged, its epoch and what it was charged (for actual usage).
    budget_id: String,
    budget_epoch: u64,
    charged: CheckedEstimate,
}

/// Which scope blocked a head; decides how far the blockage reaches in this pump pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blocked {
    /// Nobody in the workspace can be admitted until something changes.
    Workspace,
    /// Nobody on this provider can be admitted.
    Provider,
    /// Nobody of this principal can be admitted.
    Principal,
    /// Only this head is blocked (its own estimate or share).
    Head,
}

enum Attempt {
    Admit {
        probe: bool,
    },
    Defer {
        reason: Reason,
        wake: Option<Millis>,
        blocked: Blocked,
    },
    Reject(Reason),
}

/// The admission controller of one workspace.
pub struct Controller {
    profile: Profile,
    now: Millis,
    workspace: ScopeState,
    principals: Vec<PrincipalState>,
    principal_index: FxHashMap<String, u32>,
    reserved_principals: Vec<u32>,
    providers: Vec<ProviderState>,
    provider_index: FxHashMap<String, u32>,
    lanes: FxHashMap<LaneKey, Lane>,
    /// Lanes that went idle, oldest first (entries may be stale: the lane got busy again).
    idle_lanes: VecDeque<LaneKey>,
    /// Round-robin ring of (lane, ticket); an entry whose ticket is not its lane's is stale.
    ring: VecDeque<(LaneKey, u64)>,
    /// Lanes with a live ring entry.
    ring_lanes: usize,
    next_ticket: u64,
    waiters: FxHashMap<WaiterId, Waiter>,
    expiries: BTreeSet<(Millis, WaiterId)>,
    leases: FxHashMap<LeaseId, LeaseRecord>,
    budgets: BudgetLedger,
    retry_pressure: u64,
    mean_hold_ms: Option<Millis>,
    breaker_history: VecDeque<BreakerTransition>,
    transition_outbox: Vec<BreakerTransition>,
    resolutions: VecDeque<Resolution>,
    next_id: u64,
    wake_at: Option<Millis>,
    pass: u64,
    /// Ring entries the pump has looked at, over the controller's life (a cost counter).
    lanes_visited: u64,
    provider_blocked_in_pass: Vec<u64>,
    principal_blocked_in_pass: Vec<u64>,
}

impl Controller {
    /// A controller for one workspace under `profile`, starting at `now`.
    pub fn new(profile: Profile, now: Millis) -> Result<Self, ProfileError> {
        profile.validate()?;
        let mut controller = Controller {
            profile: Profile::default(),
            now,
            workspace: ScopeState::default(),
            principals: Vec::new(),
            principal_index: FxHashMap::default(),
            reserved_principals: Vec::new(),
            providers: Vec::new(),
            provider_index: FxHashMap::default(),
            lanes: FxHashMap::default(),
            idle_lanes: VecDeque::new(),
            ring: VecDeque::new(),
            ring_lanes: 0,
            next_ticket: 0,
            waiters: FxHashMap::default(),
            expiries: BTreeSet::new(),
            leases: FxHashMap::default(),
            budgets: BudgetLedger::default(),
            retry_pressure: 0,
            mean_hold_ms: None,
            breaker_history: VecDeque::new(),
            transition_outbox: Vec::new(),
            resolutions: VecDeque::new(),
            next_id: 1,
            wake_at: None,
            pass: 0,
            lanes_visited: 0,
            provider_blocked_in_pass: Vec::new(),
            principal_blocked_in_pass: Vec::new(),
        };
        controller.install_profile(profile);
        Ok(controller)
    }

    /// The profile in force.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The newest instant this controller has seen.
    pub fn now(&self) -> Millis {
        self.now
    }

    /// Whether the controller holds no lease and no waiter.
    pub fn is_idle(&self) -> bool {
        self.leases.is_empty() && self.waiters.is_empty()
    }

    fn advance(&mut self, now: Millis) -> Millis {
        self.now = self.now.max(now);
        self.now
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    // ----- interning ---------------------------------------------------------------------

    fn principal(&mut self, id: &str) -> u32 {
        if let Some(&index) = self.principal_index.get(id) {
            return index;
        }
        let index = self.principals.len() as u32;
        let limits = self.profile.principals.get(id).cloned().map(Arc::new);
        let mut scope = ScopeState::default();
        if let Some(limits) = &limits {
            scope.sync_limits(limits, self.now);
        }
        self.principals.push(PrincipalState { limits, scope });
        self.principal_blocked_in_pass.push(0);
        self.principal_index.insert(id.to_owned(), index);
        index
    }

    fn provider(&mut self, id: &str) -> u32 {
        if let Some(&index) = self.provider_index.get(id) {
            return index;
        }
        let index = self.providers.len() as u32;
        let limits = self.profile.providers.get(id).cloned().map(Arc::new);
        let mut scope = ScopeState::default();
        if let Some(limits) = &limits {
            scope.sync_limits(limits, self.now);
        }
        self.providers.push(ProviderState {
            id: id.to_owned(),
            limits,
            scope,
            breaker: Breaker::default(),
            paused_until: 0,
        });
        self.provider_blocked_in_pass.push(0);
        self.provider_index.insert(id.to_owned(), index);
        index
    }

    fn install_profile(&mut self, profile: Profile) {
        let now = self.now;
        self.workspace.sync_limits(&profile.workspace, now);
        for provider in &mut self.providers {
            provider.limits = profile.providers.get(&provider.id).cloned().map(Arc::new);
            let has_breaker = provider
                .limits
                .as_ref()
                .is_some_and(|l| l.circuit_breaker.is_some());
            if !has_breaker {
                // Without a breaker configuration nothing is counted: forget any old state.
                provider.breaker = Breaker::default();
            }
            match &provider.limits {
                Some(limits) => provider.scope.sync_limits(limits, now),
                None => provider.scope.sync_limits(&Limits::default(), now),
            }
        }
        for (id, &index) in &self.principal_index {
            let state = &mut self.principals[index as usize];
            state.limits = profile.principals.get(id).cloned().map(Arc::new);
            match &state.limits {
                Some(limits) => state.scope.sync_limits(limits, now),
                None => state.scope.sync_limits(&Limits::default(), now),
            }
        }
        self.profile = profile;
        let ids: Vec<String> = self.profile.principals.keys().cloned().collect();
        let providers: Vec<String> = self.profile.providers.keys().cloned().collect();
        for id in ids {
            self.principal(&id);
        }
        for id in providers {
            self.provider(&id);
        }
        self.reserved_principals = self
            .principals
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                p.limits
                    .as_ref()
                    .is_some_and(|l| l.reserved_concurrency.unwrap_or(0) > 0)
            })
            .map(|(i, _)| i as u32)
            .collect();
    }

    // ----- public entry points -------------------------------------------------------------

    /// Asks for a permit: admit now, queue, or reject.
    pub fn acquire(&mut self, request: AdmissionRequest, now: Millis) -> Acquired {
        let now = self.advance(now);
        self.expire(now);
        let estimate = request.estimate.check();
        let checked = estimate.as_ref().ok().copied();
        // A provider or principal the profile has never named is refused before any state is
        // kept for it, so arbitrary IDs cannot grow the controller.
        let provider = self
            .provider_index
            .get(request.provider_id.as_str())
            .copied();
        let principal = self
            .principal_index
            .get(request.principal_id.as_str())
            .copied();
        let (Some(provider), Some(principal)) = (provider, principal) else {
            // Preflight order: an unconfigured provider is reported before an unknown principal.
            let reason = if self.profile.providers.contains_key(&request.provider_id) {
                Reason::Disabled
            } else {
                Reason::UnconfiguredProvider
            };
            return Acquired::Rejected(self.unknown_scope_rejection(
                reason,
                &request.principal_id,
                checked.as_ref(),
            ));
        };
        let lane_key = (provider, principal);

        let refuse = |this: &mut Self, reason: Reason, hint: Option<Millis>| {
            let mut evidence = this.evidence(
                lane_key,
                Decision::Reject,
                reason,
                0,
                checked.as_ref(),
                false,
            );
            evidence.retry_after_ms = hint;
            Acquired::Rejected(Rejection {
                reason,
                retryable: reason.is_retryable_rejection(),
                evidence,
            })
        };

        let estimate = match self.preflight(lane_key, request.deadline, estimate.ok(), now) {
            Ok(estimate) => estimate,
            Err(reason) => return refuse(self, reason, None),
        };
        if let Some(reason) = self.never_fits(lane_key, &request.budget_id, &estimate) {
            return refuse(self, reason, None);
        }
        if self.queue_is_full(lane_key) {
            let hint = self.queue_full_hint(now);
            return refuse(self, Reason::QueueFull, Some(hint));
        }

        let waiter_id = WaiterId(self.next_id());
        let expires_at = self.expiry_for(lane_key, request.deadline, now);
        self.waiters.insert(
            waiter_id,
            Waiter {
                lane: lane_key,
                budget_id: request.budget_id,
                estimate,
                deadline: request.deadline,
                enqueued_at: now,
                expires_at,
                last_reason: Reason::Concurrency,
                last_wake: None,
                transitions: Vec::new(),
            },
        );
        if let Some(at) = expires_at {
            self.expiries.insert((at, waiter_id));
        }
        self.count_queued(lane_key, true);
        let lane = self.lanes.entry(lane_key).or_default();
        lane.queue.push_back(waiter_id);
        lane.live += 1;
        if !lane.in_ring {
            self.next_ticket += 1;
            lane.in_ring = true;
            lane.ring_ticket = self.next_ticket;
            self.ring_lanes += 1;
            self.ring.push_back((lane_key, self.next_ticket));
        }

        self.expire(now);
        self.pump(now);

        if let Some(position) = self.resolutions.iter().rposition(|r| r.waiter == waiter_id) {
            if let Some(resolution) = self.resolutions.remove(position) {
                return match resolution.outcome {
                    Ok(lease) => Acquired::Admitted(lease),
                    Err(rejection) => Acquired::Rejected(rejection),
                };
            }
        }
        let evidence = self.deferral_evidence(waiter_id, lane_key, now);
        Acquired::Queued {
            waiter: waiter_id,
            evidence,
        }
    }

    /// Cancels a queued request. Returns its `cancelled` rejection, or `None` when it was
    /// already resolved.
    pub fn cancel(&mut self, waiter: WaiterId, now: Millis) -> Option<Rejection> {
        let now = self.advance(now);
        self.expire(now);
        if !self.waiters.contains_key(&waiter) {
            return None;
        }
        let rejection = self.reject_waiter(waiter, Reason::Cancelled, now);
        self.pump(now);
        rejection
    }

    /// Releases a lease with its outcome. A second release of the same lease does nothing and
    /// returns `None`.
    pub fn release(&mut self, lease: LeaseId, outcome: Outcome, now: Millis) -> Option<Released> {
        self.release_with_usage(lease, outcome, ActualUsage::none(), now)
    }

    /// [`Controller::release`], reporting what the call actually used: the invocation's budget
    /// lines then count the actual tokens and cost instead of the estimate (see
    /// [`crate::budget`]). Rate buckets keep the estimate: they pace admissions, they do not
    /// account.
    pub fn release_with_usage(
        &mut self,
        lease: LeaseId,
        outcome: Outcome,
        usage: ActualUsage,
        now: Millis,
    ) -> Option<Released> {
        let now = self.advance(now);
        self.expire(now);
        let record = self.leases.remove(&lease)?;
        if !usage.is_none() {
            self.budgets.correct(
                &record.budget_id,
                record.budget_epoch,
                Self::scope_keys(record.lane),
                &record.charged,
                &usage,
            );
        }
        let (provider, principal) = record.lane;
        self.workspace.active -= 1;
        self.principals[principal as usize].scope.active -= 1;
        let provider_state = &mut self.providers[provider as usize];
        provider_state.scope.active -= 1;
        if record.probe {
            provider_state.breaker.end_probe();
        }
        let mut transitions = Vec::new();
        let breaker_config = provider_state
            .limits
            .as_ref()
            .and_then(|l| l.circuit_breaker.clone());
        match outcome {
            Outcome::Success => {
                provider_state
                    .breaker
                    .record_success(&provider_state.id, now, &mut transitions);
            }
            Outcome::Failure => provider_state.breaker.record_failure(
                breaker_config.as_ref(),
                &provider_state.id,
                now,
                &mut transitions,
            ),
            Outcome::RetryAfter { retry_after_ms } => {
                provider_state.paused_until = provider_state
                    .paused_until
                    .max(now.saturating_add(retry_after_ms));
                self.retry_pressure += 1;
            }
            Outcome::None => {}
        }
        let held = now.saturating_sub(record.admitted_at);
        self.mean_hold_ms = Some(match self.mean_hold_ms {
            None => held,
            Some(mean) => (mean * 7 + held) / 8,
        });
        let now_idle = self.lanes.get_mut(&record.lane).is_some_and(|lane| {
            lane.active -= 1;
            lane.is_idle()
        });
        if now_idle {
            self.lane_went_idle(record.lane);
        }
        self.record_transitions(&transitions);
        self.pump(now);
        Some(Released {
            breaker_transitions: transitions,
        })
    }

    /// Pauses a provider lane for `retry_after_ms` (the pause only ever extends) and counts one
    /// unit of retry pressure. A provider the profile never named is ignored.
    pub fn coordinate_retry_after(
        &mut self,
        provider_id: &str,
        retry_after_ms: Millis,
        now: Millis,
    ) {
        let now = self.advance(now);
        self.expire(now);
        if !self.provider_index.contains_key(provider_id) {
            return; // a provider the profile never named has no lane to pause
        }
        let provider = self.provider(provider_id);
        let state = &mut self.providers[provider as usize];
        state.paused_until = state.paused_until.max(now.saturating_add(retry_after_ms));
        self.retry_pressure += 1;
        self.pump(now);
    }

    /// Forgets the attempt, cost and token counters of one invocation. Returns whether the
    /// invocation had spent anything.
    pub fn release_budget(&mut self, budget_id: &str, now: Millis) -> bool {
        let now = self.advance(now);
        self.expire(now);
        let known = self.budgets.release(budget_id);
        self.pump(now);
        known
    }

    /// Replaces the profile. Queued work is revalidated against it at once: a waiter that can no
    /// longer pass preflight or can never fit is rejected; dwell bounds are recomputed.
    pub fn set_profile(&mut self, profile: Profile, now: Millis) -> Result<(), ProfileError> {
        profile.validate()?;
        let now = self.advance(now);
        self.install_profile(profile);
        let mut ids: Vec<WaiterId> = self.waiters.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(waiter) = self.waiters.get(&id) else {
                continue;
            };
            let (lane, deadline, estimate, enqueued_at, old_expiry) = (
                waiter.lane,
                waiter.deadline,
                waiter.estimate,
                waiter.enqueued_at,
                waiter.expires_at,
            );
            let budget_id = waiter.budget_id.clone();
            let verdict = self
                .preflight(lane, deadline, Some(estimate), now)
                .err()
                .or_else(|| self.never_fits(lane, &budget_id, &estimate));
            if let Some(reason) = verdict {
                if let Some(rejection) = self.reject_waiter(id, reason, now) {
                    self.resolutions.push_back(Resolution {
                        waiter: id,
                        outcome: Err(rejection),
                    });
                }
                continue;
            }
            let new_expiry = self.expiry_for(lane, deadline, enqueued_at);
            if new_expiry != old_expiry {
                if let Some(at) = old_expiry {
                    self.expiries.remove(&(at, id));
                }
                if let Some(at) = new_expiry {
                    self.expiries.insert((at, id));
                }
                if let Some(waiter) = self.waiters.get_mut(&id) {
                    waiter.expires_at = new_expiry;
                }
            }
        }
        self.expire(now);
        self.pump(now);
        Ok(())
    }

    /// Processes everything due at `now`: expiries, then the pump.
    pub fn handle_timeout(&mut self, now: Millis) {
        let now = self.advance(now);
        self.expire(now);
        self.pump(now);
    }

    /// The exact next instant at which anything queued can change on its own; `None` when only
    /// an external event (a release, a cancellation, a profile change) can change anything.
    pub fn poll_timeout(&self) -> Option<Millis> {
        let expiry = self.expiries.first().map(|&(at, _)| at);
        match (expiry, self.wake_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next resolved waiter, if any.
    pub fn poll_resolution(&mut self) -> Option<Resolution> {
        self.resolutions.pop_front()
    }

    /// Breaker transitions not yet taken by [`take_new_transitions`](Self::take_new_transitions).
    pub fn take_new_transitions(&mut self) -> Vec<BreakerTransition> {
        std::mem::take(&mut self.transition_outbox)
    }

    /// The last [`BREAKER_HISTORY_LIMIT`] breaker transitions, oldest first.
    pub fn breaker_transitions(&self) -> Vec<BreakerTransition> {
        self.breaker_history.iter().cloned().collect()
    }

    /// Aggregate counts.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            active: u64::from(self.workspace.active),
            queued: self.workspace.queued,
            retry_pressure: self.retry_pressure,
            open_budgets: self.budgets.open_invocations() as u64,
            providers: self
                .providers
                .iter()
                .map(|p| {
                    (
                        p.id.clone(),
                        ProviderSnapshot {
                            active: u64::from(p.scope.active),
                            queued: p.scope.queued,
                            breaker_state: p.breaker.state(),
                            paused_until: (p.paused_until > self.now).then_some(p.paused_until),
                        },
                    )
                })
                .collect(),
        }
    }

    /// Pump passes run and ring entries looked at, over the controller's life. The cost of the
    /// pump is proportional to the entries looked at; operators and tests use this to check that
    /// a handoff does not scan lanes.
    pub fn pump_stats(&self) -> (u64, u64) {
        (self.pass, self.lanes_visited)
    }

    /// Workspace-wide (active, queued) counts, without building a snapshot.
    pub fn totals(&self) -> (u64, u64) {
        (u64::from(self.workspace.active), self.workspace.queued)
    }

    /// Active and queued counts of one principal (for tests and operators' own tooling).
    pub fn principal_counts(&self, principal_id: &str) -> (u64, u64) {
        self.principal_index
            .get(principal_id)
            .map(|&i| {
                let scope = &self.principals[i as usize].scope;
                (u64::from(scope.active), scope.queued)
            })
            .unwrap_or((0, 0))
    }

    /// Number of lanes with state (waiters or leases); for leak checks.
    pub fn lane_count(&self) -> usize {
        self.lanes.values().filter(|lane| !lane.is_idle()).count()
    }

    /// Keeps an idle lane (so a busy principal does not rebuild it on every request) but at most
    /// [`IDLE_LANES_KEPT`] of them: the oldest idle lanes are forgotten first. An idle lane holds
    /// no waiter and no lease, so forgetting it loses nothing.
    fn lane_went_idle(&mut self, key: LaneKey) {
        self.idle_lanes.push_back(key);
        while self.idle_lanes.len() > IDLE_LANES_KEPT {
            let Some(oldest) = self.idle_lanes.pop_front() else {
                break;
            };
            if self.lanes.get(&oldest).is_some_and(Lane::is_idle) {
                self.lanes.remove(&oldest);
            }
        }
    }

    /// The refusal of a request naming a provider or principal the controller does not know.
    fn unknown_scope_rejection(
        &self,
        reason: Reason,
        principal_id: &str,
        estimate: Option<&CheckedEstimate>,
    ) -> Rejection {
        let active = self
            .principal_index
            .get(principal_id)
            .map_or(0, |&i| u64::from(self.principals[i as usize].scope.active));
        Rejection {
            reason,
            retryable: false,
            evidence: Evidence {
                decision: Decision::Reject,
                reason,
                queue_delay_ms: 0,
                active,
                queued: 0,
                estimated_tokens: estimate.and_then(|e| e.tokens),
                estimated_cost_usd: estimate.and_then(|e| e.cost_usd),
                retry_pressure: self.retry_pressure,
                breaker_state: BreakerState::Closed,
                retry_after_ms: None,
                breaker_transitions: Vec::new(),
            },
        }
    }

    // ----- checks --------------------------------------------------------------------------

    fn principal_limits(&self, index: u32) -> Option<&Limits> {
        self.principals[index as usize].limits.as_deref()
    }

    fn provider_limits(&self, index: u32) -> Option<&Limits> {
        self.providers[index as usize].limits.as_deref()
    }

    /// Preflight (REFERENCE §4): permanent, order as specified.
    fn preflight(
        &self,
        (provider, principal): LaneKey,
        deadline: Option<Millis>,
        estimate: Option<CheckedEstimate>,
        now: Millis,
    ) -> Result<CheckedEstimate, Reason> {
        let Some(provider_limits) = self.provider_limits(provider) else {
            return Err(Reason::UnconfiguredProvider);
        };
        let Some(principal_limits) = self.principal_limits(principal) else {
            return Err(Reason::Disabled);
        };
        if deadline.is_some_and(|d| now >= d) {
            return Err(Reason::DeadlineExceeded);
        }
        let Some(estimate) = estimate else {
            return Err(Reason::InvalidEstimate);
        };
        for limits in [principal_limits, &self.profile.workspace, provider_limits] {
            if limits
                .max_batch_size
                .is_some_and(|m| estimate.batch_size > m)
            {
                return Err(Reason::BatchSize);
            }
            if let (Some(max), Some(bytes)) = (limits.max_request_bytes, estimate.request_bytes) {
                if bytes > max {
                    return Err(Reason::RequestTooLarge);
                }
            }
            if let (Some(max), Some(items)) = (limits.max_items, estimate.items) {
                if items > max {
                    return Err(Reason::TooManyItems);
                }
            }
            if let Some(max) = limits.max_retained_work {
                match estimate.retained_work {
                    None => return Err(Reason::UnknownRetainedWork),
                    Some(work) if work > max => return Err(Reason::RetainedWork),
                    Some(_) => {}
                }
            }
            if limits.max_cost_usd.is_some()
                && !limits.allow_unknown_cost.unwrap_or(false)
                && estimate.cost_usd.is_none()
            {
                return Err(Reason::UnknownCost);
            }
            if limits.max_tokens.is_some() && estimate.tokens.is_none() {
                return Err(Reason::UnknownTokens);
            }
        }
        Ok(estimate)
    }

    fn scope_keys((provider, principal): LaneKey) -> [ScopeKey; 3] {
        [
            ScopeKey::Principal(principal),
            ScopeKey::Workspace,
            ScopeKey::Provider(provider),
        ]
    }

    /// Conditions under which waiting can never help: rejected at once (permanent).
    fn never_fits(
        &self,
        lane: LaneKey,
        budget_id: &str,
        estimate: &CheckedEstimate,
    ) -> Option<Reason> {
        let (provider, principal) = lane;
        let scopes = [
            (
                self.principal_limits(principal)?,
                &self.principals[principal as usize].scope,
            ),
            (&self.profile.workspace, &self.workspace),
            (
                self.provider_limits(provider)?,
                &self.providers[provider as usize].scope,
            ),
        ];
        let keys = Self::scope_keys(lane);
        for ((limits, state), key) in scopes.into_iter().zip(keys) {
            if limits.concurrency == 0 {
                return Some(Reason::Concurrency);
            }
            if let Some(reason) = self.budgets.usage(budget_id, key).check(limits, estimate) {
                return Some(reason);
            }
            if limits.requests_per_minute == Some(0) {
                return Some(Reason::RequestsPerMinute);
            }
            if let (Some(bucket), Some(tokens)) = (&state.tokens, estimate.tokens) {
                if !bucket.can_ever_hold(tokens) {
                    return Some(Reason::TokensPerSecond);
                }
            }
        }
        None
    }

    /// Queue admission: queue lengths of the three scopes and the principal's queue shares.
    fn queue_is_full(&self, lane: LaneKey) -> bool {
        let (provider, principal) = lane;
        let principal_state = &self.principals[principal as usize];
        let provider_state = &self.providers[provider as usize];
        let (Some(principal_limits), Some(provider_limits)) = (
            principal_state.limits.as_ref(),
            provider_state.limits.as_ref(),
        ) else {
            return false;
        };
        let workspace_limits = &self.profile.workspace;
        let over =
            |limits: &Limits, queued: u64| limits.max_queue_length.is_some_and(|m| queued >= m);
        if over(principal_limits, principal_state.scope.queued)
            || over(workspace_limits, self.workspace.queued)
            || over(provider_limits, provider_state.scope.queued)
        {
            return true;
        }
        let lane_queued = self.lanes.get(&lane).map_or(0, |l| l.live);
        workspace_limits
            .queued_share_cap()
            .is_some_and(|cap| principal_state.scope.queued >= cap)
            || provider_limits
                .queued_share_cap()
                .is_some_and(|cap| lane_queued >= cap)
    }

    /// A real hint for a `queue-full` refusal: the sooner of the next queue expiry and the
    /// expected drain time of the queue at the mean lease hold time; at least 1 ms.
    fn queue_full_hint(&self, now: Millis) -> Millis {
        let expiry = self.expiries.first().map(|&(at, _)| at.saturating_sub(now));
        let concurrency = u64::from(self.profile.workspace.concurrency.max(1));
        let drain = self
            .mean_hold_ms
            .map(|mean| (mean.saturating_mul(self.workspace.queued)).div_ceil(concurrency));
        let hint = match (expiry, drain) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(1),
        };
        hint.max(1)
    }

    fn expiry_for(
        &self,
        (provider, principal): LaneKey,
        deadline: Option<Millis>,
        enqueued_at: Millis,
    ) -> Option<Millis> {
        let dwell = [
            self.principal_limits(principal),
            Some(&self.profile.workspace),
            self.provider_limits(provider),
        ]
        .into_iter()
        .flatten()
        .filter_map(|l| l.max_queue_wait_ms)
        .min()
        .map(|wait| enqueued_at.saturating_add(wait));
        match (deadline, dwell) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Permits of a pool held back for principals other than `principal`.
    fn held_for_others(
        &self,
        principal: u32,
        capacity: u32,
        active_in_pool: impl Fn(u32) -> u32,
    ) -> u32 {
        self.reserved_principals
            .iter()
            .filter(|&&other| other != principal)
            .map(|&other| {
                let reservation = self.principals[other as usize]
                    .limits
                    .as_ref()
                    .map_or(0, |l| l.reservation_in(capacity));
                reservation.saturating_sub(active_in_pool(other))
            })
            .sum()
    }

    /// Whether a reservation rule keeps `principal` out of a pool of `capacity` with `active`
    /// permits taken.
    fn reservation_blocks(
        &self,
        principal: u32,
        capacity: u32,
        active: u32,
        own_active: u32,
        active_in_pool: impl Fn(u32) -> u32,
    ) -> bool {
        if self.reserved_principals.is_empty() {
            return false;
        }
        let free = capacity.saturating_sub(active);
        let own_reservation = self
            .principal_limits(principal)
            .map_or(0, |l| l.reservation_in(capacity));
        if own_active < own_reservation {
            return free < 1;
        }
        free.saturating_sub(self.held_for_others(principal, capacity, active_in_pool)) < 1
    }

    /// tryAdmit (REFERENCE §4), for the head `waiter_id`. Mutates only the breaker (open →
    /// half-open) and the token-bucket holders; everything else is committed by the caller.
    fn try_admit(
        &mut self,
        waiter_id: WaiterId,
        now: Millis,
        transitions: &mut Vec<BreakerTransition>,
    ) -> Attempt {
        let Some(waiter) = self.waiters.get(&waiter_id) else {
            return Attempt::Reject(Reason::Cancelled);
        };
        let lane_key = waiter.lane;
        let (provider, principal) = lane_key;
        let estimate = waiter.estimate;
        let (Some(principal_limits), Some(provider_limits)) = (
            self.principals[principal as usize].limits.clone(),
            self.providers[provider as usize].limits.clone(),
        ) else {
            return Attempt::Reject(Reason::UnconfiguredProvider);
        };
        let workspace_limits = &self.profile.workspace;
        let principal_active = self.principals[principal as usize].scope.active;
        let provider_active = self.providers[provider as usize].scope.active;
        let lane_active = self.lanes.get(&lane_key).map_or(0, |l| l.active);
        let defer = |reason, wake, blocked| Attempt::Defer {
            reason,
            wake,
            blocked,
        };

        // 1. Concurrency.
        if principal_active >= principal_limits.concurrency {
            return defer(Reason::Concurrency, None, Blocked::Principal);
        }
        if self.workspace.active >= workspace_limits.concurrency {
            return defer(Reason::Concurrency, None, Blocked::Workspace);
        }
        if provider_active >= provider_limits.concurrency {
            return defer(Reason::Concurrency, None, Blocked::Provider);
        }
        // 2. Share caps.
        if workspace_limits
            .active_share_cap()
            .is_some_and(|cap| u64::from(principal_active) >= cap)
        {
            return defer(Reason::Concurrency, None, Blocked::Principal);
        }
        if provider_limits
            .active_share_cap()
            .is_some_and(|cap| u64::from(lane_active) >= cap)
        {
            return defer(Reason::Concurrency, None, Blocked::Head);
        }
        // 3. Reservations: workspace pool, then provider pool.
        if self.reservation_blocks(
            principal,
            workspace_limits.concurrency,
            self.workspace.active,
            principal_active,
            |other| self.principals[other as usize].scope.active,
        ) {
            return defer(Reason::Concurrency, None, Blocked::Principal);
        }
        if self.reservation_blocks(
            principal,
            provider_limits.concurrency,
            provider_active,
            lane_active,
            |other| self.lanes.get(&(provider, other)).map_or(0, |l| l.active),
        ) {
            return defer(Reason::Concurrency, None, Blocked::Head);
        }
        // 4. Retry-After.
        let provider_state = &mut self.providers[provider as usize];
        if provider_state.paused_until > now {
            return defer(
                Reason::RetryAfter,
                Some(provider_state.paused_until),
                Blocked::Provider,
            );
        }
        // 5. Breaker.
        let probe = match provider_state.breaker.gate(
            provider_limits.circuit_breaker.as_ref(),
            &provider_state.id,
            now,
            transitions,
        ) {
            BreakerGate::Pass { probe } => probe,
            BreakerGate::OpenUntil(at) => {
                return defer(Reason::CircuitOpen, Some(at), Blocked::Provider)
            }
            BreakerGate::ProbesBusy => return defer(Reason::CircuitOpen, None, Blocked::Provider),
        };
        // 6. Budgets and buckets: permanent conditions of every scope first, then deferrals.
        let budget_id = self
            .waiters
            .get(&waiter_id)
            .map_or("", |w| w.budget_id.as_str());
        if let Some(reason) = self.never_fits(lane_key, budget_id, &estimate) {
            return Attempt::Reject(reason);
        }
        let tokens = estimate.tokens.unwrap_or(0);
        let scopes: [(&mut ScopeState, Blocked); 3] = {
            // Split borrows: the three scopes live in different collections.
            let principal_scope = &mut self.principals[principal as usize].scope;
            let workspace_scope = &mut self.workspace;
            let provider_scope = &mut self.providers[provider as usize].scope;
            [
                (principal_scope, Blocked::Principal),
                (workspace_scope, Blocked::Workspace),
                (provider_scope, Blocked::Provider),
            ]
        };
        for (scope, blocked) in scopes {
            scope.refill(now);
            if let Some(bucket) = &scope.requests {
                if !bucket.has(1) {
                    let wake = bucket.wait_for(1).map(|ms| now.saturating_add(ms));
                    return defer(Reason::RequestsPerMinute, wake, blocked);
                }
            }
            if let Some(bucket) = &scope.tokens {
                let holder = scope.token_holder.filter(|h| h.waiter != waiter_id);
                let need = tokens.saturating_add(holder.map_or(0, |h| h.tokens));
                if !bucket.has(need) {
                    let wake = bucket.wait_for(need).map(|ms| now.saturating_add(ms));
                    if scope.token_holder.is_none() {
                        scope.token_holder = Some(TokenHolder {
                            waiter: waiter_id,
                            tokens,
                        });
                    }
                    return defer(Reason::TokensPerSecond, wake, Blocked::Head);
                }
            }
        }
        Attempt::Admit { probe }
    }

    // ----- state changes -----------------------------------------------------------------

    fn count_queued(&mut self, (provider, principal): LaneKey, up: bool) {
        let scopes = [
            &mut self.principals[principal as usize].scope,
            &mut self.workspace,
            &mut self.providers[provider as usize].scope,
        ];
        for scope in scopes {
            if up {
                scope.queued += 1;
            } else {
                scope.queued -= 1;
            }
        }
    }

    /// Removes a waiter from every structure; returns it.
    fn remove_waiter(&mut self, waiter_id: WaiterId) -> Option<Waiter> {
        let waiter = self.waiters.remove(&waiter_id)?;
        if let Some(at) = waiter.expires_at {
            self.expiries.remove(&(at, waiter_id));
        }
        let (provider, principal) = waiter.lane;
        self.count_queued(waiter.lane, false);
        self.principals[principal as usize]
            .scope
            .forget_holder(waiter_id);
        self.workspace.forget_holder(waiter_id);
        self.providers[provider as usize]
            .scope
            .forget_holder(waiter_id);
        let mut now_idle = false;
        if let Some(lane) = self.lanes.get_mut(&waiter.lane) {
            lane.live -= 1;
            if lane.live == 0 {
                // Every ID left in the queue is stale; the lane's ring entry becomes stale too.
                lane.queue.clear();
                if lane.in_ring {
                    lane.in_ring = false;
                    self.ring_lanes -= 1;
                }
                now_idle = lane.is_idle();
            } else if lane.queue.front() == Some(&waiter_id) {
                lane.queue.pop_front();
            }
        }
        if now_idle {
            self.lane_went_idle(waiter.lane);
        }
        Some(waiter)
    }

    fn reject_waiter(
        &mut self,
        waiter_id: WaiterId,
        reason: Reason,
        now: Millis,
    ) -> Option<Rejection> {
        let waiter = self.remove_waiter(waiter_id)?;
        let mut evidence = self.evidence(
            waiter.lane,
            Decision::Reject,
            reason,
            now.saturating_sub(waiter.enqueued_at),
            Some(&waiter.estimate),
            false,
        );
        if reason == Reason::QueueTimeout {
            evidence.retry_after_ms = waiter.last_wake.map(|at| at.saturating_sub(now).max(1));
        }
        evidence.breaker_transitions = waiter.transitions;
        Some(Rejection {
            reason,
            // A zero dwell bound can never be met: that queue-timeout is permanent.
            retryable: reason.is_retryable_rejection()
                && !(reason == Reason::QueueTimeout
                    && waiter.expires_at == Some(waiter.enqueued_at)),
            evidence,
        })
    }

    /// Rejects every waiter whose deadline or dwell bound has come.
    fn expire(&mut self, now: Millis) {
        while let Some(&(at, waiter_id)) = self.expiries.first() {
            if at > now {
                break;
            }
            let deadline_passed = self
                .waiters
                .get(&waiter_id)
                .is_some_and(|w| w.deadline.is_some_and(|d| now >= d));
            let reason = if deadline_passed {
                Reason::DeadlineExceeded
            } else {
                Reason::QueueTimeout
            };
            match self.reject_waiter(waiter_id, reason, now) {
                Some(rejection) => self.resolutions.push_back(Resolution {
                    waiter: waiter_id,
                    outcome: Err(rejection),
                }),
                None => {
                    self.expiries.remove(&(at, waiter_id));
                }
            }
        }
    }

    fn commit(&mut self, waiter_id: WaiterId, probe: bool, now: Millis) -> Option<Lease> {
        // The lease counts in its lane before the waiter leaves, so the lane is never dropped
        // as idle in between.
        let lane_key = self.waiters.get(&waiter_id)?.lane;
        if let Some(lane) = self.lanes.get_mut(&lane_key) {
            lane.active += 1;
        }
        let mut waiter = self.remove_waiter(waiter_id)?;
        let lane_key = waiter.lane;
        let (provider, principal) = lane_key;
        let tokens = waiter.estimate.tokens.unwrap_or(0);
        for scope in [
            &mut self.principals[principal as usize].scope,
            &mut self.workspace,
            &mut self.providers[provider as usize].scope,
        ] {
            if let Some(bucket) = &mut scope.requests {
                bucket.take(1);
            }
            if let Some(bucket) = &mut scope.tokens {
                bucket.take(tokens);
            }
            scope.active += 1;
        }
        let budget_epoch = self.budgets.charge(
            &waiter.budget_id,
            Self::scope_keys(lane_key),
            &waiter.estimate,
        );
        if probe {
            self.providers[provider as usize].breaker.start_probe();
        }
        let lease_id = LeaseId(self.next_id());
        self.leases.insert(
            lease_id,
            LeaseRecord {
                lane: lane_key,
                probe,
                admitted_at: now,
                budget_id: std::mem::take(&mut waiter.budget_id),
                budget_epoch,
                charged: waiter.estimate,
            },
        );
        let mut evidence = self.evidence(
            lane_key,
            Decision::Admit,
            Reason::Admitted,
            now.saturating_sub(waiter.enqueued_at),
            Some(&waiter.estimate),
            false,
        );
        evidence.breaker_transitions = std::mem::take(&mut waiter.transitions);
        Some(Lease {
            id: lease_id,
            evidence,
        })
    }

    fn record_transitions(&mut self, transitions: &[BreakerTransition]) {
        for transition in transitions {
            if self.breaker_history.len() == BREAKER_HISTORY_LIMIT {
                self.breaker_history.pop_front();
            }
            self.breaker_history.push_back(transition.clone());
            self.transition_outbox.push(transition.clone());
        }
    }

    /// Serves lane heads round-robin until nothing more can be admitted now.
    fn pump(&mut self, now: Millis) {
        self.wake_at = None;
        self.pass += 1;
        let pass = self.pass;
        let mut since_admission = 0usize;
        let mut blocked_queued = 0u64;
        while since_admission < self.ring.len() {
            if self.workspace.queued == blocked_queued
                || self.workspace.active >= self.profile.workspace.concurrency
            {
                // Nothing unblocked is queued, or the workspace ceiling holds everyone back:
                // no head needs to be looked at.
                break;
            }
            let Some(entry) = self.ring.pop_front() else {
                break;
            };
            self.lanes_visited += 1;
            let (lane_key, ticket) = entry;
            let (provider, principal) = lane_key;
            let head = {
                let Some(lane) = self.lanes.get_mut(&lane_key) else {
                    continue;
                };
                if !lane.in_ring || lane.ring_ticket != ticket {
                    continue; // a stale entry of a lane that emptied
                }
                while lane
                    .queue
                    .front()
                    .is_some_and(|id| !self.waiters.contains_key(id))
                {
                    lane.queue.pop_front();
                }
                match lane.queue.front() {
                    Some(&head) => head,
                    None => {
                        lane.in_ring = false;
                        self.ring_lanes -= 1;
                        if lane.is_idle() {
                            self.lane_went_idle(lane_key);
                        }
                        continue;
                    }
                }
            };
            if self.provider_blocked_in_pass[provider as usize] == pass
                || self.principal_blocked_in_pass[principal as usize] == pass
            {
                self.ring.push_back(entry);
                since_admission += 1;
                continue;
            }
            let mut transitions = Vec::new();
            let attempt = match self.waiters.get(&head) {
                Some(waiter) => {
                    let (deadline, estimate) = (waiter.deadline, waiter.estimate);
                    match self.preflight(lane_key, deadline, Some(estimate), now) {
                        Err(reason) => Attempt::Reject(reason),
                        Ok(_) => self.try_admit(head, now, &mut transitions),
                    }
                }
                None => Attempt::Reject(Reason::Cancelled),
            };
            if !transitions.is_empty() {
                self.record_transitions(&transitions);
                if let Some(waiter) = self.waiters.get_mut(&head) {
                    waiter.transitions.extend(transitions);
                }
            }
            match attempt {
                Attempt::Admit { probe } => {
                    if let Some(lease) = self.commit(head, probe, now) {
                        self.resolutions.push_back(Resolution {
                            waiter: head,
                            outcome: Ok(lease),
                        });
                    }
                    if self.ring_entry_is_live(entry) {
                        self.ring.push_back(entry);
                    }
                    since_admission = 0;
                }
                Attempt::Reject(reason) => {
                    if let Some(rejection) = self.reject_waiter(head, reason, now) {
                        self.resolutions.push_back(Resolution {
                            waiter: head,
                            outcome: Err(rejection),
                        });
                    }
                    // The lane's next waiter is considered at once.
                    if self.ring_entry_is_live(entry) {
                        self.ring.push_front(entry);
                    }
                }
                Attempt::Defer {
                    reason,
                    wake,
                    blocked,
                } => {
                    if let Some(waiter) = self.waiters.get_mut(&head) {
                        waiter.last_reason = reason;
                        waiter.last_wake = wake;
                    }
                    if let Some(at) = wake {
                        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
                    }
                    self.ring.push_back(entry);
                    since_admission += 1;
                    match blocked {
                        Blocked::Workspace => break,
                        Blocked::Provider => {
                            self.provider_blocked_in_pass[provider as usize] = pass;
                            blocked_queued += self.providers[provider as usize].scope.queued;
                        }
                        Blocked::Principal => {
                            self.principal_blocked_in_pass[principal as usize] = pass;
                        }
                        Blocked::Head => {}
                    }
                }
            }
        }
        // The cursor stays just past the last admitted lane: lanes considered since then were
        // not served and come first again next time.
        let unserved = since_admission.min(self.ring.len());
        self.ring.rotate_right(unserved);
        // Stale entries are dropped when reached; compact if they ever dominate the ring.
        if self.ring.len() > 2 * self.ring_lanes + 64 {
            let lanes = &self.lanes;
            self.ring.retain(|&(key, ticket)| {
                lanes
                    .get(&key)
                    .is_some_and(|lane| lane.in_ring && lane.ring_ticket == ticket)
            });
        }
    }

    fn ring_entry_is_live(&self, (key, ticket): (LaneKey, u64)) -> bool {
        self.lanes
            .get(&key)
            .is_some_and(|lane| lane.in_ring && lane.ring_ticket == ticket)
    }

    // ----- evidence ------------------------------------------------------------------------

    fn evidence(
        &self,
        (provider, principal): LaneKey,
        decision: Decision,
        reason: Reason,
        queue_delay_ms: Millis,
        estimate: Option<&CheckedEstimate>,
        count_self_in_lane: bool,
    ) -> Evidence {
        let lane_live = self.lanes.get(&(provider, principal)).map_or(0, |l| l.live);
        let queued = if count_self_in_lane {
            lane_live.saturating_sub(1)
        } else {
            lane_live
        };
        Evidence {
            decision,
            reason,
            queue_delay_ms,
            active: u64::from(self.principals[principal as usize].scope.active),
            queued,
            estimated_tokens: estimate.and_then(|e| e.tokens),
            estimated_cost_usd: estimate.and_then(|e| e.cost_usd),
            retry_pressure: self.retry_pressure,
            breaker_state: self.providers[provider as usize].breaker.state(),
            retry_after_ms: None,
            breaker_transitions: Vec::new(),
        }
    }

    /// The `defer` evidence of a request that just joined its lane and is still waiting.
    fn deferral_evidence(&self, waiter_id: WaiterId, lane: LaneKey, now: Millis) -> Evidence {
        let waiter = self.waiters.get(&waiter_id);
        let mut evidence = self.evidence(
            lane,
            Decision::Defer,
            waiter.map_or(Reason::Concurrency, |w| w.last_reason),
            0,
            waiter.map(|w| &w.estimate),
            true,
        );
        if let Some(waiter) = waiter {
            evidence.retry_after_ms = waiter.last_wake.map(|at| at.saturating_sub(now).max(1));
            evidence.breaker_transitions = waiter.transitions.clone();
        }
        evidence
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_lanes_are_kept_for_reuse_but_bounded() {
        let mut profile = Profile {
            workspace: Limits::with_concurrency(8),
            ..Profile::default()
        };
        profile
            .providers
            .insert("jev".into(), Limits::with_concurrency(8));
        let names: Vec<String> = (0..3000).map(|i| format!("p{i}")).collect();
        for name in &names {
            profile
                .principals
                .insert(name.clone(), Limits::with_concurrency(1));
        }
        let mut controller = Controller::new(profile, 0).unwrap();
        for name in &names {
            let Acquired::Admitted(lease) =
                controller.acquire(AdmissionRequest::new(name.as_str(), "jev", "b"), 0)
            else {
                panic!("admitted");
            };
            controller.release(lease.id, Outcome::Success, 0).unwrap();
        }
        assert_eq!(controller.lane_count(), 0, "no busy lane is left");
        assert!(
            controller.lanes.len() <= IDLE_LANES_KEPT,
            "{}",
            controller.lanes.len()
        );
        assert!(controller.idle_lanes.len() <= IDLE_LANES_KEPT);
    }
}
