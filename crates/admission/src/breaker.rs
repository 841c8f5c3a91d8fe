//! The closed / open / half-open circuit breaker of one provider lane.
//!
//! - closed: calls pass; each failure counts; at `failureThreshold` the breaker opens.
//! - open: calls defer as `circuit-open` until `openedAt + openMs`; the first admission attempt
//!   after that moves it to half-open.
//! - half-open: at most `halfOpenMaxCalls` probes in flight; a success closes it, a failure that
//!   reaches the threshold opens it again.
//!
//! A success always resets the failure count. A release with a Retry-After or with no outcome
//! leaves the breaker untouched. Without a breaker configuration nothing is counted. Every
//! transition is reported to the caller as a [`BreakerTransition`], which never names a
//! principal or workspace.

use serde::{Deserialize, Serialize};

use crate::limits::CircuitBreakerConfig;
use crate::reason::BreakerState;
use crate::time::Millis;

/// One change of breaker state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerTransition {
    /// The provider whose breaker changed (a lane name, never a tenant).
    pub provider_id: String,
    /// The state before the change.
    pub from: BreakerState,
    /// The state after the change.
    pub to: BreakerState,
    /// The controller's `now` at the change.
    pub at_epoch_ms: Millis,
    /// Consecutive failures counted when it changed.
    pub failures: u32,
}

/// Whether the breaker lets a call through now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerGate {
    /// Pass; `probe` says the call counts as a half-open probe.
    Pass { probe: bool },
    /// Open until the given instant.
    OpenUntil(Millis),
    /// Half-open with every probe slot taken: wait for a probe's release.
    ProbesBusy,
}

#[derive(Debug, Clone, Default)]
pub struct Breaker {
    state: BreakerState,
    failures: u32,
    opened_at: Millis,
    probes_in_flight: u32,
}

impl Breaker {
    pub fn state(&self) -> BreakerState {
        self.state
    }

    #[cfg(test)]
    pub fn failures(&self) -> u32 {
        self.failures
    }

    fn transition(
        &mut self,
        provider_id: &str,
        to: BreakerState,
        now: Millis,
    ) -> BreakerTransition {
        let record = BreakerTransition {
            provider_id: provider_id.to_owned(),
            from: self.state,
            to,
            at_epoch_ms: now,
            failures: self.failures,
        };
        self.state = to;
        record
    }

    /// Looks at the gate without changing anything except the open → half-open move, which
    /// happens the first time a call is considered after the open period.
    pub fn gate(
        &mut self,
        config: Option<&CircuitBreakerConfig>,
        provider_id: &str,
        now: Millis,
        transitions: &mut Vec<BreakerTransition>,
    ) -> BreakerGate {
        let Some(config) = config else {
            return BreakerGate::Pass { probe: false };
        };
        if self.state == BreakerState::Open {
            let reopens_at = self.opened_at.saturating_add(config.open_ms_or_default());
            if now < reopens_at {
                return BreakerGate::OpenUntil(reopens_at);
            }
            transitions.push(self.transition(provider_id, BreakerState::HalfOpen, now));
        }
        match self.state {
            BreakerState::HalfOpen
                if self.probes_in_flight >= config.half_open_max_calls_or_default() =>
            {
                BreakerGate::ProbesBusy
            }
            BreakerState::HalfOpen => BreakerGate::Pass { probe: true },
            _ => BreakerGate::Pass { probe: false },
        }
    }

    /// The end of the open period, while the breaker is open at `now` (reads only: the move to
    /// half-open happens in [`Breaker::gate`]).
    pub fn open_until(&self, config: Option<&CircuitBreakerConfig>, now: Millis) -> Option<Millis> {
        let config = config?;
        let reopens_at = self.opened_at.saturating_add(config.open_ms_or_default());
        (self.state == BreakerState::Open && now < reopens_at).then_some(reopens_at)
    }

    /// Whether [`Breaker::gate`] would let a call through at `now`, read without the open →
    /// half-open move (a rollout's candidate asks without changing anything).
    pub fn would_pass(&self, config: Option<&CircuitBreakerConfig>, now: Millis) -> bool {
        let Some(config) = config else {
            return true;
        };
        match self.state {
            BreakerState::Open if self.open_until(Some(config), now).is_some() => false,
            BreakerState::Open => config.half_open_max_calls_or_default() > 0,
            BreakerState::HalfOpen => {
                self.probes_in_flight < config.half_open_max_calls_or_default()
            }
            BreakerState::Closed => true,
        }
    }

    /// After a restart: the breaker is open again since `opened_at` with `failures` counted,
    /// as the last journaled transition left it (no transition is reported: the journal
    /// already holds it). Probes in flight are not counted (none are, after a restart).
    pub fn restore_open(&mut self, opened_at: Millis, failures: u32) {
        self.state = BreakerState::Open;
        self.opened_at = opened_at;
        self.failures = self.failures.max(failures);
        self.probes_in_flight = 0;
    }

    /// Counts an admitted probe.
    pub fn start_probe(&mut self) {
        self.probes_in_flight += 1;
    }

    /// A probe's lease ended, whatever its outcome.
    pub fn end_probe(&mut self) {
        self.probes_in_flight = self.probes_in_flight.saturating_sub(1);
    }

    pub fn record_success(
        &mut self,
        provider_id: &str,
        now: Millis,
        transitions: &mut Vec<BreakerTransition>,
    ) {
        self.failures = 0;
        if self.state != BreakerState::Closed {
            transitions.push(self.transition(provider_id, BreakerState::Closed, now));
        }
    }

    pub fn record_failure(
        &mut self,
        config: Option<&CircuitBreakerConfig>,
        provider_id: &str,
        now: Millis,
        transitions: &mut Vec<BreakerTransition>,
    ) {
        let Some(config) = config else { return };
        self.failures = self.failures.saturating_add(1);
        if self.failures >= config.failure_threshold && self.state != BreakerState::Open {
            transitions.push(self.transition(provider_id, BreakerState::Open, now));
            self.opened_at = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CircuitBreakerConfig {
        CircuitBreakerConfig {
            failure_threshold: 2,
            open_ms: Some(100),
            half_open_max_calls: Some(1),
        }
    }

    #[test]
    fn opens_at_threshold_then_probes_then_closes() {
        let mut breaker = Breaker::default();
        let mut log = Vec::new();
        breaker.record_failure(Some(&config()), "jev", 0, &mut log);
        assert!(log.is_empty());
        breaker.record_failure(Some(&config()), "jev", 5, &mut log);
        assert_eq!(log.len(), 1);
        assert_eq!(
            breaker.gate(Some(&config()), "jev", 104, &mut log),
            BreakerGate::OpenUntil(105)
        );
        assert_eq!(
            breaker.gate(Some(&config()), "jev", 105, &mut log),
            BreakerGate::Pass { probe: true }
        );
        breaker.start_probe();
        assert_eq!(
            breaker.gate(Some(&config()), "jev", 106, &mut log),
            BreakerGate::ProbesBusy
        );
        breaker.end_probe();
        breaker.record_success("jev", 107, &mut log);
        let states: Vec<_> = log.iter().map(|t| (t.from, t.to)).collect();
        assert_eq!(
            states,
            vec![
                (BreakerState::Closed, BreakerState::Open),
                (BreakerState::Open, BreakerState::HalfOpen),
                (BreakerState::HalfOpen, BreakerState::Closed)
            ]
        );
        assert_eq!(breaker.failures(), 0);
    }

    #[test]
    fn open_until_is_the_end_of_the_open_period_and_changes_nothing() {
        let mut breaker = Breaker::default();
        let mut log = Vec::new();
        assert_eq!(breaker.open_until(Some(&config()), 0), None, "closed");
        breaker.record_failure(Some(&config()), "jev", 0, &mut log);
        breaker.record_failure(Some(&config()), "jev", 5, &mut log);
        assert_eq!(breaker.open_until(Some(&config()), 50), Some(105));
        assert_eq!(
            breaker.open_until(None, 50),
            None,
            "no configuration, no breaker"
        );
        assert_eq!(
            breaker.open_until(Some(&config()), 105),
            None,
            "the period is over"
        );
        assert_eq!(breaker.state(), BreakerState::Open, "reading moved nothing");
    }

    #[test]
    fn a_restored_open_breaker_goes_half_open_when_its_period_ends_and_reports_only_that() {
        let mut breaker = Breaker::default();
        let mut log = Vec::new();
        breaker.restore_open(1_000, 2);
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.open_until(Some(&config()), 1_050), Some(1_100));
        assert_eq!(
            breaker.gate(Some(&config()), "jev", 1_099, &mut log),
            BreakerGate::OpenUntil(1_100)
        );
        assert!(log.is_empty(), "restoring reports nothing");
        assert_eq!(
            breaker.gate(Some(&config()), "jev", 1_100, &mut log),
            BreakerGate::Pass { probe: true }
        );
        assert_eq!(log.len(), 1);
        // A failed probe opens it again at once (the failures were restored).
        breaker.record_failure(Some(&config()), "jev", 1_101, &mut log);
        assert_eq!(breaker.state(), BreakerState::Open);
    }

    #[test]
    fn without_config_failures_are_not_counted() {
        let mut breaker = Breaker::default();
        let mut log = Vec::new();
        breaker.record_failure(None, "jev", 0, &mut log);
        assert_eq!(breaker.failures(), 0);
    }
}
