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
//! Two rules refuse at once what waiting cannot help:
//!
//! - **The blocking condition outlasts the deadline.** A request (at `acquire`, or a lane head
//!   the pump looks at) whose provider is paused (Retry-After) or whose breaker is open until an
//!   instant at or after the request's deadline is refused at once with `retry-after` /
//!   `circuit-open` (retryable, `retryAfterMs` = the real remaining time) instead of waiting
//!   for its deadline. It applies when the deadline is what ends the wait; a shorter queue
//!   dwell bound keeps the reference's `queue-timeout` at that bound.
//! - **Try now.** [`Controller::try_acquire`] admits only if the request is free now: on a free
//!   lane it is admitted exactly as `acquire` would admit it; otherwise it is refused at once,
//!   retryable, with the reason it would have waited for (`concurrency`, `retry-after`,
//!   `circuit-open`, `requests-per-minute`, `tokens-per-second`) and the real remaining time
//!   when that is known. It never stays queued, and a request behind other waiters of its lane
//!   is refused (it does not jump the queue).
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
//! # Events
//!
//! Resolutions leave through [`Controller::poll_resolution`] and breaker transitions through
//! [`Controller::poll_transition`] (bounded: beyond [`TRANSITION_OUTBOX_LIMIT`] unpolled
//! transitions the oldest is dropped and counted). Nothing is pushed to a callback.
//!
//! # Layout
//!
//! - `mod.rs` (this file): the answers, the controller's state and its entry points.
//! - `request.rs`: the request a caller asks with.
//! - `admit.rs`: the checks: preflight, never-fit, queue admission, dwell bounds, share caps,
//!   reservations and tryAdmit.
//! - `pump.rs`: the state changes: the pump, commits, rejections, expiries and evidence.
//! - `profile_change.rs`: replacing the profile and revalidating queued work against it.
//! - `budgets.rs`: the host's budget operations (release, bounds, evicted IDs) and the
//!   `too-many-budgets` refusal.
//! - `snapshot.rs`: the read-only views: snapshot, counts and their peaks.
//! - `reinstate.rs`: putting back, after a restart of the host, the leases and budget spend a
//!   previous process granted (what a journal needs to record, and how it is replayed).
//! - `restore.rs`: putting back, after a restart, the lane state a previous process left:
//!   pauses, open breakers, and rate buckets drained since its last grant.
//! - The data structures with an invariant of their own are crate modules: the round-robin ring
//!   ([`crate::ring`]), the waiter queue with its ordered expiries ([`crate::queue`]), the lanes
//!   ([`crate::lane`]) and the scope tables ([`crate::scopes`]).
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

mod admit;
mod budgets;
pub(crate) mod caller_quota;
mod deadline_refusal;
mod fair;
mod lanes;
mod levels;
mod profile_change;
mod provider_quota;
mod pump;
mod reinstate;
mod request;
mod restore;
mod rollout_side;
mod snapshot;

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::breaker::BreakerTransition;
use crate::budget::{ActualUsage, BudgetLedger};
use crate::estimate::CheckedEstimate;
use crate::evidence::{Evidence, Lease, LeaseId, Outcome, Rejection, WaiterId};
use crate::lane::{LaneKey, LaneSlot, LaneTable};
use crate::profile::{Profile, ProfileError};
use crate::queue::{Waiter, WaiterQueue};
use crate::reason::{Decision, Reason};
use crate::ring::FairRing;
use crate::scopes::Scopes;
pub use crate::scopes::IDLE_PRINCIPALS_KEPT;
use crate::time::Millis;

pub use lanes::{BindingCount, BucketLevel, LaneView};
pub use levels::{BucketLevels, ScopeLevels};
pub use reinstate::{Charge, LeaseCharge, ReinstateError};
pub use request::AdmissionRequest;
pub use snapshot::{Counts, ProviderSnapshot, Snapshot};

/// Idle lanes kept for reuse (the reference keeps at most 1024 idle scopes).
pub const IDLE_LANES_KEPT: usize = 1024;

/// Breaker transitions kept in [`Controller::breaker_transitions`].
pub const BREAKER_HISTORY_LIMIT: usize = 64;

/// Unpolled breaker transitions kept for [`Controller::poll_transition`]; beyond it the oldest
/// is dropped (and counted), so a host that never polls cannot grow the controller.
pub const TRANSITION_OUTBOX_LIMIT: usize = 4096;

/// The immediate answer to [`Controller::acquire`].
#[derive(Debug, Clone, PartialEq)]
pub enum Acquired {
    /// Admitted at once: the lease to release exactly once.
    Admitted(Lease),
    /// Waiting; resolved later through [`Controller::poll_resolution`].
    Queued {
        /// The waiter to cancel, or to match with its resolution.
        waiter: WaiterId,
        /// Why it waits (the deferral reason, and the remaining time when known).
        evidence: Evidence,
    },
    /// Refused at once.
    Rejected(Rejection),
}

/// The final answer for a waiter.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    /// The waiter resolved.
    pub waiter: WaiterId,
    /// Its lease, or why it was refused.
    pub outcome: Result<Lease, Rejection>,
}

/// What releasing a lease changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Released {
    /// Breaker transitions the outcome caused.
    pub breaker_transitions: Vec<BreakerTransition>,
    /// After an outcome `retry-after`: the lease's provider lane and the instant its pause now
    /// ends (the later of the pause in force and the new one), when a pause is in force (a zero
    /// Retry-After with none in force applies none).
    pub pause: Option<(String, Millis)>,
}

/// A Retry-After names a provider the profile does not configure (`unconfigured-provider`);
/// nothing was paused and no state was kept for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unconfigured-provider: the profile does not configure this provider")]
pub struct UnknownProvider;

/// The deadline, when it is what ends the wait (it comes no later than the dwell bound): the
/// "blocked past the deadline" rule replaces a `deadline-exceeded` ending only. A shorter dwell
/// bound keeps the reference's `queue-timeout` at that bound (TESTS.md TELEMETRY-001).
fn deadline_bound(deadline: Option<Millis>, expires_at: Option<Millis>) -> Option<Millis> {
    deadline.filter(|&d| expires_at == Some(d))
}

struct LeaseRecord {
    lane: LaneKey,
    /// The lane's slot (a lane holding a lease is never forgotten, so the slot stays its own).
    lane_slot: LaneSlot,
    probe: bool,
    admitted_at: Millis,
    /// The invocation charged, its epoch and what it was charged (for actual usage).
    budget_id: String,
    budget_epoch: u64,
    charged: CheckedEstimate,
    /// The service charged to the lane's counter in its provider's fair order (0 without one).
    service: u128,
}

/// The admission controller of one workspace.
pub struct Controller {
    profile: Profile,
    now: Millis,
    scopes: Scopes,
    lanes: LaneTable,
    /// Lanes that went idle, oldest first (entries may be stale: the lane got busy again, or
    /// its slot now holds another lane).
    idle_lanes: VecDeque<LaneSlot>,
    ring: FairRing,
    queue: WaiterQueue,
    leases: FxHashMap<LeaseId, LeaseRecord>,
    budgets: BudgetLedger,
    retry_pressure: u64,
    mean_hold_ms: Option<Millis>,
    breaker_history: VecDeque<BreakerTransition>,
    transition_outbox: VecDeque<BreakerTransition>,
    transitions_dropped: u64,
    resolutions: VecDeque<Resolution>,
    next_id: u64,
    wake_at: Option<Millis>,
    pass: u64,
    /// Ring entries the pump has looked at, over the controller's life (a cost counter).
    lanes_visited: u64,
    /// High-water marks of the workspace totals.
    peak: Counts,
    /// Idle principal states kept beyond those not yet pristine ([`IDLE_PRINCIPALS_KEPT`]).
    idle_principals_kept: usize,
    /// Whether a request whose predicted wait exceeds its deadline is refused at once.
    deadline_refusals: bool,
    /// Set once bucket levels read after the last grant were restored (`levels.rs`): they hold
    /// every held lease's request and tokens already, so reinstating debits no bucket.
    levels_hold_leases: bool,
}

impl Controller {
    /// A controller for one workspace under `profile`, starting at `now`.
    pub fn new(profile: Profile, now: Millis) -> Result<Self, ProfileError> {
        profile.validate()?;
        let mut controller = Controller {
            profile: Profile::default(),
            now,
            scopes: Scopes::default(),
            lanes: LaneTable::default(),
            idle_lanes: VecDeque::new(),
            ring: FairRing::default(),
            queue: WaiterQueue::default(),
            leases: FxHashMap::default(),
            budgets: BudgetLedger::default(),
            retry_pressure: 0,
            mean_hold_ms: None,
            breaker_history: VecDeque::new(),
            transition_outbox: VecDeque::new(),
            transitions_dropped: 0,
            resolutions: VecDeque::new(),
            next_id: 1,
            wake_at: None,
            pass: 0,
            lanes_visited: 0,
            peak: Counts::default(),
            idle_principals_kept: IDLE_PRINCIPALS_KEPT,
            deadline_refusals: true,
            levels_hold_leases: false,
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
        self.leases.is_empty() && self.queue.is_empty()
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

    // ----- public entry points -------------------------------------------------------------

    /// Asks for a permit: admit now, queue, or reject.
    pub fn acquire(&mut self, request: AdmissionRequest, now: Millis) -> Acquired {
        let now = self.advance(now);
        self.expire(now);
        let acquired = self.admit_or_queue(request, now, false);
        self.note_peaks();
        acquired
    }

    /// Admits only if the request is free now; otherwise refuses it at once, retryable, with
    /// the reason it would have waited for (see the module docs). Never queues.
    pub fn try_acquire(
        &mut self,
        request: AdmissionRequest,
        now: Millis,
    ) -> Result<Lease, Rejection> {
        let now = self.advance(now);
        self.expire(now);
        let acquired = self.admit_or_queue(request, now, true);
        self.note_peaks();
        match acquired {
            Acquired::Admitted(lease) => Ok(lease),
            Acquired::Rejected(rejection) => Err(rejection),
            // `admit_or_queue` never leaves a try-now request queued; refuse defensively.
            Acquired::Queued { waiter, .. } => Err(self
                .queue
                .find(waiter)
                .and_then(|slot| self.reject_waiter(slot, Reason::Concurrency, now))
                .unwrap_or_else(|| Rejection::refusal(Reason::Concurrency, self.retry_pressure))),
        }
    }

    // Inlined into both entry points: the request is large, and moving it into a separate call
    // costs a copy on the hot path.
    #[inline(always)]
    fn admit_or_queue(
        &mut self,
        request: AdmissionRequest,
        now: Millis,
        try_now: bool,
    ) -> Acquired {
        let estimate = request.estimate.check();
        let checked = estimate.as_ref().ok().copied();
        // A provider or principal the profile has never named is refused before any state is
        // kept for it, so arbitrary IDs cannot grow the controller.
        let provider = self.scopes.providers.find(&request.provider_id);
        let principal = self.scopes.principals.find(&request.principal_id);
        let (Some(provider), Some(principal)) = (provider, principal) else {
            // Preflight order: an unconfigured provider is reported before an unknown principal.
            let reason = if self.profile.providers.contains_key(&request.provider_id) {
                Reason::Disabled
            } else {
                Reason::UnconfiguredProvider
            };
            let mut rejection = Rejection::refusal(reason, self.retry_pressure);
            let evidence = &mut rejection.evidence;
            evidence.active = principal.map_or(0, |i| self.principal_active(i));
            evidence.estimated_tokens = checked.and_then(|e| e.tokens);
            evidence.estimated_cost_usd = checked.and_then(|e| e.cost_usd);
            return Acquired::Rejected(rejection);
        };
        let lane_key = (provider, principal);
        let refuse = |this: &Self, reason: Reason, until: Option<Millis>, retryable: bool| {
            let mut evidence = this.evidence(
                lane_key,
                this.lanes.by_key(lane_key).map_or(0, |l| l.live),
                Decision::Reject,
                reason,
                0,
                checked.as_ref(),
                false,
            );
            evidence.retry_after_ms = until.map(|at| at.saturating_sub(now).max(1));
            Acquired::Rejected(Rejection {
                reason,
                retryable,
                evidence,
            })
        };

        let estimate = match self.preflight(lane_key, request.deadline, estimate.ok(), now) {
            Ok(estimate) => estimate,
            Err(reason) => return refuse(self, reason, None, reason.is_retryable_rejection()),
        };
        if let Some(reason) = self.never_fits(lane_key, &request.budget_id, &estimate) {
            return refuse(self, reason, None, false);
        }
        if let Some(cap) = self.budget_cap_reached(lane_key, &request.budget_id) {
            let refused = refuse(self, Reason::TooManyBudgets, None, true);
            return self.refuse_budget_cap(refused, cap, now);
        }
        // A try-now request joins its lane like any other, so the pump serves it in turn (it
        // never jumps waiters ahead of it), and leaves before this call returns; it never
        // expires.
        let expires_at = if try_now {
            None
        } else {
            self.expiry_for(lane_key, request.deadline, now)
        };
        // Waiting cannot outlast a pause or an open breaker that ends at or after the instant the
        // request would be refused for its deadline (for a try-now request: now).
        let horizon = if try_now {
            Some(now)
        } else {
            deadline_bound(request.deadline, expires_at)
        };
        if let Some((reason, until)) = horizon.and_then(|d| self.blocked_past(provider, d, now)) {
            return refuse(self, reason, Some(until), true);
        }
        if !try_now && self.queue_is_full(lane_key) {
            let hint = now.saturating_add(self.queue_full_hint(now));
            return refuse(self, Reason::QueueFull, Some(hint), true);
        }

        let deadline = request.deadline;
        let waiter_id = WaiterId(self.next_id());
        let waiter = Waiter::new(
            waiter_id,
            (lane_key, self.lane_for(lane_key)),
            request.budget_id,
            estimate,
            request.deadline,
            now,
            expires_at,
        );
        self.enqueue(waiter);
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
        let Some(slot) = self.queue.find(waiter_id) else {
            // Resolved by the pump but not found among the resolutions: never happens.
            return Acquired::Rejected(Rejection::refusal(Reason::Cancelled, self.retry_pressure));
        };
        if try_now {
            return self.withdraw_try_now(slot, now);
        }
        if let Some(rejection) =
            self.refuse_if_unreachable(slot, deadline_bound(deadline, expires_at), now)
        {
            return Acquired::Rejected(rejection);
        }
        let evidence = self.deferral_evidence(slot, lane_key, now);
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
        let slot = self.queue.find(waiter)?;
        let rejection = self.reject_waiter(slot, Reason::Cancelled, now);
        self.pump(now);
        self.note_peaks();
        rejection
    }

    /// Releases a lease with its outcome. A second release of the same lease does nothing and
    /// returns `None`.
    pub fn release(&mut self, lease: LeaseId, outcome: Outcome, now: Millis) -> Option<Released> {
        self.release_with_usage(lease, outcome, ActualUsage::none(), now)
    }

    /// [`Controller::release`], reporting what the call actually used: the invocation's budget
    /// lines then count the actual tokens and cost instead of the estimate (see
    /// [`crate::ActualUsage`]). Rate buckets keep the estimate: they pace admissions, they do
    /// not account.
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
        self.budgets.settle(
            &record.budget_id,
            record.budget_epoch,
            Self::scope_keys(record.lane),
            &record.charged,
            &usage,
            now,
        );
        for scope in self.scopes.of_lane_mut(record.lane, now) {
            scope.active -= 1;
        }
        let (provider, principal) = record.lane;
        self.scopes.principals.list_if_idle(principal);
        let provider_state = &mut self.scopes.providers[provider];
        let breaker_config = provider_state
            .limits
            .as_ref()
            .and_then(|l| l.circuit_breaker.clone());
        let provider_state = &mut provider_state.extra;
        if record.probe {
            provider_state.breaker.end_probe();
        }
        let mut transitions = Vec::new();
        let mut pause = None;
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
                if provider_state.paused_until > now {
                    pause = Some((provider_state.id.clone(), provider_state.paused_until));
                }
            }
            Outcome::None => {}
        }
        let held = now.saturating_sub(record.admitted_at);
        self.mean_hold_ms = Some(match self.mean_hold_ms {
            None => held,
            Some(mean) => (mean * 7 + held) / 8,
        });
        if let (Some(actual), true) = (usage.tokens, record.service > 0) {
            self.order_correct(record.lane_slot, record.service, actual);
        }
        if !transitions.is_empty() || pause.is_some() {
            self.regime_changed(provider);
        }
        let now_idle = self.lanes.get_mut(record.lane_slot).is_some_and(|lane| {
            lane.active -= 1;
            lane.is_idle()
        });
        if now_idle {
            self.lane_went_idle(record.lane_slot);
        }
        self.record_transitions(&transitions);
        self.pump(now);
        self.note_peaks();
        Some(Released {
            breaker_transitions: transitions,
            pause,
        })
    }

    /// Pauses a provider lane for `retry_after_ms` (the pause only ever extends) and counts one
    /// unit of retry pressure. Returns the instant the pause ends. A provider the profile does
    /// not configure is an error, and no state is kept for it.
    pub fn coordinate_retry_after(
        &mut self,
        provider_id: &str,
        retry_after_ms: Millis,
        now: Millis,
    ) -> Result<Millis, UnknownProvider> {
        let now = self.advance(now);
        self.expire(now);
        let provider = self.configured_provider(provider_id)?;
        let state = &mut self.scopes.providers[provider].extra;
        state.paused_until = state.paused_until.max(now.saturating_add(retry_after_ms));
        let paused_until = state.paused_until;
        self.retry_pressure += 1;
        self.regime_changed(provider);
        self.pump(now);
        self.note_peaks();
        Ok(paused_until)
    }

    /// Processes everything due at `now`: expiries, then the pump.
    pub fn handle_timeout(&mut self, now: Millis) {
        let now = self.advance(now);
        self.expire(now);
        self.pump(now);
        self.note_peaks();
    }

    /// The exact next instant at which anything queued can change on its own; `None` when only
    /// an external event (a release, a cancellation, a profile change) can change anything.
    pub fn poll_timeout(&self) -> Option<Millis> {
        match (self.queue.next_expiry(), self.wake_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next resolved waiter, if any.
    pub fn poll_resolution(&mut self) -> Option<Resolution> {
        self.resolutions.pop_front()
    }

    /// The oldest breaker transition not yet polled, if any.
    pub fn poll_transition(&mut self) -> Option<BreakerTransition> {
        self.transition_outbox.pop_front()
    }

    /// Turns deadline-aware refusal (`deadline-unreachable`) on or off (on by default).
    pub fn set_deadline_refusals(&mut self, on: bool) {
        self.deadline_refusals = on;
    }

    /// How many idle principal states are kept beyond those not yet pristine (default
    /// [`IDLE_PRINCIPALS_KEPT`]). Only tests and benchmarks change it: eviction never changes a
    /// decision, so the bound only trades memory for re-creating state.
    #[doc(hidden)]
    pub fn set_idle_principals_kept(&mut self, kept: usize) {
        self.idle_principals_kept = kept;
    }

    /// Transitions dropped unpolled because the outbox was full ([`TRANSITION_OUTBOX_LIMIT`]).
    pub fn transitions_dropped(&self) -> u64 {
        self.transitions_dropped
    }

    fn principal_active(&self, principal: u32) -> u64 {
        u64::from(self.scopes.principals[principal].scope().active)
    }

    /// Keeps an idle lane (so a busy principal does not rebuild it on every request) but at most
    /// [`IDLE_LANES_KEPT`] of them: the oldest idle lanes are forgotten first. An idle lane holds
    /// no waiter and no lease, so forgetting it loses nothing.
    fn lane_went_idle(&mut self, slot: LaneSlot) {
        self.idle_lanes.push_back(slot);
        while self.idle_lanes.len() > IDLE_LANES_KEPT {
            let Some(oldest) = self.idle_lanes.pop_front() else {
                break;
            };
            self.forget_lane_if_idle(oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;

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
