//! The admission answer (`{leaseId, expiresAtEpochMs, ttlMs, evidence}`) written by hand.
//!
//! It is the answer of every granted admission; through serde it cost about 4,000
//! instructions (a call per field, every key escaped byte by byte) and a copy of the
//! evidence into a `LeaseBody`. Here the keys are constants, the enums their spec names, the
//! integers `itoa`, and only what may need it goes through `serde_json`: a float (its
//! shortest round-trip form), a string that needs escaping, and evidence carrying breaker
//! transitions (rare on a grant).
//!
//! Invariant: the bytes equal `serde_json`'s encoding of
//! a `LeaseBody` (the serde type in the tests below) for every value (a property test below),
//! so clients cannot tell the two apart.

use std::time::SystemTime;

use axum::response::Response;
use turnstile_admission::{CallerQuota, Coordination, Evidence, Millis};
use turnstile_proxy::{write_caller_headers, ApiFormat};

use crate::http::json_answer::json_response;

/// Room for a typical admission answer (about 300 bytes).
const TYPICAL_ANSWER_BYTES: usize = 384;

/// The `200` answer of a granted admission, with the caller's own rate-limit headers
/// (`x-ratelimit-*`, [`caller_headers`]).
pub fn lease_response(
    lease_id: &str,
    expires_at_epoch_ms: Millis,
    ttl_ms: Millis,
    evidence: &Evidence,
) -> Response {
    let mut out = Vec::with_capacity(TYPICAL_ANSWER_BYTES);
    let written = write_lease(&mut out, lease_id, expires_at_epoch_ms, ttl_ms, evidence);
    let mut response = json_response(written.map(|()| out));
    caller_headers(&mut response, &evidence.caller);
    response
}

/// Writes the caller's own rate-limit headers of a decision (`Evidence::caller`, a grant's or a
/// refusal's) in OpenAI's spelling: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`,
/// reset as a duration (`1s`, `6m0s`). Nothing when the principal has no rate limit.
pub fn caller_headers(response: &mut Response, caller: &CallerQuota) {
    if !caller.is_empty() {
        write_caller_headers(
            response.headers_mut(),
            caller,
            ApiFormat::Openai,
            SystemTime::now(),
        );
    }
}

/// Appends the answer's JSON to `out`.
pub fn write_lease(
    out: &mut Vec<u8>,
    lease_id: &str,
    expires_at_epoch_ms: Millis,
    ttl_ms: Millis,
    evidence: &Evidence,
) -> Result<(), serde_json::Error> {
    out.extend_from_slice(b"{\"leaseId\":");
    write_str(out, lease_id)?;
    out.extend_from_slice(b",\"expiresAtEpochMs\":");
    write_u64(out, expires_at_epoch_ms);
    out.extend_from_slice(b",\"ttlMs\":");
    write_u64(out, ttl_ms);
    out.extend_from_slice(b",\"evidence\":");
    write_evidence(out, evidence)?;
    out.push(b'}');
    Ok(())
}

fn write_evidence(out: &mut Vec<u8>, evidence: &Evidence) -> Result<(), serde_json::Error> {
    // Destructured whole: a new evidence field must be written here too.
    let Evidence {
        decision,
        reason,
        queue_delay_ms,
        active,
        queued,
        estimated_tokens,
        estimated_cost_usd,
        retry_pressure,
        breaker_state,
        retry_after_ms,
        predicted_wait_ms,
        breaker_transitions,
        budget_opened,
        budget_cap,
        provider_quota,
        coordination,
        // Not in the body: written as headers (`caller_headers`).
        caller: _,
        // Not serialized: the answer names the revision that decided (`Registry::revision_of`).
        candidate: _,
    } = evidence;
    if !breaker_transitions.is_empty() {
        return serde_json::to_writer(out, evidence);
    }
    out.extend_from_slice(b"{\"decision\":\"");
    out.extend_from_slice(decision.as_str().as_bytes());
    out.extend_from_slice(b"\",\"reason\":\"");
    out.extend_from_slice(reason.as_str().as_bytes());
    out.extend_from_slice(b"\",\"queueDelayMs\":");
    write_u64(out, *queue_delay_ms);
    out.extend_from_slice(b",\"active\":");
    write_u64(out, *active);
    out.extend_from_slice(b",\"queued\":");
    write_u64(out, *queued);
    out.extend_from_slice(b",\"estimatedTokens\":");
    match estimated_tokens {
        Some(tokens) => write_u64(out, *tokens),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"estimatedCostUsd\":");
    serde_json::to_writer(&mut *out, estimated_cost_usd)?;
    out.extend_from_slice(b",\"retryPressure\":");
    write_u64(out, *retry_pressure);
    out.extend_from_slice(b",\"breakerState\":\"");
    out.extend_from_slice(breaker_state.as_str().as_bytes());
    out.push(b'"');
    if let Some(retry_after_ms) = retry_after_ms {
        out.extend_from_slice(b",\"retryAfterMs\":");
        write_u64(out, *retry_after_ms);
    }
    if let Some(predicted_wait_ms) = predicted_wait_ms {
        out.extend_from_slice(b",\"predictedWaitMs\":");
        write_u64(out, predicted_wait_ms.get());
    }
    if *budget_opened {
        out.extend_from_slice(b",\"budgetOpened\":true");
    }
    if let Some(cap) = budget_cap {
        out.extend_from_slice(b",\"budgetCap\":\"");
        out.extend_from_slice(cap.as_str().as_bytes());
        out.push(b'"');
    }
    if *provider_quota {
        out.extend_from_slice(b",\"providerQuota\":true");
    }
    if let Some(coordination) = coordination {
        out.extend_from_slice(match coordination {
            Coordination::Shared => b",\"coordination\":\"shared\"".as_slice(),
            Coordination::Degraded => b",\"coordination\":\"degraded\"".as_slice(),
        });
    }
    out.push(b'}');
    Ok(())
}

fn write_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// A JSON string: copied when nothing in it needs escaping (serde_json escapes only `"`, `\`
/// and control characters), else through serde_json.
fn write_str(out: &mut Vec<u8>, value: &str) -> Result<(), serde_json::Error> {
    if value.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(out, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Serialize;
    use turnstile_admission::{BreakerState, BreakerTransition, BudgetCap, Decision, Reason};

    /// A granted lease as serde writes it: the oracle the hand-written bytes must equal.
    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    struct LeaseBody {
        lease_id: String,
        expires_at_epoch_ms: Millis,
        ttl_ms: Millis,
        evidence: Evidence,
    }

    fn decision() -> impl Strategy<Value = Decision> {
        prop_oneof![
            Just(Decision::Admit),
            Just(Decision::Defer),
            Just(Decision::Reject)
        ]
    }

    fn breaker_state() -> impl Strategy<Value = BreakerState> {
        prop_oneof![
            Just(BreakerState::Closed),
            Just(BreakerState::Open),
            Just(BreakerState::HalfOpen)
        ]
    }

    fn cost() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            Just(None),
            Just(Some(f64::NAN)),
            Just(Some(f64::INFINITY)),
            Just(Some(0.1 + 0.2)),
            any::<f64>().prop_map(Some),
            (0u64..10_000_000).prop_map(|micros| Some(micros as f64 / 1e6)),
        ]
    }

    fn transition() -> impl Strategy<Value = BreakerTransition> {
        (
            ".{0,8}",
            breaker_state(),
            breaker_state(),
            any::<u64>(),
            any::<u32>(),
        )
            .prop_map(
                |(provider_id, from, to, at_epoch_ms, failures)| BreakerTransition {
                    provider_id,
                    from,
                    to,
                    at_epoch_ms,
                    failures,
                },
            )
    }

    fn evidence() -> impl Strategy<Value = Evidence> {
        (
            (
                decision(),
                proptest::sample::select(Reason::ALL.to_vec()),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                proptest::option::of(any::<u64>()),
                cost(),
            ),
            (
                any::<u64>(),
                breaker_state(),
                proptest::option::of(any::<u64>()),
                proptest::collection::vec(transition(), 0..2),
                (
                    any::<bool>(),
                    proptest::option::of(any::<std::num::NonZeroU64>()),
                    any::<bool>(),
                    proptest::option::of(prop_oneof![
                        Just(BudgetCap::Principal),
                        Just(BudgetCap::Workspace)
                    ]),
                ),
                proptest::option::of(prop_oneof![
                    Just(Coordination::Shared),
                    Just(Coordination::Degraded)
                ]),
            ),
        )
            .prop_map(
                |(
                    (decision, reason, queue_delay_ms, active, queued, tokens, cost),
                    (
                        retry_pressure,
                        breaker_state,
                        retry_after_ms,
                        transitions,
                        (opened, predicted_wait_ms, quota, budget_cap),
                        coord,
                    ),
                )| Evidence {
                    decision,
                    reason,
                    queue_delay_ms,
                    active,
                    queued,
                    estimated_tokens: tokens,
                    estimated_cost_usd: cost,
                    retry_pressure,
                    breaker_state,
                    retry_after_ms,
                    predicted_wait_ms,
                    breaker_transitions: transitions,
                    budget_opened: opened,
                    budget_cap,
                    provider_quota: quota,
                    coordination: coord,
                    caller: Default::default(),
                    candidate: false,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        #[test]
        fn the_hand_written_answer_is_byte_for_byte_serdes(
            lease_id in prop_oneof![
                "[0-9a-f]{32}",
                any::<String>(),
                "[\"\\\\\\x00-\\x1f\u{7f}\u{e9}\u{1F600}a]{0,6}",
            ],
            expires in any::<u64>(),
            ttl in any::<u64>(),
            evidence in evidence(),
        ) {
            let mut ours = Vec::new();
            write_lease(&mut ours, &lease_id, expires, ttl, &evidence).unwrap();
            let serde = serde_json::to_vec(&LeaseBody {
                lease_id: lease_id.clone(),
                expires_at_epoch_ms: expires,
                ttl_ms: ttl,
                evidence: evidence.clone(),
            })
            .unwrap();
            prop_assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&serde));
            prop_assert_eq!(ours, serde);
        }
    }
}
