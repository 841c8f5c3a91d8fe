//! Lanes: one FIFO queue per (provider, principal) within a workspace controller.
//!
//! A lane's queue holds waiter IDs in arrival order. Removal from the middle (a cancellation or
//! an expiry) is lazy: the waiter leaves the controller's waiter table and `live` drops at once,
//! while its ID is skipped when it reaches the front. So every operation is O(1) amortized and
//! `live` is always the exact number of waiting requests. `active` counts the lane's leases: the
//! principal's active permits in the provider pool, used by share caps and reservations.
//!
//! The round-robin ring holds each lane with live waiters once (`in_ring`, with the entry's
//! `ring_ticket`). When a lane empties, its entry turns stale (the lane forgets it) and is
//! dropped when the pump reaches it, so leaving the ring is O(1) too. The pump serves the ring
//! front and moves a lane to the back after considering its head, so the ring front is the
//! round-robin cursor.

use std::collections::VecDeque;

use crate::evidence::WaiterId;

/// (provider index, principal index).
pub type LaneKey = (u32, u32);

#[derive(Debug, Default)]
pub struct Lane {
    pub queue: VecDeque<WaiterId>,
    pub live: u64,
    pub active: u32,
    /// Whether the lane has a live entry in the ring.
    pub in_ring: bool,
    /// The ticket of that entry; older entries for this lane are stale.
    pub ring_ticket: u64,
}

impl Lane {
    pub fn is_idle(&self) -> bool {
        self.live == 0 && self.active == 0 && !self.in_ring
    }
}
