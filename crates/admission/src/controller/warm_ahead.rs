//! Warming the memory of the next heads the pump will serve, a few handoffs ahead.
//!
//! # What it decides
//!
//! Nothing: it reads, and changes no state. With many lanes (100,000 each holding a waiter)
//! a handoff's cost is cold memory, not instructions: the ring entry names a lane, the lane
//! names its head waiter and its principal, the principal's entry names its counters and
//! buckets. Each of those is a cache miss, and each depends on the one before, so the CPU takes
//! them one after another. The ring says in advance which lanes come next, so each handoff
//! reads one step of that chain for the next three ring entries: the lane of the third, the
//! head waiter and principal entry of the second, the principal's counters and buckets and the
//! waiter's budget ID of the first. Those reads depend only on memory an earlier handoff
//! already read, so they are independent of one another and the CPU overlaps them: a handoff
//! waits for about one miss instead of a chain of five or six.
//!
//! # Invariants
//!
//! - Read only: the result is handed to [`std::hint::black_box`] so the reads are not optimised
//!   away, and nothing else observes it. Decisions never depend on it.
//! - O(1) per handoff: three ring entries, a constant number of reads each; a stale or missing
//!   entry is skipped.

use std::hint::black_box;

use crate::queue::WaiterQueue;

use super::Controller;

impl Controller {
    /// Reads ahead for the ring's next three entries (see the module docs).
    #[inline]
    pub(super) fn warm_ahead(&self) {
        let mut sum = 0u64;
        // Third entry: its lane.
        if let Some(lane) = self
            .ring
            .peek(2)
            .and_then(|entry| self.lanes.get(entry.lane))
        {
            sum = sum.wrapping_add(lane.live);
        }
        // Second entry: its head waiter and its principal's entry.
        if let Some(lane) = self
            .ring
            .peek(1)
            .and_then(|entry| self.lanes.get(entry.lane))
        {
            if let Some(waiter) = WaiterQueue::head(&lane.fifo).and_then(|h| self.queue.get(h)) {
                sum = sum.wrapping_add(waiter.enqueued_at);
            }
            let (_, principal) = lane.key;
            sum = sum.wrapping_add(u64::from(
                self.scopes.principals[principal].limits.is_some(),
            ));
        }
        // First entry: its principal's counters and buckets, its waiter's budget ID.
        if let Some(lane) = self
            .ring
            .peek(0)
            .and_then(|entry| self.lanes.get(entry.lane))
        {
            let (_, principal) = lane.key;
            let state = self.scopes.principals[principal].scope();
            sum = sum.wrapping_add(u64::from(state.active));
            if let Some(bucket) = &state.tokens {
                sum = sum.wrapping_add(bucket.level_units());
            }
            if let Some(waiter) = WaiterQueue::head(&lane.fifo).and_then(|h| self.queue.get(h)) {
                sum = sum.wrapping_add(u64::from(waiter.budget_id.bytes().next().unwrap_or(0)));
            }
        }
        black_box(sum);
    }
}
