//! Coordination's `/metrics` families: the state gauge `turnstile_coordination_state` (one
//! series per [`Health`], 1 for the current one) and the counters
//! `turnstile_coordination_*_total`, written by the coordinator's collector
//! ([`Coordinator::collector`]) through `prometheus-client`, the library of the one registry
//! that `/metrics` is (the host's).
//!
//! Invariant: the only label is the state, a closed vocabulary; no tenant ID reaches a label.
//! The counters are relaxed atomics the admission path adds to; a scrape only reads them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::coordinator::Coordinator;
use crate::health::{Health, HealthCell};

/// Counters for `/metrics` (no labels but the state).
#[derive(Debug, Default)]
pub struct CoordMetrics {
    /// Failed Redis calls.
    pub errors: AtomicU64,
    /// Admissions decided by the declared share.
    pub degraded_admissions: AtomicU64,
    /// Reconciliations after Redis came back.
    pub reconciliations: AtomicU64,
    /// Admissions decided by the shared limits.
    pub shared_admissions: AtomicU64,
    /// Shared acquires refused because another principal's turn came first.
    pub turns: AtomicU64,
    /// Times this replica found a workspace's books lost by Redis (a missing or new books
    /// epoch, or leases of its own missing) and registered its leases there again.
    pub books_lost: AtomicU64,
}

/// A coordinator's collector (what [`Coordinator::collector`] gives): the state and the
/// counters it reads, not the coordinator (whose background task ends with its last owner).
#[derive(Debug)]
struct CoordCollector {
    health: Arc<HealthCell>,
    metrics: Arc<CoordMetrics>,
}

impl Coordinator {
    /// The coordination state and counters, for `/metrics` (read at each scrape).
    pub fn collector(&self) -> impl Collector {
        CoordCollector {
            health: self.health_cell(),
            metrics: Arc::clone(&self.metrics),
        }
    }
}

impl Collector for CoordCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let mut state = encoder.encode_descriptor(
            "turnstile_coordination_state",
            "Whether this replica shares limits through Redis (healthy), enforces its declared share alone (degraded), or is merging back (reconciling).",
            None,
            MetricType::Gauge,
        )?;
        let current = self.health.reported();
        for health in Health::ALL {
            let labels = [("state", health.as_str())];
            ConstGauge::new(u64::from(health == current)).encode(state.encode_family(&labels)?)?;
        }
        let metrics = &self.metrics;
        let counters = [
            (
                "turnstile_coordination_errors",
                "Redis calls that failed or timed out.",
                &metrics.errors,
            ),
            (
                "turnstile_coordination_shared_admissions",
                "Admissions granted through the shared limits.",
                &metrics.shared_admissions,
            ),
            (
                "turnstile_coordination_degraded_admissions",
                "Admissions granted on the declared share while degraded.",
                &metrics.degraded_admissions,
            ),
            (
                "turnstile_coordination_turns",
                "Shared acquires that waited because another principal was further behind its share (fair turns).",
                &metrics.turns,
            ),
            (
                "turnstile_coordination_reconciliations",
                "Recoveries: live leases registered again and pauses merged.",
                &metrics.reconciliations,
            ),
            (
                "turnstile_coordination_books_lost",
                "Times this replica found books Redis had lost (flushed, restarted empty, evicted) and registered its leases there again.",
                &metrics.books_lost,
            ),
        ];
        for (name, help, counter) in counters {
            let family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(counter.load(Ordering::Relaxed)).encode(family)?;
        }
        Ok(())
    }
}
