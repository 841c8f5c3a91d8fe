//! Token buckets in exact fixed-point arithmetic.
//!
//! A bucket of `rate` units per `period_ms` holds its level scaled by `period_ms`, so one
//! millisecond of refill adds exactly `rate` scaled units and no rounding ever happens: the same
//! inputs give the same decisions on every machine. The capacity is `capacity` units (the
//! profile's burst, `requestsBurst` / `tokensBurst`), which defaults to `rate` units when the
//! profile sets no burst; the bucket starts full. Refill is lazy (on each look), so an idle
//! bucket costs nothing.
//!
//! Consequence (documented in `docs/profiles.md`): in any window of `t` ms at most
//! `capacity + floor(rate * t / period_ms)` units pass; with the default capacity that is up to
//! `2 * rate` in the first period.
//!
//! Invariant: `0 <= level <= capacity * period_ms`.

use std::num::NonZeroU64;

use crate::time::Millis;

/// Requests-per-minute buckets refill over a minute.
pub const MINUTE_MS: u64 = 60_000;
/// Tokens-per-second buckets refill over a second.
pub const SECOND_MS: u64 = 1_000;

/// A token bucket in exact fixed-point arithmetic: `rate` units refill per `period_ms`,
/// continuously, up to `capacity`; the core's request and token rates, and the reference the
/// shared Lua buckets are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    rate: u64,
    /// Capacity in units (the burst).
    capacity: u64,
    /// Never zero (a period of 0 ms is treated as 1 ms); non-zero also lets `Option<TokenBucket>`
    /// take no more room than the bucket.
    period_ms: NonZeroU64,
    level: u128,
    refilled_at: Millis,
}

impl TokenBucket {
    /// A full bucket of `rate` units per `period_ms` holding at most `capacity` units.
    pub fn full_with_capacity(rate: u64, capacity: u64, period_ms: u64, now: Millis) -> Self {
        TokenBucket {
            rate,
            capacity,
            period_ms: NonZeroU64::new(period_ms).unwrap_or(NonZeroU64::MIN),
            level: u128::from(capacity) * u128::from(period_ms.max(1)),
            refilled_at: now,
        }
    }

    fn capacity(&self) -> u128 {
        u128::from(self.capacity) * u128::from(self.period_ms.get())
    }

    fn scaled(&self, units: u64) -> u128 {
        u128::from(units) * u128::from(self.period_ms.get())
    }

    /// Brings the level up to date with `now`.
    pub fn refill(&mut self, now: Millis) {
        if now > self.refilled_at {
            let gained = u128::from(now - self.refilled_at) * u128::from(self.rate);
            self.level = (self.level + gained).min(self.capacity());
            self.refilled_at = now;
        }
    }

    /// Whether `units` could ever fit (the bucket's capacity is at least `units`).
    #[cfg(test)]
    pub fn can_ever_hold(&self, units: u64) -> bool {
        self.scaled(units) <= self.capacity()
    }

    /// Whether `units` are available now (after [`refill`](Self::refill)).
    pub fn has(&self, units: u64) -> bool {
        self.level >= self.scaled(units)
    }

    /// Milliseconds from the last refill until `units` are available; `None` if never.
    pub fn wait_for(&self, units: u64) -> Option<Millis> {
        let need = self.scaled(units);
        if need > self.capacity() || self.rate == 0 {
            return None;
        }
        let deficit = need.saturating_sub(self.level);
        let rate = u128::from(self.rate);
        Some(u64::try_from(deficit.div_ceil(rate)).unwrap_or(u64::MAX))
    }

    /// Milliseconds from `now` until the bucket has delivered `units` more (taken one after the
    /// other as they refill, so beyond its capacity too); `None` if it never refills.
    pub(crate) fn time_to_deliver(&self, units: u64, now: Millis) -> Option<Millis> {
        if self.rate == 0 {
            return None;
        }
        let level = self.scaled_level_at(now);
        let deficit = self.scaled(units).saturating_sub(level);
        Some(u64::try_from(deficit.div_ceil(u128::from(self.rate))).unwrap_or(u64::MAX))
    }

    /// Whether the bucket is full (as of the last refill): it then behaves exactly as a bucket
    /// created full at the instant of that refill or later.
    pub fn is_full(&self) -> bool {
        self.level >= self.capacity()
    }

    /// Consumes `units`; the caller checked [`has`](Self::has).
    pub fn take(&mut self, units: u64) {
        self.level = self.level.saturating_sub(self.scaled(units));
    }

    /// Restart after a crash: lowers the level to what a bucket that was **empty at `since`**
    /// holds at `now` after refilling at its rate (`min(capacity, rate × (now − since))`); a
    /// level already lower stays. `since` at or after `now` leaves the bucket empty at `now`.
    ///
    /// Why it is safe: a bucket's future decisions are monotone in its level, and any bucket
    /// that was at level ≥ 0 at `since` and took nothing since holds at least this much at
    /// `now`; so a drained bucket never passes a unit the uncrashed one would have refused.
    /// Returns whether the level went down.
    pub fn drain_since(&mut self, since: Millis, now: Millis) -> bool {
        self.refill(now);
        let gained = u128::from(now.saturating_sub(since)) * u128::from(self.rate);
        let before = self.level;
        self.level = self.level.min(gained.min(self.capacity()));
        self.level < before
    }

    /// The level in the bucket's fixed-point units (units × `period_ms`) at `now`, without
    /// changing the bucket (a refill to `now` changes no later decision).
    pub fn scaled_level_at(&self, now: Millis) -> u128 {
        let mut read = self.clone();
        read.refill(now);
        read.level
    }

    /// Restart after a clean stop: sets the level to `level` (fixed-point units, as
    /// [`scaled_level_at`](Self::scaled_level_at) read it at `read_at`) refilled at this
    /// bucket's rate from `read_at` to `now`, clamped to the capacity. Refilling composes
    /// (`min(min(a + x, c) + y, c) = min(a + x + y, c)`), so this is exactly the level the bucket
    /// that never stopped holds at `now` if it took nothing since `read_at`. `read_at` after
    /// `now` (a clock stepped back) refills nothing. Returns whether the level changed.
    pub fn restore_level(&mut self, level: u128, read_at: Millis, now: Millis) -> bool {
        let gained = u128::from(now.saturating_sub(read_at)) * u128::from(self.rate);
        let before = self.level;
        self.level = level.saturating_add(gained).min(self.capacity());
        self.refilled_at = self.refilled_at.max(now);
        self.level != before
    }

    /// Whole units available now (after refill).
    #[cfg(test)]
    pub fn available(&self) -> u64 {
        self.level_units()
    }

    /// The level in whole units (as of the last refill).
    pub fn level_units(&self) -> u64 {
        u64::try_from(self.level / u128::from(self.period_ms.get())).unwrap_or(u64::MAX)
    }

    /// Adopts a new rate and capacity: the level is kept but clamped to the new capacity.
    pub fn set_rate(&mut self, rate: u64, capacity: u64, now: Millis) {
        self.refill(now);
        self.rate = rate;
        self.capacity = capacity;
        self.level = self.level.min(self.capacity());
    }

    /// The refill period in milliseconds (the fixed-point scale of the level).
    pub fn period_ms(&self) -> u64 {
        self.period_ms.get()
    }

    /// Units refilled per period.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Capacity in units.
    pub fn capacity_units(&self) -> u64 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refill_is_exact_and_capped() {
        let mut bucket = TokenBucket::full_with_capacity(1000, 1000, SECOND_MS, 0);
        bucket.take(900);
        assert_eq!(bucket.wait_for(900), Some(800));
        bucket.refill(799);
        assert!(!bucket.has(900));
        bucket.refill(800);
        assert!(bucket.has(900));
        bucket.refill(10_000);
        assert_eq!(bucket.available(), 1000);
    }

    #[test]
    fn one_request_per_minute_refills_in_sixty_seconds() {
        let mut bucket = TokenBucket::full_with_capacity(1, 1, MINUTE_MS, 0);
        bucket.take(1);
        assert_eq!(bucket.wait_for(1), Some(60_000));
        bucket.refill(59_999);
        assert!(!bucket.has(1));
        bucket.refill(60_000);
        assert!(bucket.has(1));
    }

    /// "At most 600 per minute, at most 10 at once": 10 pass at once, then one every 100 ms.
    #[test]
    fn a_burst_below_the_rate_caps_what_passes_at_once() {
        let mut bucket = TokenBucket::full_with_capacity(600, 10, MINUTE_MS, 0);
        for _ in 0..10 {
            assert!(bucket.has(1));
            bucket.take(1);
        }
        assert!(!bucket.has(1));
        assert_eq!(bucket.wait_for(1), Some(100));
        bucket.refill(60_000);
        assert_eq!(bucket.available(), 10, "capped at the burst, not the rate");
        assert!(!bucket.can_ever_hold(11));
    }

    #[test]
    fn a_drained_bucket_is_empty_at_since_and_refills_from_there() {
        let mut bucket = TokenBucket::full_with_capacity(60, 60, MINUTE_MS, 0);
        bucket.drain_since(100_000, 110_000);
        assert_eq!(bucket.available(), 10, "10 s of 60 per minute");
        bucket.refill(115_000);
        assert_eq!(bucket.available(), 15);
        // Long enough ago: a full bucket stays full.
        let mut bucket = TokenBucket::full_with_capacity(60, 60, MINUTE_MS, 0);
        bucket.drain_since(0, 60_000);
        assert!(bucket.is_full());
        // A lower level stays lower; `since` after `now` (a clock stepped back) empties it.
        let mut bucket = TokenBucket::full_with_capacity(60, 60, MINUTE_MS, 30_000);
        bucket.take(58);
        bucket.drain_since(0, 30_000);
        assert_eq!(bucket.available(), 2);
        bucket.drain_since(40_000, 30_000);
        assert_eq!(bucket.available(), 0);
        assert_eq!(bucket.wait_for(1), Some(1_000));
    }

    proptest::proptest! {
        /// A crash at any instant after the last take, a restart at any later instant: the
        /// drained bucket (fresh at the restart, drained since the last take) never passes a
        /// unit the uncrashed bucket (which kept running) would have refused, whatever comes
        /// after.
        #[test]
        fn a_drained_bucket_never_passes_more_than_the_uncrashed_one(
            rate in 1u64..200,
            extra_capacity in 0u64..50,
            period in proptest::sample::select(vec![SECOND_MS, MINUTE_MS]),
            before in proptest::collection::vec((0u64..5_000, 0u64..60), 0..40),
            crash_after_ms in 0u64..5_000,
            down_ms in 0u64..120_000,
            after in proptest::collection::vec((0u64..5_000, 0u64..60), 0..60),
        ) {
            let capacity = rate + extra_capacity;
            let mut uncrashed = TokenBucket::full_with_capacity(rate, capacity, period, 0);
            let (mut now, mut last_take) = (0u64, None);
            for (step, units) in before {
                now += step;
                uncrashed.refill(now);
                if uncrashed.has(units) {
                    uncrashed.take(units);
                    last_take = Some(now);
                }
            }
            let restart = now + crash_after_ms + down_ms;
            let mut restarted = TokenBucket::full_with_capacity(rate, capacity, period, restart);
            if let Some(since) = last_take {
                restarted.drain_since(since, restart);
            }
            now = restart;
            for (step, units) in after {
                now += step;
                uncrashed.refill(now);
                restarted.refill(now);
                if restarted.has(units) {
                    proptest::prop_assert!(uncrashed.has(units), "passed {units} at {now}");
                    restarted.take(units);
                    uncrashed.take(units);
                }
            }
        }
    }

    proptest::proptest! {
        /// A clean stop at any instant, a restart at any later instant: the bucket restored
        /// from the level read at the stop decides exactly as the bucket that never stopped.
        #[test]
        fn a_restored_bucket_decides_exactly_as_the_one_that_never_stopped(
            rate in 1u64..200,
            extra_capacity in 0u64..50,
            period in proptest::sample::select(vec![SECOND_MS, MINUTE_MS]),
            before in proptest::collection::vec((0u64..5_000, 0u64..60), 0..40),
            stop_after_ms in 0u64..5_000,
            down_ms in 0u64..120_000,
            after in proptest::collection::vec((0u64..5_000, 0u64..60), 0..60),
        ) {
            let capacity = rate + extra_capacity;
            let mut uncrashed = TokenBucket::full_with_capacity(rate, capacity, period, 0);
            let mut now = 0u64;
            for (step, units) in before {
                now += step;
                uncrashed.refill(now);
                if uncrashed.has(units) {
                    uncrashed.take(units);
                }
            }
            let read_at = now + stop_after_ms;
            let level = uncrashed.scaled_level_at(read_at);
            let restart = read_at + down_ms;
            let mut restarted = TokenBucket::full_with_capacity(rate, capacity, period, restart);
            restarted.restore_level(level, read_at, restart);
            now = restart;
            for (step, units) in after {
                now += step;
                uncrashed.refill(now);
                restarted.refill(now);
                proptest::prop_assert_eq!(restarted.has(units), uncrashed.has(units));
                proptest::prop_assert_eq!(restarted.wait_for(units), uncrashed.wait_for(units));
                if restarted.has(units) {
                    restarted.take(units);
                    uncrashed.take(units);
                }
            }
        }
    }

    #[test]
    fn a_restored_level_refills_from_its_reading_and_is_clamped() {
        let mut bucket = TokenBucket::full_with_capacity(60, 60, MINUTE_MS, 0);
        bucket.take(50);
        let level = bucket.scaled_level_at(1_000);
        assert_eq!(
            level,
            11 * u128::from(MINUTE_MS),
            "10 left, 1 back in a second"
        );
        let mut restarted = TokenBucket::full_with_capacity(60, 60, MINUTE_MS, 5_000);
        assert!(restarted.restore_level(level, 1_000, 5_000));
        assert_eq!(restarted.available(), 15);
        // A capacity lowered since: clamped; a clock stepped back: nothing refilled.
        let mut smaller = TokenBucket::full_with_capacity(6, 6, MINUTE_MS, 5_000);
        smaller.restore_level(level, 1_000, 5_000);
        assert_eq!(smaller.available(), 6);
        let mut stepped_back = TokenBucket::full_with_capacity(60, 60, MINUTE_MS, 500);
        stepped_back.restore_level(level, 1_000, 500);
        assert_eq!(stepped_back.available(), 11);
    }

    #[test]
    fn zero_rate_and_oversized_requests_never_fit() {
        let bucket = TokenBucket::full_with_capacity(0, 0, MINUTE_MS, 0);
        assert_eq!(bucket.wait_for(1), None);
        let bucket = TokenBucket::full_with_capacity(4, 4, SECOND_MS, 0);
        assert!(!bucket.can_ever_hold(5));
        assert_eq!(bucket.wait_for(5), None);
    }
}
