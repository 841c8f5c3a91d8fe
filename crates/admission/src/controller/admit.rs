//! The admission checks of the controller (REFERENCE §4): what a request must pass to be
//! queued, and what a lane head must pass to be admitted.
//!
//! # What it decides
//!
//! - **Preflight** (permanent, in the reference order): provider configured, principal known,
//!   deadline, estimate well-formed, then per scope the per-request bounds and the
//!   unknown-cost / unknown-tokens / unknown-retained-work rules.
//! - **Never fits** (permanent): a zero ceiling, a zero request rate, a token estimate above a
//!   bucket's capacity, or a budget the request would exceed. Budgets never shrink while a
//!   request waits, so waiting cannot help.
//! - **Queue admission** (retryable `queue-full`): queue lengths and queue shares, and the
//!   estimated hint of a `queue-full` refusal.
//! - **Dwell bounds**: a waiter expires at `min(deadline, enqueuedAt + min(maxQueueWaitMs))`.
//! - **tryAdmit** for a lane head: concurrency, share caps, reservations, Retry-After,
//!   breaker, then budgets and buckets, then the provider's announced quota
//!   (`provider_quota.rs`), each deferral naming how far the blockage reaches
//!   ([`Blocked`]) and when it can change.
//!
//! # Invariants
//!
//! - Checks only read state, except tryAdmit, which may move a breaker from open to half-open
//!   (reported as a transition) and take a bucket's large-token reservation for its head.
//! - A request admitted by tryAdmit fits every scope's concurrency, share, reservation, pause,
//!   breaker, budget and bucket at `now`; the caller commits it.
//!
//! # Complexity
//!
//! Every check is O(1) in the number of lanes and waiters, except the reservation rule, which
//! is O(principals holding a reservation).

use crate::binding::Binding;
use crate::breaker::{BreakerGate, BreakerTransition};
use crate::budget::{BudgetCap, ScopeKey};
use crate::deadline::block_outlasts_deadline;
use crate::estimate::CheckedEstimate;
use crate::lane::{LaneKey, LaneSlot};
use crate::limits::Limits;
use crate::queue::{WaiterQueue, WaiterSlot};
use crate::reason::Reason;
use crate::scope::TokenHolder;
use crate::time::Millis;

use super::Controller;

/// Which scope blocked a head; decides how far the blockage reaches in this pump pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Blocked {
    /// Nobody in the workspace can be admitted until something changes.
    Workspace,
    /// Nobody on this provider can be admitted.
    Provider,
    /// Nobody of this principal can be admitted.
    Principal,
    /// Only this head is blocked (its own estimate or share).
    Head,
}

impl Blocked {
    /// How far the limit `binding` reaches: every lane its scope covers, except a head's own
    /// share, reservation or token need, which holds that head only.
    pub(super) const fn of(binding: Binding) -> Blocked {
        match binding {
            Binding::WorkspaceConcurrency | Binding::WorkspaceRequests => Blocked::Workspace,
            Binding::ProviderConcurrency
            | Binding::ProviderRequests
            | Binding::ProviderPause
            | Binding::ProviderBreaker
            | Binding::ProviderQuotaRequests => Blocked::Provider,
            Binding::PrincipalConcurrency
            | Binding::WorkspaceShare
            | Binding::WorkspaceReservation
            | Binding::PrincipalRequests => Blocked::Principal,
            Binding::ProviderShare
            | Binding::ProviderReservation
            | Binding::PrincipalTokens
            | Binding::WorkspaceTokens
            | Binding::ProviderTokens
            | Binding::ProviderQuotaTokens => Blocked::Head,
        }
    }
}

/// The verdict of tryAdmit for one head.
pub(super) enum Attempt {
    Admit {
        probe: bool,
    },
    Defer {
        /// The limit that holds the head (its reason is the deferral's, its reach
        /// [`Blocked::of`]).
        binding: Binding,
        wake: Option<Millis>,
    },
    Reject(Reason),
    /// A provider pause or open breaker ends at `until`, at or after the head's deadline:
    /// refused now (retryable) rather than left to wait for a deadline it cannot meet.
    Refuse {
        reason: Reason,
        until: Millis,
    },
}

impl Controller {
    /// Preflight (REFERENCE §4): permanent, order as specified.
    pub(super) fn preflight(
        &self,
        (provider, principal): LaneKey,
        deadline: Option<Millis>,
        estimate: Option<CheckedEstimate>,
        now: Millis,
    ) -> Result<CheckedEstimate, Reason> {
        let Some(provider_limits) = self.scopes.providers.limits(provider) else {
            return Err(Reason::UnconfiguredProvider);
        };
        let Some(principal_limits) = self.scopes.principals.limits(principal) else {
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

    /// The budget lines a request of `lane` is charged to, in the reference order.
    pub(super) fn scope_keys((provider, principal): LaneKey) -> [ScopeKey; 3] {
        [
            ScopeKey::Principal(principal),
            ScopeKey::Workspace,
            ScopeKey::Provider(provider),
        ]
    }

    /// Whether a scope of `lane` has a budget limit: its spend then is never forgotten for
    /// idleness (`budget.rs`).
    pub(super) fn budget_limited(&self, (provider, principal): LaneKey) -> bool {
        [
            self.scopes.principals.limits(principal),
            Some(&self.profile.workspace),
            self.scopes.providers.limits(provider),
        ]
        .into_iter()
        .flatten()
        .any(Limits::has_budget)
    }

    /// The cap an attempt of `lane` on `budget_id` would break by opening a budget: the
    /// principal's `maxOpenBudgets` (else the workspace's, else the server's default), always
    /// below the workspace cap so one principal at its own cap never fills the workspace; then
    /// the workspace cap.
    pub(super) fn budget_cap_reached(
        &self,
        (_, principal): LaneKey,
        budget_id: &str,
    ) -> Option<BudgetCap> {
        let bounds = self.budgets.bounds();
        let configured = self
            .scopes
            .principals
            .limits(principal)
            .and_then(|l| l.max_open_budgets)
            .or(self.profile.workspace.max_open_budgets)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .or(bounds.max_open_per_principal);
        let cap = match (configured, bounds.max_open) {
            (Some(own), Some(workspace)) => Some(own.min(workspace.saturating_sub(1).max(1))),
            (own, _) => own,
        };
        self.budgets.check_open(budget_id, principal, cap)
    }

    /// Conditions under which waiting can never help: rejected at once (permanent).
    pub(super) fn never_fits(
        &self,
        lane: LaneKey,
        budget_id: &str,
        estimate: &CheckedEstimate,
    ) -> Option<Reason> {
        let (provider, principal) = lane;
        let scopes = [
            self.scopes.principals.limits(principal)?,
            &self.profile.workspace,
            self.scopes.providers.limits(provider)?,
        ];
        let keys = Self::scope_keys(lane);
        for (limits, key) in scopes.into_iter().zip(keys) {
            if limits.concurrency == 0 {
                return Some(Reason::Concurrency);
            }
            // Without a budget limit the check passes whatever was spent: skip the lookup.
            if limits.has_budget() {
                if let Some(reason) = self.budgets.usage(budget_id, key).check(limits, estimate) {
                    return Some(reason);
                }
            }
            if limits.requests_per_minute == Some(0) {
                return Some(Reason::RequestsPerMinute);
            }
            // A scope's token bucket always has the capacity its limits give it.
            if let (Some(capacity), Some(tokens)) = (limits.token_capacity(), estimate.tokens) {
                if tokens > capacity {
                    return Some(Reason::TokensPerSecond);
                }
            }
        }
        None
    }

    /// Queue admission: queue lengths of the three scopes and the principal's queue shares.
    pub(super) fn queue_is_full(&self, lane: LaneKey) -> bool {
        let (provider, principal) = lane;
        let principal_state = &self.scopes.principals[principal];
        let provider_state = &self.scopes.providers[provider];
        let (Some(principal_limits), Some(provider_limits)) = (
            principal_state.limits.as_ref(),
            provider_state.limits.as_ref(),
        ) else {
            return false;
        };
        let workspace_limits = &self.profile.workspace;
        let over =
            |limits: &Limits, queued: u64| limits.max_queue_length.is_some_and(|m| queued >= m);
        if over(principal_limits, u64::from(principal_state.scope().queued))
            || over(workspace_limits, u64::from(self.scopes.workspace.queued))
            || over(provider_limits, u64::from(provider_state.scope().queued))
        {
            return true;
        }
        let lane_queued = self.lanes.by_key(lane).map_or(0, |l| l.live);
        workspace_limits
            .queued_share_cap()
            .is_some_and(|cap| u64::from(principal_state.scope().queued) >= cap)
            || provider_limits
                .queued_share_cap()
                .is_some_and(|cap| lane_queued >= cap)
    }

    /// An estimated hint for a `queue-full` refusal: the sooner of the next queue expiry and the
    /// expected drain time of the queue at the mean lease hold time; at least 1 ms.
    pub(super) fn queue_full_hint(&self, now: Millis) -> Millis {
        let expiry = self.queue.next_expiry().map(|at| at.saturating_sub(now));
        let concurrency = u64::from(self.profile.workspace.concurrency.max(1));
        let drain = self.mean_hold_ms.map(|mean| {
            (mean.saturating_mul(u64::from(self.scopes.workspace.queued))).div_ceil(concurrency)
        });
        let hint = match (expiry, drain) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(1),
        };
        hint.max(1)
    }

    /// The instant a waiter of `lane` enqueued at `enqueued_at` expires, if any.
    pub(super) fn expiry_for(
        &self,
        (provider, principal): LaneKey,
        deadline: Option<Millis>,
        enqueued_at: Millis,
    ) -> Option<Millis> {
        let dwell = [
            self.scopes.principals.limits(principal),
            Some(&self.profile.workspace),
            self.scopes.providers.limits(provider),
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

    /// The provider pause (`retry-after`) or open breaker (`circuit-open`) that keeps
    /// `provider` closed until an instant at or after `deadline`, with that instant. A pause is
    /// reported before the breaker, as tryAdmit checks them.
    pub(super) fn blocked_past(
        &self,
        provider: u32,
        deadline: Millis,
        now: Millis,
    ) -> Option<(Reason, Millis)> {
        let entry = &self.scopes.providers[provider];
        let paused_until = entry.extra.paused_until;
        if paused_until > now && block_outlasts_deadline(paused_until, deadline) {
            return Some((Reason::RetryAfter, paused_until));
        }
        let config = entry
            .limits
            .as_ref()
            .and_then(|l| l.circuit_breaker.as_ref());
        entry
            .extra
            .breaker
            .open_until(config, now)
            .filter(|&until| block_outlasts_deadline(until, deadline))
            .map(|until| (Reason::CircuitOpen, until))
    }

    /// What `waiter` waits for behind the head of its lane: the reason of the head's last
    /// deferral (`concurrency` if the pump has not looked at it yet) and when it can end.
    /// `None` when `waiter` is the head.
    pub(super) fn wait_behind(
        &self,
        lane: LaneSlot,
        waiter: WaiterSlot,
    ) -> Option<(Reason, Option<Millis>)> {
        let lane = self.lanes.get(lane)?;
        let head_slot = WaiterQueue::head(&lane.fifo)?;
        let head = self.queue.get(head_slot)?;
        (head_slot != waiter).then(|| {
            (
                head.last_reason().unwrap_or(Reason::Concurrency),
                head.last_wake,
            )
        })
    }

    /// Permits of a pool held back for principals other than `principal`.
    fn held_for_others(
        &self,
        principal: u32,
        capacity: u32,
        active_in_pool: impl Fn(u32) -> u32,
    ) -> u32 {
        self.scopes
            .reserved_principals
            .iter()
            .filter(|&&other| other != principal)
            .map(|&other| {
                let reservation = self
                    .scopes
                    .principals
                    .limits(other)
                    .map_or(0, |l| l.reservation_in(capacity));
                reservation.saturating_sub(active_in_pool(other))
            })
            .sum()
    }

    /// Whether a reservation rule keeps `principal` out of a pool of `capacity` with `active`
    /// permits taken.
    pub(super) fn reservation_blocks(
        &self,
        principal: u32,
        capacity: u32,
        active: u32,
        own_active: u32,
        active_in_pool: impl Fn(u32) -> u32,
    ) -> bool {
        if self.scopes.reserved_principals.is_empty() {
            return false;
        }
        let free = capacity.saturating_sub(active);
        let own_reservation = self
            .scopes
            .principals
            .limits(principal)
            .map_or(0, |l| l.reservation_in(capacity));
        if own_active < own_reservation {
            return free < 1;
        }
        free.saturating_sub(self.held_for_others(principal, capacity, active_in_pool)) < 1
    }

    /// tryAdmit (REFERENCE §4), for the head `waiter_id`. Mutates only the breaker (open →
    /// half-open) and the token-bucket holders; everything else is committed by the caller.
    pub(super) fn try_admit(
        &mut self,
        slot: WaiterSlot,
        now: Millis,
        transitions: &mut Vec<BreakerTransition>,
    ) -> Attempt {
        let Some(waiter) = self.queue.get(slot) else {
            return Attempt::Reject(Reason::Cancelled);
        };
        let (lane_key, lane_slot, waiter_id) = (waiter.lane, waiter.lane_slot, waiter.id);
        let (provider, principal) = lane_key;
        let estimate = waiter.estimate();
        let (Some(principal_limits), Some(provider_limits)) = (
            self.scopes.principals[principal].limits.clone(),
            self.scopes.providers[provider].limits.clone(),
        ) else {
            return Attempt::Reject(Reason::UnconfiguredProvider);
        };
        let workspace_limits = &self.profile.workspace;
        let workspace_active = self.scopes.workspace.active;
        let principal_active = self.scopes.principals[principal].scope().active;
        let provider_active = self.scopes.providers[provider].scope().active;
        let lane_active = self.lanes.get(lane_slot).map_or(0, |l| l.active);
        let defer = |binding, wake| Attempt::Defer { binding, wake };

        // 1. Concurrency.
        if principal_active >= principal_limits.concurrency {
            return defer(Binding::PrincipalConcurrency, None);
        }
        if workspace_active >= workspace_limits.concurrency {
            return defer(Binding::WorkspaceConcurrency, None);
        }
        if provider_active >= provider_limits.concurrency {
            return defer(Binding::ProviderConcurrency, None);
        }
        // 2. Share caps.
        if workspace_limits
            .active_share_cap()
            .is_some_and(|cap| u64::from(principal_active) >= cap)
        {
            return defer(Binding::WorkspaceShare, None);
        }
        if provider_limits
            .active_share_cap()
            .is_some_and(|cap| u64::from(lane_active) >= cap)
        {
            return defer(Binding::ProviderShare, None);
        }
        // 3. Reservations: workspace pool, then provider pool.
        if self.reservation_blocks(
            principal,
            workspace_limits.concurrency,
            workspace_active,
            principal_active,
            |other| self.scopes.principals[other].scope().active,
        ) {
            return defer(Binding::WorkspaceReservation, None);
        }
        if self.reservation_blocks(
            principal,
            provider_limits.concurrency,
            provider_active,
            lane_active,
            |other| self.lanes.by_key((provider, other)).map_or(0, |l| l.active),
        ) {
            return defer(Binding::ProviderReservation, None);
        }
        // 4. Retry-After.
        let provider_state = &mut self.scopes.providers[provider].extra;
        if provider_state.paused_until > now {
            return defer(Binding::ProviderPause, Some(provider_state.paused_until));
        }
        // 5. Breaker.
        let probe = match provider_state.breaker.gate(
            provider_limits.circuit_breaker.as_ref(),
            &provider_state.id,
            now,
            transitions,
        ) {
            BreakerGate::Pass { probe } => probe,
            BreakerGate::OpenUntil(at) => return defer(Binding::ProviderBreaker, Some(at)),
            BreakerGate::ProbesBusy => return defer(Binding::ProviderBreaker, None),
        };
        // 6. Budgets and buckets: permanent conditions of every scope first, then deferrals.
        let budget_id = self.queue.get(slot).map_or("", |w| &*w.budget_id);
        if let Some(reason) = self.never_fits(lane_key, budget_id, &estimate).or_else(|| {
            self.budget_cap_reached(lane_key, budget_id)
                .map(|_| Reason::TooManyBudgets)
        }) {
            return Attempt::Reject(reason);
        }
        let tokens = estimate.tokens.unwrap_or(0);
        let [principal_scope, workspace_scope, provider_scope] =
            self.scopes.of_lane_mut(lane_key, now);
        for (scope, [by_requests, by_tokens]) in [
            (
                principal_scope,
                [Binding::PrincipalRequests, Binding::PrincipalTokens],
            ),
            (
                workspace_scope,
                [Binding::WorkspaceRequests, Binding::WorkspaceTokens],
            ),
            (
                provider_scope,
                [Binding::ProviderRequests, Binding::ProviderTokens],
            ),
        ] {
            scope.refill(now);
            if let Some(bucket) = &scope.requests {
                if !bucket.has(1) {
                    let wake = bucket.wait_for(1).map(|ms| now.saturating_add(ms));
                    return defer(by_requests, wake);
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
                    return defer(by_tokens, wake);
                }
            }
        }
        // 7. The provider's announced quota, on top of the profile's limits.
        if let Some(deferral) = self.quota_deferral(provider, tokens, now) {
            return deferral;
        }
        Attempt::Admit { probe }
    }
}
