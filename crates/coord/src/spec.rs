//! What one admission asks of the shared limits: the lane's scopes with their limits, the
//! invocation's budget and the estimate, in the integers the scripts use.
//!
//! Invariants: money is integer micro-dollars (a USD limit is rounded down, an estimate up, so
//! rounding never admits more than the profile allows); every value a script multiplies stays
//! below 2^53 (checked by [`ScopeLimits::from_limits`]), so Lua's doubles compute exactly what
//! `bucket.rs` computes in u128.

use turnstile_admission::Limits;
use turnstile_admission::{CircuitBreakerConfig, MAX_SAFE_INTEGER};

use crate::error::CoordError;
use crate::keys::ScopeName;

/// A bucket: `rate` units per period, `capacity` units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketSpec {
    /// Units added per period.
    pub rate: u64,
    /// The most units it holds.
    pub capacity: u64,
}

/// The shared limits of one scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScopeLimits {
    /// The scope's name in its workspace's keys (hashed).
    pub name: ScopeName,
    /// Leases held at once.
    pub concurrency: Option<u32>,
    /// The request bucket.
    pub requests: Option<BucketSpec>,
    /// The token bucket.
    pub tokens: Option<BucketSpec>,
    /// The attempts budget of an invocation.
    pub max_attempts: Option<u64>,
    /// The money budget of an invocation (micro-dollars).
    pub max_micro_usd: Option<u64>,
    /// The token budget of an invocation.
    pub max_tokens: Option<u64>,
}

/// Micro-dollars in `usd`, rounded down (a limit).
pub fn micro_floor(usd: f64) -> u64 {
    (usd * 1_000_000.0)
        .floor()
        .clamp(0.0, MAX_SAFE_INTEGER as f64) as u64
}

/// Micro-dollars in `usd`, rounded up (an estimate or a charge).
pub fn micro_ceil(usd: f64) -> u64 {
    (usd * 1_000_000.0)
        .ceil()
        .clamp(0.0, MAX_SAFE_INTEGER as f64) as u64
}

fn bucket(
    rate: Option<u64>,
    burst: Option<u64>,
    period_ms: u64,
) -> Result<Option<BucketSpec>, CoordError> {
    let Some(rate) = rate else {
        return Ok(None);
    };
    let capacity = burst.unwrap_or(rate);
    // level <= capacity * period and one refill step adds elapsed * rate: both exact in f64.
    if capacity
        .checked_mul(period_ms)
        .is_none_or(|v| v > MAX_SAFE_INTEGER)
    {
        return Err(CoordError::Inexact);
    }
    Ok(Some(BucketSpec { rate, capacity }))
}

impl ScopeLimits {
    /// The shared part of a scope's `limits`.
    pub fn from_limits(name: ScopeName, limits: &Limits) -> Result<Self, CoordError> {
        Ok(ScopeLimits {
            name,
            concurrency: Some(limits.concurrency),
            requests: bucket(
                limits.requests_per_minute,
                limits.requests_burst,
                turnstile_admission::MINUTE_MS,
            )?,
            tokens: bucket(
                limits.tokens_per_second,
                limits.tokens_burst,
                turnstile_admission::SECOND_MS,
            )?,
            max_attempts: limits.max_attempts,
            max_micro_usd: limits.max_cost_usd.map(micro_floor),
            max_tokens: limits.max_tokens,
        })
    }

    /// Whether this scope has a money or token budget (fails closed while degraded).
    pub fn has_usage_budget(&self) -> bool {
        self.max_micro_usd.is_some() || self.max_tokens.is_some()
    }

    /// Whether this scope charges the invocation's budget lines.
    pub fn has_budget(&self) -> bool {
        self.max_attempts.is_some() || self.has_usage_budget()
    }
}

/// The provider lane's circuit breaker (the core's `circuitBreaker`, defaults applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BreakerSpec {
    /// Consecutive failures that open it.
    pub failure_threshold: u32,
    /// How long it stays open before a half-open probe.
    pub open_ms: u64,
    /// Probe leases allowed at once while half-open.
    pub half_open_max_calls: u32,
}

impl BreakerSpec {
    /// The shared breaker of the core's breaker configuration (its defaults filled in).
    pub fn from_config(config: &CircuitBreakerConfig) -> Self {
        BreakerSpec {
            failure_threshold: config.failure_threshold,
            open_ms: config.open_ms_or_default(),
            half_open_max_calls: config.half_open_max_calls_or_default(),
        }
    }
}

/// One admission: the lane's scopes (principal, workspace, provider, in the core's order) and
/// the estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneSpec {
    /// The workspace ID (hashed into every key, never written).
    pub workspace: String,
    /// The provider ID.
    pub provider: String,
    /// The invocation whose budget lines an admission charges.
    pub budget_id: String,
    /// The shared scopes, principal first.
    pub scopes: Vec<ScopeLimits>,
    /// The admission's token estimate.
    pub tokens: Option<u64>,
    /// The admission's cost estimate (micro-dollars).
    pub micro_usd: Option<u64>,
    /// The provider's breaker, shared when the provider limits configure one.
    pub breaker: Option<BreakerSpec>,
}

impl LaneSpec {
    /// The lane of `principal` on `provider` under a workspace's current limits.
    pub fn new(
        (workspace, provider, principal): (&str, &str, &str),
        budget_id: &str,
        (principal_limits, workspace_limits, provider_limits): (&Limits, &Limits, &Limits),
        tokens: Option<u64>,
        cost_usd: Option<f64>,
    ) -> Result<Self, CoordError> {
        Ok(LaneSpec {
            workspace: workspace.to_owned(),
            provider: provider.to_owned(),
            budget_id: budget_id.to_owned(),
            scopes: vec![
                ScopeLimits::from_limits(ScopeName::principal(principal), principal_limits)?,
                ScopeLimits::from_limits(ScopeName::workspace(), workspace_limits)?,
                ScopeLimits::from_limits(ScopeName::provider(provider), provider_limits)?,
            ],
            tokens,
            micro_usd: cost_usd.map(micro_ceil),
            breaker: provider_limits
                .circuit_breaker
                .as_ref()
                .map(BreakerSpec::from_config),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_rounds_against_the_caller() {
        assert_eq!(micro_floor(0.3), 300_000);
        assert_eq!(micro_ceil(0.1), 100_000);
        assert_eq!(micro_ceil(0.000_000_1), 1);
        assert_eq!(micro_floor(0.000_000_9), 0);
    }

    #[test]
    fn buckets_that_lua_doubles_cannot_hold_exactly_are_refused() {
        let limits = Limits {
            concurrency: 1,
            tokens_per_second: Some(MAX_SAFE_INTEGER),
            ..Limits::default()
        };
        assert_eq!(
            ScopeLimits::from_limits(ScopeName::workspace(), &limits),
            Err(CoordError::Inexact)
        );
        let limits = Limits {
            concurrency: 1,
            requests_per_minute: Some(600),
            requests_burst: Some(10),
            ..Limits::default()
        };
        let scope = ScopeLimits::from_limits(ScopeName::workspace(), &limits).unwrap();
        assert_eq!(
            scope.requests,
            Some(BucketSpec {
                rate: 600,
                capacity: 10
            })
        );
    }
}
