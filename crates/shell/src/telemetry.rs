//! Admission telemetry with OpenTelemetry: one `decision.admit` span per admission request, a
//! `breaker.transition` event per breaker transition, one metrics family (two counters, and
//! the specification's three OpenTelemetry instruments) fed to both OpenTelemetry and a
//! Prometheus text exposition, and structured log records.
//!
//! # What is recorded
//!
//! - **Span `decision.admit`** — opens when admission is requested, closes on rejection,
//!   deferral or lease release. Status `ok` for admit, `unset` for defer, `error` (description:
//!   the reason) for reject. Attributes: [`attributes`] (decision, reason, queue delay, active
//!   and queued counts, estimates, retry pressure, breaker status, adapter id).
//! - **Event `breaker.transition`** on the span of the attempt that caused it
//!   (`turnstile.breaker.from`, `turnstile.breaker.to`, `turnstile.breaker.failures`).
//! - **Counters**: one family (`metrics.rs`; with the specification's `decision.admission`,
//!   `decision.throttles` and `decision.breaker_transitions`, OpenTelemetry only):
//!   `turnstile.admission.decisions` (every decision,
//!   by decision and reason) and `turnstile.breaker.transitions` (every transition, by the state
//!   entered), counted once into both OpenTelemetry and `/metrics`
//!   (`turnstile_admission_decisions_total`, `turnstile_breaker_transitions_total`).
//! - **Logs**: one [`LogRecord`] per non-admit decision and per breaker transition, to an
//!   optional [`LogSink`].
//!
//! # Invariants
//!
//! - **No tenant identity.** Nothing here receives a principal or workspace ID: the inputs are
//!   admission [`Evidence`](turnstile_admission::Evidence) (which has no field for one), breaker
//!   transitions (provider lane only) and the adapter id. Metric dimensions are only the
//!   fixed vocabularies decision, reason and breaker status, so cardinality is bounded.
//! - **Telemetry never changes a result.** The OpenTelemetry API has no error path into the
//!   caller; every call into an exporter-backed object and into the log sink is additionally
//!   guarded against panics (`guarded`). The evaluator never reads anything back.

mod admit_span;
pub mod attributes;
mod log;
pub(crate) mod metrics;
#[cfg(feature = "otlp")]
pub mod otlp;

use std::sync::Arc;

use opentelemetry::global::BoxedTracer;
use opentelemetry::metrics::Meter;
use opentelemetry::trace::Tracer;

pub use admit_span::AdmitSpan;
pub use log::{LogLevel, LogRecord, LogSink};
use metrics::Family;
use turnstile_admission::{BreakerState, Decision, Reason};

/// The instrumentation scope name of spans and metrics.
pub const SCOPE: &str = "turnstile";

/// Runs `f`, swallowing a panic from an exporter or sink: telemetry never changes a result.
pub(crate) fn guarded(f: impl FnOnce()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}

/// A cloneable telemetry handle for evaluation requests (`EvaluationRequest::telemetry`).
#[derive(Clone)]
pub struct Telemetry {
    tracer: Arc<BoxedTracer>,
    family: Family,
    log: Option<LogSink>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Telemetry on `tracer` (for example `provider.tracer(SCOPE)`) and `meter`.
    pub fn new<T>(tracer: T, meter: &Meter) -> Self
    where
        T: Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        Telemetry {
            tracer: Arc::new(BoxedTracer::new(Box::new(tracer))),
            family: Family::new(meter),
            log: None,
        }
    }

    /// Telemetry on the global tracer and meter providers.
    pub fn global() -> Self {
        let meter = opentelemetry::global::meter(SCOPE);
        Telemetry {
            tracer: Arc::new(opentelemetry::global::tracer(SCOPE)),
            family: Family::new(&meter),
            log: None,
        }
    }

    /// Also sends [`LogRecord`]s to `sink`.
    pub fn with_log_sink(mut self, sink: LogSink) -> Self {
        self.log = Some(sink);
        self
    }

    /// The metrics family's `/metrics` collector (decisions and breaker transitions, as
    /// counted by this handle and its clones), for an [`Exposition`](crate::Exposition).
    pub fn collector(&self) -> impl crate::Collector {
        self.family.collector()
    }

    /// The metrics family alone, in the text `/metrics` writes it in (format 0.0.4), as
    /// counted by this handle and its clones.
    pub fn prometheus_text(&self) -> String {
        crate::Exposition::new().with(self.collector()).text()
    }

    /// How many decisions of one kind this handle and its clones counted (what `/metrics`
    /// shows).
    pub fn decision_count(&self, decision: Decision, reason: Reason) -> u64 {
        self.family.decision_count(decision, reason)
    }

    /// How many breaker transitions into `state` this handle and its clones counted.
    pub fn transition_count(&self, state: BreakerState) -> u64 {
        self.family.transition_count(state)
    }

    /// Opens the `decision.admit` span of one admission request; `adapter_id` names what the
    /// admission is for (the evaluator's adapter, or the service's provider lane).
    pub fn admission_requested(&self, adapter_id: &str) -> AdmitSpan {
        AdmitSpan::open(self.clone(), adapter_id)
    }

    pub(crate) fn log(&self, record: LogRecord) {
        if let Some(sink) = &self.log {
            guarded(|| sink(&record));
        }
    }
}
