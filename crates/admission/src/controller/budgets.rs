//! The controller's budget operations: a host forgetting a budget, bounding the ledger, draining
//! the IDs idleness forgot, and the `too-many-budgets` refusal (which cap refused, and when a
//! place may free).
//!
//! # Invariants
//!
//! - Only [`Controller::release_budget`] forgets a budget that holds spend a budget limit
//!   counts; idleness forgets only budgets without such spend (`crate::budget`).
//! - A `too-many-budgets` refusal names its cap ([`BudgetCap`]) in its evidence.

use crate::budget::{BudgetBounds, BudgetCap};
use crate::time::Millis;

use super::{Acquired, Controller};

impl Controller {
    /// Forgets the attempt, cost and token counters of one invocation. Returns whether the
    /// invocation had spent anything.
    pub fn release_budget(&mut self, budget_id: &str, now: Millis) -> bool {
        let now = self.advance(now);
        self.expire(now);
        let known = self.budgets.release(budget_id);
        self.pump(now);
        self.note_peaks();
        known
    }

    /// Bounds the budget ledger (idle eviction, caps on open budgets); see [`BudgetBounds`].
    pub fn set_budget_bounds(&mut self, bounds: BudgetBounds) {
        self.budgets.set_bounds(bounds);
    }

    /// The budget IDs forgotten for idleness since the last call.
    pub fn take_evicted_budgets(&mut self) -> Vec<String> {
        self.budgets.take_evicted()
    }

    /// Open budgets in the compact form of settled budgets that hold limited spend.
    pub fn settled_budgets(&self) -> usize {
        self.budgets.settled_invocations()
    }

    /// `refused` (a `too-many-budgets` refusal) with its cap and the earliest a place may free
    /// without a host's release, when idleness can free one.
    pub(super) fn refuse_budget_cap(
        &self,
        mut refused: Acquired,
        cap: BudgetCap,
        now: Millis,
    ) -> Acquired {
        if let Acquired::Rejected(rejection) = &mut refused {
            rejection.evidence.budget_cap = Some(cap);
            rejection.evidence.retry_after_ms = self
                .budgets
                .next_eviction_at()
                .map(|at| at.saturating_sub(now).max(1));
        }
        refused
    }
}
