//! Roster status: what `turnstile roster status` and the dashboard show
//! ("SEMANTIC ON · n/120 CALLS").

use serde::Serialize;

/// Rolling-hour call usage: `{used, limit, available, eligibleAfter?}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingCalls {
    /// Calls in the active hour.
    pub used: u32,
    /// The effective limit.
    pub limit: u32,
    /// Calls that may still be made.
    pub available: u32,
    /// When capacity returns, if exhausted (epoch ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eligible_after: Option<u64>,
}

/// The roster at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RosterStatus {
    /// The instant described (epoch ms).
    pub now: u64,
    /// Rolling-hour usage.
    pub rolling_calls: RollingCalls,
    /// Number of pending items.
    pub pending: usize,
    /// The earliest instant at which a pass could read or defer something (epoch ms); `None`
    /// with nothing pending. At or before `now` means a pass is due now.
    pub next_eligible_at: Option<u64>,
}
