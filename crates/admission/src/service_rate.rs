//! How fast a provider lane has been serving its waiters ([`ServiceRate`]): the basis of
//! deadline-aware refusal.
//!
//! # What it decides
//!
//! Nothing by itself: it keeps the last [`WINDOW`] *service intervals* of a provider lane
//! (the time between two consecutive grants when the first of them left a waiter behind, so
//! the interval measures service, not arrivals) and answers their 10th percentile once at
//! least [`MIN_SAMPLES`] were seen since the last *regime change* (a profile change, a breaker
//! transition, a Retry-After pause), after which earlier intervals say nothing. The controller
//! refuses with `deadline-unreachable` only on that basis (`controller/deadline_refusal.rs`).
//!
//! # Invariants
//!
//! - `len <= WINDOW`; the samples counted since the last reset are the ones kept (up to the
//!   window), so no interval from before a regime change is ever used.
//! - Recording a grant is O(1); the percentile is O(WINDOW), read only when a request with a
//!   deadline would wait.

use crate::time::Millis;

/// Intervals kept.
pub(crate) const WINDOW: usize = 64;

/// Intervals needed since the last regime change before a prediction is trusted.
pub(crate) const MIN_SAMPLES: usize = 32;

/// A provider lane's recent service intervals; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct ServiceRate {
    intervals: [u32; WINDOW],
    len: usize,
    next: usize,
    last_grant: Option<Millis>,
    /// Whether a waiter was left behind at the last grant.
    backlogged: bool,
}

impl Default for ServiceRate {
    fn default() -> Self {
        ServiceRate {
            intervals: [0; WINDOW],
            len: 0,
            next: 0,
            last_grant: None,
            backlogged: false,
        }
    }
}

impl ServiceRate {
    /// A grant at `now`; `waiting` says whether the provider still has waiters after it.
    #[inline]
    pub(crate) fn record_grant(&mut self, now: Millis, waiting: bool) {
        if let (Some(last), true) = (self.last_grant, self.backlogged) {
            let interval = u32::try_from(now.saturating_sub(last)).unwrap_or(u32::MAX);
            self.intervals[self.next] = interval;
            self.next = (self.next + 1) % WINDOW;
            self.len = (self.len + 1).min(WINDOW);
        }
        self.last_grant = Some(now);
        self.backlogged = waiting;
    }

    /// The lane's regime changed: forget every interval.
    pub(crate) fn reset(&mut self) {
        *self = ServiceRate {
            last_grant: self.last_grant,
            ..ServiceRate::default()
        };
        self.backlogged = false;
    }

    /// The 10th percentile of the kept intervals, once there are [`MIN_SAMPLES`] of them.
    pub(crate) fn low_interval(&self) -> Option<Millis> {
        if self.len < MIN_SAMPLES {
            return None;
        }
        let mut kept = self.intervals;
        let kept = &mut kept[..self.len];
        let (_, p10, _) = kept.select_nth_unstable(self.len / 10);
        Some(Millis::from(*p10))
    }

    /// The instant of the last grant, if any.
    pub(crate) fn last_grant(&self) -> Option<Millis> {
        self.last_grant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_intervals_that_began_with_a_waiter_count() {
        let mut rate = ServiceRate::default();
        rate.record_grant(0, false);
        rate.record_grant(500, true); // began idle: not a service interval
        for i in 1..=40 {
            rate.record_grant(500 + i * 100, true);
        }
        assert_eq!(rate.low_interval(), Some(100));
    }

    #[test]
    fn no_prediction_before_enough_samples_or_after_a_reset() {
        let mut rate = ServiceRate::default();
        for i in 0..MIN_SAMPLES as u64 {
            rate.record_grant(i * 10, true);
        }
        assert_eq!(
            rate.low_interval(),
            None,
            "{MIN_SAMPLES} grants make one fewer interval"
        );
        rate.record_grant(10 * MIN_SAMPLES as u64, true);
        assert_eq!(rate.low_interval(), Some(10));
        rate.reset();
        assert_eq!(rate.low_interval(), None);
        rate.record_grant(10_000, true);
        assert_eq!(rate.low_interval(), None);
    }

    #[test]
    fn the_low_percentile_ignores_a_few_long_intervals_but_not_many() {
        let mut rate = ServiceRate::default();
        let mut now = 0;
        rate.record_grant(now, true);
        for i in 0..WINDOW {
            now += if i % 20 == 0 { 5 } else { 200 };
            rate.record_grant(now, true);
        }
        assert_eq!(
            rate.low_interval(),
            Some(200),
            "3 short ones of 64 are below p10"
        );
    }
}
