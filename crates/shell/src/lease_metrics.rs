//! Counters and gauges of the driver's leases and waiters, for `/metrics` (through their
//! [`Collector`]: the families `turnstile_leases_*`, `turnstile_waiters_*`,
//! `turnstile_breaker_transitions_dropped_total`, `turnstile_budgets_evicted_total`,
//! `turnstile_lease_journal_failures_total`).
//!
//! Invariant: no label at all: these are plain totals, so no tenant ID can reach them. Written
//! only by the driver task; read by anyone without a round trip to it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::exposition::{plain_metrics, Collector, DescriptorEncoder, MetricKind};

/// Lease and waiter totals of one driver.
#[derive(Debug, Default)]
pub struct LeaseMetrics {
    /// Leases held now.
    pub leases_active: AtomicU64,
    /// Admission requests waiting now.
    pub waiters_queued: AtomicU64,
    /// Leases granted.
    pub leases_granted: AtomicU64,
    /// Leases released by their holder.
    pub leases_released: AtomicU64,
    /// Leases that expired without a heartbeat.
    pub leases_expired: AtomicU64,
    /// Grants whose caller was gone (given back at once).
    pub leases_undeliverable: AtomicU64,
    /// Waiting callers that went away.
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

impl Collector for LeaseMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let get = |value: &AtomicU64| value.load(Ordering::Relaxed);
        plain_metrics(
            &mut encoder,
            &[
                (
                    "turnstile_leases_active",
                    MetricKind::Gauge,
                    "Leases currently held.",
                    get(&self.leases_active),
                ),
                (
                    "turnstile_waiters_queued",
                    MetricKind::Gauge,
                    "Admission requests waiting in a queue.",
                    get(&self.waiters_queued),
                ),
                (
                    "turnstile_leases_granted",
                    MetricKind::Counter,
                    "Leases granted.",
                    get(&self.leases_granted),
                ),
                (
                    "turnstile_leases_released",
                    MetricKind::Counter,
                    "Leases released by their holder.",
                    get(&self.leases_released),
                ),
                (
                    "turnstile_leases_expired",
                    MetricKind::Counter,
                    "Leases reclaimed after their TTL without a heartbeat.",
                    get(&self.leases_expired),
                ),
                (
                    "turnstile_leases_undeliverable",
                    MetricKind::Counter,
                    "Leases given back at once because their holder had gone (a client that disconnected, a dropped in-process lease).",
                    get(&self.leases_undeliverable),
                ),
                (
                    "turnstile_waiters_disconnected",
                    MetricKind::Counter,
                    "Queued requests cancelled because the caller went away.",
                    get(&self.waiters_disconnected),
                ),
                (
                    "turnstile_breaker_transitions_dropped",
                    MetricKind::Counter,
                    "Breaker transitions the core dropped before they could be journaled.",
                    get(&self.transitions_dropped),
                ),
                (
                    "turnstile_budgets_evicted",
                    MetricKind::Counter,
                    "Budgets forgotten because nobody charged or settled them for their idle time (budgets.idle_ms).",
                    get(&self.budgets_evicted),
                ),
                (
                    "turnstile_leases_reinstated",
                    MetricKind::Counter,
                    "Leases granted before a restart and put back at start.",
                    get(&self.leases_reinstated),
                ),
                (
                    "turnstile_lease_journal_failures",
                    MetricKind::Counter,
                    "Batches of lease grants and releases that could not be made durable.",
                    get(&self.journal_failures),
                ),
            ],
        )
    }
}
