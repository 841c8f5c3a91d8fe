//! The live view of a controller's provider lanes ([`LaneView`]): what an operator's console
//! shows per lane, read without changing any state.
//!
//! # Invariants
//!
//! - Views never name a principal or workspace (provider IDs are lane names; a binding names a
//!   scope and a kind of limit, and counts lanes).
//! - Reading a view changes nothing: bucket levels are computed on a copy refilled to `now`,
//!   and the breaker's probe instant is read, not advanced (the move to half-open happens only
//!   in admission).
//!
//! # Complexity
//!
//! O(providers + lanes with waiters): the oldest wait of a provider is the earliest
//! `enqueued_at` among the heads of its lanes' FIFOs (each lane is FIFO, so its head is its
//! oldest live waiter), and its bindings count those heads by the limit that holds them
//! ([`Binding`]): the workspace's concurrency while it holds its ceiling, else the limit that
//! blocked the head's principal or provider (the pump skips the other heads of a blocked
//! scope), else what tryAdmit last found for the head; a head never tried is not counted.

use serde::{Deserialize, Serialize};

use crate::binding::Binding;
use crate::bucket::TokenBucket;
use crate::queue::WaiterQueue;
use crate::reason::BreakerState;
use crate::time::Millis;

use super::admit::Blocked;
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

/// How many of a provider's queued lanes (one per principal with waiters) a limit holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingCount {
    /// The limit.
    pub binding: Binding,
    /// Queued lanes whose head it held at the last try.
    pub lanes: u64,
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
    /// Which limits hold this provider's queued lanes, most lanes first (empty when nothing
    /// waits, or before the pump tried a head).
    pub bindings: Vec<BindingCount>,
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

/// The non-zero counts of `bound` (indexed like [`Binding::ALL`]), most lanes first.
fn binding_counts(bound: &[u64; Binding::ALL.len()]) -> Vec<BindingCount> {
    let mut counts: Vec<BindingCount> = Binding::ALL
        .iter()
        .zip(bound)
        .filter(|(_, &lanes)| lanes > 0)
        .map(|(&binding, &lanes)| BindingCount { binding, lanes })
        .collect();
    counts.sort_by_key(|c| std::cmp::Reverse(c.lanes));
    counts
}

impl Controller {
    /// Every provider lane the controller knows, in provider-interning order, read at `now`
    /// (never earlier than the controller's own clock).
    pub fn lane_views(&self, now: Millis) -> Vec<LaneView> {
        let now = now.max(self.now);
        let providers = self.scopes.providers.len();
        let mut oldest: Vec<Option<Millis>> = vec![None; providers];
        // A provider or principal found blocked holds all its lanes: the pump skips their
        // heads for the rest of the pass (`pump.rs`), so a skipped head's binding is its
        // scope's.
        let mut provider_bound: Vec<Option<Binding>> = vec![None; providers];
        let mut principal_bound: Vec<Option<Binding>> = vec![None; self.scopes.principals.len()];
        let heads = || {
            self.lanes
                .iter()
                .filter(|lane| lane.live > 0)
                .filter_map(|lane| {
                    let head =
                        WaiterQueue::head(&lane.fifo).and_then(|slot| self.queue.get(slot))?;
                    Some((lane.key, head))
                })
        };
        for ((provider, principal), head) in heads() {
            if let Some(slot) = oldest.get_mut(provider as usize) {
                let at = head.enqueued_at;
                *slot = Some(slot.map_or(at, |known: Millis| known.min(at)));
            }
            let Some(binding) = head.last_binding else {
                continue;
            };
            let scope = match Blocked::of(binding) {
                Blocked::Provider => provider_bound.get_mut(provider as usize),
                Blocked::Principal => principal_bound.get_mut(principal as usize),
                Blocked::Workspace | Blocked::Head => None,
            };
            if let Some(slot) = scope {
                slot.get_or_insert(binding);
            }
        }
        // The pump looks at no head while the workspace holds its ceiling: that binds every
        // queued lane, whatever a head last waited for.
        let workspace_full = self.scopes.workspace.active >= self.profile.workspace.concurrency;
        let mut bound = vec![[0u64; Binding::ALL.len()]; providers];
        for ((provider, principal), head) in heads() {
            let binding = if workspace_full {
                Some(Binding::WorkspaceConcurrency)
            } else {
                let (provider, principal) = (provider as usize, principal as usize);
                // tryAdmit checks a principal's limits before the provider's.
                principal_bound
                    .get(principal)
                    .copied()
                    .flatten()
                    .or_else(|| provider_bound.get(provider).copied().flatten())
                    .or(head.last_binding)
            };
            if let (Some(binding), Some(counts)) = (binding, bound.get_mut(provider as usize)) {
                counts[binding.index()] += 1;
            }
        }
        self.scopes
            .providers
            .iter()
            .zip(oldest)
            .zip(bound)
            .map(|((entry, oldest), bound)| {
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
                    bindings: binding_counts(&bound),
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
        // b's head waits for the provider lane's concurrency (1, held by a).
        assert_eq!(
            view.bindings,
            [BindingCount {
                binding: Binding::ProviderConcurrency,
                lanes: 1
            }]
        );

        // A failure opens the breaker (threshold 1): the next probe is 10 s later.
        controller.release(lease.id, Outcome::Failure, 2_000);
        let view = &controller.lane_views(2_000)[0];
        assert_eq!(view.breaker_state, BreakerState::Open);
        assert_eq!(view.next_probe_at, Some(12_000));
        assert_eq!(view.paused_until, None);
    }
}
