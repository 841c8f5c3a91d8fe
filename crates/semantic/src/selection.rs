//! Selection (`selectPending(pending, lastBand1GenerationId, activeHistory)`):
//!
//! 1. sort by band ascending, then `pendingSince` ascending, then `generationId` ascending;
//! 2. *uncovered* = items with no call in the active history; eligible = uncovered if non-empty,
//!    else all (step skipped when the policy has no coverage-first rule);
//! 3. if eligible has band-1 items, return the one after `lastBand1GenerationId` in that list,
//!    cyclically (the first if that ID is absent): stable round robin;
//! 4. else the first eligible item, or none.
//!
//! So an uncovered routine generation wins over an already-read priority generation; once every
//! pending generation has rolling-hour coverage, the priority policy resumes. Pure;
//! O(p log p + h) for p pending items and h receipts.

use std::collections::HashSet;

use crate::{Band, CallReceipt, PendingItem};

/// The pending item to read next, if any.
pub fn select_pending<'a>(
    pending: &'a [PendingItem],
    last_band1_generation_id: Option<&str>,
    active_history: &[CallReceipt],
    coverage_first: bool,
) -> Option<&'a PendingItem> {
    let mut sorted: Vec<&PendingItem> = pending.iter().collect();
    sorted.sort_by(|a, b| {
        (a.band, a.pending_since, &a.generation_id).cmp(&(
            b.band,
            b.pending_since,
            &b.generation_id,
        ))
    });

    let eligible: Vec<&PendingItem> = if coverage_first {
        let covered: HashSet<&str> = active_history
            .iter()
            .map(|receipt| receipt.generation_id.as_str())
            .collect();
        let uncovered: Vec<&PendingItem> = sorted
            .iter()
            .copied()
            .filter(|item| !covered.contains(item.generation_id.as_str()))
            .collect();
        if uncovered.is_empty() {
            sorted
        } else {
            uncovered
        }
    } else {
        sorted
    };

    let band1: Vec<&PendingItem> = eligible
        .iter()
        .copied()
        .filter(|item| item.band == Band::Priority)
        .collect();
    if !band1.is_empty() {
        let after = last_band1_generation_id
            .and_then(|last| band1.iter().position(|item| item.generation_id == last))
            .map_or(0, |index| (index + 1) % band1.len());
        return band1.get(after).copied();
    }
    eligible.first().copied()
}
