//! Lanes: one FIFO queue per (provider, principal) within a workspace controller, kept in a slab
//! ([`LaneTable`]) and addressed by a dense integer slot on every hot path.
//!
//! A lane's queue is intrusive: the lane holds the slots of its first and last waiter
//! ([`LaneFifo`]) and every waiter the slots of its neighbours (see [`crate::queue`]), so a lane
//! owns no allocation of its own and removing a waiter from the middle (a cancellation, an
//! expiry) is O(1) and exact. `live` is the number of waiters in the FIFO; `active` counts the
//! lane's leases: the principal's active permits in the provider pool, used by share caps and
//! reservations.
//!
//! A lane with live waiters is in the round-robin ring (`ring`, see [`crate::ring`]); a lane
//! that is idle (no waiter, no lease, not in the ring) may be forgotten by the controller.
//!
//! # Invariants
//!
//! - A lane's slot is stable while the lane exists: waiters and leases name their lane by slot,
//!   and a lane holding either is never idle, so never removed. A slot freed by an idle lane may
//!   be reused by another lane; ring entries are recognised stale by their ticket, never by slot.
//! - The index maps exactly the keys of the lanes in the slab.
//!
//! # Complexity
//!
//! By slot: O(1), one slab entry. By key (only when a request first names its lane): O(1)
//! expected, one hash lookup.

use rustc_hash::FxHashMap;
use slab::Slab;

use crate::fair_order::FairSlot;
use crate::ring::RingSlot;

/// (provider index, principal index).
pub(crate) type LaneKey = (u32, u32);

/// The slot of a lane in its [`LaneTable`].
pub(crate) type LaneSlot = u32;

/// "No waiter" in a FIFO link.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// The ends of a lane's intrusive FIFO of waiter slots ([`NO_SLOT`] when empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneFifo {
    pub(crate) head: u32,
    pub(crate) tail: u32,
}

impl Default for LaneFifo {
    fn default() -> Self {
        LaneFifo {
            head: NO_SLOT,
            tail: NO_SLOT,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Lane {
    pub(crate) key: LaneKey,
    pub(crate) fifo: LaneFifo,
    pub(crate) live: u64,
    pub(crate) active: u32,
    /// The lane's membership of the round-robin ring.
    pub(crate) ring: RingSlot,
    /// The lane's place in its provider's fair order (used when the provider has one).
    pub(crate) fair: FairSlot,
    /// The pump pass in which the lane's head was last deferred on its own account (its
    /// estimate or share): the provider's order skips it for the rest of that pass.
    pub(crate) deferred_in_pass: u64,
}

impl Lane {
    fn new(key: LaneKey, fair: FairSlot) -> Self {
        Lane {
            key,
            fifo: LaneFifo::default(),
            live: 0,
            active: 0,
            ring: RingSlot::default(),
            fair,
            deferred_in_pass: 0,
        }
    }

    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.live == 0 && self.active == 0 && !self.ring.in_ring()
    }
}

/// Every lane of a controller, by slot, with the index from lane key to slot.
#[derive(Debug, Default)]
pub(crate) struct LaneTable {
    lanes: Slab<Lane>,
    index: FxHashMap<LaneKey, LaneSlot>,
}

impl LaneTable {
    /// The slot of the lane `key`, if it exists.
    #[inline]
    pub(crate) fn find(&self, key: LaneKey) -> Option<LaneSlot> {
        self.index.get(&key).copied()
    }

    /// The slot of the lane `key`, creating the lane if it does not exist.
    #[cfg(test)]
    pub(crate) fn find_or_insert(&mut self, key: LaneKey) -> LaneSlot {
        match self.find(key) {
            Some(slot) => slot,
            None => self.insert(key, FairSlot::default()),
        }
    }

    /// Creates the lane `key`, which does not exist, with its place in the fair order.
    #[inline]
    pub(crate) fn insert(&mut self, key: LaneKey, fair: FairSlot) -> LaneSlot {
        // Slots stay below u32::MAX: a controller never holds 2^32 lanes (one per principal
        // and provider the profile names).
        let slot = self.lanes.insert(Lane::new(key, fair)) as LaneSlot;
        self.index.insert(key, slot);
        slot
    }

    #[inline]
    pub(crate) fn get(&self, slot: LaneSlot) -> Option<&Lane> {
        self.lanes.get(slot as usize)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, slot: LaneSlot) -> Option<&mut Lane> {
        self.lanes.get_mut(slot as usize)
    }

    /// The lane `key`, if it exists.
    #[inline]
    pub(crate) fn by_key(&self, key: LaneKey) -> Option<&Lane> {
        self.find(key).and_then(|slot| self.get(slot))
    }

    /// Forgets the lane in `slot` if it is idle; returns it if it did.
    pub(crate) fn remove_if_idle(&mut self, slot: LaneSlot) -> Option<Lane> {
        let idle = self.get(slot).is_some_and(Lane::is_idle);
        if !idle {
            return None;
        }
        let lane = self.lanes.remove(slot as usize);
        self.index.remove(&lane.key);
        Some(lane)
    }

    /// The slots of the lanes with waiters.
    pub(crate) fn backlogged(&self) -> Vec<LaneSlot> {
        self.lanes
            .iter()
            .filter(|(_, lane)| lane.live > 0)
            .map(|(slot, _)| slot as LaneSlot)
            .collect()
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Lane> {
        self.lanes.iter_mut().map(|(_, lane)| lane)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Lane> {
        self.lanes.iter().map(|(_, lane)| lane)
    }

    /// Lanes kept (busy and idle).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lanes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_is_idle_only_without_waiters_leases_and_ring_entry() {
        let mut lane = Lane::new((0, 0), FairSlot::default());
        assert!(lane.is_idle());
        lane.active = 1;
        assert!(!lane.is_idle());
        lane.active = 0;
        lane.live = 1;
        assert!(!lane.is_idle());
    }

    #[test]
    fn slots_are_stable_and_only_idle_lanes_are_removed() {
        let mut table = LaneTable::default();
        let a = table.find_or_insert((0, 1));
        let b = table.find_or_insert((0, 2));
        assert_eq!(table.find_or_insert((0, 1)), a, "a key keeps its slot");
        table.get_mut(a).unwrap().active = 1;
        assert!(table.remove_if_idle(a).is_none(), "a busy lane stays");
        assert!(table.remove_if_idle(b).is_some());
        assert_eq!(table.find((0, 2)), None);
        assert_eq!(table.by_key((0, 1)).map(|l| l.key), Some((0, 1)));
        assert_eq!(table.len(), 1);
        let c = table.find_or_insert((0, 3));
        assert_eq!(table.get(c).map(|l| l.key), Some((0, 3)));
        assert_eq!(table.get(a).map(|l| l.key), Some((0, 1)));
    }
}
