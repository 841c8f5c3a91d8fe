//! Settled budgets kept compactly ([`ColdBudgets`], issue 34): the form an invocation takes
//! when it has gone idle while holding spend a budget limit counts (see `budget.rs`).
//!
//! # What it decides
//!
//! How a budget that must never be forgotten by idleness is stored: one fixed-size record per
//! budget, keyed by a 128-bit keyed hash of its `budgetId` (two SipHash-1-3 values under keys
//! drawn at random for each ledger), so a budget costs the same however long its ID is. A
//! budget charged on one lane (one principal, one provider: the usual case, where its three
//! usage lines are equal) keeps one [`Spent`]; one charged on several lanes keeps its lines in
//! one boxed slice.
//!
//! # Invariants
//!
//! - A record holds exactly the usage lines of the invocation it was made from; turning it back
//!   into an invocation ([`ColdBudget::lines`]) gives the same usage in every scope.
//! - Keys are unpredictable to a client (random per ledger), so no client can choose two IDs
//!   that share a record; two IDs sharing one by chance is a 2^-128 event per pair.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use rustc_hash::FxHashMap;

use crate::budget::{ScopeKey, Spent};

/// One settled budget: who opened it and what it spent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ColdBudget {
    /// The principal that opened it (counted against that principal's cap).
    pub owner: u32,
    pub lines: ColdLines,
}

/// The usage lines of a settled budget.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ColdLines {
    /// Charged on one lane only: the principal's, the workspace's and the provider's lines are
    /// this one.
    One {
        principal: u32,
        provider: u32,
        spent: Spent,
    },
    /// Charged on several lanes: every line.
    Many(Box<[(ScopeKey, Spent)]>),
}

impl ColdLines {
    /// The compact form of `lines`.
    pub fn from_lines(lines: impl Iterator<Item = (ScopeKey, Spent)>) -> Self {
        let lines: Vec<(ScopeKey, Spent)> = lines.collect();
        let mut principal = None;
        let mut provider = None;
        let mut spent = Vec::with_capacity(3);
        for (key, line) in &lines {
            match key {
                ScopeKey::Principal(p) => principal = Some(*p),
                ScopeKey::Provider(p) => provider = Some(*p),
                ScopeKey::Workspace => {}
            }
            spent.push(*line);
        }
        match (principal, provider) {
            (Some(principal), Some(provider))
                if lines.len() == 3 && spent.iter().all(|s| *s == spent[0]) =>
            {
                ColdLines::One {
                    principal,
                    provider,
                    spent: spent[0],
                }
            }
            _ => ColdLines::Many(lines.into_boxed_slice()),
        }
    }

    /// What was spent in `scope`.
    pub fn usage(&self, scope: ScopeKey) -> Spent {
        match self {
            ColdLines::One {
                principal,
                provider,
                spent,
            } => match scope {
                ScopeKey::Workspace => *spent,
                ScopeKey::Principal(p) if p == *principal => *spent,
                ScopeKey::Provider(p) if p == *provider => *spent,
                _ => Spent::default(),
            },
            ColdLines::Many(lines) => lines
                .iter()
                .find(|(key, _)| *key == scope)
                .map(|(_, spent)| *spent)
                .unwrap_or_default(),
        }
    }

    /// Every line, as the invocation held them.
    pub fn lines(&self) -> Vec<(ScopeKey, Spent)> {
        match self {
            ColdLines::One {
                principal,
                provider,
                spent,
            } => vec![
                (ScopeKey::Principal(*principal), *spent),
                (ScopeKey::Workspace, *spent),
                (ScopeKey::Provider(*provider), *spent),
            ],
            ColdLines::Many(lines) => lines.to_vec(),
        }
    }
}

/// Settled budgets by the keyed hash of their ID.
#[derive(Debug, Default)]
pub(crate) struct ColdBudgets {
    keys: (RandomState, RandomState),
    records: FxHashMap<[u64; 2], ColdBudget>,
}

impl ColdBudgets {
    fn key(&self, budget_id: &str) -> [u64; 2] {
        [
            self.keys.0.hash_one(budget_id),
            self.keys.1.hash_one(budget_id),
        ]
    }

    pub fn get(&self, budget_id: &str) -> Option<&ColdBudget> {
        if self.records.is_empty() {
            return None;
        }
        self.records.get(&self.key(budget_id))
    }

    pub fn insert(&mut self, budget_id: &str, budget: ColdBudget) {
        let key = self.key(budget_id);
        self.records.insert(key, budget);
    }

    pub fn remove(&mut self, budget_id: &str) -> Option<ColdBudget> {
        if self.records.is_empty() {
            return None;
        }
        let key = self.key(budget_id);
        self.records.remove(&key)
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(attempts: u64) -> Spent {
        Spent {
            attempts,
            cost_usd: 0.5,
            tokens: 10,
        }
    }

    #[test]
    fn one_lane_is_one_line_and_several_keep_each_line() {
        let one = ColdLines::from_lines(
            [
                (ScopeKey::Principal(3), spent(2)),
                (ScopeKey::Workspace, spent(2)),
                (ScopeKey::Provider(1), spent(2)),
            ]
            .into_iter(),
        );
        assert!(matches!(one, ColdLines::One { .. }));
        assert_eq!(one.usage(ScopeKey::Principal(3)), spent(2));
        assert_eq!(one.usage(ScopeKey::Principal(4)), Spent::default());
        assert_eq!(one.usage(ScopeKey::Provider(1)), spent(2));
        assert_eq!(one.lines().len(), 3);
        let many = [
            (ScopeKey::Principal(3), spent(1)),
            (ScopeKey::Principal(4), spent(1)),
            (ScopeKey::Workspace, spent(2)),
            (ScopeKey::Provider(1), spent(2)),
        ];
        let cold = ColdLines::from_lines(many.into_iter());
        assert_eq!(cold.usage(ScopeKey::Workspace), spent(2));
        assert_eq!(cold.usage(ScopeKey::Principal(4)), spent(1));
        assert_eq!(cold.lines(), many.to_vec());
    }

    #[test]
    fn a_record_is_small_and_found_by_its_id_only() {
        // The fixed part of one settled budget: the record and its key.
        assert!(std::mem::size_of::<([u64; 2], ColdBudget)>() <= 64);
        let mut cold = ColdBudgets::default();
        let record = ColdBudget {
            owner: 0,
            lines: ColdLines::Many(Box::new([])),
        };
        cold.insert("inv-1", record.clone());
        assert_eq!(cold.get("inv-1"), Some(&record));
        assert_eq!(cold.get("inv-2"), None);
        assert_eq!(cold.remove("inv-1"), Some(record));
        assert_eq!(cold.len(), 0);
    }
}
