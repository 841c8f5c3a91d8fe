//! OTLP/HTTP export (cargo feature `otlp`): tracer and meter providers that send spans and
//! metrics to an OpenTelemetry collector, and a [`Telemetry`] on them.
//!
//! The providers are returned so the host keeps them alive and shuts them down (flushing) at
//! exit. Export runs on the SDK's own threads; export failures are the SDK's to log and never
//! reach an evaluation.

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;

use super::{Telemetry, SCOPE};

/// Why the OTLP pipeline could not be built.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// An exporter could not be built.
    #[error("OTLP exporter could not be built: {0}")]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The providers behind an OTLP [`Telemetry`].
pub struct OtlpPipeline {
    /// The span exporter's provider (shut it down to flush).
    pub tracer_provider: SdkTracerProvider,
    /// The metric exporter's provider (shut it down to flush).
    pub meter_provider: SdkMeterProvider,
    /// Telemetry that records into both.
    pub telemetry: Telemetry,
}

/// Builds OTLP/HTTP exporters for `endpoint` (e.g. `http://localhost:4318`).
pub fn otlp_pipeline(endpoint: &str) -> Result<OtlpPipeline, OtlpError> {
    let spans = SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        .build()?;
    let metrics = MetricExporter::builder()
        .with_http()
        .with_endpoint(format!("{}/v1/metrics", endpoint.trim_end_matches('/')))
        .build()?;
    let tracer_provider = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .build();
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics).build())
        .build();
    let telemetry = Telemetry::new(tracer_provider.tracer(SCOPE), &meter_provider.meter(SCOPE));
    Ok(OtlpPipeline {
        tracer_provider,
        meter_provider,
        telemetry,
    })
}
