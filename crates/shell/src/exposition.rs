//! The one Prometheus exposition of every host: one [`Exposition`] (a `prometheus-client`
//! registry) that each part's counters join as a [`Collector`], encoded by the library into
//! the Prometheus text format 0.0.4 that `/metrics` has always served.
//!
//! # Why `prometheus-client` (the Prometheus project's crate), not OpenTelemetry's exporter
//!
//! - **Text and content type.** `/metrics` serves `text/plain; version=0.0.4`, with
//!   `# HELP x_total` / `# TYPE x_total counter` lines named like the series. Since 0.26
//!   `prometheus-client` writes exactly that ([`prometheus_text`], [`CONTENT_TYPE`]), so every
//!   family keeps its name, type, labels and HELP line byte for byte. Its OpenMetrics encoder
//!   would name the family without `_total` and end with `# EOF`, so it is not used.
//!   `opentelemetry-prometheus` writes 0.0.4 too (through a second library, tikv's
//!   `prometheus`), but adds `otel_scope_*` labels and a `target_info` family unless told not
//!   to, appends unit suffixes, needs an SDK meter provider in every process, moves in lockstep
//!   with the OpenTelemetry SDK version, and its own README points new projects to OTLP.
//! - **Cost on the hot path.** Nothing changes there: decisions, leases and proxied calls still
//!   add one to a relaxed atomic. The collectors read those atomics at scrape time. Through the
//!   OpenTelemetry exporter, each admission would instead go through the SDK's attribute-set
//!   lookup (a hash and a lock per add) into an aggregation the exporter reads back.
//! - **`_total`.** The library adds the suffix to counters, so a family is named here without
//!   it ([`MetricKind::Counter`]); the series names on `/metrics` are unchanged.
//! - **Labels** are borrowed `(&str, &str)` pairs from closed vocabularies, escaped by the
//!   library. No exemplars (OpenMetrics only; none are recorded).
//!
//! # Invariants
//!
//! - Every family is written through [`metric_family`] (or [`plain_metrics`]), so it has
//!   exactly one HELP and one TYPE line, before its series; a family with no series yet keeps
//!   its HELP and TYPE. (Coordination, in `turnstile-coord`, which does not depend on this
//!   crate, calls the same library's `encode_descriptor` directly.)
//! - No principal, workspace, budget or lease ID is ever a label: the labels each collector
//!   writes are closed vocabularies, or the proxy's provider lanes (fixed at start).

use std::fmt;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

pub use prometheus_client::collector::Collector;
pub use prometheus_client::encoding::DescriptorEncoder;

/// The content type of [`Exposition::text`] (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// What a family is: the closed vocabulary of the families on `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only grows; its name is given without `_total`, which the encoder adds.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// The registry every part joins: its text is `/metrics`.
#[derive(Debug, Default)]
pub struct Exposition {
    registry: Registry,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Exposition::default()
    }

    /// Adds `collector`; families appear in the order their collectors were added.
    pub fn with(mut self, collector: impl Collector) -> Self {
        self.registry.register_collector(Box::new(collector));
        self
    }

    /// The text exposition (format 0.0.4) of every collector, read now.
    pub fn text(&self) -> String {
        let mut text = String::with_capacity(8 * 1024);
        // Writing into a `String` does not fail, and no collector here returns an error of
        // its own: a failure could only cut the text short.
        let _ = prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

/// One family being written: its HELP and TYPE lines are out; [`MetricSeries::labelled`] adds
/// series.
pub struct MetricSeries<'a> {
    encoder: MetricEncoder<'a>,
    kind: MetricKind,
}

/// Starts the family `name` (a counter's without `_total`) with its HELP and TYPE lines.
pub fn metric_family<'a>(
    encoder: &'a mut DescriptorEncoder<'_>,
    name: &'a str,
    help: &str,
    kind: MetricKind,
) -> Result<MetricSeries<'a>, fmt::Error> {
    let metric_type = match kind {
        MetricKind::Counter => MetricType::Counter,
        MetricKind::Gauge => MetricType::Gauge,
    };
    let encoder = encoder.encode_descriptor(name, help, None, metric_type)?;
    Ok(MetricSeries { encoder, kind })
}

impl MetricSeries<'_> {
    /// One series of the family, with `labels` (in this order).
    pub fn labelled(&mut self, labels: &[(&str, &str)], value: u64) -> fmt::Result {
        let encoder = self.encoder.encode_family(&labels)?;
        write(self.kind, encoder, value)
    }

    /// The family's only series, without labels.
    pub fn value(self, value: u64) -> fmt::Result {
        write(self.kind, self.encoder, value)
    }
}

fn write(kind: MetricKind, encoder: MetricEncoder<'_>, value: u64) -> fmt::Result {
    match kind {
        MetricKind::Counter => ConstCounter::new(value).encode(encoder),
        MetricKind::Gauge => ConstGauge::new(value).encode(encoder),
    }
}

/// Families of one unlabelled series each: `(name, kind, help, value)`.
pub fn plain_metrics(
    encoder: &mut DescriptorEncoder<'_>,
    families: &[(&str, MetricKind, &str, u64)],
) -> fmt::Result {
    for &(name, kind, help, value) in families {
        metric_family(encoder, name, help, kind)?.value(value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Two;

    impl Collector for Two {
        fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
            plain_metrics(&mut encoder, &[("a", MetricKind::Gauge, "A gauge.", 3)])?;
            let mut series = metric_family(&mut encoder, "b", "B counts.", MetricKind::Counter)?;
            series.labelled(&[("k", "x"), ("j", "y")], 2)?;
            metric_family(&mut encoder, "c", "Nothing yet.", MetricKind::Counter)?;
            Ok(())
        }
    }

    #[test]
    fn writes_the_text_format_0_0_4_that_metrics_has_always_served() {
        assert_eq!(
            Exposition::new().with(Two).text(),
            "# HELP a A gauge.\n# TYPE a gauge\na 3\n\
             # HELP b_total B counts.\n# TYPE b_total counter\nb_total{k=\"x\",j=\"y\"} 2\n\
             # HELP c_total Nothing yet.\n# TYPE c_total counter\n"
        );
        assert_eq!(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    }
}
