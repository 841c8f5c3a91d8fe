//! The counters and buckets of one scope (a principal, the workspace, or a provider lane).
//!
//! Invariants: `active` counts live leases charged to this scope and `queued` counts live
//! waiters; both return to zero when everything is released or cancelled. Buckets exist exactly
//! when the current limits configure them; a rate change keeps the level (clamped to the new
//! capacity), so tightening a profile never refunds spent requests or tokens.

use crate::bucket::{TokenBucket, MINUTE_MS, SECOND_MS};
use crate::evidence::WaiterId;
use crate::limits::Limits;
use crate::time::Millis;

/// The waiter that holds a token bucket's large-token reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenHolder {
    pub waiter: WaiterId,
    pub tokens: u64,
}

/// Packed into two cache lines (128 bytes, aligned): the counters, both buckets and the
/// holder are what a handoff touches of a principal.
#[derive(Debug, Clone, Default, PartialEq)]
#[repr(align(64))]
pub struct ScopeState {
    pub active: u32,
    pub queued: u32,
    pub requests: Option<TokenBucket>,
    pub tokens: Option<TokenBucket>,
    pub token_holder: Option<TokenHolder>,
}

impl ScopeState {
    /// Creates or adjusts the buckets to match `limits`.
    pub fn sync_limits(&mut self, limits: &Limits, now: Millis) {
        sync_bucket(
            &mut self.requests,
            limits.requests_per_minute,
            limits.requests_burst,
            MINUTE_MS,
            now,
        );
        sync_bucket(
            &mut self.tokens,
            limits.tokens_per_second,
            limits.tokens_burst,
            SECOND_MS,
            now,
        );
        if self.tokens.is_none() {
            self.token_holder = None;
        }
    }

    pub fn refill(&mut self, now: Millis) {
        if let Some(bucket) = &mut self.requests {
            bucket.refill(now);
        }
        if let Some(bucket) = &mut self.tokens {
            bucket.refill(now);
        }
    }

    /// Lowers both buckets to what they would hold had they been empty at `since`
    /// ([`TokenBucket::drain_since`]); returns how many it lowered.
    pub fn drain_since(&mut self, since: Millis, now: Millis) -> usize {
        let mut lowered = 0;
        for bucket in [&mut self.requests, &mut self.tokens].into_iter().flatten() {
            lowered += usize::from(bucket.drain_since(since, now));
        }
        lowered
    }

    /// The state of a scope nobody has used under `limits`: zero counters, full buckets.
    pub fn fresh(limits: &Limits, now: Millis) -> Self {
        let mut state = ScopeState::default();
        state.sync_limits(limits, now);
        state
    }

    /// Whether no lease and no waiter counts in this scope.
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.active == 0 && self.queued == 0 && self.token_holder.is_none()
    }

    /// When this idle state becomes indistinguishable from [`ScopeState::fresh`]: `now` or
    /// earlier if its buckets are full at `now` (they are refilled to `now`, which changes no
    /// later decision), else the instant the slowest one is full again (`None`: never, a bucket
    /// that does not refill).
    pub fn pristine_at(&mut self, now: Millis) -> Option<Millis> {
        self.refill(now);
        let mut at = now;
        for bucket in [&self.requests, &self.tokens].into_iter().flatten() {
            if !bucket.is_full() {
                let wait = bucket.wait_for(bucket.capacity_units())?;
                at = at.max(now.saturating_add(wait));
            }
        }
        Some(at)
    }

    /// Drops the token reservation if `waiter` holds it.
    pub fn forget_holder(&mut self, waiter: WaiterId) {
        if self.token_holder.is_some_and(|h| h.waiter == waiter) {
            self.token_holder = None;
        }
    }
}

/// A bucket of `rate` per `period` whose capacity is `burst`, or `rate` without one.
fn sync_bucket(
    slot: &mut Option<TokenBucket>,
    rate: Option<u64>,
    burst: Option<u64>,
    period: u64,
    now: Millis,
) {
    match (slot.as_mut(), rate) {
        (_, None) => *slot = None,
        (None, Some(rate)) => {
            *slot = Some(TokenBucket::full_with_capacity(
                rate,
                burst.unwrap_or(rate),
                period,
                now,
            ))
        }
        (Some(bucket), Some(rate)) => {
            let capacity = burst.unwrap_or(rate);
            if bucket.rate() != rate || bucket.capacity_units() != capacity {
                bucket.set_rate(rate, capacity, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_state_fits_two_cache_lines() {
        assert_eq!(std::mem::size_of::<ScopeState>(), 128);
        assert_eq!(std::mem::align_of::<ScopeState>(), 64);
    }
}
