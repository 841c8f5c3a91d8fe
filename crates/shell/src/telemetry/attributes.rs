//! Attribute keys of the `decision.admit` span and its events, and the
//! conversion of admission evidence into attributes. Values are fixed vocabularies, counts and
//! estimates; the adapter id is a provider lane, never a tenant.

use opentelemetry::KeyValue;
use turnstile_admission::Evidence;

/// The decision (`admit`, `reject`, `defer`).
pub const DECISION: &str = "turnstile.admission.decision";
/// The decision's reason.
pub const REASON: &str = "turnstile.admission.reason";
/// How long the request queued, in milliseconds.
pub const QUEUE_DELAY_MS: &str = "turnstile.admission.queue_delay_ms";
/// Active leases of the lane at the decision.
pub const ACTIVE: &str = "turnstile.admission.active";
/// Queued requests of the lane at the decision.
pub const QUEUED: &str = "turnstile.admission.queued";
/// The request's estimated tokens.
pub const ESTIMATED_TOKENS: &str = "turnstile.admission.estimated_tokens";
/// The request's estimated cost in USD.
pub const ESTIMATED_COST_USD: &str = "turnstile.admission.estimated_cost_usd";
/// The lane's retry pressure.
pub const RETRY_PRESSURE: &str = "turnstile.admission.retry_pressure";
/// The Retry-After returned with a refusal, in milliseconds.
pub const RETRY_AFTER_MS: &str = "turnstile.admission.retry_after_ms";
/// The breaker's status at the decision.
pub const BREAKER_STATUS: &str = "turnstile.breaker.status";
/// The state a breaker left.
pub const BREAKER_FROM: &str = "turnstile.breaker.from";
/// The state a breaker entered.
pub const BREAKER_TO: &str = "turnstile.breaker.to";
/// The failures that tripped the breaker.
pub const BREAKER_FAILURES: &str = "turnstile.breaker.failures";
/// The adapter (provider lane) id.
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
