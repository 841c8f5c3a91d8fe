//! The held leases and budget spend that a lease log describes: the log's records applied in
//! order, indexed so that replaying a long log costs O(1) per record.
//!
//! The rules are those of `leases.rs` (a grant adds its charge to its spend line; a release
//! with actual usage replaces the lease's charge by it; a budget release forgets its spend and
//! detaches its held leases; an unknown token changes nothing).
//!
//! Invariants: `leases` is in grant order; `last_grant_at_ms` is the latest `admitted_at_ms`
//! of every grant the records (and the snapshot's header) describe, released ones included; `by_budget[(w, b)]` holds exactly the tokens of the
//! held leases whose `budget_id` is `b` in workspace `w`; `spend` holds only lines of budgets
//! that were charged since their last release; `pauses` holds the latest pause of each lane
//! (dropped by [`LeaseState::forget_ended_pauses`] once ended), `breakers` the latest
//! transition of each lane whose breaker is not closed.

use std::collections::{HashMap, HashSet};

use hashlink::LinkedHashMap;

use crate::service::leases::{
    corrected_cost, corrected_tokens, LeaseChange, StoredBreaker, StoredLease, StoredPause,
    StoredSpend, BREAKER_CLOSED, PAUSE_KEPT_AFTER_END_MS,
};

/// (workspace, budget)
type BudgetKey = (String, String);
/// (principal, provider): one spend line of a budget; (workspace, provider): a lane's pause
/// or breaker.
type LaneKey = (String, String);

/// Held leases and spend lines, as the records applied so far leave them.
#[derive(Debug, Default)]
pub struct LeaseState {
    leases: LinkedHashMap<String, StoredLease>,
    by_budget: HashMap<BudgetKey, HashSet<String>>,
    spend: HashMap<BudgetKey, HashMap<LaneKey, StoredSpend>>,
    /// The latest `admitted_at_ms` of any grant applied or restored.
    last_grant_at_ms: Option<u64>,
    /// (workspace, provider) → the lane's latest pause.
    pauses: HashMap<LaneKey, StoredPause>,
    /// (workspace, provider) → the lane's latest transition, when not to closed.
    breakers: HashMap<LaneKey, StoredBreaker>,
}

impl LeaseState {
    /// Applies one change (the rules of `leases.rs`).
    pub fn apply(&mut self, change: LeaseChange) {
        match change {
            LeaseChange::Granted(lease) => self.grant(lease),
            LeaseChange::Released {
                token,
                actual_tokens,
                actual_cost_usd,
            } => self.release(&token, actual_tokens, actual_cost_usd),
            LeaseChange::BudgetReleased {
                workspace_id,
                budget_id,
            } => self.release_budget(workspace_id, budget_id),
            LeaseChange::Paused {
                workspace_id,
                provider_id,
                until_epoch_ms,
            } => self.restore_pause(StoredPause {
                workspace_id,
                provider_id,
                until_epoch_ms,
            }),
            LeaseChange::Breaker(transition) => self.restore_breaker(transition),
        }
    }

    /// Keeps `pause` as its lane's latest (a snapshot's line, or a `Paused` change).
    pub fn restore_pause(&mut self, pause: StoredPause) {
        let lane = (pause.workspace_id.clone(), pause.provider_id.clone());
        self.pauses.insert(lane, pause);
    }

    /// Keeps `transition` as its lane's latest, or forgets the lane's when it closed.
    pub fn restore_breaker(&mut self, transition: StoredBreaker) {
        let lane = (
            transition.workspace_id.clone(),
            transition.provider_id.clone(),
        );
        if transition.to == BREAKER_CLOSED {
            self.breakers.remove(&lane);
        } else {
            self.breakers.insert(lane, transition);
        }
    }

    /// Forgets the pauses that ended more than [`PAUSE_KEPT_AFTER_END_MS`] before `now`
    /// (before a snapshot is written).
    pub fn forget_ended_pauses(&mut self, now: u64) {
        self.pauses
            .retain(|_, pause| pause.until_epoch_ms.saturating_add(PAUSE_KEPT_AFTER_END_MS) > now);
    }

    /// Every lane's latest pause, sorted by workspace and provider.
    pub fn pauses(&self) -> Vec<&StoredPause> {
        let mut pauses: Vec<&StoredPause> = self.pauses.values().collect();
        pauses.sort_by(|a, b| {
            (&a.workspace_id, &a.provider_id).cmp(&(&b.workspace_id, &b.provider_id))
        });
        pauses
    }

    /// Every lane's latest breaker transition that is not to closed, sorted by workspace and
    /// provider.
    pub fn breakers(&self) -> Vec<&StoredBreaker> {
        let mut breakers: Vec<&StoredBreaker> = self.breakers.values().collect();
        breakers.sort_by(|a, b| {
            (&a.workspace_id, &a.provider_id).cmp(&(&b.workspace_id, &b.provider_id))
        });
        breakers
    }

    /// Puts back one spend line as a snapshot recorded it.
    pub fn restore_spend(&mut self, line: StoredSpend) {
        let budget = (line.workspace_id.clone(), line.budget_id.clone());
        let lane = (line.principal_id.clone(), line.provider_id.clone());
        self.spend.entry(budget).or_default().insert(lane, line);
    }

    /// Puts back one held lease as a snapshot recorded it (its charge is already in the spend).
    pub fn restore_lease(&mut self, lease: StoredLease) {
        self.note_grant_at(Some(lease.admitted_at_ms));
        self.index(&lease);
        self.leases.insert(lease.token.clone(), lease);
    }

    fn index(&mut self, lease: &StoredLease) {
        if let Some(budget) = &lease.budget_id {
            self.by_budget
                .entry((lease.workspace_id.clone(), budget.clone()))
                .or_default()
                .insert(lease.token.clone());
        }
    }

    fn grant(&mut self, lease: StoredLease) {
        if let Some(budget_id) = &lease.budget_id {
            let line = self.spend_line(&lease, budget_id);
            line.attempts = line.attempts.saturating_add(lease.attempts);
            line.tokens = line.tokens.saturating_add(lease.tokens.unwrap_or(0));
            line.cost_usd += lease.cost_usd.unwrap_or(0.0);
        }
        self.restore_lease(lease);
    }

    fn release(&mut self, token: &str, actual_tokens: Option<u64>, actual_cost: Option<f64>) {
        let Some(lease) = self.leases.remove(token) else {
            return;
        };
        let Some(budget_id) = &lease.budget_id else {
            return;
        };
        let budget = (lease.workspace_id.clone(), budget_id.clone());
        if let Some(tokens) = self.by_budget.get_mut(&budget) {
            tokens.remove(token);
            if tokens.is_empty() {
                self.by_budget.remove(&budget);
            }
        }
        if actual_tokens.is_none() && actual_cost.is_none() {
            return;
        }
        let line = self.spend_line(&lease, budget_id);
        if let Some(actual) = actual_tokens {
            line.tokens = corrected_tokens(line.tokens, lease.tokens, actual);
        }
        if let Some(actual) = actual_cost {
            line.cost_usd = corrected_cost(line.cost_usd, lease.cost_usd, actual);
        }
    }

    fn release_budget(&mut self, workspace_id: String, budget_id: String) {
        let budget = (workspace_id, budget_id);
        self.spend.remove(&budget);
        for token in self.by_budget.remove(&budget).unwrap_or_default() {
            if let Some(lease) = self.leases.get_mut(&token) {
                lease.budget_id = None;
            }
        }
    }

    fn spend_line(&mut self, lease: &StoredLease, budget_id: &str) -> &mut StoredSpend {
        let budget = (lease.workspace_id.clone(), budget_id.to_owned());
        let lane = (lease.principal_id.clone(), lease.provider_id.clone());
        self.spend
            .entry(budget)
            .or_default()
            .entry(lane)
            .or_insert_with(|| StoredSpend {
                workspace_id: lease.workspace_id.clone(),
                budget_id: budget_id.to_owned(),
                principal_id: lease.principal_id.clone(),
                provider_id: lease.provider_id.clone(),
                attempts: 0,
                tokens: 0,
                cost_usd: 0.0,
            })
    }

    /// Every held lease, oldest grant first.
    pub fn held_leases(&self) -> impl Iterator<Item = &StoredLease> {
        self.leases.values()
    }

    /// Every spend line, sorted by workspace, budget, principal and provider (a stable order
    /// for snapshots and tests).
    pub fn spend(&self) -> Vec<&StoredSpend> {
        let mut lines: Vec<&StoredSpend> = self.spend.values().flat_map(|m| m.values()).collect();
        lines.sort_by(|a, b| {
            (
                &a.workspace_id,
                &a.budget_id,
                &a.principal_id,
                &a.provider_id,
            )
                .cmp(&(
                    &b.workspace_id,
                    &b.budget_id,
                    &b.principal_id,
                    &b.provider_id,
                ))
        });
        lines
    }

    /// Moves the instant of the latest grant to `at` if that is later (a snapshot's header).
    pub fn note_grant_at(&mut self, at: Option<u64>) {
        self.last_grant_at_ms = self.last_grant_at_ms.max(at);
    }

    /// The latest `admitted_at_ms` of any grant applied or restored (`None`: no grant ever).
    pub fn last_grant_at_ms(&self) -> Option<u64> {
        self.last_grant_at_ms
    }

    /// How many leases are held.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }
}
