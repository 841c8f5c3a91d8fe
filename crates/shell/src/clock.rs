//! The driver clock: the one place the async shell reads time.
//!
//! Time in turnstile is integer milliseconds. A [`Clock`] maps a tokio [`Instant`] taken once at
//! construction to `epoch_ms + elapsed`, so everything downstream (the admission core, deadlines,
//! attempt durations) sees the same monotonic millisecond count. Because it reads
//! `tokio::time::Instant`, it follows `tokio::time::pause()` and `advance()` exactly: tests run
//! on virtual time with no code change.
//!
//! Invariants: `now_ms()` never goes backwards; `instant_at(now_ms())` is never later than the
//! real instant, so a sleep until `instant_at(t)` wakes at a moment where `now_ms() >= t`.

use std::time::Duration;

use tokio::time::Instant;
use turnstile_admission::Millis;

/// Milliseconds since an epoch, on tokio time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    epoch_ms: Millis,
}

impl Clock {
    /// A clock whose current reading is `epoch_ms`.
    pub fn starting_at(epoch_ms: Millis) -> Self {
        Clock {
            start: Instant::now(),
            epoch_ms,
        }
    }

    /// A clock that reads Unix epoch milliseconds (the wall clock is read once, here).
    pub fn system() -> Self {
        let epoch_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Self::starting_at(epoch_ms)
    }

    /// The current reading in milliseconds.
    pub fn now_ms(&self) -> Millis {
        let elapsed = Instant::now().saturating_duration_since(self.start);
        self.epoch_ms
            .saturating_add(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
    }

    /// The tokio instant at which the clock reads `at_ms`.
    pub fn instant_at(&self, at_ms: Millis) -> Instant {
        let offset = at_ms.saturating_sub(self.epoch_ms);
        // Far-future instants are clamped to about 30 years to stay representable.
        let offset = offset.min(1_000_000_000_000);
        self.start + Duration::from_millis(offset)
    }

    /// Sleeps until the clock reads at least `at_ms`.
    pub async fn sleep_until(&self, at_ms: Millis) {
        tokio::time::sleep_until(self.instant_at(at_ms)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_time() {
        let clock = Clock::starting_at(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(clock.now_ms(), 1_250);
        clock.sleep_until(2_000).await;
        assert_eq!(clock.now_ms(), 2_000);
    }
}
