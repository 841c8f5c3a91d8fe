//! The provider lane's circuit breaker, shared by the replicas through Redis.
//!
//! Same semantics and defaults as the core's breaker (`turnstile_admission`, `breaker.rs`):
//! closed counts failures reported on release (by any replica); at `failureThreshold` it opens
//! for `openMs` (server time), during which every replica refuses or waits with the remaining
//! open time; the first admission after that moves it to half-open, where at most
//! `halfOpenMaxCalls` replicas hold a **probe lease** (a lease in the probe zset, scored by the
//! lease's liveness, renewed with it: a probe holder that dies frees it within the liveness);
//! a success closes it for all and resets the count, a failure opens it again.
//!
//! Invariants: the state lives in `ts:{W}:brk:<h(provider)>` and `ts:{W}:probe:<h(provider)>`
//! (no ID in a key); every transition is decided by one Lua call on the server clock; the
//! replica's own core keeps its local breaker too (the stricter of the two applies), so a
//! degraded replica falls back to it, and on recovery the outcomes it saw meanwhile are merged
//! in ([`SeenOutcomes`]).

use crate::error::CoordError;
use crate::keys::WorkspaceKeys;
use crate::spec::BreakerSpec;

/// The shared breaker's state, as the scripts report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakerState {
    /// Admitting; failures are counted.
    Closed,
    /// Refusing until its open time ends.
    Open,
    /// Admitting probe leases only.
    HalfOpen,
}

impl BreakerState {
    /// `c`, `o`, `h`; `''` (no breaker) is `None`.
    pub fn decode(text: &str) -> Result<Option<Self>, CoordError> {
        match text {
            "" => Ok(None),
            "c" => Ok(Some(BreakerState::Closed)),
            "o" => Ok(Some(BreakerState::Open)),
            "h" => Ok(Some(BreakerState::HalfOpen)),
            other => Err(CoordError::Protocol(format!("breaker state {other}"))),
        }
    }
}

/// What a release reports to the breaker (the core's outcome; `retry-after` counts as none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    /// Nothing to report (the call was not made, or it answered `retry-after`).
    #[default]
    None,
    /// The provider answered.
    Success,
    /// The provider failed.
    Failure,
}

impl Outcome {
    /// The outcome's word in a release.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::None => "none",
            Outcome::Success => "success",
            Outcome::Failure => "failure",
        }
    }
}

/// A lane's breaker keys and threshold (what a release needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerKeys {
    /// The breaker's hash.
    pub key: String,
    /// The probe leases' zset.
    pub probes: String,
    /// Failures that open it.
    pub failure_threshold: u32,
}

impl BreakerKeys {
    /// The keys of `provider`'s breaker in `keys`' workspace.
    pub fn new(keys: &WorkspaceKeys, provider: &str, spec: &BreakerSpec) -> Self {
        BreakerKeys {
            key: keys.breaker(provider),
            probes: keys.probes(provider),
            failure_threshold: spec.failure_threshold,
        }
    }
}

/// The outcomes a degraded replica saw for one breaker, compressed: whether a success was seen,
/// and the failures after the last success (a success resets the count, so this replays the
/// sequence exactly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeenOutcomes {
    pub success: bool,
    pub failures: u32,
}

impl SeenOutcomes {
    pub fn record(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::None => {}
            Outcome::Success => {
                self.success = true;
                self.failures = 0;
            }
            Outcome::Failure => self.failures = self.failures.saturating_add(1),
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.success && self.failures == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_resets_the_failures_seen_before_it() {
        let mut seen = SeenOutcomes::default();
        assert!(seen.is_empty());
        for outcome in [Outcome::Failure, Outcome::Failure, Outcome::Success] {
            seen.record(outcome);
        }
        seen.record(Outcome::Failure);
        seen.record(Outcome::None);
        assert_eq!(
            seen,
            SeenOutcomes {
                success: true,
                failures: 1
            }
        );
        assert_eq!(BreakerState::decode("o").unwrap(), Some(BreakerState::Open));
        assert_eq!(BreakerState::decode("").unwrap(), None);
        assert!(BreakerState::decode("x").is_err());
    }
}
