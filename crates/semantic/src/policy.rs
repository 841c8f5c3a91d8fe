//! The scheduler's constants, gathered in one [`Policy`] value so the incident replay can run the
//! pre-ADR-0119 policy beside the current one.
//!
//! | constant | ADR 0119 | legacy (ADRs 0097/0102/0109) |
//! |---|---|---|
//! | hard calls per rolling hour | 120 | 60 |
//! | band-1 minimum interval | 2 min | 30 s |
//! | band-2 minimum interval | 5 min | 5 min |
//! | retry cool-down after invalid/unavailable | 5 min | 5 min |
//! | uncovered generations first | yes | no |

use crate::Band;

/// One hour in milliseconds: the width of the rolling window.
pub const HOUR_MS: u64 = 3_600_000;

/// The scheduling constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Root-wide hard ceiling of calls per rolling hour; a configured value may only lower it.
    pub hard_calls_per_hour: u32,
    /// Minimum interval between two reads of one band-1 generation.
    pub band1_interval_ms: u64,
    /// Minimum interval between two reads of one band-2 generation.
    pub band2_interval_ms: u64,
    /// Minimum interval after a read whose outcome was invalid or unavailable.
    pub retry_cooldown_ms: u64,
    /// Select generations without a call in the active hour before refreshing covered ones.
    pub coverage_first: bool,
}

impl Policy {
    /// The policy of ADR 0119.
    pub const ADR_0119: Policy = Policy {
        hard_calls_per_hour: 120,
        band1_interval_ms: 2 * 60_000,
        band2_interval_ms: 5 * 60_000,
        retry_cooldown_ms: 5 * 60_000,
        coverage_first: true,
    };

    /// The policy before ADR 0119 (used only to replay the incident).
    pub const LEGACY: Policy = Policy {
        hard_calls_per_hour: 60,
        band1_interval_ms: 30_000,
        band2_interval_ms: 5 * 60_000,
        retry_cooldown_ms: 5 * 60_000,
        coverage_first: false,
    };

    /// The minimum interval between two reads of a generation in `band`.
    pub fn interval_ms(&self, band: Band) -> u64 {
        match band {
            Band::Priority => self.band1_interval_ms,
            Band::Routine => self.band2_interval_ms,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::ADR_0119
    }
}
