//! Lanes: one FIFO queue per (provider, principal) within a workspace controller.
//!
//! A lane's queue holds waiter IDs in arrival order. Removal from the middle (a cancellation or
//! an expiry) is lazy: the waiter leaves the controller's waiter table and `live` drops at once,
//! while its ID is skipped when it reaches the front. So every operation is O(1) amortized and
//! `live` is always the exact number of waiting requests. `active` counts the lane's leases: the
//! principal's active permits in the provider pool, used by share caps and reservations.
//!
//! A lane with live waiters is in the round-robin ring (`ring`, see [`crate::ring`]); a lane
//! that is idle (no waiter, no lease, not in the ring) may be forgotten by the controller.

use std::collections::VecDeque;

use crate::evidence::WaiterId;
use crate::ring::RingSlot;

/// (provider index, principal index).
pub(crate) type LaneKey = (u32, u32);

#[derive(Debug, Default)]
pub(crate) struct Lane {
    pub(crate) queue: VecDeque<WaiterId>,
    pub(crate) live: u64,
    pub(crate) active: u32,
    /// The lane's membership of the round-robin ring.
    pub(crate) ring: RingSlot,
}

impl Lane {
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.live == 0 && self.active == 0 && !self.ring.in_ring()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_is_idle_only_without_waiters_leases_and_ring_entry() {
        let mut lane = Lane::default();
        assert!(lane.is_idle());
        lane.active = 1;
        assert!(!lane.is_idle());
        lane.active = 0;
        lane.live = 1;
        assert!(!lane.is_idle());
    }
}
