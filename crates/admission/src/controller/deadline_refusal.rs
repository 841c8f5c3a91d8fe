//! Deadline-aware refusal: a request that joined its lane's queue and surely cannot be served
//! before its deadline is refused at once (`deadline-unreachable`, retryable, `Retry-After` =
//! the predicted wait) instead of waiting to expire.
//!
//! # What it decides
//!
//! The predicted wait of a new waiter is the larger of two terms, each a *lower* bound of the
//! real wait so that a request that would have been served is not refused:
//!
//! - **Floors**, exact: a Retry-After pause or open breaker still to run, the reset of a
//!   provider's announced quota window that cannot hold this request and those surely ahead
//!   (`provider_quota.rs`), and the time the
//!   request buckets of the lane's three scopes need to deliver one request for every waiter
//!   surely ahead plus this one.
//! - **Service**, statistical: `ahead × interval`, where `interval` is the 10th percentile of
//!   the provider's last service intervals ([`crate::service_rate`]; at least 32 since the last
//!   regime change, else no statistical term), the first interval counted only for what is
//!   left of it, plus a pause still to run.
//!
//! `ahead` counts this request and the waiters before it in its own lane (FIFO: they are
//! served first) that cannot expire before its deadline. Waiters of other lanes and bands are
//! not counted: a lower bound. The request is refused when a floor exceeds the time left, or
//! when the service term exceeds 1.25 × the time left.
//!
//! # Invariants
//!
//! - Only a request whose deadline is what ends its wait is considered (a shorter dwell bound
//!   keeps the reference's `queue-timeout`), never a try-now request, and only when the
//!   controller's deadline refusals are on.
//! - Without history (or after a regime change) only the exact floors can refuse.
//!
//! # Complexity
//!
//! A screen in O(1) from the lane's count; the walk of at most 256 predecessors only when the
//! screen says the request may be unreachable.

use std::num::NonZeroU64;

use crate::evidence::Rejection;
use crate::lane::LaneKey;
use crate::queue::WaiterSlot;
use crate::reason::Reason;
use crate::time::Millis;

use super::Controller;

/// Predecessors walked at most when the screen says "maybe unreachable".
const WALK_LIMIT: usize = 256;

impl Controller {
    /// Refuses the just-queued waiter in `slot` if its predicted wait surely exceeds the time
    /// left before `deadline`; returns the refusal.
    pub(super) fn refuse_if_unreachable(
        &mut self,
        slot: WaiterSlot,
        deadline: Option<Millis>,
        now: Millis,
    ) -> Option<Rejection> {
        if !self.deadline_refusals {
            return None;
        }
        let predicted = self.unreachable_wait(slot, deadline?, now)?;
        let mut rejection = self.reject_waiter(slot, Reason::DeadlineUnreachable, now)?;
        rejection.retryable = true;
        let predicted = NonZeroU64::new(predicted).unwrap_or(NonZeroU64::MIN);
        rejection.evidence.retry_after_ms = Some(predicted.get());
        rejection.evidence.predicted_wait_ms = Some(predicted);
        Some(rejection)
    }

    /// The predicted wait of the waiter in `slot` when it surely exceeds the time left before
    /// `deadline`; `None` when it may be served in time.
    fn unreachable_wait(&self, slot: WaiterSlot, deadline: Millis, now: Millis) -> Option<Millis> {
        let waiter = self.queue.get(slot)?;
        let left = deadline.saturating_sub(now);
        // Screen, O(1): with every waiter of the lane counted, can it refuse at all?
        let everyone = self.lanes.get(waiter.lane_slot).map_or(1, |lane| lane.live);
        let tokens = waiter.estimate().tokens.unwrap_or(0);
        let (floor, service) = self.wait_bounds(waiter.lane, (everyone, tokens), now);
        if !refuses(floor, service, left) {
            return None;
        }
        // Walk: only the predecessors that cannot expire before this deadline.
        let ahead = 1 + self
            .queue
            .predecessors(slot)
            .take(WALK_LIMIT)
            .filter(|w| w.expires_at().is_none_or(|at| at >= deadline))
            .count() as u64;
        let (floor, service) = self.wait_bounds(waiter.lane, (ahead, tokens), now);
        refuses(floor, service, left).then(|| floor.max(service.unwrap_or(0)))
    }

    /// The exact floor and the statistical service term of a wait for `grants` grants on the
    /// lane `(provider, principal)`, the last of them for `tokens`.
    fn wait_bounds(
        &self,
        lane: LaneKey,
        (grants, tokens): (u64, u64),
        now: Millis,
    ) -> (Millis, Option<Millis>) {
        let (provider, principal) = lane;
        let entry = &self.scopes.providers[provider];
        let extra = &entry.extra;
        let config = entry
            .limits
            .as_ref()
            .and_then(|l| l.circuit_breaker.as_ref());
        let blocked_until = extra
            .breaker
            .open_until(config, now)
            .unwrap_or(0)
            .max(extra.paused_until)
            .max(self.quota_floor(provider, grants, tokens, now).unwrap_or(0));
        let blocked = blocked_until.saturating_sub(now);
        let buckets = [
            self.scopes.principals[principal].scope(),
            &self.scopes.workspace,
            entry.scope(),
        ]
        .into_iter()
        .filter_map(|scope| scope.requests.as_ref())
        .filter_map(|bucket| bucket.time_to_deliver(grants, now))
        .max()
        .unwrap_or(0);
        let service = extra.rate.low_interval().map(|interval| {
            let since_last = extra
                .rate
                .last_grant()
                .map_or(0, |at| now.saturating_sub(at));
            let first = interval.saturating_sub(since_last);
            blocked
                .saturating_add(grants.saturating_sub(1).saturating_mul(interval))
                .saturating_add(first)
        });
        (blocked.max(buckets), service)
    }
}

/// Whether these bounds refuse with `left` ms to the deadline.
fn refuses(floor: Millis, service: Option<Millis>, left: Millis) -> bool {
    floor > left || service.is_some_and(|wait| u128::from(wait) * 4 > u128::from(left) * 5)
}
