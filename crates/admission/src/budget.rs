//! Invocation-scoped budgets: attempts, money and cumulative tokens (REFERENCE §2, §4 step 6).
//!
//! Usage is counted per `budgetId` (one invocation) and per scope, so one invocation's spend is
//! checked against the principal's, the workspace's and the provider's limits independently.
//! Budgets only grow until the host calls `releaseBudget`, which forgets one invocation whole.
//! A check that would exceed a limit is permanent: waiting never makes a budget larger.
//!
//! An admitted attempt is charged its *estimate*. When the host releases the lease with what
//! the call *actually* used ([`ActualUsage`]), the charge is corrected: the estimate's tokens and
//! cost are replaced by the actual ones in every scope the attempt was charged to, so an attempt
//! that overran its estimate makes the next check fail closed, and a conservative estimate is
//! given back. Attempts are never corrected (an attempt was made).
//!
//! Invariants: usage is never negative; a correction only ever touches the invocation that was
//! charged (each opening of a `budgetId` has its own epoch, so a correction arriving after
//! `releaseBudget` and a re-opening changes nothing).

use rustc_hash::FxHashMap;

use crate::estimate::CheckedEstimate;
use crate::limits::Limits;
use crate::reason::Reason;

/// Which scope a usage line belongs to, by interned index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeKey {
    Principal(u32),
    Workspace,
    Provider(u32),
}

/// What one invocation has spent in one scope.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub attempts: u64,
    pub cost_usd: f64,
    pub tokens: u64,
}

impl Usage {
    /// The budget reason the estimate would break, if any.
    pub fn check(&self, limits: &Limits, estimate: &CheckedEstimate) -> Option<Reason> {
        if let Some(max) = limits.max_attempts {
            if self.attempts.saturating_add(estimate.attempts) > max {
                return Some(Reason::Attempts);
            }
        }
        if let (Some(max), Some(cost)) = (limits.max_cost_usd, estimate.cost_usd) {
            if self.cost_usd + cost > max {
                return Some(Reason::Cost);
            }
        }
        if let (Some(max), Some(tokens)) = (limits.max_tokens, estimate.tokens) {
            if self.tokens.saturating_add(tokens) > max {
                return Some(Reason::Tokens);
            }
        }
        None
    }

    fn add(&mut self, estimate: &CheckedEstimate) {
        self.attempts = self.attempts.saturating_add(estimate.attempts);
        self.cost_usd += estimate.cost_usd.unwrap_or(0.0);
        self.tokens = self.tokens.saturating_add(estimate.tokens.unwrap_or(0));
    }

    /// Replaces a charged estimate by what was actually used (only the dimensions reported).
    fn correct(&mut self, charged: &CheckedEstimate, actual: &ActualUsage) {
        if let Some(tokens) = actual.tokens {
            self.tokens = self
                .tokens
                .saturating_sub(charged.tokens.unwrap_or(0))
                .saturating_add(tokens);
        }
        if let Some(cost) = actual.cost_usd() {
            self.cost_usd = (self.cost_usd - charged.cost_usd.unwrap_or(0.0)).max(0.0) + cost;
        }
    }
}

/// What an admitted call actually used, reported when its lease is released.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ActualUsage {
    pub tokens: Option<u64>,
    cost_usd: Option<f64>,
}

/// A reported cost that is not a finite number ≥ 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("actual cost must be a finite number >= 0")]
pub struct InvalidActualCost;

impl ActualUsage {
    /// Nothing reported: the estimate stands.
    pub fn none() -> Self {
        Self::default()
    }

    /// Reports the tokens used.
    pub fn tokens(mut self, tokens: u64) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// The reported cost in USD (finite and ≥ 0).
    pub fn cost_usd(&self) -> Option<f64> {
        self.cost_usd
    }

    /// Reports the cost in USD; refused unless finite and ≥ 0.
    pub fn with_cost_usd(mut self, cost_usd: f64) -> Result<Self, InvalidActualCost> {
        if !cost_usd.is_finite() || cost_usd < 0.0 {
            return Err(InvalidActualCost);
        }
        self.cost_usd = Some(cost_usd);
        Ok(self)
    }

    pub fn is_none(&self) -> bool {
        self.tokens.is_none() && self.cost_usd.is_none()
    }
}

/// One opening of a `budgetId`: its epoch and its usage per scope.
#[derive(Debug, Default)]
struct Invocation {
    epoch: u64,
    lines: FxHashMap<ScopeKey, Usage>,
}

/// Usage of every open invocation.
#[derive(Debug, Default)]
pub struct BudgetLedger {
    invocations: FxHashMap<String, Invocation>,
    next_epoch: u64,
}

impl BudgetLedger {
    pub fn usage(&self, budget_id: &str, scope: ScopeKey) -> Usage {
        self.invocations
            .get(budget_id)
            .and_then(|invocation| invocation.lines.get(&scope))
            .copied()
            .unwrap_or_default()
    }

    /// Adds one admitted attempt to every scope it was checked against. Returns the epoch of
    /// the invocation charged (for [`BudgetLedger::correct`]).
    pub fn charge(
        &mut self,
        budget_id: &str,
        scopes: [ScopeKey; 3],
        estimate: &CheckedEstimate,
    ) -> u64 {
        let invocation = match self.invocations.get_mut(budget_id) {
            Some(invocation) => invocation,
            None => {
                self.next_epoch += 1;
                self.invocations
                    .entry(budget_id.to_owned())
                    .or_insert(Invocation {
                        epoch: self.next_epoch,
                        lines: FxHashMap::default(),
                    })
            }
        };
        for scope in scopes {
            invocation.lines.entry(scope).or_default().add(estimate);
        }
        invocation.epoch
    }

    /// Replaces an attempt's charged estimate by its actual usage in every scope it was
    /// charged to, if the invocation charged (`epoch`) is still open.
    pub fn correct(
        &mut self,
        budget_id: &str,
        epoch: u64,
        scopes: [ScopeKey; 3],
        charged: &CheckedEstimate,
        actual: &ActualUsage,
    ) {
        let Some(invocation) = self.invocations.get_mut(budget_id) else {
            return;
        };
        if invocation.epoch != epoch {
            return;
        }
        for scope in scopes {
            if let Some(line) = invocation.lines.get_mut(&scope) {
                line.correct(charged, actual);
            }
        }
    }

    /// Forgets one invocation. Returns whether it was known.
    pub fn release(&mut self, budget_id: &str) -> bool {
        self.invocations.remove(budget_id).is_some()
    }

    /// Open invocations, for snapshots and leak checks.
    pub fn open_invocations(&self) -> usize {
        self.invocations.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_budget_refuses_the_attempt_that_would_exceed_it() {
        let mut limits = Limits::with_concurrency(1);
        limits.max_cost_usd = Some(0.1);
        let estimate = CheckedEstimate {
            cost_usd: Some(0.06),
            attempts: 1,
            batch_size: 1,
            ..CheckedEstimate::default()
        };
        let mut ledger = BudgetLedger::default();
        let scopes = [
            ScopeKey::Principal(0),
            ScopeKey::Workspace,
            ScopeKey::Provider(0),
        ];
        assert_eq!(
            ledger.usage("inv", scopes[0]).check(&limits, &estimate),
            None
        );
        ledger.charge("inv", scopes, &estimate);
        assert_eq!(
            ledger.usage("inv", scopes[0]).check(&limits, &estimate),
            Some(Reason::Cost)
        );
        assert!(ledger.release("inv"));
        assert_eq!(ledger.open_invocations(), 0);
    }

    #[test]
    fn actual_usage_replaces_the_estimate_and_never_touches_a_reopened_invocation() {
        let mut limits = Limits::with_concurrency(1);
        limits.max_tokens = Some(1000);
        let estimate = CheckedEstimate {
            tokens: Some(100),
            cost_usd: Some(0.5),
            attempts: 1,
            batch_size: 1,
            ..CheckedEstimate::default()
        };
        let scopes = [
            ScopeKey::Principal(0),
            ScopeKey::Workspace,
            ScopeKey::Provider(0),
        ];
        let mut ledger = BudgetLedger::default();
        let epoch = ledger.charge("inv", scopes, &estimate);
        // Overrun: 950 tokens used; the next 100-token attempt no longer fits.
        let overrun = ActualUsage::none().tokens(950);
        ledger.correct("inv", epoch, scopes, &estimate, &overrun);
        for scope in scopes {
            let usage = ledger.usage("inv", scope);
            assert_eq!(
                (usage.tokens, usage.cost_usd, usage.attempts),
                (950, 0.5, 1)
            );
            assert_eq!(usage.check(&limits, &estimate), Some(Reason::Tokens));
        }
        // Only the cost reported: tokens stay, cost is replaced.
        let cheap = ActualUsage::none().with_cost_usd(0.1).unwrap();
        ledger.correct("inv", epoch, scopes, &estimate, &cheap);
        assert!((ledger.usage("inv", scopes[1]).cost_usd - 0.1).abs() < 1e-12);
        // Released and re-opened: a late correction for the old epoch changes nothing.
        assert!(ledger.release("inv"));
        let reopened = ledger.charge("inv", scopes, &estimate);
        assert_ne!(reopened, epoch);
        ledger.correct(
            "inv",
            epoch,
            scopes,
            &estimate,
            &ActualUsage::none().tokens(0),
        );
        assert_eq!(ledger.usage("inv", scopes[0]).tokens, 100);
        // Under-use gives back, never below zero.
        ledger.correct(
            "inv",
            reopened,
            scopes,
            &estimate,
            &ActualUsage::none().tokens(0),
        );
        assert_eq!(ledger.usage("inv", scopes[0]).tokens, 0);
        assert_eq!(
            ActualUsage::none().with_cost_usd(f64::NAN),
            Err(InvalidActualCost)
        );
        assert_eq!(
            ActualUsage::none().with_cost_usd(-1.0),
            Err(InvalidActualCost)
        );
        assert!(ActualUsage::none().is_none());
    }
}
