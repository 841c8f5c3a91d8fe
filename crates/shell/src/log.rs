//! The driver's log events (`tracing`; the host installs the subscriber, `docs/server.md`,
//! "Logs"): every refusal at `debug`, a summary of the refusals at `info` once per
//! [`SUMMARY_EVERY_MS`] (counts by provider lane and reason; the driver's timer wakes for it),
//! every breaker transition and Retry-After pause at `info`, and a lease-log write that failed
//! at `error`.
//!
//! # Invariants
//!
//! - **No tenant.** A line names a provider lane (a lane name of the profile), a reason, a
//!   breaker state or a pause's end, never a principal or workspace ID and never a key. A
//!   request naming a provider the profile does not configure is counted under
//!   [`UNCONFIGURED`], so an arbitrary string from a request never reaches a log line.
//! - **Bounded.** The summary holds at most [`MAX_SUMMARY_ROWS`] (lane, reason) rows per
//!   interval; beyond, refusals are counted in one `other` row.
//! - **Cheap.** A refusal costs one counter increment (a hash lookup) and a `debug!` that the
//!   subscriber's level filter drops at its call site when `debug` is off; with no subscriber
//!   logging `info` for `turnstile::admission`, nothing is counted and the driver never wakes
//!   for a summary.

use std::collections::HashMap;

use turnstile_admission::{BreakerTransition, Millis, Reason};

use crate::pause::Pause;

/// How often the refusal summary is logged (at the first decision after the interval ends).
pub const SUMMARY_EVERY_MS: Millis = 10_000;

/// (lane, reason) rows kept per interval.
pub const MAX_SUMMARY_ROWS: usize = 1024;

/// The lane name of a refusal whose provider the profile does not configure.
pub const UNCONFIGURED: &str = "(unconfigured)";

/// The lane name of refusals beyond [`MAX_SUMMARY_ROWS`] rows.
const OTHER: &str = "(other)";

/// Refusals per reason of one lane, indexed like [`Reason::ALL`].
type Counts = [u64; Reason::ALL.len()];

/// Refusals counted since the last summary.
#[derive(Debug, Default)]
pub(crate) struct RefusalLog {
    counts: HashMap<Box<str>, Counts>,
    /// (lane, reason) rows with a count (bounded by [`MAX_SUMMARY_ROWS`]).
    rows: usize,
    other: u64,
    interval_start: Option<Millis>,
}

fn index(reason: Reason) -> usize {
    Reason::ALL.iter().position(|r| *r == reason).unwrap_or(0)
}

impl RefusalLog {
    /// One refusal on `provider` for `reason` at `now`.
    pub(crate) fn refused(&mut self, provider: &str, reason: Reason, now: Millis) {
        let lane: &str = if reason == Reason::UnconfiguredProvider {
            UNCONFIGURED
        } else {
            provider
        };
        tracing::debug!(target: "turnstile::admission", lane, reason = reason.as_str(), "refused");
        // Counted only when somebody logs the summary: without a subscriber at `info` this
        // costs nothing and never wakes the driver.
        if !tracing::enabled!(target: "turnstile::admission", tracing::Level::INFO) {
            return;
        }
        self.interval_start.get_or_insert(now);
        let at = index(reason);
        let full = self.rows >= MAX_SUMMARY_ROWS;
        let counts = match self.counts.get_mut(lane) {
            Some(counts) => counts,
            None if !full => self
                .counts
                .entry(lane.into())
                .or_insert([0; Reason::ALL.len()]),
            None => {
                self.other += 1;
                return;
            }
        };
        if counts[at] == 0 {
            if full {
                self.other += 1;
                return;
            }
            self.rows += 1;
        }
        counts[at] += 1;
    }

    /// When the pending summary is due (none without refusals).
    pub(crate) fn due(&self) -> Option<Millis> {
        self.interval_start
            .map(|start| start.saturating_add(SUMMARY_EVERY_MS))
    }

    /// Logs the summary if its interval has ended at `now`, and starts a new one.
    pub(crate) fn flush(&mut self, now: Millis) {
        let Some(start) = self.interval_start else {
            return;
        };
        if now.saturating_sub(start) < SUMMARY_EVERY_MS {
            return;
        }
        let seconds = now.saturating_sub(start) / 1000;
        let mut lanes: Vec<_> = self.counts.drain().collect();
        lanes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (lane, counts) in lanes {
            for (reason, &count) in Reason::ALL.iter().zip(&counts) {
                if count > 0 {
                    tracing::info!(
                        target: "turnstile::admission",
                        lane = &*lane,
                        reason = reason.as_str(),
                        count,
                        seconds,
                        "refusals"
                    );
                }
            }
        }
        if self.other > 0 {
            tracing::info!(target: "turnstile::admission", lane = OTHER, count = self.other, seconds, "refusals");
        }
        self.other = 0;
        self.rows = 0;
        self.interval_start = None;
    }
}

/// A batch of lease events the journal could not make durable (its callers are answered with an
/// error). The journal's error text names files and causes, never a tenant or key.
pub(crate) fn journal_failure(error: &str) {
    tracing::error!(target: "turnstile::journal", error, "lease log write failed");
}

/// A breaker transition of a provider lane.
pub(crate) fn transition(transition: &BreakerTransition) {
    tracing::info!(
        target: "turnstile::breaker",
        lane = transition.provider_id.as_str(),
        from = transition.from.as_str(),
        to = transition.to.as_str(),
        "breaker transition"
    );
}

/// A Retry-After pause of a provider lane.
pub(crate) fn pause(pause: &Pause, now: Millis) {
    tracing::info!(
        target: "turnstile::pause",
        lane = pause.provider_id.as_str(),
        for_ms = pause.until_epoch_ms.saturating_sub(now),
        "provider lane paused"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_counted_without_a_subscriber() {
        let mut log = RefusalLog::default();
        log.refused("lane", Reason::QueueFull, 0);
        assert_eq!((log.rows, log.due()), (0, None));
    }

    #[test]
    fn the_summary_is_bounded_and_names_no_unconfigured_provider() {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let mut log = RefusalLog::default();
        log.refused("anything a caller typed", Reason::UnconfiguredProvider, 0);
        assert!(log.counts.contains_key(UNCONFIGURED));
        assert!(!log.counts.contains_key("anything a caller typed"));
        for i in 0..(MAX_SUMMARY_ROWS + 10) {
            log.refused(&format!("lane-{i}"), Reason::QueueFull, 1);
        }
        assert_eq!(log.rows, MAX_SUMMARY_ROWS);
        assert_eq!(log.other, 11);
        log.flush(SUMMARY_EVERY_MS - 1);
        assert!(!log.counts.is_empty(), "not before the interval ends");
        log.flush(SUMMARY_EVERY_MS);
        assert!(log.counts.is_empty() && log.other == 0 && log.interval_start.is_none());
    }
}
