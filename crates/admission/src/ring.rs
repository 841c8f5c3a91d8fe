//! The round-robin ring of lanes with waiters ([`FairRing`]): the pump's fairness cursor.
//!
//! # What it decides
//!
//! Which lane's head the pump looks at next. The ring front is the cursor: the pump pops it,
//! considers that lane's head, and pushes the lane to the back after an admission or a deferral
//! (at most one new permit per lane per round) or back to the front after a rejection (the
//! lane's next waiter is considered at once). At the end of a pass the lanes considered since
//! the last admission are rotated back to the front, so the cursor stays just past the last
//! admitted lane.
//!
//! # Invariants
//!
//! - A lane is *in the ring* exactly when its [`RingSlot`] holds a ticket; the ring then holds
//!   exactly one *live* entry for it, the one with that ticket. [`FairRing::live_lanes`] counts
//!   those lanes.
//! - Leaving the ring ([`FairRing::leave`]) is O(1): the slot forgets its ticket and the entry
//!   turns stale where it sits. A stale entry is dropped when the pump reaches it
//!   ([`FairRing::is_live`] is the one liveness test), or by compaction once stale entries
//!   dominate ([`FairRing::compact`]); re-entering takes a fresh ticket, so an old entry can
//!   never come back to life.
//!
//! # Complexity
//!
//! Entering, leaving, popping and pushing are O(1); the end-of-pass rotation is O(lanes
//! considered in the pass); compaction is O(ring length) and runs only when more than half of
//! the ring (plus a constant) is stale, so it is O(1) amortized per lane that left.

use std::collections::VecDeque;

use crate::lane::{LaneSlot, LaneTable};

/// A lane's membership of the ring: the ticket of its live entry, if it has one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingSlot {
    ticket: Option<u64>,
}

impl RingSlot {
    /// Whether the lane has a live entry in the ring.
    #[inline]
    pub(crate) fn in_ring(&self) -> bool {
        self.ticket.is_some()
    }
}

/// One ring entry: a lane and the ticket it was given when it entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingEntry {
    /// The lane's slot in the controller's [`LaneTable`] (a slot may be reused by another lane
    /// after this one was forgotten; the ticket tells).
    pub(crate) lane: LaneSlot,
    ticket: u64,
}

/// The ring of lanes with waiters; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct FairRing {
    entries: VecDeque<RingEntry>,
    /// Lanes with a live entry.
    live: usize,
    next_ticket: u64,
}

impl FairRing {
    /// Puts a lane at the back of the ring unless it is already in it.
    #[inline]
    pub(crate) fn enter(&mut self, lane: LaneSlot, slot: &mut RingSlot) {
        if slot.in_ring() {
            return;
        }
        self.next_ticket += 1;
        slot.ticket = Some(self.next_ticket);
        self.live += 1;
        self.entries.push_back(RingEntry {
            lane,
            ticket: self.next_ticket,
        });
    }

    /// Takes a lane out of the ring; its entry turns stale where it sits.
    #[inline]
    pub(crate) fn leave(&mut self, slot: &mut RingSlot) {
        if slot.ticket.take().is_some() {
            self.live -= 1;
        }
    }

    /// Whether `entry` is its lane's live entry (the one liveness test of the ring).
    #[inline]
    pub(crate) fn is_live(entry: RingEntry, slot: Option<&RingSlot>) -> bool {
        slot.is_some_and(|slot| slot.ticket == Some(entry.ticket))
    }

    /// The cursor: the next entry to consider (possibly stale).
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<RingEntry> {
        self.entries.pop_front()
    }

    /// The entry `ahead` places after the front (0: the front), without taking it.
    #[inline]
    pub(crate) fn peek(&self, ahead: usize) -> Option<RingEntry> {
        self.entries.get(ahead).copied()
    }

    /// Served or deferred: the lane waits for its next turn.
    #[inline]
    pub(crate) fn push_back(&mut self, entry: RingEntry) {
        self.entries.push_back(entry);
    }

    /// Its head was rejected: the lane's next waiter is considered at once.
    #[inline]
    pub(crate) fn push_front(&mut self, entry: RingEntry) {
        self.entries.push_front(entry);
    }

    /// Entries in the ring, stale ones included (bounds a pump pass).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Lanes with a live entry.
    #[cfg(test)]
    pub(crate) fn live_lanes(&self) -> usize {
        self.live
    }

    /// Ends a pump pass: the `unserved` entries at the back (considered since the last
    /// admission) come first again, then stale entries are compacted away if they dominate.
    #[inline]
    pub(crate) fn end_pass(&mut self, unserved: usize, lanes: &LaneTable) {
        let unserved = unserved.min(self.entries.len());
        self.entries.rotate_right(unserved);
        if self.entries.len() > 2 * self.live + 64 {
            self.compact(lanes);
        }
    }

    /// Drops every stale entry, keeping the order of the live ones.
    pub(crate) fn compact(&mut self, lanes: &LaneTable) {
        self.entries
            .retain(|&entry| Self::is_live(entry, lanes.get(entry.lane).map(|l| &l.ring)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::lane::LaneKey;

    /// A lane table holding `keys`; in these tests a lane's slot is its position in `keys`.
    fn lanes(keys: &[LaneKey]) -> LaneTable {
        let mut table = LaneTable::default();
        for &key in keys {
            table.find_or_insert(key);
        }
        table
    }

    fn slot(lanes: &LaneTable, key: LaneKey) -> LaneSlot {
        lanes.find(key).unwrap()
    }

    fn live_order(ring: &FairRing, lanes: &LaneTable) -> Vec<LaneKey> {
        ring.entries
            .iter()
            .filter(|e| FairRing::is_live(**e, lanes.get(e.lane).map(|l| &l.ring)))
            .filter_map(|e| lanes.get(e.lane).map(|l| l.key))
            .collect()
    }

    #[test]
    fn a_lane_has_at_most_one_live_entry_and_entering_twice_adds_nothing() {
        let mut map = lanes(&[(0, 0)]);
        let mut ring = FairRing::default();
        let at = slot(&map, (0, 0));
        let lane = map.get_mut(at).unwrap();
        ring.enter(at, &mut lane.ring);
        ring.enter(at, &mut lane.ring);
        assert_eq!((ring.len(), ring.live_lanes()), (1, 1));
        assert!(lane.ring.in_ring());
    }

    #[test]
    fn leaving_turns_the_entry_stale_and_reentering_never_revives_it() {
        let mut map = lanes(&[(0, 0)]);
        let mut ring = FairRing::default();
        let at = slot(&map, (0, 0));
        let lane = map.get_mut(at).unwrap();
        ring.enter(at, &mut lane.ring);
        ring.leave(&mut lane.ring);
        ring.leave(&mut lane.ring); // a second leave changes nothing
        assert_eq!(ring.live_lanes(), 0);
        ring.enter(at, &mut lane.ring);
        let slot = lane.ring;
        let old = ring.pop_front().unwrap();
        let new = ring.pop_front().unwrap();
        assert!(
            !FairRing::is_live(old, Some(&slot)),
            "the old ticket stays stale"
        );
        assert!(FairRing::is_live(new, Some(&slot)));
        assert!(
            !FairRing::is_live(new, None),
            "a forgotten lane has no live entry"
        );
    }

    #[test]
    fn end_pass_puts_unserved_lanes_first_again() {
        let keys = [(0, 0), (0, 1), (0, 2), (0, 3)];
        let mut map = lanes(&keys);
        let mut ring = FairRing::default();
        for key in keys {
            let at = slot(&map, key);
            ring.enter(at, &mut map.get_mut(at).unwrap().ring);
        }
        // Serve (0,0), then consider (0,1) and (0,2) without admitting them.
        for _ in 0..3 {
            let entry = ring.pop_front().unwrap();
            ring.push_back(entry);
        }
        ring.end_pass(2, &map);
        assert_eq!(
            live_order(&ring, &map),
            vec![(0, 1), (0, 2), (0, 3), (0, 0)]
        );
    }

    #[test]
    fn compaction_drops_only_stale_entries_and_keeps_the_order() {
        let keys: Vec<LaneKey> = (0..200).map(|i| (0, i)).collect();
        let mut map = lanes(&keys);
        let mut ring = FairRing::default();
        for &key in &keys {
            let at = slot(&map, key);
            ring.enter(at, &mut map.get_mut(at).unwrap().ring);
        }
        for &key in keys.iter().filter(|k| k.1 % 3 != 0) {
            let at = slot(&map, key);
            ring.leave(&mut map.get_mut(at).unwrap().ring);
        }
        let expected: Vec<LaneKey> = keys.iter().copied().filter(|k| k.1 % 3 == 0).collect();
        ring.end_pass(0, &map);
        assert_eq!(
            ring.len(),
            expected.len(),
            "stale entries dominated: compacted"
        );
        assert_eq!(live_order(&ring, &map), expected);
        assert_eq!(ring.live_lanes(), expected.len());
    }
}
