//! The waiter queue of one controller ([`WaiterQueue`]): every queued request in a slab, the
//! lanes' FIFOs threaded through it, and the expiry instants in order.
//!
//! # What it decides
//!
//! Which waiters are due to expire at `now` (deadline or queue dwell bound, whichever is first),
//! in the order they fall due, and which waiter heads each lane (arrival order within a lane).
//! Which lane is served next is the ring's business ([`crate::ring`]).
//!
//! # Layout
//!
//! Waiters live in a slab and are addressed by their slot ([`WaiterSlot`]) on every internal
//! path: a lane names its first and last waiter by slot ([`LaneFifo`]) and every waiter its
//! neighbours, so the pump reaches a lane's head without hashing. The public [`WaiterId`] (never
//! reused within a controller) maps to its slot in one small ordered index, used only where a
//! host names a waiter (a cancellation) and kept exact on insert and remove.
//!
//! # Invariants
//!
//! - The expiry set holds exactly one `(expires_at, id, slot)` entry for every waiter with an
//!   expiry, and nothing else; the index holds exactly one `id → slot` entry per waiter:
//!   inserting, removing and re-timing a waiter go through the queue, which edits all of them
//!   together ([`Waiter::expires_at`] is read-only outside this module).
//! - A lane's FIFO links exactly the waiters of that lane, in arrival order; `live` of the lane
//!   is their number (kept by the controller, checked by the tests).
//!
//! # Complexity
//!
//! Insert and remove: O(1) for the slab and the FIFO, O(log n) for the ID index and for the
//! ordered expiry set when the waiter has an expiry (both touch the warm ends of their trees
//! when waiters leave roughly in arrival order). Lookup by slot O(1), by ID O(log n); the next
//! expiry O(log n); expiring k waiters O(k log n).

use std::collections::{BTreeMap, BTreeSet};

use slab::Slab;

use crate::binding::Binding;
use crate::breaker::BreakerTransition;
use crate::estimate::{CheckedEstimate, PackedEstimate};
use crate::evidence::WaiterId;
use crate::lane::{LaneFifo, LaneKey, LaneSlot, NO_SLOT};
use crate::reason::Reason;
use crate::time::Millis;

/// The slot of a waiter in the [`WaiterQueue`]'s slab (valid while the waiter is queued; a
/// removed waiter's slot may be reused by a later one).
pub(crate) type WaiterSlot = u32;

/// One queued request.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) id: WaiterId,
    pub(crate) lane: LaneKey,
    pub(crate) lane_slot: LaneSlot,
    /// Neighbours in the lane's FIFO ([`NO_SLOT`] at the ends); set by the queue only.
    prev: WaiterSlot,
    next: WaiterSlot,
    pub(crate) budget_id: Box<str>,
    /// The checked estimate, packed ([`Waiter::estimate`] unpacks it).
    estimate: PackedEstimate,
    pub(crate) deadline: Option<Millis>,
    pub(crate) enqueued_at: Millis,
    /// Set by the queue only (it files the instant in its ordered set).
    expires_at: Option<Millis>,
    /// The limit the waiter last waited for when the pump looked at it; `None` before that.
    pub(crate) last_binding: Option<Binding>,
    /// When that blocking condition can change, if known.
    pub(crate) last_wake: Option<Millis>,
    /// Whether the provider's announced quota held it back at some point (evidence says so).
    pub(crate) provider_quota: bool,
    /// Breaker transitions seen while this waiter was considered. Rare, so boxed when present:
    /// a thin pointer (8 bytes) instead of an empty `Vec` (24) in every queued waiter.
    #[allow(clippy::box_collection)]
    transitions: Option<Box<Vec<BreakerTransition>>>,
}

impl Waiter {
    #[inline]
    pub(crate) fn new(
        id: WaiterId,
        (lane, lane_slot): (LaneKey, LaneSlot),
        budget_id: String,
        estimate: CheckedEstimate,
        deadline: Option<Millis>,
        enqueued_at: Millis,
        expires_at: Option<Millis>,
    ) -> Self {
        Waiter {
            id,
            lane,
            lane_slot,
            prev: NO_SLOT,
            next: NO_SLOT,
            budget_id: budget_id.into_boxed_str(),
            estimate: PackedEstimate::pack(&estimate),
            deadline,
            enqueued_at,
            expires_at,
            last_binding: None,
            last_wake: None,
            provider_quota: false,
            transitions: None,
        }
    }

    /// The reason the waiter last waited for (its binding's), `None` before the pump looked.
    #[inline]
    pub(crate) fn last_reason(&self) -> Option<Reason> {
        self.last_binding.map(Binding::reason)
    }

    /// The checked estimate the waiter was queued with.
    #[inline]
    pub(crate) fn estimate(&self) -> CheckedEstimate {
        self.estimate.unpack()
    }

    /// Records breaker transitions seen while this waiter was considered.
    pub(crate) fn add_transitions(&mut self, transitions: Vec<BreakerTransition>) {
        if transitions.is_empty() {
            return;
        }
        self.transitions
            .get_or_insert_with(Box::default)
            .extend(transitions);
    }

    /// The transitions recorded so far.
    pub(crate) fn transitions(&self) -> Vec<BreakerTransition> {
        self.transitions.as_deref().cloned().unwrap_or_default()
    }

    /// Takes the transitions recorded so far.
    pub(crate) fn take_transitions(&mut self) -> Vec<BreakerTransition> {
        self.transitions.take().map(|t| *t).unwrap_or_default()
    }

    /// The instant at which the waiter expires (deadline or dwell bound), if any.
    #[inline]
    pub(crate) fn expires_at(&self) -> Option<Millis> {
        self.expires_at
    }
}

/// The waiter slab, its ID index and its ordered expiries; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct WaiterQueue {
    waiters: Slab<Waiter>,
    /// `WaiterId` → slot. Ordered, not hashed: IDs grow with arrival and waiters mostly leave
    /// near the front, so inserts and removals stay at the two warm ends of the tree (a hash
    /// table, churned by one insert and one removal per handoff, fills with tombstones and
    /// rehashes the whole table every so often: cold memory on the hot path).
    slots: BTreeMap<WaiterId, WaiterSlot>,
    expiries: BTreeSet<(Millis, WaiterId, WaiterSlot)>,
}

impl WaiterQueue {
    /// Adds a waiter at the back of its lane's FIFO and files its expiry; returns its slot.
    #[inline]
    pub(crate) fn insert(&mut self, mut waiter: Waiter, fifo: &mut LaneFifo) -> WaiterSlot {
        // IDs are never reused within a controller (one counter), so `id` is not indexed yet.
        let id = waiter.id;
        waiter.prev = fifo.tail;
        waiter.next = NO_SLOT;
        let expires_at = waiter.expires_at;
        // Slots stay below u32::MAX: a controller never holds 2^32 waiters at once.
        let slot = self.waiters.insert(waiter) as WaiterSlot;
        match self.waiters.get_mut(fifo.tail as usize) {
            Some(tail) if fifo.tail != NO_SLOT => tail.next = slot,
            _ => fifo.head = slot,
        }
        fifo.tail = slot;
        self.slots.insert(id, slot);
        if let Some(at) = expires_at {
            self.expiries.insert((at, id, slot));
        }
        slot
    }

    /// Removes a waiter from the slab, its lane's FIFO (`fifo`, the FIFO of the waiter's lane),
    /// the index and the expiry set; returns it.
    #[inline]
    pub(crate) fn remove(&mut self, slot: WaiterSlot, fifo: &mut LaneFifo) -> Option<Waiter> {
        let waiter = self.waiters.try_remove(slot as usize)?;
        match self.waiters.get_mut(waiter.prev as usize) {
            Some(prev) if waiter.prev != NO_SLOT => prev.next = waiter.next,
            _ => fifo.head = waiter.next,
        }
        match self.waiters.get_mut(waiter.next as usize) {
            Some(next) if waiter.next != NO_SLOT => next.prev = waiter.prev,
            _ => fifo.tail = waiter.prev,
        }
        self.slots.remove(&waiter.id);
        if let Some(at) = waiter.expires_at {
            self.expiries.remove(&(at, waiter.id, slot));
        }
        Some(waiter)
    }

    /// Re-times a waiter (its dwell bound changed with the profile).
    pub(crate) fn set_expiry(&mut self, slot: WaiterSlot, expires_at: Option<Millis>) {
        let Some(waiter) = self.waiters.get_mut(slot as usize) else {
            return;
        };
        if waiter.expires_at == expires_at {
            return;
        }
        if let Some(at) = waiter.expires_at {
            self.expiries.remove(&(at, waiter.id, slot));
        }
        if let Some(at) = expires_at {
            self.expiries.insert((at, waiter.id, slot));
        }
        waiter.expires_at = expires_at;
    }

    /// The slot of a queued waiter.
    #[inline]
    pub(crate) fn find(&self, id: WaiterId) -> Option<WaiterSlot> {
        self.slots.get(&id).copied()
    }

    #[inline]
    pub(crate) fn get(&self, slot: WaiterSlot) -> Option<&Waiter> {
        self.waiters.get(slot as usize)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, slot: WaiterSlot) -> Option<&mut Waiter> {
        self.waiters.get_mut(slot as usize)
    }

    /// The waiters ahead of `slot` in its lane's FIFO, nearest first.
    pub(crate) fn predecessors(&self, slot: WaiterSlot) -> impl Iterator<Item = &Waiter> {
        let mut at = self.waiters.get(slot as usize).map_or(NO_SLOT, |w| w.prev);
        std::iter::from_fn(move || {
            if at == NO_SLOT {
                return None;
            }
            let waiter = self.waiters.get(at as usize)?;
            at = waiter.prev;
            Some(waiter)
        })
    }

    /// The first waiter of a lane's FIFO.
    #[inline]
    pub(crate) fn head(fifo: &LaneFifo) -> Option<WaiterSlot> {
        (fifo.head != NO_SLOT).then_some(fifo.head)
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Waiters queued.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.waiters.len()
    }

    /// Every waiter's slot, oldest first (IDs grow with arrival).
    pub(crate) fn slots_in_arrival_order(&self) -> Vec<WaiterSlot> {
        self.slots.values().copied().collect()
    }

    /// The earliest expiry instant.
    #[inline]
    pub(crate) fn next_expiry(&self) -> Option<Millis> {
        self.expiries.first().map(|&(at, _, _)| at)
    }

    /// The waiter that falls due first, if its instant is at or before `now`. The waiter stays
    /// queued: the caller resolves it (which removes it).
    #[inline]
    pub(crate) fn first_due(&self, now: Millis) -> Option<WaiterSlot> {
        self.expiries
            .first()
            .filter(|&&(at, _, _)| at <= now)
            .map(|&(_, _, slot)| slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(id: u64, expires_at: Option<Millis>) -> Waiter {
        Waiter::new(
            WaiterId(id),
            ((0, 0), 0),
            "b".into(),
            CheckedEstimate::default(),
            None,
            0,
            expires_at,
        )
    }

    /// The invariants: one expiry entry per waiter with an expiry, one index entry per waiter.
    fn assert_exact(queue: &WaiterQueue) {
        let filed: BTreeSet<(Millis, WaiterId, WaiterSlot)> = queue
            .waiters
            .iter()
            .filter_map(|(slot, w)| w.expires_at.map(|at| (at, w.id, slot as WaiterSlot)))
            .collect();
        assert_eq!(queue.expiries, filed);
        assert_eq!(queue.slots.len(), queue.waiters.len());
        for (slot, w) in &queue.waiters {
            assert_eq!(queue.find(w.id), Some(slot as WaiterSlot));
        }
    }

    /// The IDs of a FIFO, front to back, walked forwards and checked backwards.
    fn fifo_ids(queue: &WaiterQueue, fifo: &LaneFifo) -> Vec<u64> {
        let mut ids = Vec::new();
        let mut at = fifo.head;
        let mut prev = NO_SLOT;
        while at != NO_SLOT {
            let w = queue.get(at).unwrap();
            assert_eq!(w.prev, prev, "back link");
            ids.push(w.id.0);
            prev = at;
            at = w.next;
        }
        assert_eq!(fifo.tail, prev);
        ids
    }

    #[test]
    fn insert_remove_and_retime_keep_the_expiry_set_and_index_exact() {
        let mut queue = WaiterQueue::default();
        let mut fifo = LaneFifo::default();
        let one = queue.insert(waiter(1, Some(50)), &mut fifo);
        let two = queue.insert(waiter(2, None), &mut fifo);
        let three = queue.insert(waiter(3, Some(20)), &mut fifo);
        assert_exact(&queue);
        queue.set_expiry(one, Some(10));
        queue.set_expiry(two, Some(30));
        queue.set_expiry(three, None);
        queue.set_expiry(99, Some(1)); // unknown: nothing filed
        assert_exact(&queue);
        assert_eq!(queue.get(one).unwrap().expires_at(), Some(10));
        assert!(queue.remove(one, &mut fifo).is_some());
        assert!(queue.remove(one, &mut fifo).is_none());
        assert_exact(&queue);
        assert_eq!(queue.find(WaiterId(2)), Some(two));
        assert_eq!(queue.find(WaiterId(1)), None);
    }

    #[test]
    fn a_lane_fifo_keeps_arrival_order_through_removals_anywhere() {
        let mut queue = WaiterQueue::default();
        let (mut a, mut b) = (LaneFifo::default(), LaneFifo::default());
        let slots: Vec<WaiterSlot> = (1..=5)
            .map(|id| queue.insert(waiter(id, None), &mut a))
            .collect();
        let other = queue.insert(waiter(9, None), &mut b);
        assert_eq!(fifo_ids(&queue, &a), [1, 2, 3, 4, 5]);
        queue.remove(slots[2], &mut a); // middle
        queue.remove(slots[0], &mut a); // head
        queue.remove(slots[4], &mut a); // tail
        assert_eq!(fifo_ids(&queue, &a), [2, 4]);
        assert_eq!(WaiterQueue::head(&a), Some(slots[1]));
        // A freed slot is reused by a later waiter, which joins at the back.
        queue.insert(waiter(6, None), &mut a);
        assert_eq!(fifo_ids(&queue, &a), [2, 4, 6]);
        assert_eq!(fifo_ids(&queue, &b), [9]);
        queue.remove(other, &mut b);
        assert_eq!(WaiterQueue::head(&b), None);
        assert_eq!(b, LaneFifo::default());
        assert_exact(&queue);
    }

    #[test]
    fn waiters_fall_due_in_instant_order_and_only_at_their_instant() {
        let mut queue = WaiterQueue::default();
        let mut fifo = LaneFifo::default();
        queue.insert(waiter(1, Some(30)), &mut fifo);
        queue.insert(waiter(2, Some(10)), &mut fifo);
        queue.insert(waiter(3, Some(10)), &mut fifo);
        assert_eq!(queue.next_expiry(), Some(10));
        assert_eq!(queue.first_due(9), None);
        let mut order = Vec::new();
        while let Some(slot) = queue.first_due(30) {
            let w = queue.remove(slot, &mut fifo).unwrap();
            order.push(w.id);
        }
        assert_eq!(order, vec![WaiterId(2), WaiterId(3), WaiterId(1)]);
        assert!(queue.is_empty() && queue.next_expiry().is_none());
        assert_eq!(fifo, LaneFifo::default());
    }

    #[test]
    fn arrival_order_is_the_id_order() {
        let mut queue = WaiterQueue::default();
        let mut fifo = LaneFifo::default();
        let mut slots = Vec::new();
        for id in [5, 1, 3] {
            slots.push((id, queue.insert(waiter(id, None), &mut fifo)));
        }
        slots.sort_unstable();
        let expected: Vec<WaiterSlot> = slots.into_iter().map(|(_, slot)| slot).collect();
        assert_eq!(queue.slots_in_arrival_order(), expected);
        assert_eq!(queue.len(), 3);
    }
}
