//! The waiter queue of one controller ([`WaiterQueue`]): every queued request, and its expiry
//! instants in order.
//!
//! # What it decides
//!
//! Which waiters are due to expire at `now` (deadline or queue dwell bound, whichever is first),
//! in the order they fall due. Lane order (who is served first) is the lanes' business
//! ([`crate::lane`]); the queue only owns the waiters' state and their timers.
//!
//! # Invariants
//!
//! - The expiry set holds exactly one `(expires_at, id)` entry for every waiter with an
//!   expiry, and nothing else: inserting, removing and re-timing a waiter go through the queue,
//!   which edits both together ([`Waiter::expires_at`] is read-only outside this module).
//! - A waiter ID is never reused within a controller, so a removed waiter's ID left in a lane
//!   queue is recognisably stale.
//!
//! # Complexity
//!
//! Insert, remove and re-time are O(log n) (the ordered set) plus O(1) expected (the table);
//! lookups are O(1) expected; the next expiry is O(log n); expiring k waiters is O(k log n).

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use crate::breaker::BreakerTransition;
use crate::estimate::CheckedEstimate;
use crate::evidence::WaiterId;
use crate::lane::LaneKey;
use crate::reason::Reason;
use crate::time::Millis;

/// One queued request.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) lane: LaneKey,
    pub(crate) budget_id: String,
    pub(crate) estimate: CheckedEstimate,
    pub(crate) deadline: Option<Millis>,
    pub(crate) enqueued_at: Millis,
    /// Set by the queue only (it files the instant in its ordered set).
    expires_at: Option<Millis>,
    /// What the waiter last waited for when the pump looked at it; `None` before that.
    pub(crate) last_reason: Option<Reason>,
    /// When that blocking condition can change, if known.
    pub(crate) last_wake: Option<Millis>,
    /// Breaker transitions seen while this waiter was considered.
    pub(crate) transitions: Vec<BreakerTransition>,
}

impl Waiter {
    #[inline]
    pub(crate) fn new(
        lane: LaneKey,
        budget_id: String,
        estimate: CheckedEstimate,
        deadline: Option<Millis>,
        enqueued_at: Millis,
        expires_at: Option<Millis>,
    ) -> Self {
        Waiter {
            lane,
            budget_id,
            estimate,
            deadline,
            enqueued_at,
            expires_at,
            last_reason: None,
            last_wake: None,
            transitions: Vec::new(),
        }
    }

    /// The instant at which the waiter expires (deadline or dwell bound), if any.
    #[inline]
    pub(crate) fn expires_at(&self) -> Option<Millis> {
        self.expires_at
    }
}

/// The waiter table and its ordered expiries; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct WaiterQueue {
    waiters: FxHashMap<WaiterId, Waiter>,
    expiries: BTreeSet<(Millis, WaiterId)>,
}

impl WaiterQueue {
    /// Adds a waiter and files its expiry.
    #[inline]
    pub(crate) fn insert(&mut self, id: WaiterId, waiter: Waiter) {
        if let Some(at) = waiter.expires_at {
            self.expiries.insert((at, id));
        }
        if let Some(old) = self.waiters.insert(id, waiter) {
            // IDs are never reused; keep the set exact even if one were.
            if let Some(at) = old.expires_at {
                self.expiries.remove(&(at, id));
            }
        }
    }

    /// Removes a waiter and its expiry; returns it.
    #[inline]
    pub(crate) fn remove(&mut self, id: WaiterId) -> Option<Waiter> {
        let waiter = self.waiters.remove(&id)?;
        if let Some(at) = waiter.expires_at {
            self.expiries.remove(&(at, id));
        }
        Some(waiter)
    }

    /// Re-times a waiter (its dwell bound changed with the profile).
    pub(crate) fn set_expiry(&mut self, id: WaiterId, expires_at: Option<Millis>) {
        let Some(waiter) = self.waiters.get_mut(&id) else {
            return;
        };
        if waiter.expires_at == expires_at {
            return;
        }
        if let Some(at) = waiter.expires_at {
            self.expiries.remove(&(at, id));
        }
        if let Some(at) = expires_at {
            self.expiries.insert((at, id));
        }
        waiter.expires_at = expires_at;
    }

    #[inline]
    pub(crate) fn get(&self, id: WaiterId) -> Option<&Waiter> {
        self.waiters.get(&id)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: WaiterId) -> Option<&mut Waiter> {
        self.waiters.get_mut(&id)
    }

    #[inline]
    pub(crate) fn contains(&self, id: WaiterId) -> bool {
        self.waiters.contains_key(&id)
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Every waiter's ID, oldest first (IDs grow with arrival).
    pub(crate) fn ids_in_arrival_order(&self) -> Vec<WaiterId> {
        let mut ids: Vec<WaiterId> = self.waiters.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The earliest expiry instant.
    #[inline]
    pub(crate) fn next_expiry(&self) -> Option<Millis> {
        self.expiries.first().map(|&(at, _)| at)
    }

    /// The waiter that falls due first, if its instant is at or before `now`. The waiter stays
    /// queued: the caller resolves it (which removes it).
    #[inline]
    pub(crate) fn first_due(&self, now: Millis) -> Option<WaiterId> {
        self.expiries
            .first()
            .filter(|&&(at, _)| at <= now)
            .map(|&(_, id)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(expires_at: Option<Millis>) -> Waiter {
        Waiter::new(
            (0, 0),
            "b".into(),
            CheckedEstimate::default(),
            None,
            0,
            expires_at,
        )
    }

    /// The invariant: one expiry entry per waiter with an expiry, nothing else.
    fn assert_exact(queue: &WaiterQueue) {
        let filed: BTreeSet<(Millis, WaiterId)> = queue
            .waiters
            .iter()
            .filter_map(|(&id, w)| w.expires_at.map(|at| (at, id)))
            .collect();
        assert_eq!(queue.expiries, filed);
    }

    #[test]
    fn insert_remove_and_retime_keep_the_expiry_set_exact() {
        let mut queue = WaiterQueue::default();
        queue.insert(WaiterId(1), waiter(Some(50)));
        queue.insert(WaiterId(2), waiter(None));
        queue.insert(WaiterId(3), waiter(Some(20)));
        assert_exact(&queue);
        queue.set_expiry(WaiterId(1), Some(10));
        queue.set_expiry(WaiterId(2), Some(30));
        queue.set_expiry(WaiterId(3), None);
        queue.set_expiry(WaiterId(9), Some(1)); // unknown: nothing filed
        assert_exact(&queue);
        assert_eq!(queue.get(WaiterId(1)).unwrap().expires_at(), Some(10));
        assert!(queue.remove(WaiterId(1)).is_some());
        assert!(queue.remove(WaiterId(1)).is_none());
        assert_exact(&queue);
        assert!(queue.contains(WaiterId(2)) && !queue.contains(WaiterId(1)));
    }

    #[test]
    fn waiters_fall_due_in_instant_order_and_only_at_their_instant() {
        let mut queue = WaiterQueue::default();
        queue.insert(WaiterId(1), waiter(Some(30)));
        queue.insert(WaiterId(2), waiter(Some(10)));
        queue.insert(WaiterId(3), waiter(Some(10)));
        assert_eq!(queue.next_expiry(), Some(10));
        assert_eq!(queue.first_due(9), None);
        let mut order = Vec::new();
        while let Some(id) = queue.first_due(30) {
            queue.remove(id);
            order.push(id);
        }
        assert_eq!(order, vec![WaiterId(2), WaiterId(3), WaiterId(1)]);
        assert!(queue.is_empty() && queue.next_expiry().is_none());
    }

    #[test]
    fn arrival_order_is_the_id_order() {
        let mut queue = WaiterQueue::default();
        for id in [5, 1, 3] {
            queue.insert(WaiterId(id), waiter(None));
        }
        assert_eq!(
            queue.ids_in_arrival_order(),
            vec![WaiterId(1), WaiterId(3), WaiterId(5)]
        );
    }
}
