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
//!
//! **Bounded state** ([`BudgetBounds`]): `budgetId`s come from clients, so the ledger never grows
//! without a bound, and never by forgetting spend a limit counts (issue 34):
//!
//! - An invocation charged under a budget limit (`maxAttempts`, `maxCostUsd` or `maxTokens` in
//!   any scope it was charged to) is **never forgotten for idleness**: only the host's
//!   `releaseBudget` forgets it. Once idle (untouched for `idle_ms`, no lease) it is kept in a
//!   fixed-size compact record (`budget_cold.rs`); its next attempt brings it back, spend and
//!   all (not a new budget: no `budgetOpened`).
//! - An invocation charged under no budget limit holds nothing a decision reads: idle for
//!   `idle_ms`, it is forgotten as if released, and its ID handed to the host
//!   ([`BudgetLedger::take_evicted`], which counts them); its next attempt opens a new
//!   invocation (the admit evidence says `budgetOpened`). So is a call budget
//!   ([`CALL_BUDGET_PREFIX`]), whatever it holds.
//! - **Caps**: an attempt that would open one more invocation is refused (`too-many-budgets`,
//!   with the [`BudgetCap`] that refused) when its principal holds its own cap of open
//!   invocations (`maxOpenBudgets`, else [`BudgetBounds::max_open_per_principal`]), or the
//!   workspace holds [`BudgetBounds::max_open`]. An invocation counts against the principal that
//!   opened it until it is released or forgotten; an attempt on an open invocation is never
//!   refused for a cap, and call budgets count against neither cap. A principal cap below the
//!   workspace cap (the registry checks it) means one principal at its cap cannot fill the
//!   workspace.
//!
//! Invocations are kept in touch order (a linked hash map), so eviction looks only at the
//! oldest ones: O(1) per touch, amortised O(1) per eviction.

use hashlink::LinkedHashMap;
use rustc_hash::{FxBuildHasher, FxHashMap};
use serde::{Deserialize, Serialize};

use crate::budget_cold::{ColdBudget, ColdBudgets, ColdLines};

use crate::time::Millis;

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
pub struct Spent {
    pub attempts: u64,
    pub cost_usd: f64,
    pub tokens: u64,
}

impl Spent {
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
    /// The tokens the call used, when reported.
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

    /// Whether nothing was reported (the estimate stands).
    pub fn is_none(&self) -> bool {
        self.tokens.is_none() && self.cost_usd.is_none()
    }
}

/// One opening of a `budgetId`: its epoch and its usage per scope.
#[derive(Debug, Default)]
struct Invocation {
    epoch: u64,
    lines: FxHashMap<ScopeKey, Spent>,
    /// When the invocation was last charged or settled.
    touched_at: Millis,
    /// Leases charged to it and not yet settled: an invocation holding one is never idle.
    open_leases: u32,
    /// The principal that opened it, whose cap it counts against; `None` for a call budget.
    owner: Option<u32>,
    /// Charged under a budget limit: its spend is never forgotten for idleness.
    limited: bool,
}

/// Bounds on the ledger's state (see the module docs). `None` means unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetBounds {
    /// An untouched invocation without leases and without limited spend is forgotten after
    /// this long.
    pub idle_ms: Option<Millis>,
    /// At most this many open invocations in the workspace (call budgets aside); one more is
    /// refused.
    pub max_open: Option<usize>,
    /// At most this many open invocations opened by one principal, unless the profile says
    /// otherwise (`maxOpenBudgets` of the principal, else of the workspace).
    pub max_open_per_principal: Option<usize>,
}

/// Which cap refused a budget (`too-many-budgets`): the principal's own or the workspace's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetCap {
    /// The principal holds as many open budgets as its `maxOpenBudgets` allows.
    Principal,
    /// The workspace holds `budgets.max_open_per_workspace` open budgets.
    Workspace,
}

impl BudgetCap {
    /// The cap's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetCap::Principal => "principal",
            BudgetCap::Workspace => "workspace",
        }
    }
}

/// Budget IDs starting with this are **call budgets**: a host's own, one per call and
/// forgotten by the host when the call ends (the proxy's per-call budgets). They count against
/// no cap, and idleness forgets them whatever they hold (a host that crashed mid-call never
/// forgets them otherwise). The admission API cannot name them (`~` is outside its alphabet).
pub const CALL_BUDGET_PREFIX: &str = "~";

/// Whether `budget_id` names a call budget ([`CALL_BUDGET_PREFIX`]).
pub fn is_call_budget(budget_id: &str) -> bool {
    budget_id.starts_with(CALL_BUDGET_PREFIX)
}

/// How many of the oldest invocations one eviction pass looks at, at most (an old invocation
/// that still holds a lease is moved to the back and skipped).
const EVICTION_SCAN_LIMIT: usize = 64;

/// Usage of every open invocation.
#[derive(Debug, Default)]
pub struct BudgetLedger {
    /// Open invocations in full form, least recently touched first.
    invocations: LinkedHashMap<String, Invocation, FxBuildHasher>,
    /// Open invocations that went idle holding limited spend, in compact form.
    cold: ColdBudgets,
    next_epoch: u64,
    bounds: BudgetBounds,
    /// IDs forgotten for idleness since the last [`BudgetLedger::take_evicted`] (at most
    /// [`EVICTION_SCAN_LIMIT`] per operation; the host drains them after each one).
    evicted: Vec<String>,
    /// Open invocations counted against the caps (call budgets aside), by opening principal.
    open_by_principal: FxHashMap<u32, u32>,
    /// Their sum.
    counted: usize,
}

impl BudgetLedger {
    /// Sets the bounds; they apply from the next call on.
    pub fn set_bounds(&mut self, bounds: BudgetBounds) {
        self.bounds = bounds;
    }

    /// The bounds in force.
    pub fn bounds(&self) -> BudgetBounds {
        self.bounds
    }

    pub fn usage(&self, budget_id: &str, scope: ScopeKey) -> Spent {
        match self.invocations.get(budget_id) {
            Some(invocation) => invocation.lines.get(&scope).copied().unwrap_or_default(),
            None => self
                .cold
                .get(budget_id)
                .map(|cold| cold.lines.usage(scope))
                .unwrap_or_default(),
        }
    }

    /// Whether `budget_id` is open (an attempt on it would not open a new invocation).
    pub fn is_open(&self, budget_id: &str) -> bool {
        self.invocations.contains_key(budget_id) || self.cold.get(budget_id).is_some()
    }

    /// The cap an attempt of `principal` on `budget_id` would break by opening an invocation:
    /// the principal's own (`principal_cap`, its effective `maxOpenBudgets`) first, then the
    /// workspace's. An open invocation and a call budget are never refused for a cap.
    pub fn check_open(
        &self,
        budget_id: &str,
        principal: u32,
        principal_cap: Option<usize>,
    ) -> Option<BudgetCap> {
        let own = self.open_by_principal.get(&principal).copied().unwrap_or(0);
        let principal_full = principal_cap.is_some_and(|max| own as usize >= max);
        let workspace_full = self.bounds.max_open.is_some_and(|max| self.counted >= max);
        if !(principal_full || workspace_full) || is_call_budget(budget_id) {
            return None;
        }
        if self.is_open(budget_id) {
            return None;
        }
        Some(if principal_full {
            BudgetCap::Principal
        } else {
            BudgetCap::Workspace
        })
    }

    /// Adds one admitted attempt to every scope it was checked against; `limited` says whether
    /// one of them has a budget limit (its spend is then never forgotten for idleness). Returns
    /// the epoch of the invocation charged (for [`BudgetLedger::settle`]) and whether this
    /// attempt opened it.
    pub fn charge(
        &mut self,
        budget_id: &str,
        scopes: [ScopeKey; 3],
        estimate: &CheckedEstimate,
        limited: bool,
        now: Millis,
    ) -> (u64, bool) {
        let opened = !self.invocations.contains_key(budget_id);
        let mut reopened = false;
        if opened {
            self.next_epoch += 1;
            let mut invocation = Invocation {
                epoch: self.next_epoch,
                ..Invocation::default()
            };
            if let Some(cold) = self.cold.remove(budget_id) {
                // Settled, never forgotten: back in full form, still counted for its owner.
                invocation.owner = Some(cold.owner);
                invocation.limited = true;
                invocation.lines = cold.lines.lines().into_iter().collect();
                reopened = true;
            } else if let (false, ScopeKey::Principal(owner)) =
                (is_call_budget(budget_id), scopes[0])
            {
                invocation.owner = Some(owner);
                *self.open_by_principal.entry(owner).or_default() += 1;
                self.counted += 1;
            }
            self.invocations.insert(budget_id.to_owned(), invocation);
        } else {
            self.invocations.to_back(budget_id);
        }
        let Some(invocation) = self.invocations.get_mut(budget_id) else {
            return (0, opened);
        };
        for scope in scopes {
            invocation.lines.entry(scope).or_default().add(estimate);
        }
        invocation.limited |= limited;
        invocation.touched_at = now;
        invocation.open_leases = invocation.open_leases.saturating_add(1);
        (invocation.epoch, opened && !reopened)
    }

    /// Settles one lease charged to the invocation of `epoch`: replaces its charged estimate by
    /// the actual usage (the dimensions reported) in every scope it was charged to, and ends its
    /// hold on the invocation. Nothing happens when that invocation is no longer open.
    pub fn settle(
        &mut self,
        budget_id: &str,
        epoch: u64,
        scopes: [ScopeKey; 3],
        charged: &CheckedEstimate,
        actual: &ActualUsage,
        now: Millis,
    ) {
        let Some(invocation) = self.invocations.get_mut(budget_id) else {
            return;
        };
        if invocation.epoch != epoch {
            return;
        }
        if !actual.is_none() {
            for scope in scopes {
                if let Some(line) = invocation.lines.get_mut(&scope) {
                    line.correct(charged, actual);
                }
            }
        }
        invocation.open_leases = invocation.open_leases.saturating_sub(1);
        invocation.touched_at = now;
        self.invocations.to_back(budget_id);
    }

    /// Forgets one invocation. Returns whether it was known.
    pub fn release(&mut self, budget_id: &str) -> bool {
        let owner = match self.invocations.remove(budget_id) {
            Some(invocation) => invocation.owner,
            None => match self.cold.remove(budget_id) {
                Some(cold) => Some(cold.owner),
                None => return false,
            },
        };
        self.uncount(owner);
        true
    }

    fn uncount(&mut self, owner: Option<u32>) {
        let Some(owner) = owner else {
            return;
        };
        if let Some(open) = self.open_by_principal.get_mut(&owner) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                self.open_by_principal.remove(&owner);
            }
        }
        self.counted = self.counted.saturating_sub(1);
    }

    /// Forgets the invocations idle at `now` (see the module docs), and moves those holding
    /// limited spend to their compact form. Returns how many were forgotten.
    pub fn evict_idle(&mut self, now: Millis) -> u64 {
        let Some(idle_ms) = self.bounds.idle_ms else {
            return 0;
        };
        let mut evicted = 0;
        for _ in 0..EVICTION_SCAN_LIMIT {
            let Some((_, oldest)) = self.invocations.front() else {
                break;
            };
            if now < oldest.touched_at.saturating_add(idle_ms) {
                break;
            }
            let Some((id, invocation)) = self.invocations.pop_front() else {
                break;
            };
            if invocation.open_leases > 0 {
                // Held by a lease: not idle. Its settlement touches it again.
                self.invocations.insert(id, invocation);
                continue;
            }
            match (invocation.limited, invocation.owner) {
                (true, Some(owner)) => {
                    // Holds spend a limit counts: kept, compactly, until released.
                    let lines = ColdLines::from_lines(invocation.lines.into_iter());
                    self.cold.insert(&id, ColdBudget { owner, lines });
                }
                (_, owner) => {
                    self.uncount(owner);
                    self.evicted.push(id);
                    evicted += 1;
                }
            }
        }
        evicted
    }

    /// When the oldest invocation becomes idle, if the ledger evicts at all (the hint of a
    /// `too-many-budgets` refusal: the earliest a place may free without a host's release).
    pub fn next_eviction_at(&self) -> Option<Millis> {
        let idle_ms = self.bounds.idle_ms?;
        let (_, oldest) = self.invocations.front()?;
        Some(oldest.touched_at.saturating_add(idle_ms))
    }

    /// The IDs forgotten for idleness since the last call (so a host that persists spend can
    /// forget them too).
    pub fn take_evicted(&mut self) -> Vec<String> {
        std::mem::take(&mut self.evicted)
    }

    /// Open invocations, for snapshots and leak checks.
    pub fn open_invocations(&self) -> usize {
        self.invocations.len() + self.cold.len()
    }

    /// Open invocations kept in compact form.
    pub fn settled_invocations(&self) -> usize {
        self.cold.len()
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
        ledger.charge("inv", scopes, &estimate, false, 0);
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
        let (epoch, opened) = ledger.charge("inv", scopes, &estimate, false, 0);
        assert!(opened);
        // Overrun: 950 tokens used; the next 100-token attempt no longer fits.
        let overrun = ActualUsage::none().tokens(950);
        ledger.settle("inv", epoch, scopes, &estimate, &overrun, 0);
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
        ledger.settle("inv", epoch, scopes, &estimate, &cheap, 0);
        assert!((ledger.usage("inv", scopes[1]).cost_usd - 0.1).abs() < 1e-12);
        // Released and re-opened: a late correction for the old epoch changes nothing.
        assert!(ledger.release("inv"));
        let (reopened, opened) = ledger.charge("inv", scopes, &estimate, false, 0);
        assert!(opened);
        assert_ne!(reopened, epoch);
        ledger.settle(
            "inv",
            epoch,
            scopes,
            &estimate,
            &ActualUsage::none().tokens(0),
            0,
        );
        assert_eq!(ledger.usage("inv", scopes[0]).tokens, 100);
        // Under-use gives back, never below zero.
        ledger.settle(
            "inv",
            reopened,
            scopes,
            &estimate,
            &ActualUsage::none().tokens(0),
            0,
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

    fn one_attempt() -> CheckedEstimate {
        CheckedEstimate {
            attempts: 1,
            batch_size: 1,
            ..CheckedEstimate::default()
        }
    }

    const SCOPES: [ScopeKey; 3] = [
        ScopeKey::Principal(0),
        ScopeKey::Workspace,
        ScopeKey::Provider(0),
    ];

    #[test]
    fn idle_invocations_are_forgotten_and_counted_but_never_while_a_lease_holds_them() {
        let mut ledger = BudgetLedger::default();
        ledger.set_bounds(BudgetBounds {
            idle_ms: Some(1_000),
            max_open: None,
            max_open_per_principal: None,
        });
        let estimate = one_attempt();
        let (held_epoch, _) = ledger.charge("held", SCOPES, &estimate, false, 0);
        let (left_epoch, _) = ledger.charge("left", SCOPES, &estimate, false, 0);
        ledger.settle(
            "left",
            left_epoch,
            SCOPES,
            &estimate,
            &ActualUsage::none(),
            100,
        );
        assert_eq!(ledger.next_eviction_at(), Some(1_000));
        assert_eq!(ledger.evict_idle(999), 0);
        // "left" was settled at 100: idle from 1_100. "held" still holds a lease.
        assert_eq!(ledger.evict_idle(1_100), 1);
        assert!(ledger.is_open("held") && !ledger.is_open("left"));
        assert_eq!(ledger.evict_idle(50_000), 0);
        ledger.settle(
            "held",
            held_epoch,
            SCOPES,
            &estimate,
            &ActualUsage::none(),
            50_000,
        );
        assert_eq!(ledger.evict_idle(51_000), 1);
        assert_eq!(ledger.open_invocations(), 0);
        assert_eq!(ledger.take_evicted(), ["left", "held"]);
        // The next attempt opens a new invocation with fresh usage.
        let (_, opened) = ledger.charge("left", SCOPES, &estimate, false, 52_000);
        assert!(opened);
        assert_eq!(ledger.usage("left", SCOPES[0]).attempts, 1);
    }

    #[test]
    fn the_cap_refuses_only_an_attempt_that_would_open_one_more_invocation() {
        let mut ledger = BudgetLedger::default();
        ledger.set_bounds(BudgetBounds {
            idle_ms: None,
            max_open: Some(2),
            max_open_per_principal: None,
        });
        let estimate = one_attempt();
        for id in ["a", "b"] {
            assert_eq!(ledger.check_open(id, 0, None), None);
            ledger.charge(id, SCOPES, &estimate, false, 0);
        }
        assert_eq!(ledger.check_open("c", 0, None), Some(BudgetCap::Workspace));
        assert_eq!(ledger.check_open("a", 0, None), None);
        assert!(ledger.release("a"));
        assert_eq!(ledger.check_open("c", 0, None), None);
        // Without an idle bound nothing is ever evicted.
        assert_eq!(ledger.evict_idle(u64::MAX), 0);
    }

    #[test]
    fn state_stays_flat_while_100000_distinct_budgets_are_opened_and_left() {
        let mut ledger = BudgetLedger::default();
        ledger.set_bounds(BudgetBounds {
            idle_ms: Some(1_000),
            max_open: Some(10_000),
            max_open_per_principal: None,
        });
        let estimate = one_attempt();
        let (mut peak, mut evicted) = (0, 0);
        for i in 0..100_000u64 {
            let now = i; // one new budget per millisecond
            ledger.evict_idle(now);
            evicted += ledger.take_evicted().len();
            let id = format!("budget-{i}");
            assert_eq!(ledger.check_open(&id, 0, None), None, "at {i}");
            let (epoch, opened) = ledger.charge(&id, SCOPES, &estimate, false, now);
            assert!(opened);
            ledger.settle(&id, epoch, SCOPES, &estimate, &ActualUsage::none(), now);
            peak = peak.max(ledger.open_invocations());
        }
        assert!(peak <= 1_001, "peak {peak}");
        assert_eq!(evicted + ledger.open_invocations(), 100_000);
    }
}
