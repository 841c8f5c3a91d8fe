//! Invocation-scoped budgets: attempts, money and cumulative tokens (REFERENCE §2, §4 step 6).
//!
//! Usage is counted per `budgetId` (one invocation) and per scope, so one invocation's spend is
//! checked against the principal's, the workspace's and the provider's limits independently.
//! Budgets only grow until the host calls `releaseBudget`, which forgets one invocation whole.
//! A check that would exceed a limit is permanent: waiting never makes a budget larger.

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
}

/// Usage of every open invocation.
#[derive(Debug, Default)]
pub struct BudgetLedger {
    invocations: FxHashMap<String, FxHashMap<ScopeKey, Usage>>,
}

impl BudgetLedger {
    pub fn usage(&self, budget_id: &str, scope: ScopeKey) -> Usage {
        self.invocations
            .get(budget_id)
            .and_then(|scopes| scopes.get(&scope))
            .copied()
            .unwrap_or_default()
    }

    /// Adds one admitted attempt to every scope it was checked against.
    pub fn charge(&mut self, budget_id: &str, scopes: [ScopeKey; 3], estimate: &CheckedEstimate) {
        let lines = match self.invocations.get_mut(budget_id) {
            Some(lines) => lines,
            None => self.invocations.entry(budget_id.to_owned()).or_default(),
        };
        for scope in scopes {
            lines.entry(scope).or_default().add(estimate);
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
}
