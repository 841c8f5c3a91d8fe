//! A controller's part in a rollout (`crate::rollout`): answering an arrival read-only,
//! taking another controller's grant as a fact, and starting from another controller's state.
//!
//! # What it decides
//!
//! - [`Controller::would_decide`]: the decision this controller would make for a request at
//!   `now` (admit now, queue, refuse), **reading only**: the same checks as
//!   [`Controller::acquire`] in the same order (preflight, never-fit, open budgets, a block
//!   past the deadline, queue admission, then tryAdmit's concurrency, shares, reservations,
//!   pause, breaker, buckets and announced quota), without the bucket refill, the breaker's
//!   open → half-open move or a token reservation. A request behind waiters of its lane would
//!   queue. It never predicts `deadline-unreachable` (such a request counts as queued).
//! - [`Controller::force_grant`]: a lease granted elsewhere, counted here as granted: lane and
//!   scope concurrency, request and token buckets, announced quota, budget lines and fair-order
//!   service charged as a commit charges them, even past this controller's limits; it never
//!   pumps, queues or emits.
//! - [`Controller::follow`]: at a rollout's start, the active controller's held leases (forced
//!   grants), bucket levels, provider pauses, breakers and announced quotas.
//!
//! # Invariants
//!
//! - `would_decide` changes nothing; `force_grant` changes only counters (no decision, no
//!   resolution, no transition).
//! - O(1) in lanes, waiters and leases per call (the reservation rule is O(reserved
//!   principals), as in tryAdmit); `follow` is O(held leases + scopes), once per rollout.

use crate::estimate::CheckedEstimate;
use crate::evidence::LeaseId;
use crate::lane::LaneKey;
use crate::reason::Reason;
use crate::rollout::RolloutDecision;
use crate::time::Millis;

use super::{deadline_bound, AdmissionRequest, Controller, LeaseRecord};

/// A lease one controller granted, as another takes it ([`Controller::force_grant`]).
pub(crate) struct GrantFact<'a> {
    principal_id: &'a str,
    provider_id: &'a str,
    budget_id: &'a str,
    charged: CheckedEstimate,
    admitted_at: Millis,
}

impl Controller {
    /// What this controller would decide for `request` at `now` (`try_now`: as
    /// [`Controller::try_acquire`] would); changes nothing.
    pub(crate) fn would_decide(
        &self,
        request: &AdmissionRequest,
        now: Millis,
        try_now: bool,
    ) -> RolloutDecision {
        let now = self.now.max(now);
        let provider = self.scopes.providers.find(&request.provider_id);
        let principal = self.scopes.principals.find(&request.principal_id);
        let (Some(provider), Some(principal)) = (provider, principal) else {
            return RolloutDecision::Refuse(
                if self.profile.providers.contains_key(&request.provider_id) {
                    Reason::Disabled
                } else {
                    Reason::UnconfiguredProvider
                },
            );
        };
        let lane = (provider, principal);
        let estimate = request.estimate.check().ok();
        let estimate = match self.preflight(lane, request.deadline, estimate, now) {
            Ok(estimate) => estimate,
            Err(reason) => return RolloutDecision::Refuse(reason),
        };
        if let Some(reason) = self
            .never_fits(lane, &request.budget_id, &estimate)
            .or_else(|| {
                self.budget_cap_reached(lane, &request.budget_id)
                    .map(|_| Reason::TooManyBudgets)
            })
        {
            return RolloutDecision::Refuse(reason);
        }
        let horizon = if try_now {
            Some(now)
        } else {
            deadline_bound(
                request.deadline,
                self.expiry_for(lane, request.deadline, now),
            )
        };
        if let Some((reason, _)) = horizon.and_then(|d| self.blocked_past(provider, d, now)) {
            return RolloutDecision::Refuse(reason);
        }
        if !try_now && self.queue_is_full(lane) {
            return RolloutDecision::Refuse(Reason::QueueFull);
        }
        let behind = self.lanes.by_key(lane).is_some_and(|l| l.live > 0);
        let wait = if behind {
            Some(Reason::Concurrency)
        } else {
            self.would_wait_for(lane, &estimate, now)
        };
        match (wait, try_now) {
            (None, _) => RolloutDecision::Admit,
            (Some(reason), true) => RolloutDecision::Refuse(reason),
            (Some(reason), false) => RolloutDecision::Queue(reason),
        }
    }

    /// tryAdmit's deferrals for a new head of `lane`, read-only: the reason it would wait for,
    /// or `None` when it would be admitted now.
    fn would_wait_for(
        &self,
        (provider, principal): LaneKey,
        estimate: &CheckedEstimate,
        now: Millis,
    ) -> Option<Reason> {
        let principal_entry = &self.scopes.principals[principal];
        let provider_entry = &self.scopes.providers[provider];
        let (Some(principal_limits), Some(provider_limits)) = (
            principal_entry.limits.as_deref(),
            provider_entry.limits.as_deref(),
        ) else {
            return Some(Reason::UnconfiguredProvider);
        };
        let workspace_limits = &self.profile.workspace;
        let workspace_active = self.scopes.workspace.active;
        let principal_active = principal_entry.scope().active;
        let provider_active = provider_entry.scope().active;
        let lane_active = self
            .lanes
            .by_key((provider, principal))
            .map_or(0, |l| l.active);
        let concurrency = principal_active >= principal_limits.concurrency
            || workspace_active >= workspace_limits.concurrency
            || provider_active >= provider_limits.concurrency
            || workspace_limits
                .active_share_cap()
                .is_some_and(|cap| u64::from(principal_active) >= cap)
            || provider_limits
                .active_share_cap()
                .is_some_and(|cap| u64::from(lane_active) >= cap)
            || self.reservation_blocks(
                principal,
                workspace_limits.concurrency,
                workspace_active,
                principal_active,
                |other| self.scopes.principals[other].scope().active,
            )
            || self.reservation_blocks(
                principal,
                provider_limits.concurrency,
                provider_active,
                lane_active,
                |other| self.lanes.by_key((provider, other)).map_or(0, |l| l.active),
            );
        if concurrency {
            return Some(Reason::Concurrency);
        }
        let extra = &provider_entry.extra;
        if extra.paused_until > now {
            return Some(Reason::RetryAfter);
        }
        if !extra
            .breaker
            .would_pass(provider_limits.circuit_breaker.as_ref(), now)
        {
            return Some(Reason::CircuitOpen);
        }
        let tokens = estimate.tokens.unwrap_or(0);
        for scope in [
            principal_entry.scope(),
            &self.scopes.workspace,
            provider_entry.scope(),
        ] {
            let short = |bucket: Option<&crate::bucket::TokenBucket>, units: u64| {
                bucket.is_some_and(|b| b.time_to_deliver(units, now) != Some(0))
            };
            if short(scope.requests.as_ref(), 1) {
                return Some(Reason::RequestsPerMinute);
            }
            let held = scope.token_holder.map_or(0, |h| h.tokens);
            if short(scope.tokens.as_ref(), tokens.saturating_add(held)) {
                return Some(Reason::TokensPerSecond);
            }
        }
        if let Some(super::admit::Attempt::Defer { binding, .. }) =
            self.quota_deferral(provider, tokens, now)
        {
            return Some(binding.reason());
        }
        None
    }

    /// A held lease as a fact for another controller ([`Controller::force_grant`]); borrows,
    /// so following a grant allocates nothing here.
    pub(crate) fn grant_fact(&self, lease: LeaseId) -> Option<GrantFact<'_>> {
        let record = self.leases.get(&lease)?;
        let (provider, principal) = record.lane;
        Some(GrantFact {
            principal_id: self.scopes.principals.id_of(principal)?,
            provider_id: &self.scopes.providers[provider].extra.id,
            budget_id: &record.budget_id,
            charged: record.charged,
            admitted_at: record.admitted_at,
        })
    }

    /// Whether this controller's profile names both the principal and the provider (so it can
    /// take a grant of that lane as a fact).
    pub(crate) fn knows_lane(&self, principal_id: &str, provider_id: &str) -> bool {
        self.lane_of(principal_id, provider_id).is_ok()
    }

    /// Whether `waiter` waits in this controller's queue.
    pub(crate) fn holds_waiter(&self, waiter: crate::evidence::WaiterId) -> bool {
        self.queue.find(waiter).is_some()
    }

    /// Whether this controller holds any waiter.
    pub(crate) fn has_waiters(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Lease and waiter IDs from here on start at `base` at least (rollouts keep the IDs of two
    /// controllers of one workspace apart).
    pub(crate) fn set_id_base(&mut self, base: u64) {
        self.next_id = self.next_id.max(base);
    }

    /// Counts a lease granted elsewhere as granted here (see the module docs); `None` when
    /// this controller does not know its lane.
    pub(crate) fn force_grant(&mut self, fact: &GrantFact<'_>, now: Millis) -> Option<LeaseId> {
        let lane = self.lane_of(fact.principal_id, fact.provider_id).ok()?;
        let now = self.advance(now);
        let charged = fact.charged;
        // Refilled first, as tryAdmit refills a scope before its commit takes from it.
        for scope in self.scopes.of_lane_mut(lane, now) {
            scope.refill(now);
        }
        let lane_slot = self.count_outside_grant(lane, &charged, true, now);
        self.quota_charge(lane.0, charged.tokens.unwrap_or(0), now);
        let budget_id = String::from(fact.budget_id);
        let limited = self.budget_limited(lane);
        let (budget_epoch, _) =
            self.budgets
                .charge(&budget_id, Self::scope_keys(lane), &charged, limited, now);
        let service = self.order_grant(lane_slot, charged.tokens, false);
        Some(self.hold_outside_grant(LeaseRecord {
            lane,
            lane_slot,
            probe: false,
            admitted_at: fact.admitted_at,
            budget_id,
            budget_epoch,
            charged,
            service,
        }))
    }

    /// Starts from `active`'s state at `now`: its held leases as forced grants (returned as
    /// `(active's lease, this controller's lease)`), then its bucket levels, provider pauses,
    /// breakers and announced quotas.
    pub(crate) fn follow(&mut self, active: &Controller, now: Millis) -> Vec<(LeaseId, LeaseId)> {
        let mut held: Vec<LeaseId> = active.leases.keys().copied().collect();
        held.sort_unstable();
        let mut pairs = Vec::with_capacity(held.len());
        for lease in held {
            if let Some(fact) = active.grant_fact(lease) {
                if let Some(mine) = self.force_grant(&fact, now) {
                    pairs.push((lease, mine));
                }
            }
        }
        // The levels hold every held lease's charge already: they replace what was debited.
        self.restore_bucket_levels(&active.bucket_levels(now), now);
        for provider in active.scopes.providers.iter() {
            let from = &provider.extra;
            if let Some(index) = self.scopes.providers.find(&from.id) {
                let to = &mut self.scopes.providers[index].extra;
                to.paused_until = from.paused_until;
                to.breaker = from.breaker.clone();
                to.quota = from.quota.clone();
            }
        }
        pairs
    }
}
