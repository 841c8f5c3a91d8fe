//! OTLP export for a command (`serve`, `evaluate`): the OTLP/HTTP pipeline to a collector,
//! the [`Telemetry`] recording into it, and the flush at the end.
//!
//! Invariants: the pipeline is built outside any async runtime (the OTLP HTTP exporter uses a
//! blocking client on the SDK's own threads) and flushed after the runtime is gone, on every
//! path out of the command; an unreachable collector never fails the command: a failed flush is
//! one warning line on stderr naming the command.

use anyhow::Context;
use turnstile_shell::telemetry::otlp::{otlp_pipeline, OtlpPipeline};
use turnstile_shell::Telemetry;

/// A command's OTLP export; [`OtlpExport::flush`] it before the process ends.
pub struct OtlpExport {
    pipeline: OtlpPipeline,
    command: &'static str,
}

impl OtlpExport {
    /// Starts exporting spans and metrics to `endpoint` (e.g. `http://localhost:4318`) for
    /// `command` (the word its warnings start with, e.g. `turnstile serve`).
    pub fn start(endpoint: &str, command: &'static str) -> anyhow::Result<Self> {
        let pipeline = otlp_pipeline(endpoint)
            .with_context(|| format!("cannot export telemetry to {endpoint}"))?;
        Ok(OtlpExport { pipeline, command })
    }

    /// Telemetry that records into the export.
    pub fn telemetry(&self) -> Telemetry {
        self.pipeline.telemetry.clone()
    }

    /// Flushes what is still buffered and stops the exporters; call it after the async runtime
    /// is dropped.
    pub fn flush(self) {
        if let Err(error) = self.pipeline.tracer_provider.shutdown() {
            eprintln!("{}: flushing spans failed: {error}", self.command);
        }
        if let Err(error) = self.pipeline.meter_provider.shutdown() {
            eprintln!("{}: flushing metrics failed: {error}", self.command);
        }
    }
}
