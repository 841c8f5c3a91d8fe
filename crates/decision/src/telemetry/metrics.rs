//! The three admission counters on an OpenTelemetry meter. Dimensions: decision, reason and
//! breaker status ([`decision_dimensions`]); transitions carry the breaker status they moved to.

use opentelemetry::metrics::{Counter, Meter};
use opentelemetry::KeyValue;
use turnstile_admission::{BreakerState, Decision, Reason};

use super::attributes::{decision_dimensions, BREAKER_STATUS};

#[derive(Clone)]
pub(crate) struct Instruments {
    admission: Counter<u64>,
    throttles: Counter<u64>,
    breaker_transitions: Counter<u64>,
}

impl Instruments {
    pub(crate) fn new(meter: &Meter) -> Self {
        Instruments {
            admission: meter
                .u64_counter("decision.admission")
                .with_description("Admission decisions")
                .build(),
            throttles: meter
                .u64_counter("decision.throttles")
                .with_description("Admission decisions that did not admit")
                .build(),
            breaker_transitions: meter
                .u64_counter("decision.breaker_transitions")
                .with_description("Circuit breaker transitions")
                .build(),
        }
    }

    pub(crate) fn decision(&self, decision: Decision, reason: Reason, breaker: BreakerState) {
        let dimensions = decision_dimensions(decision, reason, breaker);
        self.admission.add(1, &dimensions);
        if decision != Decision::Admit {
            self.throttles.add(1, &dimensions);
        }
    }

    pub(crate) fn transition(&self, to: BreakerState) {
        self.breaker_transitions
            .add(1, &[KeyValue::new(BREAKER_STATUS, to.as_str())]);
    }
}
