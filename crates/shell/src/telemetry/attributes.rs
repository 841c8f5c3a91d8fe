//! Attribute keys of the `decision.admit` span and its events, and the
//! conversion of admission evidence into attributes. Values are fixed vocabularies, counts and
//! estimates; the adapter id is a provider lane, never a tenant.

use opentelemetry::KeyValue;
use turnstile_admission::Evidence;

pub const DECISION: &str = "turnstile.admission.decision";
pub const REASON: &str = "turnstile.admission.reason";
pub const QUEUE_DELAY_MS: &str = "turnstile.admission.queue_delay_ms";
pub const ACTIVE: &str = "turnstile.admission.active";
pub const QUEUED: &str = "turnstile.admission.queued";
pub const ESTIMATED_TOKENS: &str = "turnstile.admission.estimated_tokens";
pub const ESTIMATED_COST_USD: &str = "turnstile.admission.estimated_cost_usd";
pub const RETRY_PRESSURE: &str = "turnstile.admission.retry_pressure";
pub const RETRY_AFTER_MS: &str = "turnstile.admission.retry_after_ms";
pub const BREAKER_STATUS: &str = "turnstile.breaker.status";
pub const BREAKER_FROM: &str = "turnstile.breaker.from";
pub const BREAKER_TO: &str = "turnstile.breaker.to";
pub const BREAKER_FAILURES: &str = "turnstile.breaker.failures";
pub const ADAPTER_ID: &str = "turnstile.adapter.id";

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The span attributes of one decision.
pub fn evidence_attributes(evidence: &Evidence) -> Vec<KeyValue> {
    let mut out = vec![
        KeyValue::new(DECISION, evidence.decision.as_str()),
        KeyValue::new(REASON, evidence.reason.as_str()),
        KeyValue::new(QUEUE_DELAY_MS, int(evidence.queue_delay_ms)),
        KeyValue::new(ACTIVE, int(evidence.active)),
        KeyValue::new(QUEUED, int(evidence.queued)),
        KeyValue::new(RETRY_PRESSURE, int(evidence.retry_pressure)),
        KeyValue::new(BREAKER_STATUS, evidence.breaker_state.as_str()),
    ];
    if let Some(tokens) = evidence.estimated_tokens {
        out.push(KeyValue::new(ESTIMATED_TOKENS, int(tokens)));
    }
    if let Some(cost) = evidence.estimated_cost_usd {
        out.push(KeyValue::new(ESTIMATED_COST_USD, cost));
    }
    if let Some(retry_after) = evidence.retry_after_ms {
        out.push(KeyValue::new(RETRY_AFTER_MS, int(retry_after)));
    }
    out
}
