//! Call eligibility: a generation never called is eligible; otherwise `now − newest call ≥` its
//! required interval — the band's minimum interval (2 min band 1, 5 min band 2), raised to the
//! 5-minute retry cool-down when the newest call ended invalid or unavailable.
//!
//! The band used is the band of the generation's *current* pending evidence. A receipt without an
//! outcome (in flight or lost) counts as a call with the band interval. O(history).

use crate::{Band, CallOutcome, CallReceipt, Policy};

/// The newest call of `generation_id` in `history`.
pub fn newest_call<'a>(generation_id: &str, history: &'a [CallReceipt]) -> Option<&'a CallReceipt> {
    history
        .iter()
        .filter(|receipt| receipt.generation_id == generation_id)
        .max_by_key(|receipt| (receipt.started_at, receipt.id))
}

/// The interval that must pass after `newest` before a generation in `band` is read again.
pub fn required_interval(band: Band, newest: &CallReceipt, policy: &Policy) -> u64 {
    let interval = policy.interval_ms(band);
    match newest.outcome {
        Some(CallOutcome::Invalid | CallOutcome::Unavailable) => {
            interval.max(policy.retry_cooldown_ms)
        }
        Some(CallOutcome::Accepted) | None => interval,
    }
}

/// The earliest instant at which the generation may be read; `None` if it was never called
/// (eligible at any time).
pub fn eligible_at(
    generation_id: &str,
    band: Band,
    history: &[CallReceipt],
    policy: &Policy,
) -> Option<u64> {
    newest_call(generation_id, history).map(|newest| {
        newest
            .started_at
            .saturating_add(required_interval(band, newest, policy))
    })
}

/// Whether the generation may be read at `now`.
pub fn call_eligible(
    generation_id: &str,
    band: Band,
    history: &[CallReceipt],
    now: u64,
    policy: &Policy,
) -> bool {
    eligible_at(generation_id, band, history, policy).is_none_or(|at| now >= at)
}
