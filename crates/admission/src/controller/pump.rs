//! The controller's state changes: queueing, the pump, commits, rejections, expiries, and the
//! evidence they produce.
//!
//! # What it decides
//!
//! The pump serves lane heads round-robin ([`crate::ring`]) until nothing more can be admitted
//! now: it takes the ring front's head, revalidates it (preflight against the current profile),
//! runs tryAdmit, and then commits it (lease, counters, buckets, budgets), rejects it (the
//! lane's next waiter is considered at once) or records the deferral and the instant at which
//! it can change. It stops after a full round without an admission, at once when a
//! workspace-wide condition blocks, and as soon as every queued waiter belongs to a provider
//! already found blocked in this pass; lanes of a principal or provider found blocked are
//! skipped in O(1).
//!
//! # Invariants
//!
//! - Every waiter leaves through [`Controller::remove_waiter`], which keeps the waiter queue,
//!   the queued counters, the lane (live count, ring membership, idleness) and the token-bucket
//!   holders consistent.
//! - A resolved waiter (admitted, rejected, expired) is pushed to the resolutions exactly once.
//! - `wake_at` is the earliest known instant at which a head deferred in the last pass can
//!   change; together with the next expiry it is the controller's `poll_timeout`.
//!
//! # Complexity
//!
//! A pass costs O(lanes looked at) plus O(log n) per waiter resolved; a handoff where a shared
//! ceiling binds looks at O(1) lanes (`Controller::pump_stats` counts them).

use crate::breaker::BreakerTransition;
use crate::estimate::CheckedEstimate;
use crate::evidence::{Evidence, Lease, LeaseId, Rejection};
use crate::lane::{LaneKey, LaneSlot};
use crate::queue::{Waiter, WaiterQueue, WaiterSlot};
use crate::reason::{Decision, Reason};
use crate::ring::FairRing;
use crate::time::Millis;

use super::admit::{Attempt, Blocked};
use super::{
    deadline_bound, Acquired, Controller, LeaseRecord, Resolution, BREAKER_HISTORY_LIMIT,
    TRANSITION_OUTBOX_LIMIT,
};

/// Whose turn a ring entry of a provider gives ([`Controller::pick`]).
enum Picked {
    /// The provider has no order: the entry's own lane.
    Ring,
    /// The lane the provider's order names, with its head.
    Lane {
        lane: LaneSlot,
        head: WaiterSlot,
        key: LaneKey,
        on_credit: bool,
    },
    /// No lane of the provider is eligible in this pass.
    Nobody,
}

impl Controller {
    /// Puts a new waiter at the back of its lane (and its lane in the ring); the waiter's lane
    /// exists (the caller found or created its slot).
    #[inline]
    pub(super) fn enqueue(&mut self, waiter: Waiter) {
        let (lane_key, lane_slot) = (waiter.lane, waiter.lane_slot);
        let Some(lane) = self.lanes.get_mut(lane_slot) else {
            return;
        };
        self.queue.insert(waiter, &mut lane.fifo);
        lane.live += 1;
        let first = lane.live == 1;
        self.ring.enter(lane_slot, &mut lane.ring);
        self.count_queued(lane_key, true);
        if first {
            self.order_enter(lane_slot);
        }
    }

    fn count_queued(&mut self, lane: LaneKey, up: bool) {
        for scope in self.scopes.of_lane_mut(lane, self.now) {
            if up {
                scope.queued += 1;
            } else {
                scope.queued -= 1;
            }
        }
    }

    /// Removes a waiter from every structure; returns it.
    pub(super) fn remove_waiter(&mut self, slot: WaiterSlot) -> Option<Waiter> {
        let lane_slot = self.queue.get(slot)?.lane_slot;
        let lane = self.lanes.get_mut(lane_slot)?;
        let waiter = self.queue.remove(slot, &mut lane.fifo)?;
        lane.live -= 1;
        let mut now_idle = false;
        let emptied = lane.live == 0;
        if emptied {
            // The lane's ring entry becomes stale.
            self.ring.leave(&mut lane.ring);
            now_idle = lane.is_idle();
        }
        self.count_queued(waiter.lane, false);
        for scope in self.scopes.of_lane_mut(waiter.lane, self.now) {
            scope.forget_holder(waiter.id);
        }
        if emptied {
            self.order_leave(lane_slot);
        }
        let (_, principal) = waiter.lane;
        self.scopes.principals.list_if_idle(principal);
        if now_idle {
            self.lane_went_idle(lane_slot);
        }
        Some(waiter)
    }

    /// The live waiters of a lane (0 for a lane that no longer exists: it was idle).
    #[inline]
    pub(super) fn lane_live(&self, slot: LaneSlot) -> u64 {
        self.lanes.get(slot).map_or(0, |lane| lane.live)
    }

    pub(super) fn reject_waiter(
        &mut self,
        slot: WaiterSlot,
        reason: Reason,
        now: Millis,
    ) -> Option<Rejection> {
        let waiter = self.remove_waiter(slot)?;
        let mut waiter = waiter;
        let mut evidence = self.evidence(
            waiter.lane,
            self.lane_live(waiter.lane_slot),
            Decision::Reject,
            reason,
            now.saturating_sub(waiter.enqueued_at),
            Some(&waiter.estimate()),
            false,
        );
        if reason == Reason::QueueTimeout {
            evidence.retry_after_ms = waiter.last_wake.map(|at| at.saturating_sub(now).max(1));
        }
        // A zero dwell bound can never be met: that queue-timeout is permanent.
        let retryable = reason.is_retryable_rejection()
            && !(reason == Reason::QueueTimeout && waiter.expires_at() == Some(waiter.enqueued_at));
        evidence.breaker_transitions = waiter.take_transitions();
        evidence.provider_quota = waiter.provider_quota;
        Some(Rejection {
            reason,
            retryable,
            evidence,
        })
    }

    /// Rejects a waiter and delivers the rejection through the resolutions; `until` is the
    /// instant its blocking condition ends, when that is why it is refused.
    pub(super) fn resolve_rejected(
        &mut self,
        slot: WaiterSlot,
        reason: Reason,
        until: Option<Millis>,
        now: Millis,
    ) {
        let Some(waiter) = self.queue.get(slot) else {
            return;
        };
        let waiter_id = waiter.id;
        let cap = (reason == Reason::TooManyBudgets)
            .then(|| self.budget_cap_reached(waiter.lane, &waiter.budget_id))
            .flatten();
        if let Some(mut rejection) = self.reject_waiter(slot, reason, now) {
            rejection.evidence.budget_cap = cap;
            if let Some(at) = until {
                rejection.evidence.retry_after_ms = Some(at.saturating_sub(now).max(1));
            }
            self.resolutions.push_back(Resolution {
                waiter: waiter_id,
                outcome: Err(rejection),
            });
        }
    }

    /// Rejects every waiter whose deadline or dwell bound has come.
    pub(super) fn expire(&mut self, now: Millis) {
        self.budgets.evict_idle(now);
        self.scopes
            .principals
            .evict_idle(now, self.idle_principals_kept);
        while let Some(slot) = self.queue.first_due(now) {
            let deadline_passed = self
                .queue
                .get(slot)
                .is_some_and(|w| w.deadline.is_some_and(|d| now >= d));
            let reason = if deadline_passed {
                Reason::DeadlineExceeded
            } else {
                Reason::QueueTimeout
            };
            self.resolve_rejected(slot, reason, None, now);
        }
    }

    fn commit(
        &mut self,
        slot: WaiterSlot,
        probe: bool,
        on_credit: bool,
        now: Millis,
    ) -> Option<Lease> {
        // The lease counts in its lane before the waiter leaves, so the lane is never dropped
        // as idle in between.
        let waiter = self.queue.get(slot)?;
        let (lane_key, lane_slot) = (waiter.lane, waiter.lane_slot);
        if let Some(lane) = self.lanes.get_mut(lane_slot) {
            lane.active += 1;
        }
        let mut waiter = self.remove_waiter(slot)?;
        let estimate = waiter.estimate();
        let tokens = estimate.tokens.unwrap_or(0);
        for scope in self.scopes.of_lane_mut(lane_key, now) {
            if let Some(bucket) = &mut scope.requests {
                bucket.take(1);
            }
            if let Some(bucket) = &mut scope.tokens {
                bucket.take(tokens);
            }
            scope.active += 1;
        }
        self.quota_charge(lane_key.0, tokens, now);
        let limited = self.budget_limited(lane_key);
        let (budget_epoch, budget_opened) = self.budgets.charge(
            &waiter.budget_id,
            Self::scope_keys(lane_key),
            &estimate,
            limited,
            now,
        );
        if probe {
            let (provider, _) = lane_key;
            self.scopes.providers[provider].extra.breaker.start_probe();
        }
        let service = self.order_grant(lane_slot, estimate.tokens, on_credit);
        let lease_id = LeaseId(self.next_id());
        self.leases.insert(
            lease_id,
            LeaseRecord {
                lane: lane_key,
                lane_slot,
                probe,
                admitted_at: now,
                budget_id: String::from(std::mem::take(&mut waiter.budget_id)),
                budget_epoch,
                charged: estimate,
                service,
            },
        );
        let mut evidence = self.evidence(
            lane_key,
            self.lane_live(lane_slot),
            Decision::Admit,
            Reason::Admitted,
            now.saturating_sub(waiter.enqueued_at),
            Some(&estimate),
            false,
        );
        evidence.breaker_transitions = waiter.take_transitions();
        evidence.budget_opened = budget_opened;
        evidence.provider_quota = waiter.provider_quota;
        Some(Lease {
            id: lease_id,
            evidence,
        })
    }

    pub(super) fn record_transitions(&mut self, transitions: &[BreakerTransition]) {
        for transition in transitions {
            if self.breaker_history.len() == BREAKER_HISTORY_LIMIT {
                self.breaker_history.pop_front();
            }
            self.breaker_history.push_back(transition.clone());
            if self.transition_outbox.len() == TRANSITION_OUTBOX_LIMIT {
                self.transition_outbox.pop_front();
                self.transitions_dropped += 1;
            }
            self.transition_outbox.push_back(transition.clone());
        }
    }

    /// Serves lane heads round-robin until nothing more can be admitted now.
    pub(super) fn pump(&mut self, now: Millis) {
        self.wake_at = None;
        self.pass += 1;
        let pass = self.pass;
        let mut since_admission = 0usize;
        let mut blocked_queued = 0u64;
        while since_admission < self.ring.len() {
            let workspace = &self.scopes.workspace;
            if u64::from(workspace.queued) == blocked_queued
                || workspace.active >= self.profile.workspace.concurrency
            {
                // Nothing unblocked is queued, or the workspace ceiling holds everyone back:
                // no head needs to be looked at.
                break;
            }
            let Some(entry) = self.ring.pop_front() else {
                break;
            };
            self.lanes_visited += 1;
            let (head, lane_key) = {
                let Some(lane) = self.lanes.get_mut(entry.lane) else {
                    continue;
                };
                if !FairRing::is_live(entry, Some(&lane.ring)) {
                    continue; // a stale entry of a lane that emptied
                }
                match WaiterQueue::head(&lane.fifo) {
                    Some(head) => (head, lane.key),
                    None => {
                        self.ring.leave(&mut lane.ring);
                        if lane.is_idle() {
                            self.lane_went_idle(entry.lane);
                        }
                        continue;
                    }
                }
            };
            let (provider, _) = lane_key;
            if self.scopes.providers.is_blocked(provider, pass) {
                self.ring.push_back(entry);
                since_admission += 1;
                continue;
            }
            // The provider's turn: the lane whose entry came up, or the one its order names.
            let (head, lane_key, served_lane, on_credit) = match self.pick(provider, pass) {
                Picked::Ring => (head, lane_key, entry.lane, false),
                Picked::Lane {
                    lane,
                    head,
                    key,
                    on_credit,
                } => (head, key, lane, on_credit),
                Picked::Nobody => {
                    // No lane of this provider is eligible in this pass.
                    self.scopes.providers.mark_blocked(provider, pass);
                    blocked_queued += u64::from(self.scopes.providers[provider].scope().queued);
                    self.ring.push_back(entry);
                    since_admission += 1;
                    continue;
                }
            };
            let (_, principal) = lane_key;
            let Some(head_id) = self.queue.get(head).map(|w| w.id) else {
                continue;
            };
            if self.scopes.principals.is_blocked(principal, pass) {
                self.ring.push_back(entry);
                since_admission += 1;
                continue;
            }
            let mut transitions = Vec::new();
            let attempt = match self.queue.get(head) {
                Some(waiter) => {
                    let (deadline, estimate) = (waiter.deadline, waiter.estimate());
                    let horizon = deadline_bound(deadline, waiter.expires_at());
                    match self.preflight(lane_key, deadline, Some(estimate), now) {
                        Err(reason) => Attempt::Reject(reason),
                        Ok(_) => match horizon.and_then(|d| self.blocked_past(provider, d, now)) {
                            // Waiting cannot outlast this pause or open breaker: refuse now.
                            Some((reason, until)) => Attempt::Refuse { reason, until },
                            None => self.try_admit(head, now, &mut transitions),
                        },
                    }
                }
                None => Attempt::Reject(Reason::Cancelled),
            };
            if !transitions.is_empty() {
                self.record_transitions(&transitions);
                self.regime_changed(provider);
                if let Some(waiter) = self.queue.get_mut(head) {
                    waiter.add_transitions(transitions);
                }
            }
            match attempt {
                Attempt::Admit { probe } => {
                    if let Some(lease) = self.commit(head, probe, on_credit, now) {
                        self.resolutions.push_back(Resolution {
                            waiter: head_id,
                            outcome: Ok(lease),
                        });
                    }
                    if self.ring_entry_is_live(entry) {
                        self.ring.push_back(entry);
                    }
                    since_admission = 0;
                }
                Attempt::Reject(reason) => {
                    self.resolve_rejected(head, reason, None, now);
                    // The lane's next waiter is considered at once.
                    if self.ring_entry_is_live(entry) {
                        self.ring.push_front(entry);
                    }
                }
                Attempt::Refuse { reason, until } => {
                    self.resolve_rejected(head, reason, Some(until), now);
                    // The lane's next waiter is considered at once.
                    if self.ring_entry_is_live(entry) {
                        self.ring.push_front(entry);
                    }
                }
                Attempt::Defer { binding, wake } => {
                    if let Some(waiter) = self.queue.get_mut(head) {
                        waiter.last_binding = Some(binding);
                        waiter.last_wake = wake;
                        waiter.provider_quota |= binding.is_provider_quota();
                    }
                    if let Some(at) = wake {
                        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
                    }
                    self.ring.push_back(entry);
                    since_admission += 1;
                    match Blocked::of(binding) {
                        Blocked::Workspace => break,
                        Blocked::Provider => {
                            self.scopes.providers.mark_blocked(provider, pass);
                            blocked_queued +=
                                u64::from(self.scopes.providers[provider].scope().queued);
                        }
                        Blocked::Principal => {
                            self.scopes.principals.mark_blocked(principal, pass);
                        }
                        Blocked::Head => {
                            if let Some(lane) = self.lanes.get_mut(served_lane) {
                                lane.deferred_in_pass = pass;
                            }
                        }
                    }
                }
            }
        }
        // The cursor stays just past the last admitted lane: lanes considered since then were
        // not served and come first again next time.
        self.ring.end_pass(since_admission, &self.lanes);
    }

    /// Whose turn it is on `provider`: the ring's lane when the provider has no order;
    /// otherwise the lane its order names among the lanes still eligible in this pass (principal
    /// not found blocked, head not deferred on its own account).
    #[inline]
    fn pick(&self, provider: u32, pass: u64) -> Picked {
        let Some(order) = self.scopes.providers[provider].extra.order.as_deref() else {
            return Picked::Ring;
        };
        let (lanes, principals) = (&self.lanes, &self.scopes.principals);
        let pick = order.pick(|slot| {
            lanes.get(slot).is_some_and(|lane| {
                lane.deferred_in_pass != pass && !principals.is_blocked(lane.key.1, pass)
            })
        });
        let Some(pick) = pick else {
            return Picked::Nobody;
        };
        match self
            .lanes
            .get(pick.lane)
            .and_then(|lane| WaiterQueue::head(&lane.fifo).map(|head| (head, lane.key)))
        {
            Some((head, key)) => Picked::Lane {
                lane: pick.lane,
                head,
                key,
                on_credit: pick.on_credit,
            },
            None => Picked::Nobody,
        }
    }

    fn ring_entry_is_live(&self, entry: crate::ring::RingEntry) -> bool {
        FairRing::is_live(entry, self.lanes.get(entry.lane).map(|l| &l.ring))
    }

    /// A try-now request the pump did not admit leaves the queue and is refused, retryable,
    /// with what it would have waited for: the deferral the pump recorded for it; when the pump
    /// did not look at it, what the waiter ahead of it in its lane waits for; and when it is
    /// its lane's head but the pump stopped first (its scope was already found blocked),
    /// tryAdmit's verdict now.
    pub(super) fn withdraw_try_now(&mut self, waiter_id: WaiterSlot, now: Millis) -> Acquired {
        let Some(waiter) = self.queue.get(waiter_id) else {
            return Acquired::Rejected(Rejection::refusal(Reason::Cancelled, self.retry_pressure));
        };
        let seen = match waiter.last_reason() {
            Some(reason) => Some((reason, waiter.last_wake)),
            None => self.wait_behind(waiter.lane_slot, waiter_id),
        };
        let (reason, wake) = match seen {
            Some(seen) => seen,
            None => {
                let mut transitions = Vec::new();
                let attempt = self.try_admit(waiter_id, now, &mut transitions);
                self.record_transitions(&transitions);
                if !transitions.is_empty() {
                    let (provider, _) = self.queue.get(waiter_id).map_or((0, 0), |w| w.lane);
                    self.regime_changed(provider);
                }
                if let Some(waiter) = self.queue.get_mut(waiter_id) {
                    waiter.add_transitions(transitions);
                }
                match attempt {
                    Attempt::Admit { probe } => {
                        if let Some(lease) = self.commit(waiter_id, probe, false, now) {
                            return Acquired::Admitted(lease);
                        }
                        (Reason::Concurrency, None)
                    }
                    Attempt::Defer { binding, wake, .. } => {
                        if let Some(waiter) = self.queue.get_mut(waiter_id) {
                            waiter.provider_quota |= binding.is_provider_quota();
                        }
                        (binding.reason(), wake)
                    }
                    Attempt::Refuse { reason, until } => (reason, Some(until)),
                    Attempt::Reject(reason) => {
                        return match self.reject_waiter(waiter_id, reason, now) {
                            Some(rejection) => Acquired::Rejected(rejection),
                            None => {
                                Acquired::Rejected(Rejection::refusal(reason, self.retry_pressure))
                            }
                        };
                    }
                }
            }
        };
        let mut rejection = self
            .reject_waiter(waiter_id, reason, now)
            .unwrap_or_else(|| Rejection::refusal(reason, self.retry_pressure));
        rejection.retryable = true;
        rejection.evidence.retry_after_ms = wake.map(|at| at.saturating_sub(now).max(1));
        Acquired::Rejected(rejection)
    }

    // ----- evidence ------------------------------------------------------------------------

    /// Evidence about the lane `(provider, principal)`, which holds `lane_live` waiters.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn evidence(
        &self,
        (provider, principal): LaneKey,
        lane_live: u64,
        decision: Decision,
        reason: Reason,
        queue_delay_ms: Millis,
        estimate: Option<&CheckedEstimate>,
        count_self_in_lane: bool,
    ) -> Evidence {
        let queued = if count_self_in_lane {
            lane_live.saturating_sub(1)
        } else {
            lane_live
        };
        Evidence {
            queue_delay_ms,
            active: self.principal_active(principal),
            queued,
            estimated_tokens: estimate.and_then(|e| e.tokens),
            estimated_cost_usd: estimate.and_then(|e| e.cost_usd),
            breaker_state: self.scopes.providers[provider].extra.breaker.state(),
            caller: self.caller_quota(principal),
            ..Evidence::new(decision, reason, self.retry_pressure)
        }
    }

    /// The `defer` evidence of a request that just joined its lane and is still waiting.
    pub(super) fn deferral_evidence(
        &self,
        waiter_id: WaiterSlot,
        lane: LaneKey,
        now: Millis,
    ) -> Evidence {
        let waiter = self.queue.get(waiter_id);
        let lane_live = match waiter {
            Some(waiter) => self.lane_live(waiter.lane_slot),
            None => self.lanes.by_key(lane).map_or(0, |l| l.live),
        };
        let mut evidence = self.evidence(
            lane,
            lane_live,
            Decision::Defer,
            waiter
                .and_then(Waiter::last_reason)
                .unwrap_or(Reason::Concurrency),
            0,
            waiter.map(Waiter::estimate).as_ref(),
            true,
        );
        if let Some(waiter) = waiter {
            evidence.retry_after_ms = waiter.last_wake.map(|at| at.saturating_sub(now).max(1));
            evidence.breaker_transitions = waiter.transitions();
            evidence.provider_quota = waiter.provider_quota;
        }
        evidence
    }
}
