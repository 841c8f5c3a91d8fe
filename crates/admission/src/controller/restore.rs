//! Restoring the lane state a previous process left behind, after a restart of the host
//! (issue 14): Retry-After pauses still in force, breakers its last journaled transition left
//! open or half-open, and rate buckets drained as if empty at the last grant.
//!
//! # What it decides
//!
//! Only how conservative a restart is; the rules (`docs/server.md`, "Restart"):
//!
//! - [`Controller::restore_pause`]: a journaled pause that ends after `now` pauses its provider
//!   lane again until that instant. Monotone like every pause: it never shortens a longer one.
//! - [`Controller::restore_breaker`]: a breaker whose last transition went to `open` is open
//!   again since that transition (clamped to `now`), so it goes half-open when it would have
//!   without the restart; one that went to `half-open` is open again **from `now`** (its probes
//!   were lost with the process, so a full open period passes before the next probe); one that
//!   went to `closed`, or a provider without a breaker configuration now, is left alone.
//! - [`Controller::drain_buckets_since`]: every request and token bucket (workspace, every
//!   provider, every principal the profile gives a rate) holds at most what a bucket that was
//!   **empty at `since`** (the last grant the host journaled) refills to by `now`. A bucket's
//!   decisions are monotone in its level and the uncrashed bucket was at level ≥ 0 at its last
//!   grant, took nothing after it, and refills at the same rate, so it would hold at least as
//!   much: the restarted controller never passes a request or token the uncrashed one would
//!   have refused (property test in `bucket.rs`). `since` more than a refill period ago changes
//!   nothing (the bucket is full either way). This is the rule after a crash; after a clean
//!   stop the host restores the exact levels instead (`levels.rs`).
//!
//! # Invariants
//!
//! - Restoring never admits, rejects, queues or emits a transition (the journal already holds
//!   the transitions; the first look after an open period moves the breaker to half-open and
//!   reports that, as without a restart).
//! - A pause or breaker of a provider this controller never interned is refused with
//!   [`ReinstateError::UnknownProvider`] and changes nothing.
//!
//! # Complexity
//!
//! O(1) per pause and breaker; draining is O(scopes the profile names), once per restart.

use crate::breaker::BreakerTransition;
use crate::bucket::{MINUTE_MS, SECOND_MS};
use crate::limits::Limits;
use crate::reason::BreakerState;
use crate::time::Millis;

use super::{Controller, ReinstateError};

impl Controller {
    fn provider_index(&self, provider_id: &str) -> Result<u32, ReinstateError> {
        self.scopes
            .providers
            .find(provider_id)
            .ok_or(ReinstateError::UnknownProvider)
    }

    /// Pauses a provider lane again until `until`, a pause a previous process applied; returns
    /// whether it is in force at `now` (a pause already over changes nothing).
    pub fn restore_pause(
        &mut self,
        provider_id: &str,
        until: Millis,
        now: Millis,
    ) -> Result<bool, ReinstateError> {
        let provider = self.provider_index(provider_id)?;
        let now = self.advance(now);
        if until <= now {
            return Ok(false);
        }
        let state = &mut self.scopes.providers[provider].extra;
        state.paused_until = state.paused_until.max(until);
        Ok(true)
    }

    /// Opens a provider's breaker again as `last`, its last journaled transition, left it (see
    /// the module docs); returns whether the breaker is open now.
    pub fn restore_breaker(
        &mut self,
        last: &BreakerTransition,
        now: Millis,
    ) -> Result<bool, ReinstateError> {
        let provider = self.provider_index(&last.provider_id)?;
        let now = self.advance(now);
        let configured = self
            .scopes
            .providers
            .limits(provider)
            .is_some_and(|limits| limits.circuit_breaker.is_some());
        let opened_at = match last.to {
            _ if !configured => return Ok(false),
            BreakerState::Closed => return Ok(false),
            BreakerState::Open => last.at_epoch_ms.min(now),
            BreakerState::HalfOpen => now,
        };
        self.scopes.providers[provider]
            .extra
            .breaker
            .restore_open(opened_at, last.failures);
        Ok(true)
    }

    /// Lowers every rate bucket to what it would hold had it been empty at `since` (see the
    /// module docs); returns how many buckets it lowered.
    pub fn drain_buckets_since(&mut self, since: Millis, now: Millis) -> usize {
        let now = self.advance(now);
        let mut lowered = self.scopes.workspace.drain_since(since, now);
        for provider in 0..self.scopes.providers.len() as u32 {
            lowered += self
                .scopes
                .providers
                .state_mut(provider, now)
                .drain_since(since, now);
        }
        let elapsed = now.saturating_sub(since);
        for principal in 0..self.scopes.principals.len() as u32 {
            // A principal whose buckets would be full again anyway keeps no state for this
            // (a forgotten or unused state is re-created full).
            let drains = self
                .scopes
                .principals
                .limits(principal)
                .is_some_and(|l| refills_later(l, elapsed));
            if drains {
                lowered += self
                    .scopes
                    .principals
                    .state_mut(principal, now)
                    .drain_since(since, now);
            }
        }
        lowered
    }
}

/// Whether a bucket of `limits`, empty `elapsed` ms ago, is not full again yet.
fn refills_later(limits: &Limits, elapsed: Millis) -> bool {
    let not_full = |rate: Option<u64>, capacity: Option<u64>, period: Millis| match (rate, capacity)
    {
        (Some(rate), Some(capacity)) => {
            u128::from(rate) * u128::from(elapsed) < u128::from(capacity) * u128::from(period)
        }
        _ => false,
    };
    not_full(
        limits.requests_per_minute,
        limits.request_capacity(),
        MINUTE_MS,
    ) || not_full(limits.tokens_per_second, limits.token_capacity(), SECOND_MS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::AdmissionRequest;
    use crate::estimate::Estimate;
    use crate::limits::CircuitBreakerConfig;
    use crate::profile::Profile;
    use crate::reason::Reason;

    fn profile() -> Profile {
        let mut profile = Profile {
            workspace: Limits::with_concurrency(100),
            ..Profile::default()
        };
        let mut provider = Limits::with_concurrency(100);
        provider.requests_per_minute = Some(60);
        provider.circuit_breaker = Some(CircuitBreakerConfig {
            failure_threshold: 2,
            open_ms: Some(1_000),
            half_open_max_calls: Some(1),
        });
        profile.providers.insert("jev".into(), provider);
        let mut principal = Limits::with_concurrency(100);
        principal.tokens_per_second = Some(100);
        principal.tokens_burst = Some(1_000);
        profile.principals.insert("p".into(), principal);
        profile
    }

    fn request(tokens: u64) -> AdmissionRequest {
        AdmissionRequest::new("p", "jev", "b").with_estimate(Estimate::new().tokens(tokens))
    }

    fn reason(controller: &mut Controller, tokens: u64, now: Millis) -> Option<Reason> {
        controller
            .try_acquire(request(tokens), now)
            .err()
            .map(|r| r.reason)
    }

    fn transition(to: BreakerState, at: Millis) -> BreakerTransition {
        BreakerTransition {
            provider_id: "jev".into(),
            from: BreakerState::Closed,
            to,
            at_epoch_ms: at,
            failures: 2,
        }
    }

    #[test]
    fn a_restored_pause_holds_until_its_end_and_never_shortens_a_longer_one() {
        let mut c = Controller::new(profile(), 0).unwrap();
        assert_eq!(c.restore_pause("jev", 10_000, 5_000), Ok(true));
        assert_eq!(c.restore_pause("jev", 7_000, 5_000), Ok(true));
        assert_eq!(c.restore_pause("jev", 4_000, 5_000), Ok(false), "over");
        assert_eq!(reason(&mut c, 1, 9_999), Some(Reason::RetryAfter));
        assert_eq!(reason(&mut c, 1, 10_000), None, "ends at 10 s, not 7 s");
        assert_eq!(
            c.restore_pause("other", 10_000, 5_000),
            Err(ReinstateError::UnknownProvider)
        );
    }

    #[test]
    fn a_breaker_left_open_reopens_when_it_would_have_and_half_open_counts_from_now() {
        let mut c = Controller::new(profile(), 0).unwrap();
        // Opened at 4.5 s, restart at 5 s: open until 5.5 s (open period 1 s).
        assert_eq!(
            c.restore_breaker(&transition(BreakerState::Open, 4_500), 5_000),
            Ok(true)
        );
        assert_eq!(reason(&mut c, 1, 5_499), Some(Reason::CircuitOpen));
        assert_eq!(c.poll_transition(), None, "restoring reports nothing");
        assert_eq!(reason(&mut c, 1, 5_500), None, "a half-open probe passes");
        let moved = c.poll_transition().expect("open → half-open");
        assert_eq!(moved.to, BreakerState::HalfOpen);

        let mut c = Controller::new(profile(), 0).unwrap();
        assert_eq!(
            c.restore_breaker(&transition(BreakerState::HalfOpen, 1_000), 5_000),
            Ok(true)
        );
        assert_eq!(reason(&mut c, 1, 5_999), Some(Reason::CircuitOpen));
        assert_eq!(reason(&mut c, 1, 6_000), None);

        let mut c = Controller::new(profile(), 0).unwrap();
        assert_eq!(
            c.restore_breaker(&transition(BreakerState::Closed, 4_000), 5_000),
            Ok(false)
        );
        assert_eq!(reason(&mut c, 1, 5_000), None);
    }

    #[test]
    fn a_breaker_without_configuration_now_is_not_restored() {
        let mut unconfigured = profile();
        if let Some(provider) = unconfigured.providers.get_mut("jev") {
            provider.circuit_breaker = None;
        }
        let mut c = Controller::new(unconfigured, 0).unwrap();
        assert_eq!(
            c.restore_breaker(&transition(BreakerState::Open, 4_500), 5_000),
            Ok(false)
        );
        assert_eq!(reason(&mut c, 1, 5_000), None);
    }

    #[test]
    fn drained_buckets_refill_from_the_last_grant_and_an_old_one_changes_nothing() {
        // Last grant at 50 s, restart at 60 s: 10 of 60 requests per minute are back, and
        // the principal's 1,000 tokens (100 per second) are full again.
        let mut c = Controller::new(profile(), 0).unwrap();
        assert_eq!(c.drain_buckets_since(50_000, 60_000), 1);
        for _ in 0..10 {
            assert_eq!(reason(&mut c, 10, 60_000), None);
        }
        assert_eq!(reason(&mut c, 1, 60_000), Some(Reason::RequestsPerMinute));
        assert_eq!(reason(&mut c, 1, 61_000), None, "one more each second");

        // Last grant at 59 s: one request and 100 of the principal's 1,000 tokens are back.
        let mut c = Controller::new(profile(), 0).unwrap();
        assert_eq!(c.drain_buckets_since(59_000, 60_000), 2);
        assert_eq!(reason(&mut c, 101, 60_000), Some(Reason::TokensPerSecond));
        assert_eq!(reason(&mut c, 100, 60_000), None);
        assert_eq!(reason(&mut c, 0, 60_000), Some(Reason::RequestsPerMinute));

        // A minute or more ago: every bucket is full, nothing lowered, no principal state
        // created for it.
        let mut c = Controller::new(profile(), 0).unwrap();
        assert_eq!(c.drain_buckets_since(0, 60_000), 0);
        assert_eq!(c.principal_states_kept(), 0);
        for _ in 0..60 {
            assert_eq!(reason(&mut c, 1, 60_000), None);
        }
    }
}
