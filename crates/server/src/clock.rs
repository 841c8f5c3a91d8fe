//! The driver's clock: epoch milliseconds that never go backwards.
//!
//! The system clock is read once, at construction; afterwards time advances with a monotonic
//! [`Instant`], so a wall-clock step never moves admission time backwards and the instant of
//! any future millisecond is known exactly (for arming the driver's single timer).
//!
//! Invariant: `now()` is non-decreasing, and at `instant_at(ms)` or later `now() >= ms`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use turnstile_admission::Millis;

/// Epoch milliseconds on a monotonic base.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base_ms: Millis,
    base: Instant,
}

impl Clock {
    /// Anchors the clock at the current system time.
    pub fn system() -> Self {
        let base_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as Millis)
            .unwrap_or(0);
        Clock {
            base_ms,
            base: Instant::now(),
        }
    }

    /// The current time in epoch milliseconds.
    pub fn now(&self) -> Millis {
        self.base_ms + self.base.elapsed().as_millis() as Millis
    }

    /// The instant at which `now()` reaches `ms`.
    pub fn instant_at(&self, ms: Millis) -> Instant {
        self.base + Duration::from_millis(ms.saturating_sub(self.base_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instant_at_maps_back_to_the_same_millisecond() {
        let clock = Clock::system();
        let now = clock.now();
        let at = clock.instant_at(now + 5);
        assert!(at >= Instant::now());
        assert!(clock.now() >= now);
    }
}
