//! Retry backoff (EVALUATOR.md step 4).
//!
//! `base = min(maxDelayMs, retryAfterMs if given else initialDelayMs × 2^retry)`; without a
//! Retry-After the base is scaled by `0.75 + 0.5 × random()` (jitter from the injected random,
//! in [0, 1)); the result is capped by the time left before the total deadline. A provider's
//! Retry-After is honoured as given (no jitter), still within `maxDelayMs`.

use crate::binding::RetryPolicy;

/// The delay before retry number `retry + 1`, in ms.
pub fn backoff_ms(
    policy: &RetryPolicy,
    retry: u32,
    retry_after_ms: Option<u64>,
    random: f64,
    time_left_ms: u64,
) -> u64 {
    let base = match retry_after_ms {
        Some(after) => after.min(policy.max_delay_ms),
        None => {
            let factor = 1u64.checked_shl(retry.min(62)).unwrap_or(u64::MAX);
            let exponential = policy.initial_delay_ms.saturating_mul(factor);
            let base = exponential.min(policy.max_delay_ms) as f64;
            let random = if random.is_finite() {
                random.clamp(0.0, 1.0)
            } else {
                0.5
            };
            (base * (0.75 + 0.5 * random)).round() as u64
        }
    };
    base.min(time_left_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        max_retries: 3,
        initial_delay_ms: 250,
        max_delay_ms: 2000,
    };

    #[test]
    fn exponential_with_jitter_and_caps() {
        assert_eq!(backoff_ms(&POLICY, 0, None, 0.5, u64::MAX), 250);
        assert_eq!(backoff_ms(&POLICY, 1, None, 0.0, u64::MAX), 375);
        assert_eq!(backoff_ms(&POLICY, 2, None, 1.0, u64::MAX), 1250);
        assert_eq!(backoff_ms(&POLICY, 5, None, 0.5, u64::MAX), 2000);
        assert_eq!(backoff_ms(&POLICY, 0, Some(1500), 0.0, u64::MAX), 1500);
        assert_eq!(backoff_ms(&POLICY, 0, Some(9000), 0.0, u64::MAX), 2000);
        assert_eq!(backoff_ms(&POLICY, 0, None, 0.5, 100), 100);
    }
}
