//! Service metrics in the Prometheus text exposition format.
//!
//! `/metrics` is three parts, each counted once: the admission metrics family (decisions and
//! breaker transitions, from [`Telemetry`](turnstile_shell::Telemetry), which also feeds
//! OpenTelemetry), the driver's lease and waiter totals
//! ([`LeaseMetrics`](turnstile_shell::LeaseMetrics)), and what only the HTTP service sees
//! (connections, store errors, actual usage reported on release).
//!
//! Invariant: labels come from closed vocabularies only (`decision`, `reason`, breaker
//! `state`, cut `kind`), so no principal, workspace, provider, budget or lease ID can ever reach a label.
//! Counters are atomics; `/metrics` reads them without a round trip to the driver.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why the service cut a connection or refused a request before its handler ran: one
/// `turnstile_http_cuts_total{kind}` series each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The request head did not arrive within `http.header_read_timeout_ms`.
    HeaderTimeout,
    /// A keep-alive connection stayed idle past `http.keep_alive_idle_ms`.
    IdleTimeout,
    /// The body did not arrive whole within `http.body_read_timeout_ms`.
    BodyTimeout,
    /// The body arrived slower than `http.body_min_bytes_per_sec`.
    BodyTooSlow,
    /// A response write made no progress within `http.response_write_timeout_ms`.
    WriteTimeout,
    /// The client address held `http.max_connections_per_address` connections already.
    AddressCap,
    /// The API key had `http.max_requests_per_key` requests in flight already.
    KeyCap,
    /// The principal key had `admission.max_pending_per_key` admissions waiting already.
    PendingCap,
    /// The general connection pool was full and the request was not an operator's.
    Overloaded,
}

impl Cut {
    pub const ALL: [Cut; 9] = [
        Cut::HeaderTimeout,
        Cut::IdleTimeout,
        Cut::BodyTimeout,
        Cut::BodyTooSlow,
        Cut::WriteTimeout,
        Cut::AddressCap,
        Cut::KeyCap,
        Cut::PendingCap,
        Cut::Overloaded,
    ];

    /// The `kind` label.
    pub fn label(self) -> &'static str {
        match self {
            Cut::HeaderTimeout => "header-timeout",
            Cut::IdleTimeout => "idle-timeout",
            Cut::BodyTimeout => "body-timeout",
            Cut::BodyTooSlow => "body-too-slow",
            Cut::WriteTimeout => "write-timeout",
            Cut::AddressCap => "address-cap",
            Cut::KeyCap => "key-cap",
            Cut::PendingCap => "pending-cap",
            Cut::Overloaded => "overloaded",
        }
    }
}

/// The metrics only the HTTP service sees.
#[derive(Debug, Default)]
pub struct Metrics {
    /// By [`Cut`], in [`Cut::ALL`] order.
    pub cuts: [AtomicU64; 9],
    pub connections_open: AtomicU64,
    pub connections_total: AtomicU64,
    pub store_errors: AtomicU64,
    pub actual_tokens: AtomicU64,
    /// Micro-dollars, so the counter stays an integer.
    pub actual_cost_micro_usd: AtomicU64,
    /// Bucket checkpoints found at the start but not used (stale or unreadable).
    pub bucket_checkpoints_ignored: AtomicU64,
}

impl Metrics {
    /// Counts one cut.
    pub fn cut(&self, cut: Cut) {
        if let Some(i) = Cut::ALL.iter().position(|c| *c == cut) {
            self.cuts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Cuts of one kind so far.
    pub fn cuts_of(&self, cut: Cut) -> u64 {
        Cut::ALL
            .iter()
            .position(|c| *c == cut)
            .map_or(0, |i| self.cuts[i].load(Ordering::Relaxed))
    }

    /// The text exposition of the service's own series.
    pub fn render(&self) -> String {
        let plain: [(&str, &str, &str, &AtomicU64); 6] = [
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
            (
                "turnstile_bucket_checkpoints_ignored_total",
                "counter",
                "Bucket checkpoints of a clean stop found at the start but not used (stale or unreadable): the rate buckets were drained instead.",
                &self.bucket_checkpoints_ignored,
            ),
        ];
        let mut out = String::with_capacity(1024);
        for (name, kind, help, value) in plain {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        let name = "turnstile_http_cuts_total";
        let _ = writeln!(
            out,
            "# HELP {name} Connections closed or requests refused by a deadline or a cap, by kind."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        for cut in Cut::ALL {
            let _ = writeln!(
                out,
                "{name}{{kind=\"{}\"}} {}",
                cut.label(),
                self.cuts_of(cut)
            );
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
        let labelled: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains('{'))
            .collect();
        assert_eq!(labelled.len(), Cut::ALL.len(), "{text}");
        assert!(labelled
            .iter()
            .all(|l| l.starts_with("turnstile_http_cuts_total{kind=")));
        metrics.cut(Cut::BodyTooSlow);
        assert_eq!(metrics.cuts_of(Cut::BodyTooSlow), 1);
        assert!(metrics
            .render()
            .contains("turnstile_http_cuts_total{kind=\"body-too-slow\"} 1"));
    }
}
