//! Service metrics in the Prometheus text exposition format.
//!
//! Invariant: labels come from closed vocabularies only — `decision`, `reason` and breaker
//! `state` — so no principal, workspace, provider, budget or lease ID can ever reach a label.
//! Counters are atomics written by the driver and the accept loop; `/metrics` reads them
//! without a round trip to the driver.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use turnstile_admission::{BreakerState, Decision, Reason};

const DECISIONS: [Decision; 3] = [Decision::Admit, Decision::Defer, Decision::Reject];
const STATES: [BreakerState; 3] = [
    BreakerState::Closed,
    BreakerState::Open,
    BreakerState::HalfOpen,
];

/// Every metric of the service.
#[derive(Debug)]
pub struct Metrics {
    decisions: Vec<AtomicU64>,
    breaker_transitions: [AtomicU64; 3],
    pub leases_active: AtomicU64,
    pub waiters_queued: AtomicU64,
    pub leases_granted: AtomicU64,
    pub leases_released: AtomicU64,
    pub leases_expired: AtomicU64,
    pub leases_undeliverable: AtomicU64,
    pub waiters_disconnected: AtomicU64,
    pub connections_open: AtomicU64,
    pub connections_total: AtomicU64,
    pub store_errors: AtomicU64,
    pub actual_tokens: AtomicU64,
    /// Micro-dollars, so the counter stays an integer.
    pub actual_cost_micro_usd: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            decisions: (0..DECISIONS.len() * Reason::ALL.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            breaker_transitions: Default::default(),
            leases_active: AtomicU64::new(0),
            waiters_queued: AtomicU64::new(0),
            leases_granted: AtomicU64::new(0),
            leases_released: AtomicU64::new(0),
            leases_expired: AtomicU64::new(0),
            leases_undeliverable: AtomicU64::new(0),
            waiters_disconnected: AtomicU64::new(0),
            connections_open: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            store_errors: AtomicU64::new(0),
            actual_tokens: AtomicU64::new(0),
            actual_cost_micro_usd: AtomicU64::new(0),
        }
    }
}

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

impl Metrics {
    /// Counts one admission decision.
    pub fn decision(&self, decision: Decision, reason: Reason) {
        let index = decision_index(decision) * Reason::ALL.len() + reason_index(reason);
        if let Some(counter) = self.decisions.get(index) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one breaker transition by the state it entered.
    pub fn breaker_transition(&self, to: BreakerState) {
        self.breaker_transitions[state_index(to)].fetch_add(1, Ordering::Relaxed);
    }

    /// The value of one decision counter (tests).
    pub fn decision_count(&self, decision: Decision, reason: Reason) -> u64 {
        let index = decision_index(decision) * Reason::ALL.len() + reason_index(reason);
        self.decisions
            .get(index)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str("# HELP turnstile_admission_decisions_total Admission decisions by decision and reason.\n");
        out.push_str("# TYPE turnstile_admission_decisions_total counter\n");
        for decision in DECISIONS {
            for reason in Reason::ALL {
                let value = self.decision_count(decision, reason);
                let always = decision == Decision::Admit && reason == Reason::Admitted;
                if value > 0 || always {
                    let _ = writeln!(
                        out,
                        "turnstile_admission_decisions_total{{decision=\"{}\",reason=\"{}\"}} {value}",
                        decision.as_str(),
                        reason.as_str()
                    );
                }
            }
        }
        out.push_str("# HELP turnstile_breaker_transitions_total Breaker transitions by the state entered.\n");
        out.push_str("# TYPE turnstile_breaker_transitions_total counter\n");
        for state in STATES {
            let _ = writeln!(
                out,
                "turnstile_breaker_transitions_total{{state=\"{}\"}} {}",
                state.as_str(),
                self.breaker_transitions[state_index(state)].load(Ordering::Relaxed)
            );
        }
        let plain: [(&str, &str, &str, &AtomicU64); 12] = [
            (
                "turnstile_leases_active",
                "gauge",
                "Leases currently held.",
                &self.leases_active,
            ),
            (
                "turnstile_waiters_queued",
                "gauge",
                "Admission requests waiting in a queue.",
                &self.waiters_queued,
            ),
            (
                "turnstile_leases_granted_total",
                "counter",
                "Leases granted.",
                &self.leases_granted,
            ),
            (
                "turnstile_leases_released_total",
                "counter",
                "Leases released by their holder.",
                &self.leases_released,
            ),
            (
                "turnstile_leases_expired_total",
                "counter",
                "Leases reclaimed after their TTL without a heartbeat.",
                &self.leases_expired,
            ),
            (
                "turnstile_leases_undeliverable_total",
                "counter",
                "Leases granted to a client that had already gone, released at once.",
                &self.leases_undeliverable,
            ),
            (
                "turnstile_waiters_disconnected_total",
                "counter",
                "Queued requests cancelled because the client disconnected.",
                &self.waiters_disconnected,
            ),
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
        ];
        for (name, kind, help, value) in plain {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_closed_vocabularies_only() {
        let metrics = Metrics::default();
        metrics.decision(Decision::Reject, Reason::QueueFull);
        metrics.breaker_transition(BreakerState::Open);
        let text = metrics.render();
        assert!(text.contains(
            "turnstile_admission_decisions_total{decision=\"reject\",reason=\"queue-full\"} 1"
        ));
        assert!(text.contains("turnstile_breaker_transitions_total{state=\"open\"} 1"));
        for line in text.lines().filter(|l| l.contains('{')) {
            let labels = &line[line.find('{').unwrap()..];
            for key in labels.split(',').map(|kv| kv.trim_start_matches('{')) {
                let name = key.split('=').next().unwrap();
                assert!(["decision", "reason", "state"].contains(&name), "{line}");
            }
        }
    }
}
