//! The live `decision.admit` span of one admission request (used by the evaluator and by the
//! admission service, which keeps the span of a granted lease open until the lease ends).
//!
//! Lifecycle: [`AdmitSpan::open`] when admission is requested; [`AdmitSpan::queued`] if the
//! request waits (counted as a `defer` decision); then exactly one of
//! [`AdmitSpan::admitted`] (span stays open while the lease is held) followed by
//! [`AdmitSpan::released`], [`AdmitSpan::rejected`], [`AdmitSpan::deferred`] or
//! [`AdmitSpan::failed`]. Each closing call ends the span; dropping an unclosed span ends it too
//! (the SDK ends spans on drop), so a cancelled attempt never leaks one. Every decision is
//! counted once; every breaker transition becomes one event, one count and one log record.

use std::collections::BTreeMap;

use opentelemetry::global::BoxedSpan;
use opentelemetry::trace::{Span, Status, Tracer};
use opentelemetry::KeyValue;
use turnstile_admission::{BreakerTransition, Decision, Evidence};

use super::attributes::{
    evidence_attributes, ADAPTER_ID, BREAKER_FAILURES, BREAKER_FROM, BREAKER_TO, DECISION, REASON,
};
use super::log::{LogLevel, LogRecord};
use super::{guarded, Telemetry};

/// One admission request's span.
///
/// A span that does not record (no tracer installed, or sampled out) is still opened and
/// ended, but nothing is built for it: no attribute, status or event values (their strings
/// and vectors cost more than the rest of the span). Counts and log records do not depend on
/// it.
pub struct AdmitSpan {
    telemetry: Telemetry,
    /// `None` when the tracer panicked; attributes go only to a span that records.
    span: Option<BoxedSpan>,
    recording: bool,
    adapter_id: String,
}

impl AdmitSpan {
    pub(crate) fn open(telemetry: Telemetry, adapter_id: &str) -> Self {
        let mut span = None;
        let mut recording = false;
        guarded(|| {
            let mut started = telemetry.tracer.start("decision.admit");
            recording = started.is_recording();
            if recording {
                started.set_attribute(KeyValue::new(ADAPTER_ID, adapter_id.to_owned()));
            }
            span = Some(started);
        });
        AdmitSpan {
            telemetry,
            span,
            recording,
            adapter_id: adapter_id.to_owned(),
        }
    }

    /// Runs `f` on the span when it records.
    fn with_span(&mut self, f: impl FnOnce(&mut BoxedSpan)) {
        if !self.recording {
            return;
        }
        if let Some(span) = self.span.as_mut() {
            guarded(|| f(span));
        }
    }

    fn end(&mut self) {
        if let Some(mut span) = self.span.take() {
            guarded(move || span.end());
        }
    }

    /// Records a decision: attributes, status, counts, transitions, a log line if throttled.
    fn decide(&mut self, evidence: &Evidence) {
        self.with_span(|span| {
            span.set_attributes(evidence_attributes(evidence));
            span.set_status(match evidence.decision {
                Decision::Admit => Status::Ok,
                Decision::Defer => Status::Unset,
                Decision::Reject => Status::error(evidence.reason.as_str()),
            });
        });
        let family = &self.telemetry.family;
        family.decision(evidence.decision, evidence.reason);
        family.concluded(evidence.decision, evidence.reason, evidence.breaker_state);
        if evidence.decision != Decision::Admit {
            let mut attributes = BTreeMap::new();
            attributes.insert(DECISION, evidence.decision.as_str().to_owned());
            attributes.insert(REASON, evidence.reason.as_str().to_owned());
            attributes.insert(
                super::attributes::BREAKER_STATUS,
                evidence.breaker_state.as_str().to_owned(),
            );
            attributes.insert(ADAPTER_ID, self.adapter_id.clone());
            self.telemetry.log(LogRecord {
                level: LogLevel::Info,
                message: "admission throttled",
                attributes,
            });
        }
        self.transitions(&evidence.breaker_transitions);
    }

    fn transitions(&mut self, transitions: &[BreakerTransition]) {
        for transition in transitions {
            let (from, to) = (transition.from.as_str(), transition.to.as_str());
            let failures = i64::from(transition.failures);
            self.with_span(|span| {
                span.add_event(
                    "breaker.transition",
                    vec![
                        KeyValue::new(BREAKER_FROM, from),
                        KeyValue::new(BREAKER_TO, to),
                        KeyValue::new(BREAKER_FAILURES, failures),
                    ],
                );
            });
            self.telemetry.family.transition(transition.to);
            let mut attributes = BTreeMap::new();
            attributes.insert(BREAKER_FROM, from.to_owned());
            attributes.insert(BREAKER_TO, to.to_owned());
            attributes.insert(ADAPTER_ID, self.adapter_id.clone());
            self.telemetry.log(LogRecord {
                level: LogLevel::Warn,
                message: "breaker transition",
                attributes,
            });
        }
    }

    /// Queued: the request waits. Counts the `defer` decision and adds an `admission.deferred`
    /// event with its reason; the span stays open for the final admit or reject.
    pub fn queued(&mut self, evidence: &Evidence) {
        let reason = evidence.reason.as_str();
        self.with_span(|span| {
            span.add_event("admission.deferred", vec![KeyValue::new(REASON, reason)]);
        });
        self.telemetry
            .family
            .decision(Decision::Defer, evidence.reason);
        // Transitions seen while waiting stay on the waiter and arrive with the final
        // evidence: counting them here would count them twice.
    }

    /// Admitted: the span stays open until the lease is released.
    pub fn admitted(&mut self, evidence: &Evidence) {
        self.decide(evidence);
    }

    /// Rejected: the span ends with status error.
    pub fn rejected(mut self, evidence: &Evidence) {
        self.decide(evidence);
        self.end();
    }

    /// Deferred: the span ends with status unset. (The driver resolves every acquire to an
    /// admit or a reject, so the evaluator does not produce these; hosts polling the core do.)
    pub fn deferred(mut self, evidence: &Evidence) {
        self.decide(evidence);
        self.end();
    }

    /// The registry could not take the request (no evidence exists).
    pub fn failed(mut self) {
        self.with_span(|span| {
            span.set_attribute(KeyValue::new(DECISION, Decision::Reject.as_str()));
            span.set_status(Status::error("registry"));
        });
        self.end();
    }

    /// The lease was released: transitions the outcome caused become events; the span ends.
    pub fn released(mut self, transitions: &[BreakerTransition]) {
        self.transitions(transitions);
        self.end();
    }
}

impl Drop for AdmitSpan {
    fn drop(&mut self) {
        self.end();
    }
}
