//! The deadline of a shared-identity write, in Redis's clock (sans-IO: instants and
//! durations in, server milliseconds out).
//!
//! A write whose answer never came back (the call timed out because Redis hangs: SIGSTOP, a
//! long fork, a paused VM; or the connection broke after the command was sent) may still sit
//! in Redis, in its socket buffer or its queue of paused clients, and run when Redis resumes.
//! So every write carries a **deadline in Redis server time**, and the function refuses to
//! apply it (`late`) once `TIME` is past it. The replica computes the deadline so that Redis's
//! clock is certainly past it by the time the replica gives up on the call:
//!
//! - A [`ClockReading`] is a `TIME` Redis answered (server ms, read inside a call) and the
//!   local monotonic instant the answer arrived (`received`). Redis read its clock before it
//!   answered, so at `received` its clock showed at least `server_ms`, and at any later local
//!   instant `t` at least `server_ms + (t - received)`: [`ClockReading::server_at_least`].
//! - A write sent at local `sent` with the call timeout `timeout` carries
//!   `deadline = server_at_least(sent) + timeout - margin` ([`ClockReading::deadline`]). The
//!   reading's round trip only makes the lower bound early (by at most that round trip): Redis
//!   has at least `timeout - margin - round trip` to run the write.
//! - The replica answers a write whose outcome it does not know no earlier than
//!   `sent + timeout` (the caller waits until then). At that instant Redis's clock shows at
//!   least `deadline + margin > deadline`, so a write still waiting in Redis is refused when it
//!   runs: **a write the replica did not see succeed either applied before the answer or never
//!   will.**
//!
//! **Assumption**: Redis's wall clock does not step backwards by more than the margin
//! ([`margin`]: a quarter of the timeout, at most [`MAX_MARGIN`]) and does not run slower than
//! the replica's monotonic clock by more than that over a reading's age ([`MAX_READING_AGE`])
//! plus the timeout. If it does (an NTP step back of more than the margin between the reading
//! and the write running, a failover to a Redis whose clock is behind), a write whose outcome
//! was answered unknown can still apply up to the excess after the answer; it then reaches
//! every replica through the feed like any write (the mirrors stay consistent with each other;
//! only the answer was wrong about "never").
//!
//! Invariants:
//! - Every bound is rounded toward the safe side: elapsed time and the timeout down, the
//!   margin up (at least 1 ms), so the deadline is never later than the exact formula.
//! - A reading older than [`MAX_READING_AGE`] is not used: the write reads `TIME` first (a
//!   Redis that stopped answering then refuses the write before anything is sent).

use std::time::{Duration, Instant};

/// The largest margin kept for a backwards step of Redis's clock.
pub const MAX_MARGIN: Duration = Duration::from_millis(250);

/// How old a reading may be and still date a write.
pub const MAX_READING_AGE: Duration = Duration::from_secs(1);

/// The margin for a call timeout: a quarter of it, at most [`MAX_MARGIN`], at least 1 ms.
pub fn margin(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(1), MAX_MARGIN)
}

fn whole_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn ms_rounded_up(duration: Duration) -> u64 {
    let ms = whole_ms(duration);
    if Duration::from_millis(ms) < duration {
        ms.saturating_add(1)
    } else {
        ms
    }
}

/// One answer of Redis's clock: its `TIME` in ms and when (locally) the answer arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReading {
    /// Redis's `TIME`, in whole milliseconds (rounded down).
    pub server_ms: u64,
    /// The local instant the answer holding it arrived.
    pub received: Instant,
}

impl ClockReading {
    /// Whether this reading may still date a write sent at `now`.
    pub fn fresh(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.received) <= MAX_READING_AGE
    }

    /// A lower bound of Redis's clock (ms) at the local instant `at`.
    pub fn server_at_least(&self, at: Instant) -> u64 {
        self.server_ms
            .saturating_add(whole_ms(at.saturating_duration_since(self.received)))
    }

    /// The deadline (server ms) of a write sent at `sent` with the call timeout `timeout`:
    /// Redis's clock is past it once `timeout` has passed since `sent`.
    pub fn deadline(&self, sent: Instant, timeout: Duration) -> u64 {
        self.server_at_least(sent)
            .saturating_add(whole_ms(timeout))
            .saturating_sub(ms_rounded_up(margin(timeout)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_passed_in_redis_time_when_the_timeout_fires() {
        let received = Instant::now();
        let reading = ClockReading {
            server_ms: 1_000_000,
            received,
        };
        let timeout = Duration::from_millis(2_000);
        let sent = received + Duration::from_millis(300);
        let deadline = reading.deadline(sent, timeout);
        // 300 ms after the reading, less the 250 ms margin.
        assert_eq!(deadline, 1_000_000 + 300 + 2_000 - 250);
        // When the replica answers (sent + timeout), Redis's clock is past the deadline by at
        // least the margin, however the reading's round trip split.
        let answered = sent + timeout;
        assert!(reading.server_at_least(answered) >= deadline + 250);
    }

    #[test]
    fn rounding_is_on_the_safe_side() {
        let received = Instant::now();
        let reading = ClockReading {
            server_ms: 10,
            received,
        };
        let timeout = Duration::from_micros(1_000_900);
        let sent = received + Duration::from_micros(1_900);
        // Elapsed 1.9 ms counts as 1, the timeout as 1000 ms, the margin (250) as is.
        assert_eq!(reading.deadline(sent, timeout), 10 + 1 + 1_000 - 250);
        assert_eq!(
            margin(Duration::from_millis(100)),
            Duration::from_millis(25)
        );
        assert_eq!(margin(Duration::from_micros(10)), Duration::from_millis(1));
        assert_eq!(margin(Duration::from_secs(60)), MAX_MARGIN);
        // A timeout shorter than its margin never gives a deadline in the future.
        assert!(reading.deadline(received, Duration::ZERO) <= reading.server_ms);
    }

    #[test]
    fn an_old_reading_is_not_used() {
        let received = Instant::now();
        let reading = ClockReading {
            server_ms: 0,
            received,
        };
        assert!(reading.fresh(received + MAX_READING_AGE));
        assert!(!reading.fresh(received + MAX_READING_AGE + Duration::from_millis(1)));
    }
}
