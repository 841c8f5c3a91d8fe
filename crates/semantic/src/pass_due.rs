//! Pass due (`{pending, history, now, debounceMs, callsPerHour?}`) and the next wake-up time.
//!
//! Matured items are those pending for at least `debounceMs`. No matured item → not due. Rate cap
//! exhausted → due (one pass must run so that deferred records get published). Otherwise due when
//! any matured item is call-eligible.
//!
//! [`next_wake`] is the scheduler's `poll_timeout`: the earliest instant at which a pass could
//! change something, so a driver arms one timer instead of polling. Both are O(p·h).

use crate::eligibility::{call_eligible, eligible_at};
use crate::rate_cap::rate_cap;
use crate::{CallLimit, CallReceipt, PendingItem, Policy};

/// Whether `item` has been pending for at least `debounce_ms` at `now`.
pub fn matured(item: &PendingItem, now: u64, debounce_ms: u64) -> bool {
    now.saturating_sub(item.pending_since) >= debounce_ms && now >= item.pending_since
}

/// Whether a pass should run at `now`. `active_history` must be the active history at `now`.
pub fn pass_due(
    pending: &[PendingItem],
    active_history: &[CallReceipt],
    now: u64,
    debounce_ms: u64,
    limit: CallLimit,
    policy: &Policy,
) -> bool {
    let mut matured_items = pending
        .iter()
        .filter(|item| matured(item, now, debounce_ms))
        .peekable();
    if matured_items.peek().is_none() {
        return false;
    }
    if rate_cap(active_history, limit).available() == 0 {
        return true;
    }
    matured_items
        .any(|item| call_eligible(&item.generation_id, item.band, active_history, now, policy))
}

/// The earliest instant at or after which a pass could make progress, or `None` with nothing
/// pending. May be `<= now` when a pass is due now.
///
/// At the cap: the earliest of the cap's `eligibleAfter` and the maturing of any not yet matured
/// item (which then needs its deferred record). Otherwise: the earliest, over pending items, of
/// `max(matured at, call-eligible at)`.
pub fn next_wake(
    pending: &[PendingItem],
    active_history: &[CallReceipt],
    now: u64,
    debounce_ms: u64,
    limit: CallLimit,
    policy: &Policy,
) -> Option<u64> {
    let matures_at = |item: &PendingItem| item.pending_since.saturating_add(debounce_ms);
    if let Some(cap_opens) = rate_cap(active_history, limit).eligible_after() {
        if pending.is_empty() {
            return None;
        }
        let next_maturing = pending.iter().map(matures_at).filter(|at| *at > now).min();
        return Some(next_maturing.map_or(cap_opens, |at| at.min(cap_opens)));
    }
    pending
        .iter()
        .map(|item| {
            let eligible =
                eligible_at(&item.generation_id, item.band, active_history, policy).unwrap_or(0);
            matures_at(item).max(eligible)
        })
        .min()
}
