//! The one metrics family of admission, counted once and fed to both sinks.
//!
//! | OpenTelemetry instrument | Prometheus series | dimensions |
//! |---|---|---|
//! | `turnstile.admission.decisions` | `turnstile_admission_decisions_total` | `decision`, `reason` |
//! | `turnstile.breaker.transitions` | `turnstile_breaker_transitions_total` | `state` (entered) |
//!
//! Beside them, the specification's instruments (EVALUATOR.md, "Metrics add …"; TESTS.md
//! TELEMETRY-001), OpenTelemetry only (their counts are series of the Prometheus families above:
//! `docs/operations/admission.md`, "Signals"):
//!
//! | OpenTelemetry instrument | counts | dimensions |
//! |---|---|---|
//! | `decision.admission` | every final decision of a request (admit, reject, or a poll's defer; not the deferral of a request that then waits) | `decision`, `reason`, `breaker_status` |
//! | `decision.throttles` | the final decisions that are not admit | `decision`, `reason`, `breaker_status` |
//! | `decision.breaker_transitions` | every breaker transition | `breaker_status` (the state entered) |
//!
//! [`Family::decision`], [`Family::concluded`] and [`Family::transition`] are the only ways to
//! count; each adds one to its OpenTelemetry counters and one to the Prometheus atomics, so the
//! two sinks can never disagree and nothing is counted twice. Dimensions are closed vocabularies only (`Decision`,
//! `Reason`, `BreakerState`): no principal, workspace, provider, budget or lease ID can reach a
//! label, and the series count is bounded by the vocabularies' sizes. `/metrics` reads the
//! atomics at scrape time through the family's [`Collector`] (a counter costs one relaxed
//! `fetch_add` on the admission path, nothing more).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry::metrics::{Counter, Meter};
use opentelemetry::KeyValue;
use turnstile_admission::{BreakerState, Decision, Reason};

use super::guarded;
use crate::exposition::{metric_family, Collector, DescriptorEncoder, MetricKind};

/// OpenTelemetry name of the decision counter.
pub const DECISIONS_INSTRUMENT: &str = "turnstile.admission.decisions";
/// OpenTelemetry name of the breaker transition counter.
pub const TRANSITIONS_INSTRUMENT: &str = "turnstile.breaker.transitions";
/// The specification's instrument of final decisions.
pub const ADMISSION_INSTRUMENT: &str = "decision.admission";
/// The specification's instrument of final decisions that are not admit.
pub const THROTTLES_INSTRUMENT: &str = "decision.throttles";
/// The specification's instrument of breaker transitions.
pub const BREAKER_TRANSITIONS_INSTRUMENT: &str = "decision.breaker_transitions";
/// Prometheus family of the decision counter (the encoder adds `_total`).
pub const DECISIONS_FAMILY: &str = "turnstile_admission_decisions";
/// Prometheus family of the breaker transition counter (the encoder adds `_total`).
pub const TRANSITIONS_FAMILY: &str = "turnstile_breaker_transitions";
/// Dimension keys (identical in both sinks).
pub const DECISION_LABEL: &str = "decision";
pub const REASON_LABEL: &str = "reason";
pub const STATE_LABEL: &str = "state";
/// The breaker's status dimension of the specification's instruments.
pub const BREAKER_STATUS_LABEL: &str = "breaker_status";

const DECISIONS: [Decision; 3] = [Decision::Admit, Decision::Defer, Decision::Reject];
const STATES: [BreakerState; 3] = [
    BreakerState::Closed,
    BreakerState::Open,
    BreakerState::HalfOpen,
];

fn decision_index(decision: Decision) -> usize {
    match decision {
        Decision::Admit => 0,
        Decision::Defer => 1,
        Decision::Reject => 2,
    }
}

fn reason_index(reason: Reason) -> usize {
    Reason::ALL.iter().position(|r| *r == reason).unwrap_or(0)
}

fn state_index(state: BreakerState) -> usize {
    match state {
        BreakerState::Closed => 0,
        BreakerState::Open => 1,
        BreakerState::HalfOpen => 2,
    }
}

/// The admission metrics family: OpenTelemetry counters plus the atomics behind `/metrics`.
#[derive(Clone)]
pub(crate) struct Family {
    decisions: Counter<u64>,
    transitions: Counter<u64>,
    /// `decision.admission`, `decision.throttles`, `decision.breaker_transitions`.
    spec: [Counter<u64>; 3],
    counts: Arc<Counts>,
}

#[derive(Debug)]
struct Counts {
    decisions: Vec<AtomicU64>,
    transitions: [AtomicU64; 3],
}

impl Family {
    pub(crate) fn new(meter: &Meter) -> Self {
        Family {
            decisions: meter
                .u64_counter(DECISIONS_INSTRUMENT)
                .with_description("Admission decisions by decision and reason")
                .build(),
            transitions: meter
                .u64_counter(TRANSITIONS_INSTRUMENT)
                .with_description("Circuit breaker transitions by the state entered")
                .build(),
            spec: [
                (ADMISSION_INSTRUMENT, "Final admission decisions by decision, reason and breaker status"),
                (THROTTLES_INSTRUMENT, "Final admission decisions other than admit, by decision, reason and breaker status"),
                (BREAKER_TRANSITIONS_INSTRUMENT, "Circuit breaker transitions by the breaker status entered"),
            ]
            .map(|(name, description)| meter.u64_counter(name).with_description(description).build()),
            counts: Arc::new(Counts {
                decisions: (0..DECISIONS.len() * Reason::ALL.len())
                    .map(|_| AtomicU64::new(0))
                    .collect(),
                transitions: Default::default(),
            }),
        }
    }

    /// Counts one decision in both sinks.
    pub(crate) fn decision(&self, decision: Decision, reason: Reason) {
        let index = decision_index(decision) * Reason::ALL.len() + reason_index(reason);
        if let Some(counter) = self.counts.decisions.get(index) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let counter = &self.decisions;
        guarded(|| {
            counter.add(
                1,
                &[
                    KeyValue::new(DECISION_LABEL, decision.as_str()),
                    KeyValue::new(REASON_LABEL, reason.as_str()),
                ],
            )
        });
    }

    /// Counts the final decision of a request (already counted by [`Family::decision`]) in
    /// the specification's `decision.admission` and, unless it admits, `decision.throttles`.
    pub(crate) fn concluded(&self, decision: Decision, reason: Reason, breaker: BreakerState) {
        let [admission, throttles, _] = &self.spec;
        let attributes = [
            KeyValue::new(DECISION_LABEL, decision.as_str()),
            KeyValue::new(REASON_LABEL, reason.as_str()),
            KeyValue::new(BREAKER_STATUS_LABEL, breaker.as_str()),
        ];
        guarded(|| {
            admission.add(1, &attributes);
            if decision != Decision::Admit {
                throttles.add(1, &attributes);
            }
        });
    }

    /// Counts one breaker transition (by the state entered) in both sinks.
    pub(crate) fn transition(&self, to: BreakerState) {
        self.counts.transitions[state_index(to)].fetch_add(1, Ordering::Relaxed);
        let (counter, spec) = (&self.transitions, &self.spec[2]);
        guarded(|| {
            counter.add(1, &[KeyValue::new(STATE_LABEL, to.as_str())]);
            spec.add(1, &[KeyValue::new(BREAKER_STATUS_LABEL, to.as_str())]);
        });
    }

    /// The count of one decision series (as `/metrics` shows it).
    pub(crate) fn decision_count(&self, decision: Decision, reason: Reason) -> u64 {
        let index = decision_index(decision) * Reason::ALL.len() + reason_index(reason);
        self.counts
            .decisions
            .get(index)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The count of one transition series.
    pub(crate) fn transition_count(&self, to: BreakerState) -> u64 {
        self.counts.transitions[state_index(to)].load(Ordering::Relaxed)
    }

    /// The family's `/metrics` collector (reads the counts at each scrape).
    pub(crate) fn collector(&self) -> impl Collector {
        Arc::clone(&self.counts)
    }
}

/// Decision series appear once counted (`admit/admitted` always, so a scrape sees the family
/// from the start); transition series always.
impl Collector for Counts {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let mut series = metric_family(
            &mut encoder,
            DECISIONS_FAMILY,
            "Admission decisions by decision and reason.",
            MetricKind::Counter,
        )?;
        for decision in DECISIONS {
            for reason in Reason::ALL {
                let index = decision_index(decision) * Reason::ALL.len() + reason_index(reason);
                let value = self
                    .decisions
                    .get(index)
                    .map_or(0, |c| c.load(Ordering::Relaxed));
                let always = decision == Decision::Admit && reason == Reason::Admitted;
                if value > 0 || always {
                    let labels = [
                        (DECISION_LABEL, decision.as_str()),
                        (REASON_LABEL, reason.as_str()),
                    ];
                    series.labelled(&labels, value)?;
                }
            }
        }
        let mut series = metric_family(
            &mut encoder,
            TRANSITIONS_FAMILY,
            "Circuit breaker transitions by the state entered.",
            MetricKind::Counter,
        )?;
        for state in STATES {
            let value = self.transitions[state_index(state)].load(Ordering::Relaxed);
            series.labelled(&[(STATE_LABEL, state.as_str())], value)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_count_per_call_and_labels_from_closed_vocabularies_only() {
        let family = Family::new(&opentelemetry::global::meter("test"));
        family.decision(Decision::Reject, Reason::QueueFull);
        family.decision(Decision::Reject, Reason::QueueFull);
        family.transition(BreakerState::Open);
        let text = crate::Exposition::new().with(family.collector()).text();
        assert!(text.contains(
            "turnstile_admission_decisions_total{decision=\"reject\",reason=\"queue-full\"} 2"
        ));
        assert!(text.contains(
            "turnstile_admission_decisions_total{decision=\"admit\",reason=\"admitted\"} 0"
        ));
        assert!(text.contains("turnstile_breaker_transitions_total{state=\"open\"} 1"));
        assert!(text.contains("turnstile_breaker_transitions_total{state=\"half-open\"} 0"));
        for line in text.lines().filter(|l| l.contains('{')) {
            let labels = &line[line.find('{').unwrap()..line.find('}').unwrap()];
            for pair in labels.trim_start_matches('{').split(',') {
                let key = pair.split('=').next().unwrap();
                assert!(["decision", "reason", "state"].contains(&key), "{line}");
            }
        }
    }
}
