//! What only the HTTP service counts for `/metrics`: connections, cuts, store errors, actual
//! usage reported on release, ignored bucket checkpoints, handler panics (families `turnstile_http_*`,
//! `turnstile_store_errors_total`, `turnstile_actual_*_total`,
//! `turnstile_bucket_checkpoints_ignored_total`), written by its [`Collector`].
//!
//! `/metrics` itself is one [`Exposition`](turnstile_shell::Exposition) that this joins with
//! the other parts' collectors ([`crate::api::ops::metrics`]).
//!
//! Invariant: the only label is the cut `kind`, a closed vocabulary, so no principal,
//! workspace, provider, budget or lease ID can ever reach a label. Counters are atomics;
//! `/metrics` reads them without a round trip to the driver.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use turnstile_shell::{metric_family, plain_metrics, Collector, DescriptorEncoder, MetricKind};

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
    /// Every connection slot was taken and this connection had sent nothing for
    /// `http.full_pool_first_byte_ms`: closed for a waiting one ([`crate::http::fresh`]).
    FirstByteTimeout,
}

impl Cut {
    pub const ALL: [Cut; 10] = [
        Cut::HeaderTimeout,
        Cut::IdleTimeout,
        Cut::BodyTimeout,
        Cut::BodyTooSlow,
        Cut::WriteTimeout,
        Cut::AddressCap,
        Cut::KeyCap,
        Cut::PendingCap,
        Cut::Overloaded,
        Cut::FirstByteTimeout,
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
            Cut::FirstByteTimeout => "first-byte-timeout",
        }
    }
}

/// The metrics only the HTTP service sees.
#[derive(Debug, Default)]
pub struct Metrics {
    /// By [`Cut`], in [`Cut::ALL`] order.
    pub cuts: [AtomicU64; 10],
    pub connections_open: AtomicU64,
    pub connections_total: AtomicU64,
    pub store_errors: AtomicU64,
    pub actual_tokens: AtomicU64,
    /// Micro-dollars, so the counter stays an integer.
    pub actual_cost_micro_usd: AtomicU64,
    /// Bucket checkpoints found at the start but not used (stale or unreadable).
    pub bucket_checkpoints_ignored: AtomicU64,
    /// Requests whose handler panicked ([`crate::http::panics`]).
    pub handler_panics: AtomicU64,
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
}

impl Collector for Metrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let get = |value: &AtomicU64| value.load(Ordering::Relaxed);
        plain_metrics(
            &mut encoder,
            &[
                (
                    "turnstile_http_connections_open",
                    MetricKind::Gauge,
                    "Open HTTP connections.",
                    get(&self.connections_open),
                ),
                (
                    "turnstile_http_connections",
                    MetricKind::Counter,
                    "Accepted HTTP connections.",
                    get(&self.connections_total),
                ),
                (
                    "turnstile_store_errors",
                    MetricKind::Counter,
                    "Failed writes to the durable store.",
                    get(&self.store_errors),
                ),
                (
                    "turnstile_actual_tokens",
                    MetricKind::Counter,
                    "Tokens reported as actually used on release.",
                    get(&self.actual_tokens),
                ),
                (
                    "turnstile_actual_cost_micro_usd",
                    MetricKind::Counter,
                    "Cost reported as actually spent on release, in micro-USD.",
                    get(&self.actual_cost_micro_usd),
                ),
                (
                    "turnstile_bucket_checkpoints_ignored",
                    MetricKind::Counter,
                    "Bucket checkpoints of a clean stop found at the start but not used (stale or unreadable): the rate buckets were drained instead.",
                    get(&self.bucket_checkpoints_ignored),
                ),
                (
                    "turnstile_http_handler_panics",
                    MetricKind::Counter,
                    "Requests whose handler panicked: answered 500 internal-error and logged (a bug to report).",
                    get(&self.handler_panics),
                ),
            ],
        )?;
        let mut series = metric_family(
            &mut encoder,
            "turnstile_http_cuts",
            "Connections closed or requests refused by a deadline or a cap, by kind.",
            MetricKind::Counter,
        )?;
        for cut in Cut::ALL {
            series.labelled(&[("kind", cut.label())], self.cuts_of(cut))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_series_carry_no_labels() {
        let metrics = std::sync::Arc::new(Metrics::default());
        let render = || {
            turnstile_shell::Exposition::new()
                .with(metrics.clone())
                .text()
        };
        metrics.connections_total.fetch_add(3, Ordering::Relaxed);
        let text = render();
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
        assert!(render().contains("turnstile_http_cuts_total{kind=\"body-too-slow\"} 1"));
    }
}
