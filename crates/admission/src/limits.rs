//! Limits: one shape for the principal, workspace and provider scopes (REFERENCE §2).
//!
//! Deserialization refuses unknown fields, negative numbers and fractions where a count is
//! expected, so a typo in a profile is an error rather than a silently missing limit.
//! [`Limits::validate`] checks the rules serde cannot express and names the offending field.

use serde::{Deserialize, Serialize};

use crate::time::Millis;

/// The largest integer JSON hosts can represent exactly (2^53 − 1).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Circuit breaker settings; only the provider scope's breaker is used.
///
/// `openMs` and `halfOpenMaxCalls` keep whether they were written: an absent field stays `None`
/// (and is not serialized), so a profile serializes, and digests, as written
/// ([`crate::Profile::digest`]). The rules read the effective values through
/// [`CircuitBreakerConfig::open_ms_or_default`] and
/// [`CircuitBreakerConfig::half_open_max_calls_or_default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CircuitBreakerConfig {
    /// Consecutive failures that open the breaker (≥ 1).
    pub failure_threshold: u32,
    /// How long an open breaker refuses calls before a half-open probe; absent means
    /// [`DEFAULT_BREAKER_OPEN_MS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_ms: Option<Millis>,
    /// Probes allowed in flight while half-open (≥ 1); absent means
    /// [`DEFAULT_BREAKER_HALF_OPEN_MAX_CALLS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_open_max_calls: Option<u32>,
}

/// `circuitBreaker.openMs` when the profile does not say (REFERENCE §2).
pub const DEFAULT_BREAKER_OPEN_MS: Millis = 30_000;

/// `circuitBreaker.halfOpenMaxCalls` when the profile does not say (REFERENCE §2).
pub const DEFAULT_BREAKER_HALF_OPEN_MAX_CALLS: u32 = 1;

impl CircuitBreakerConfig {
    /// How long an open breaker refuses calls: `openMs`, or 30,000 when absent.
    pub fn open_ms_or_default(&self) -> Millis {
        self.open_ms.unwrap_or(DEFAULT_BREAKER_OPEN_MS)
    }

    /// Probes allowed in flight while half-open: `halfOpenMaxCalls`, or 1 when absent.
    pub fn half_open_max_calls_or_default(&self) -> u32 {
        self.half_open_max_calls
            .unwrap_or(DEFAULT_BREAKER_HALF_OPEN_MAX_CALLS)
    }
}

/// The limits of one scope. Every field but `concurrency` is optional; absent means unbounded.
///
/// The meaning, unit, default and exact semantics of every field, with worked examples, are in
/// `docs/profiles.md`; the OpenAPI `Limits` schema carries the same descriptions. Absent fields
/// are not serialized, so a profile digests as written ([`crate::Profile::digest`]): adding an
/// optional field never changes the digest of a profile that does not use it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Maximum active leases in this scope (a lease is active from admission to release, TTL
    /// reclaim or drop). `0` rejects every request.
    pub concurrency: u32,
    /// Request bucket: refills this many requests per minute, continuously (one every
    /// 60,000/N ms); capacity `requestsBurst`, or N when absent; starts full, so with the
    /// default capacity up to 2N requests pass in the first minute. `0` rejects everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u64>,
    /// Capacity of the request bucket (requests that may pass at once); default
    /// `requestsPerMinute`. Needs `requestsPerMinute` ≥ 1; ≥ 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_burst: Option<u64>,
    /// Token bucket: refills this many estimated tokens per second, continuously; capacity
    /// `tokensBurst`, or N when absent; starts full. A request whose token estimate exceeds the
    /// capacity can never pass (`tokens-per-second`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_second: Option<u64>,
    /// Capacity of the token bucket in tokens; default `tokensPerSecond`. Needs
    /// `tokensPerSecond` ≥ 1; ≥ 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_burst: Option<u64>,
    /// Attempt budget per `budgetId`: admissions charged to one budget ID in this scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u64>,
    /// Money budget per `budgetId` in USD: the sum of the cost estimates (corrected by the
    /// actual usage on release) charged to one budget ID in this scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// With `maxCostUsd`, whether a request without a cost estimate may pass (default false:
    /// `unknown-cost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_unknown_cost: Option<bool>,
    /// Token budget per `budgetId`: the sum of the token estimates (corrected by the actual
    /// usage on release) charged to one budget ID in this scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Principal or workspace scope: how many budgets (`budgetId`s) one principal may hold
    /// open at once (≥ 1). On a principal it is that principal's cap; on the workspace, the
    /// cap of every principal that sets none; absent on both, the server's
    /// `budgets.max_open_per_principal`. Opening one more is refused `too-many-budgets`
    /// (evidence `budgetCap: principal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_open_budgets: Option<u64>,
    /// Largest `batchSize` estimate one request may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch_size: Option<u64>,
    /// Largest `requestBytes` estimate one request may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<u64>,
    /// Largest `items` estimate one request may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u64>,
    /// Largest `retainedWork` estimate one request may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retained_work: Option<u64>,
    /// Maximum queued waiters counted in this scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_length: Option<u64>,
    /// Queue-dwell bound; the effective bound is the minimum over the three scopes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_wait_ms: Option<Millis>,
    /// Circuit breaker; only the provider scope's breaker is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker: Option<CircuitBreakerConfig>,
    /// Principal scope only: workspace and provider permits held back for this principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_concurrency: Option<u32>,
    /// Workspace or provider scope only, in (0, 1]: caps one principal's share of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_principal_share: Option<f64>,
    /// Provider scope only: what the lane's turns are fair in: `requests` (absent: every
    /// backlogged principal gets one grant per round) or `tokens` (the principal with the least
    /// weighted tokens served goes next). See `docs/profiles.md`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness: Option<Fairness>,
    /// Principal scope only: the principal's share of a lane relative to others in its band,
    /// in [[`MIN_WEIGHT`], [`MAX_WEIGHT`]]; absent means 1. Weight 2 receives twice the
    /// tokens (token mode) or grants (requests mode) of weight 1 while both wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// Principal scope only: the band the principal's requests wait in; absent means
    /// `standard`. Higher bands are served first; lower bands keep their `minShare`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// Workspace scope only: the smallest share of a provider lane's grants a waiting lower
    /// band receives while a higher band saturates the lane. Absent bands take
    /// [`DEFAULT_STANDARD_MIN_SHARE`] and [`DEFAULT_BATCH_MIN_SHARE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_share: Option<MinShare>,
}

/// What a provider lane's turns are fair in (`fairness`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fairness {
    /// One grant per backlogged principal per round (the default).
    #[default]
    Requests,
    /// The backlogged principal with the least weighted tokens served goes next.
    Tokens,
}

/// The band a principal's requests wait in (`priority`), highest first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Priority {
    /// Served first.
    Interactive,
    /// The default band.
    #[default]
    Standard,
    /// Served last, but never below its `minShare` of grants while it waits.
    Batch,
}

impl Priority {
    /// Every band, highest first.
    pub const ALL: [Priority; 3] = [Priority::Interactive, Priority::Standard, Priority::Batch];

    /// The band's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Standard => "standard",
            Priority::Batch => "batch",
        }
    }

    /// The band's rank: 0 for the highest.
    #[inline]
    pub fn rank(self) -> usize {
        self as usize
    }
}

/// The smallest weight a principal may have.
pub const MIN_WEIGHT: f64 = 0.01;
/// The largest weight a principal may have.
pub const MAX_WEIGHT: f64 = 100.0;
/// The `standard` band's share of grants when `minShare.standard` is absent.
pub const DEFAULT_STANDARD_MIN_SHARE: f64 = 0.2;
/// The `batch` band's share of grants when `minShare.batch` is absent.
pub const DEFAULT_BATCH_MIN_SHARE: f64 = 0.1;

/// The bands' minimum shares of a lane's grants (`minShare`, workspace scope). The top band
/// (`interactive`) needs none: it is served first.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MinShare {
    /// The `standard` band's share while a higher band waits, in [0, 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standard: Option<f64>,
    /// The `batch` band's share while a higher band waits, in [0, 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<f64>,
}

impl MinShare {
    /// The share of `band` in thousandths of the grants (0 for the top band).
    pub fn permille(&self, band: Priority) -> u32 {
        let share = match band {
            Priority::Interactive => return 0,
            Priority::Standard => self.standard.unwrap_or(DEFAULT_STANDARD_MIN_SHARE),
            Priority::Batch => self.batch.unwrap_or(DEFAULT_BATCH_MIN_SHARE),
        };
        (share * 1000.0).round().clamp(0.0, 1000.0) as u32
    }
}

/// Which scope a set of limits belongs to; decides which fields are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeKind {
    /// One caller's limits.
    Principal,
    /// The whole workspace's limits.
    Workspace,
    /// One provider lane's limits.
    Provider,
}

impl ScopeKind {
    /// The scope's name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Principal => "principal",
            ScopeKind::Workspace => "workspace",
            ScopeKind::Provider => "provider",
        }
    }
}

/// A limits value that breaks a rule serde cannot express.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LimitsError {
    /// A count above 2^53 − 1, which JSON hosts cannot represent exactly.
    #[error("{field} must be at most 2^53-1")]
    TooLarge {
        /// The offending field.
        field: &'static str,
    },
    /// `maxCostUsd` negative, NaN or infinite.
    #[error("maxCostUsd must be a finite number >= 0")]
    InvalidCost,
    /// `reservedConcurrency` outside [0, principal concurrency].
    #[error(
        "reservedConcurrency must be within the principal concurrency ({reserved} > {concurrency})"
    )]
    ReservationOutsideConcurrency {
        /// `reservedConcurrency`.
        reserved: u32,
        /// The principal's `concurrency`.
        concurrency: u32,
    },
    /// `reservedConcurrency` on a workspace or provider.
    #[error("reservedConcurrency is only allowed on principal limits, not on {scope} limits")]
    ReservationOutsidePrincipal {
        /// The scope it was set on.
        scope: &'static str,
    },
    /// `maxPrincipalShare` outside (0, 1].
    #[error("maxPrincipalShare (share) must be in (0, 1], got {share}")]
    ShareOutOfRange {
        /// The share given.
        share: f64,
    },
    /// `maxPrincipalShare` on a principal.
    #[error("maxPrincipalShare is only allowed on workspace or provider limits")]
    ShareOnPrincipal,
    /// A circuit breaker that can never open or never probe.
    #[error("circuitBreaker.{field} must be at least 1")]
    BreakerZero {
        /// The offending field.
        field: &'static str,
    },
    /// A field set on a scope it does not apply to (`fairness` on providers, `weight` and
    /// `priority` on principals, `minShare` on the workspace).
    #[error("{field} is only allowed on {allowed} limits, not on {scope} limits")]
    WrongScope {
        /// The offending field.
        field: &'static str,
        /// The scope it applies to.
        allowed: &'static str,
        /// The scope it was set on.
        scope: &'static str,
    },
    /// `weight` not a finite number within [0.01, 100].
    #[error("weight must be a number within [0.01, 100], got {weight}")]
    WeightOutOfRange {
        /// The weight given.
        weight: f64,
    },
    /// A `minShare` not within [0, 1), or shares adding up to 1 or more.
    #[error("minShare.{band} must be within [0, 1) and the shares must add up to less than 1")]
    MinShareOutOfRange {
        /// The band whose share breaks the rule.
        band: &'static str,
    },
    /// A count that must be at least 1 (`maxOpenBudgets`).
    #[error("{field} must be at least 1")]
    Zero {
        /// The offending field.
        field: &'static str,
    },
    /// A bucket capacity of 0, or one without a refilling bucket to size.
    #[error("{field} needs {rate} >= 1 and must itself be at least 1")]
    Burst {
        /// The capacity field.
        field: &'static str,
        /// The rate field it sizes.
        rate: &'static str,
    },
}

impl LimitsError {
    /// The camelCase name of the offending field.
    pub fn field(&self) -> &'static str {
        match self {
            LimitsError::TooLarge { field } | LimitsError::Zero { field } => field,
            LimitsError::InvalidCost => "maxCostUsd",
            LimitsError::ReservationOutsideConcurrency { .. }
            | LimitsError::ReservationOutsidePrincipal { .. } => "reservedConcurrency",
            LimitsError::ShareOutOfRange { .. } | LimitsError::ShareOnPrincipal => {
                "maxPrincipalShare"
            }
            LimitsError::BreakerZero { field } => field,
            LimitsError::Burst { field, .. } => field,
            LimitsError::WrongScope { field, .. } => field,
            LimitsError::WeightOutOfRange { .. } => "weight",
            LimitsError::MinShareOutOfRange { .. } => "minShare",
        }
    }
}

impl Limits {
    /// Limits with only a concurrency ceiling.
    pub fn with_concurrency(concurrency: u32) -> Self {
        Limits {
            concurrency,
            ..Limits::default()
        }
    }

    /// Checks the rules serde cannot express, for limits used in `scope`.
    pub fn validate(&self, scope: ScopeKind) -> Result<(), LimitsError> {
        let counts: [(&'static str, Option<u64>); 13] = [
            ("requestsPerMinute", self.requests_per_minute),
            ("requestsBurst", self.requests_burst),
            ("tokensPerSecond", self.tokens_per_second),
            ("tokensBurst", self.tokens_burst),
            ("maxAttempts", self.max_attempts),
            ("maxTokens", self.max_tokens),
            ("maxOpenBudgets", self.max_open_budgets),
            ("maxBatchSize", self.max_batch_size),
            ("maxRequestBytes", self.max_request_bytes),
            ("maxItems", self.max_items),
            ("maxRetainedWork", self.max_retained_work),
            ("maxQueueLength", self.max_queue_length),
            ("maxQueueWaitMs", self.max_queue_wait_ms),
        ];
        for (field, value) in counts {
            if value.is_some_and(|v| v > MAX_SAFE_INTEGER) {
                return Err(LimitsError::TooLarge { field });
            }
        }
        let bursts = [
            (
                "requestsBurst",
                "requestsPerMinute",
                self.requests_burst,
                self.requests_per_minute,
            ),
            (
                "tokensBurst",
                "tokensPerSecond",
                self.tokens_burst,
                self.tokens_per_second,
            ),
        ];
        for (field, rate_field, burst, rate) in bursts {
            if burst.is_some_and(|b| b == 0 || rate.unwrap_or(0) == 0) {
                return Err(LimitsError::Burst {
                    field,
                    rate: rate_field,
                });
            }
        }
        if self.max_open_budgets == Some(0) {
            return Err(LimitsError::Zero {
                field: "maxOpenBudgets",
            });
        }
        if self.max_open_budgets.is_some() && scope == ScopeKind::Provider {
            return Err(LimitsError::WrongScope {
                field: "maxOpenBudgets",
                allowed: "principal or workspace",
                scope: scope.as_str(),
            });
        }
        if let Some(cost) = self.max_cost_usd {
            if !cost.is_finite() || cost < 0.0 {
                return Err(LimitsError::InvalidCost);
            }
        }
        if let Some(breaker) = &self.circuit_breaker {
            if breaker.failure_threshold == 0 {
                return Err(LimitsError::BreakerZero {
                    field: "failureThreshold",
                });
            }
            if breaker.half_open_max_calls == Some(0) {
                return Err(LimitsError::BreakerZero {
                    field: "halfOpenMaxCalls",
                });
            }
            if breaker.open_ms.is_some_and(|ms| ms > MAX_SAFE_INTEGER) {
                return Err(LimitsError::TooLarge {
                    field: "circuitBreaker.openMs",
                });
            }
        }
        self.validate_scheduling(scope)?;
        match scope {
            ScopeKind::Principal => {
                if self.max_principal_share.is_some() {
                    return Err(LimitsError::ShareOnPrincipal);
                }
                if let Some(reserved) = self.reserved_concurrency {
                    if reserved > self.concurrency {
                        return Err(LimitsError::ReservationOutsideConcurrency {
                            reserved,
                            concurrency: self.concurrency,
                        });
                    }
                }
            }
            ScopeKind::Workspace | ScopeKind::Provider => {
                if self.reserved_concurrency.is_some() {
                    return Err(LimitsError::ReservationOutsidePrincipal {
                        scope: scope.as_str(),
                    });
                }
                if let Some(share) = self.max_principal_share {
                    if !(share > 0.0 && share <= 1.0) {
                        return Err(LimitsError::ShareOutOfRange { share });
                    }
                }
            }
        }
        Ok(())
    }

    /// The scheduling fields: each on its own scope, weights and shares in range.
    fn validate_scheduling(&self, scope: ScopeKind) -> Result<(), LimitsError> {
        let placed: [(&'static str, bool, ScopeKind); 4] = [
            ("fairness", self.fairness.is_some(), ScopeKind::Provider),
            ("weight", self.weight.is_some(), ScopeKind::Principal),
            ("priority", self.priority.is_some(), ScopeKind::Principal),
            ("minShare", self.min_share.is_some(), ScopeKind::Workspace),
        ];
        for (field, set, allowed) in placed {
            if set && scope != allowed {
                return Err(LimitsError::WrongScope {
                    field,
                    allowed: allowed.as_str(),
                    scope: scope.as_str(),
                });
            }
        }
        if let Some(weight) = self.weight {
            if !(MIN_WEIGHT..=MAX_WEIGHT).contains(&weight) {
                return Err(LimitsError::WeightOutOfRange { weight });
            }
        }
        if let Some(shares) = &self.min_share {
            let mut sum = 0.0;
            for (band, share) in [
                (
                    "standard",
                    shares.standard.unwrap_or(DEFAULT_STANDARD_MIN_SHARE),
                ),
                ("batch", shares.batch.unwrap_or(DEFAULT_BATCH_MIN_SHARE)),
            ] {
                sum += share;
                if !(0.0..1.0).contains(&share) || sum >= 1.0 {
                    return Err(LimitsError::MinShareOutOfRange { band });
                }
            }
        }
        Ok(())
    }

    /// The principal's weight in thousandths (1000 when absent).
    #[inline]
    pub(crate) fn weight_milli(&self) -> u64 {
        self.weight
            .map_or(1000, |w| ((w * 1000.0).round() as u64).max(1))
    }

    /// The principal's band.
    #[inline]
    pub(crate) fn band(&self) -> Priority {
        self.priority.unwrap_or_default()
    }

    /// Whether this principal's limits ask for anything but the default order (a weight other
    /// than 1 or a band other than `standard`).
    pub(crate) fn shapes_order(&self) -> bool {
        self.weight_milli() != 1000 || self.band() != Priority::Standard
    }

    /// The reservation this principal holds in a pool of `capacity` permits.
    pub(crate) fn reservation_in(&self, capacity: u32) -> u32 {
        self.reserved_concurrency.unwrap_or(0).min(capacity)
    }

    /// Whether any per-`budgetId` budget (attempts, cost, tokens) is set: without one, a
    /// budget check passes whatever the invocation spent.
    #[inline]
    pub(crate) fn has_budget(&self) -> bool {
        self.max_attempts.is_some() || self.max_cost_usd.is_some() || self.max_tokens.is_some()
    }

    /// The request bucket's capacity (`requestsBurst`, or `requestsPerMinute`), if configured.
    #[inline]
    pub(crate) fn request_capacity(&self) -> Option<u64> {
        self.requests_per_minute
            .map(|rate| self.requests_burst.unwrap_or(rate))
    }

    /// The token bucket's capacity (`tokensBurst`, or `tokensPerSecond`), if configured.
    #[inline]
    pub(crate) fn token_capacity(&self) -> Option<u64> {
        self.tokens_per_second
            .map(|rate| self.tokens_burst.unwrap_or(rate))
    }

    /// One principal's active-permit cap in this pool, if a share is set.
    pub(crate) fn active_share_cap(&self) -> Option<u64> {
        self.max_principal_share
            .map(|share| share_cap(share, u64::from(self.concurrency)))
    }

    /// One principal's queued-request cap in this pool, if a share and a queue bound are set.
    pub(crate) fn queued_share_cap(&self) -> Option<u64> {
        match (self.max_principal_share, self.max_queue_length) {
            (Some(share), Some(length)) => Some(share_cap(share, length)),
            _ => None,
        }
    }
}

/// `max(1, floor(share × pool))`.
fn share_cap(share: f64, pool: u64) -> u64 {
    // `pool` is at most 2^53 − 1, so the product is exact enough for floor().
    ((share * pool as f64).floor() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_and_negative_counts_are_refused() {
        let typo = serde_json::from_str::<Limits>(r#"{"concurrency":1,"maxQueueLenght":3}"#);
        assert!(typo.is_err());
        let negative = serde_json::from_str::<Limits>(r#"{"concurrency":-1}"#);
        assert!(negative.is_err());
        let fraction = serde_json::from_str::<Limits>(r#"{"concurrency":1,"maxItems":1.5}"#);
        assert!(fraction.is_err());
    }

    #[test]
    fn share_and_reservation_rules_name_their_field() {
        let mut limits = Limits::with_concurrency(2);
        limits.max_principal_share = Some(1.5);
        let err = limits.validate(ScopeKind::Workspace).unwrap_err();
        assert_eq!(err.field(), "maxPrincipalShare");
        assert!(err.to_string().contains("share"));

        let mut principal = Limits::with_concurrency(1);
        principal.reserved_concurrency = Some(2);
        let err = principal.validate(ScopeKind::Principal).unwrap_err();
        assert!(err.to_string().contains("within the principal concurrency"));
    }

    #[test]
    fn a_burst_needs_a_refilling_bucket_and_a_capacity_of_at_least_one() {
        let cases = [
            (r#"{"concurrency":1,"requestsBurst":5}"#, "requestsBurst"),
            (
                r#"{"concurrency":1,"requestsPerMinute":0,"requestsBurst":5}"#,
                "requestsBurst",
            ),
            (
                r#"{"concurrency":1,"requestsPerMinute":60,"requestsBurst":0}"#,
                "requestsBurst",
            ),
            (r#"{"concurrency":1,"tokensBurst":5}"#, "tokensBurst"),
            (
                r#"{"concurrency":1,"tokensPerSecond":100,"tokensBurst":0}"#,
                "tokensBurst",
            ),
        ];
        for (json, field) in cases {
            let limits: Limits = serde_json::from_str(json).unwrap();
            let err = limits.validate(ScopeKind::Provider).unwrap_err();
            assert_eq!(err.field(), field, "{json}");
        }
        let fine: Limits = serde_json::from_str(
            r#"{"concurrency":1,"requestsPerMinute":600,"requestsBurst":10,
                "tokensPerSecond":100,"tokensBurst":1000}"#,
        )
        .unwrap();
        fine.validate(ScopeKind::Provider).unwrap();
    }

    /// Absent bursts are not written back, so existing profiles keep their digests.
    #[test]
    fn absent_bursts_are_not_serialized() {
        let limits: Limits =
            serde_json::from_str(r#"{"concurrency":1,"requestsPerMinute":60}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&limits).unwrap(),
            r#"{"concurrency":1,"requestsPerMinute":60}"#
        );
    }

    #[test]
    fn share_caps_are_at_least_one() {
        let mut limits = Limits::with_concurrency(4);
        limits.max_principal_share = Some(0.1);
        limits.max_queue_length = Some(4);
        assert_eq!(limits.active_share_cap(), Some(1));
        assert_eq!(limits.queued_share_cap(), Some(1));
        limits.max_principal_share = Some(0.75);
        assert_eq!(limits.active_share_cap(), Some(3));
    }
}
