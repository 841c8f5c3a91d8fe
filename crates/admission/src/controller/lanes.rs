//! The live view of a controller's provider lanes ([`LaneView`]): what an operator's console
//! shows per lane, read without changing any state.
//!
//! # Invariants
//!
//! - Views never name a principal or workspace (provider IDs are lane names).
//! - Reading a view changes nothing: bucket levels are computed on a copy refilled to `now`,
//!   and the breaker's probe instant is read, not advanced (the move to half-open happens only
//!   in admission).
//!
//! # Complexity
//!
//! O(providers + lanes with waiters): the oldest wait of a provider is the earliest
//! `enqueued_at` among the heads of its lanes' FIFOs (each lane is FIFO, so its head is its
//! oldest live waiter).

use serde::{Deserialize, Serialize};

use crate::bucket::TokenBucket;
use crate::queue::WaiterQueue;
use crate::reason::BreakerState;
use crate::time::Millis;

use super::Controller;

/// A token bucket's level, in whole units, and its capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BucketLevel {
    /// Whole units in the bucket now.
    pub available: u64,
    /// The most units it holds (the burst).
    pub capacity: u64,
}

/// One provider lane as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneView {
    /// The provider (a lane name, never a tenant).
    pub provider_id: String,
    /// Leases held on this provider now.
    pub active: u64,
    /// The lane's concurrency limit; `None` when the current profile no longer names it.
    pub concurrency: Option<u32>,
    /// Waiters queued for this provider now.
    pub queued: u64,
    /// How long the oldest live waiter of this lane has waited, at `now`.
    pub oldest_wait_ms: Option<Millis>,
    /// The request bucket (`requestsPerMinute`), when configured.
    pub requests: Option<BucketLevel>,
    /// The token bucket (`tokensPerSecond`), when configured.
    pub tokens: Option<BucketLevel>,
    /// The provider's breaker, as read (never advanced) at `now`.
    pub breaker_state: BreakerState,
    /// While the breaker is open: the instant it lets its next probe through.
    pub next_probe_at: Option<Millis>,
    /// While a Retry-After pause lasts: the instant it ends.
    pub paused_until: Option<Millis>,
}

fn level(bucket: Option<&TokenBucket>, now: Millis) -> Option<BucketLevel> {
    bucket.map(|bucket| {
        let mut copy = bucket.clone();
        copy.refill(now);
        BucketLevel {
            available: copy.level_units(),
            capacity: copy.capacity_units(),
        }
    })
}

impl Controller {
    /// Every provider lane the controller knows, in provider-interning order, read at `now`
    /// (never earlier than the controller's own clock).
    pub fn lane_views(&self, now: Millis) -> Vec<LaneView> {
        let now = now.max(self.now);
        let mut oldest: Vec<Option<Millis>> = vec![None; self.scopes.providers.len()];
        for lane in self.lanes.iter() {
            if lane.live == 0 {
                continue;
            }
            let (provider, _) = lane.key;
            let front = WaiterQueue::head(&lane.fifo)
                .and_then(|slot| self.queue.get(slot))
                .map(|w| w.enqueued_at);
            if let (Some(at), Some(slot)) = (front, oldest.get_mut(provider as usize)) {
                *slot = Some(slot.map_or(at, |known: Millis| known.min(at)));
            }
        }
        self.scopes
            .providers
            .iter()
            .zip(oldest)
            .map(|(entry, oldest)| {
                let limits = entry.limits.as_deref();
                let breaker = limits.and_then(|l| l.circuit_breaker.as_ref());
                LaneView {
                    provider_id: entry.extra.id.clone(),
                    active: u64::from(entry.scope().active),
                    concurrency: limits.map(|l| l.concurrency),
                    queued: u64::from(entry.scope().queued),
                    oldest_wait_ms: oldest.map(|at| now.saturating_sub(at)),
                    requests: level(entry.scope().requests.as_ref(), now),
                    tokens: level(entry.scope().tokens.as_ref(), now),
                    breaker_state: entry.extra.breaker.state(),
                    next_probe_at: entry.extra.breaker.open_until(breaker, now),
                    paused_until: (entry.extra.paused_until > now)
                        .then_some(entry.extra.paused_until),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{Acquired, AdmissionRequest};
    use crate::limits::{CircuitBreakerConfig, Limits};
    use crate::profile::Profile;
    use crate::Outcome;

    #[test]
    fn a_lane_view_reads_limits_buckets_oldest_wait_and_breaker() {
        let mut profile = Profile {
            workspace: Limits::with_concurrency(8),
            ..Profile::default()
        };
        profile.providers.insert(
            "p".into(),
            Limits {
                concurrency: 1,
                requests_per_minute: Some(60),
                circuit_breaker: Some(CircuitBreakerConfig {
                    failure_threshold: 1,
                    open_ms: Some(10_000),
                    half_open_max_calls: None,
                }),
                ..Limits::default()
            },
        );
        for principal in ["a", "b"] {
            profile
                .principals
                .insert(principal.into(), Limits::with_concurrency(1));
        }
        let mut controller = Controller::new(profile, 1_000).unwrap();
        let Acquired::Admitted(lease) =
            controller.acquire(AdmissionRequest::new("a", "p", "x"), 1_000)
        else {
            panic!("admitted");
        };
        let queued = controller.acquire(AdmissionRequest::new("b", "p", "y"), 1_200);
        assert!(matches!(queued, Acquired::Queued { .. }));

        let view = &controller.lane_views(1_500)[0];
        assert_eq!(view.provider_id, "p");
        assert_eq!(
            (view.active, view.concurrency, view.queued),
            (1, Some(1), 1)
        );
        assert_eq!(view.oldest_wait_ms, Some(300));
        let requests = view.requests.unwrap();
        assert_eq!(requests.capacity, 60);
        assert!(requests.available < 60);
        assert_eq!(view.tokens, None);
        assert_eq!(view.breaker_state, BreakerState::Closed);

        // A failure opens the breaker (threshold 1): the next probe is 10 s later.
        controller.release(lease.id, Outcome::Failure, 2_000);
        let view = &controller.lane_views(2_000)[0];
        assert_eq!(view.breaker_state, BreakerState::Open);
        assert_eq!(view.next_probe_at, Some(12_000));
        assert_eq!(view.paused_until, None);
    }
}
