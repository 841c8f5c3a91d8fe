//! A hand-written Prometheus text exposition (format 0.0.4) of the admission counters, for a
//! service's `/metrics` without a Prometheus client dependency.
//!
//! Names follow Prometheus conventions (`decision_admission_total`, …); labels are the same
//! fixed vocabularies as the OpenTelemetry dimensions (`decision`, `reason`, `breaker_status`),
//! so the series count is bounded by the vocabularies' sizes. Label values come only from those
//! vocabularies and need no escaping.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};

use turnstile_admission::{BreakerState, Decision, Reason};

type Series = BTreeMap<Vec<(&'static str, &'static str)>, u64>;

#[derive(Debug, Default)]
pub(crate) struct PrometheusCounters {
    admission: Mutex<Series>,
    throttles: Mutex<Series>,
    transitions: Mutex<Series>,
}

fn bump(series: &Mutex<Series>, labels: Vec<(&'static str, &'static str)>) {
    let mut series = series.lock().unwrap_or_else(PoisonError::into_inner);
    *series.entry(labels).or_insert(0) += 1;
}

impl PrometheusCounters {
    pub(crate) fn decision(&self, decision: Decision, reason: Reason, breaker: BreakerState) {
        let labels = vec![
            ("decision", decision.as_str()),
            ("reason", reason.as_str()),
            ("breaker_status", breaker.as_str()),
        ];
        if decision != Decision::Admit {
            bump(&self.throttles, labels.clone());
        }
        bump(&self.admission, labels);
    }

    pub(crate) fn transition(&self, to: BreakerState) {
        bump(&self.transitions, vec![("breaker_status", to.as_str())]);
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for (name, help, series) in [
            (
                "decision_admission_total",
                "Admission decisions.",
                &self.admission,
            ),
            (
                "decision_throttles_total",
                "Admission decisions that did not admit.",
                &self.throttles,
            ),
            (
                "decision_breaker_transitions_total",
                "Circuit breaker transitions.",
                &self.transitions,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let series = series.lock().unwrap_or_else(PoisonError::into_inner);
            for (labels, value) in series.iter() {
                let labels: Vec<String> =
                    labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
                let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_with_fixed_labels() {
        let counters = PrometheusCounters::default();
        counters.decision(Decision::Admit, Reason::Admitted, BreakerState::Closed);
        counters.decision(Decision::Reject, Reason::QueueTimeout, BreakerState::Open);
        counters.decision(Decision::Reject, Reason::QueueTimeout, BreakerState::Open);
        counters.transition(BreakerState::Open);
        let text = counters.render();
        assert!(text.contains("# TYPE decision_admission_total counter"));
        assert!(text.contains(
            "decision_throttles_total{decision=\"reject\",reason=\"queue-timeout\",breaker_status=\"open\"} 2"
        ));
        assert!(text.contains("decision_breaker_transitions_total{breaker_status=\"open\"} 1"));
    }
}
