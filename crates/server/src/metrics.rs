//! Service metrics in the Prometheus text exposition format.
//!
//! `/metrics` is three parts, each counted once: the admission metrics family (decisions and
//! breaker transitions, from [`Telemetry`](turnstile_shell::Telemetry), which also feeds
//! OpenTelemetry), the driver's lease and waiter totals
//! ([`LeaseMetrics`](turnstile_shell::LeaseMetrics)), and what only the HTTP service sees
//! (connections, store errors, actual usage reported on release).
//!
//! Invariant: labels come from closed vocabularies only (`decision`, `reason`, breaker
//! `state`), so no principal, workspace, provider, budget or lease ID can ever reach a label.
//! Counters are atomics; `/metrics` reads them without a round trip to the driver.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The metrics only the HTTP service sees.
#[derive(Debug, Default)]
pub struct Metrics {
    pub connections_open: AtomicU64,
    pub connections_total: AtomicU64,
    pub store_errors: AtomicU64,
    pub actual_tokens: AtomicU64,
    /// Micro-dollars, so the counter stays an integer.
    pub actual_cost_micro_usd: AtomicU64,
}

impl Metrics {
    /// The text exposition of the service's own series.
    pub fn render(&self) -> String {
        let plain: [(&str, &str, &str, &AtomicU64); 5] = [
            (
                "turnstile_http_connections_open",
                "gauge",
                "Open HTTP connections.",
                &self.connections_open,
            ),
            (
                "turnstile_http_connections_total",
                "counter",
                "Accepted HTTP connections.",
                &self.connections_total,
            ),
            (
                "turnstile_store_errors_total",
                "counter",
                "Failed writes to the durable store.",
                &self.store_errors,
            ),
            (
                "turnstile_actual_tokens_total",
                "counter",
                "Tokens reported as actually used on release.",
                &self.actual_tokens,
            ),
            (
                "turnstile_actual_cost_micro_usd_total",
                "counter",
                "Cost reported as actually spent on release, in micro-USD.",
                &self.actual_cost_micro_usd,
            ),
        ];
        let mut out = String::with_capacity(1024);
        for (name, kind, help, value) in plain {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_series_carry_no_labels() {
        let metrics = Metrics::default();
        metrics.connections_total.fetch_add(3, Ordering::Relaxed);
        let text = metrics.render();
        assert!(text.contains("turnstile_http_connections_total 3"));
        assert!(!text.contains('{'), "{text}");
    }
}
