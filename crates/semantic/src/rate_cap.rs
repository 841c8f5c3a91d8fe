//! The rate cap: with `n` active calls and limit `L`, `n < L` → `{available: L − n}`; otherwise
//! `{available: 0, eligibleAfter}`.
//!
//! `eligibleAfter` is the instant at which the active count first drops below `L`: the
//! `(n − L + 1)`-th oldest active `startedAt` + 60 min. When `n = L` (the normal case) that is the
//! spec's "oldest active startedAt + 60 min"; when a lowered limit leaves `n > L`, it is the exact
//! instant rather than an earlier one at which capacity would still be exhausted.

use serde::Serialize;

use crate::{CallLimit, CallReceipt, HOUR_MS};

/// Whether a call may be made now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum RateCap {
    /// `available` more calls fit in the rolling hour.
    Available {
        /// Calls that may still be made.
        available: u32,
    },
    /// No call may be made before `eligible_after`.
    Exhausted {
        /// Always 0.
        available: u32,
        /// Epoch ms at which capacity returns.
        #[serde(rename = "eligibleAfter")]
        eligible_after: u64,
    },
}

impl RateCap {
    /// Calls that may still be made.
    pub fn available(&self) -> u32 {
        match self {
            RateCap::Available { available } => *available,
            RateCap::Exhausted { .. } => 0,
        }
    }

    /// When capacity returns, if exhausted.
    pub fn eligible_after(&self) -> Option<u64> {
        match self {
            RateCap::Available { .. } => None,
            RateCap::Exhausted { eligible_after, .. } => Some(*eligible_after),
        }
    }
}

/// The rate cap given the *active* history.
pub fn rate_cap(active_history: &[CallReceipt], limit: CallLimit) -> RateCap {
    let limit = usize::try_from(limit.get()).unwrap_or(usize::MAX);
    let used = active_history.len();
    if used < limit {
        let available = u32::try_from(limit - used).unwrap_or(u32::MAX);
        return RateCap::Available { available };
    }
    let mut starts: Vec<u64> = active_history.iter().map(|r| r.started_at).collect();
    starts.sort_unstable();
    // used >= limit >= 1, so index used - limit is in bounds.
    let pivot = starts.get(used - limit).copied().unwrap_or(0);
    RateCap::Exhausted {
        available: 0,
        eligible_after: pivot.saturating_add(HOUR_MS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;

    fn receipts(starts: &[u64]) -> Vec<CallReceipt> {
        starts
            .iter()
            .enumerate()
            .map(|(i, s)| CallReceipt {
                id: i as i64,
                generation_id: format!("g{i}"),
                started_at: *s,
                outcome: None,
                usage: None,
                duration_ms: None,
            })
            .collect()
    }

    #[test]
    fn available_until_the_limit_then_exhausted_until_the_pivot_expires() {
        let limit = CallLimit::from_configured(Some(2.0), &Policy::ADR_0119);
        assert_eq!(
            rate_cap(&receipts(&[5]), limit),
            RateCap::Available { available: 1 }
        );
        assert_eq!(
            rate_cap(&receipts(&[7, 5]), limit).eligible_after(),
            Some(5 + HOUR_MS)
        );
        // Limit lowered below the active count: capacity returns when the second-oldest expires.
        assert_eq!(
            rate_cap(&receipts(&[5, 6, 9]), limit).eligible_after(),
            Some(6 + HOUR_MS)
        );
    }
}
