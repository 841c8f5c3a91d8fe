//! Counters and gauges of the driver's leases and waiters, for `/metrics`.
//!
//! Invariant: no label at all: these are plain totals, so no tenant ID can reach them. Written
//! only by the driver task; read by anyone without a round trip to it.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Lease and waiter totals of one driver.
#[derive(Debug, Default)]
pub struct LeaseMetrics {
    pub leases_active: AtomicU64,
    pub waiters_queued: AtomicU64,
    pub leases_granted: AtomicU64,
    pub leases_released: AtomicU64,
    pub leases_expired: AtomicU64,
    pub leases_undeliverable: AtomicU64,
    pub waiters_disconnected: AtomicU64,
    /// Breaker transitions the core dropped because nobody polled them in time.
    pub transitions_dropped: AtomicU64,
    /// Budgets the core forgot because nobody touched them for their idle time.
    pub budgets_evicted: AtomicU64,
    /// Leases a previous process granted, put back at start.
    pub leases_reinstated: AtomicU64,
    /// Batches of lease events the journal could not make durable (their grants were given
    /// back).
    pub journal_failures: AtomicU64,
}

impl LeaseMetrics {
    /// The text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let series: [(&str, &str, &str, &AtomicU64); 11] = [
            ("turnstile_leases_active", "gauge", "Leases currently held.", &self.leases_active),
            (
                "turnstile_waiters_queued",
                "gauge",
                "Admission requests waiting in a queue.",
                &self.waiters_queued,
            ),
            ("turnstile_leases_granted_total", "counter", "Leases granted.", &self.leases_granted),
            (
                "turnstile_leases_released_total",
                "counter",
                "Leases released by their holder.",
                &self.leases_released,
            ),
            (
                "turnstile_leases_expired_total",
                "counter",
                "Leases reclaimed after their TTL without a heartbeat.",
                &self.leases_expired,
            ),
            (
                "turnstile_leases_undeliverable_total",
                "counter",
                "Leases given back at once because their holder had gone (a client that disconnected, a dropped in-process lease).",
                &self.leases_undeliverable,
            ),
            (
                "turnstile_waiters_disconnected_total",
                "counter",
                "Queued requests cancelled because the caller went away.",
                &self.waiters_disconnected,
            ),
            (
                "turnstile_breaker_transitions_dropped_total",
                "counter",
                "Breaker transitions the core dropped before they could be journaled.",
                &self.transitions_dropped,
            ),
            (
                "turnstile_budgets_evicted_total",
                "counter",
                "Budgets forgotten because nobody charged or settled them for their idle time (budgets.idle_ms).",
                &self.budgets_evicted,
            ),
            (
                "turnstile_leases_reinstated_total",
                "counter",
                "Leases granted before a restart and put back at start.",
                &self.leases_reinstated,
            ),
            (
                "turnstile_lease_journal_failures_total",
                "counter",
                "Batches of lease grants and releases that could not be made durable.",
                &self.journal_failures,
            ),
        ];
        let mut out = String::with_capacity(2048);
        for (name, kind, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        out
    }
}
