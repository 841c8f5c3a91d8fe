//! Active history: call receipts whose `startedAt` is less than 60 minutes before `now`.
//!
//! A receipt with `startedAt` after `now` (a clock step backwards) stays active, which can only
//! make the cap stricter. Receipts at or before [`prune_cutoff`] may be deleted.

use crate::{CallReceipt, HOUR_MS};

/// Whether a call that started at `started_at` is in the active hour at `now`.
pub fn is_active(started_at: u64, now: u64) -> bool {
    now.saturating_sub(started_at) < HOUR_MS
}

/// The receipts in the active hour, in their given order.
pub fn active_history(receipts: &[CallReceipt], now: u64) -> Vec<CallReceipt> {
    receipts
        .iter()
        .filter(|receipt| is_active(receipt.started_at, now))
        .cloned()
        .collect()
}

/// Receipts with `startedAt <= cutoff` are outside the active hour at `now`; `None` while no
/// receipt can be outside it yet.
pub fn prune_cutoff(now: u64) -> Option<u64> {
    now.checked_sub(HOUR_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_half_open_at_sixty_minutes() {
        assert!(is_active(0, HOUR_MS - 1));
        assert!(!is_active(0, HOUR_MS));
        assert!(is_active(10, 5));
        assert_eq!(prune_cutoff(HOUR_MS), Some(0));
        assert_eq!(prune_cutoff(5), None);
    }
}
