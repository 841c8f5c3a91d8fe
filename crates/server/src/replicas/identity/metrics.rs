//! The mirror's `/metrics` families (`turnstile_identity_*`): its counters, and whether it
//! follows the shared feed, written by their collector ([`Mirror::collector`]).
//!
//! Invariant: no label at all, so no tenant ID can reach one. The counters are atomics the
//! follower adds to; a scrape reads them without taking the cursor's lock.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use turnstile_shell::{plain_metrics, Collector, DescriptorEncoder, MetricKind};

use super::Mirror;

/// Counters of the mirror (`/metrics`: `turnstile_identity_*`, no tenant label).
#[derive(Debug, Default)]
pub struct MirrorMetrics {
    pub events_applied: AtomicU64,
    pub follow_errors: AtomicU64,
    /// Events a replica could not apply (its registry refused a registration the writer had
    /// validated): the mirror may differ from the feed until the replica restarts.
    pub apply_errors: AtomicU64,
    pub reseeds: AtomicU64,
    /// Whether the last look at the feed succeeded ([`Mirror::following`]).
    pub(crate) following: AtomicBool,
}

impl MirrorMetrics {
    /// Zero counts, following (as a mirror starts).
    pub(crate) fn at_start() -> Self {
        MirrorMetrics {
            following: AtomicBool::new(true),
            ..MirrorMetrics::default()
        }
    }
}

impl Mirror {
    /// The mirror's counters and whether it follows the feed, for `/metrics`.
    pub fn collector(&self) -> impl Collector {
        Arc::clone(&self.metrics)
    }
}

impl Collector for MirrorMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let get = |value: &AtomicU64| value.load(Ordering::Relaxed);
        plain_metrics(
            &mut encoder,
            &[
                (
                    "turnstile_identity_events_applied",
                    MetricKind::Counter,
                    "Events of the shared key, profile and audit feed applied to this replica's mirror.",
                    get(&self.events_applied),
                ),
                (
                    "turnstile_identity_follow_errors",
                    MetricKind::Counter,
                    "Failed reads of the shared feed (Redis unreachable) and audit records not shared.",
                    get(&self.follow_errors),
                ),
                (
                    "turnstile_identity_apply_errors",
                    MetricKind::Counter,
                    "Registrations of the shared feed this replica's registry refused.",
                    get(&self.apply_errors),
                ),
                (
                    "turnstile_identity_reseeds",
                    MetricKind::Counter,
                    "Times this replica seeded the shared feed again after Redis lost it.",
                    get(&self.reseeds),
                ),
                (
                    "turnstile_identity_following",
                    MetricKind::Gauge,
                    "1 while the last read of the shared feed succeeded.",
                    u64::from(self.following.load(Ordering::Relaxed)),
                ),
            ],
        )
    }
}
