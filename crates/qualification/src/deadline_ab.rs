//! False deadline refusals: the A/B comparison of one seeded manifest on virtual time.
//!
//! Run B is the record's run, with the core's deadline-aware refusals on (the default). Run A
//! is the same manifest and arrivals with `Registry::set_deadline_refusals(false)`: waiters
//! just wait until they are served or expire. A **false refusal** is an attempt B refused
//! `deadline-unreachable` that A admitted by its deadline; the same attempt is
//! `(arrival ordinal, attempt number)` in both runs. The runs part ways after B's first
//! refusal (a refused request leaves room for later ones), so A is "what would have happened
//! to these attempts", not a replay of B.
//!
//! # Invariants
//!
//! - `falseRefusals ≤ refused`; both are counts of attempts, never IDs.
//! - Deterministic: both runs are, so the block is.

use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

/// One attempt of one arrival: `(ordinal, attempt number from 1)`.
pub type AttemptKey = (u64, u32);

/// The A/B block of a record (`observations.deadlineRefusals`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadlineRefusals {
    /// Attempts B refused `deadline-unreachable`.
    pub refused: u64,
    /// Of those, attempts A admitted by their deadline.
    pub false_refusals: u64,
    /// Run A's completed and shed arrivals, for comparison with the record's own.
    pub completed_without_refusals: u64,
    pub shed_without_refusals: u64,
}

/// What run A saw of the attempts B refused.
#[derive(Debug, Default)]
pub struct RefusalWatch {
    watched: FxHashSet<AttemptKey>,
    admitted_in_time: u64,
}

impl RefusalWatch {
    /// Watches the attempts `refused` (B's refusals) in run A.
    pub fn new(refused: &[AttemptKey]) -> Self {
        RefusalWatch {
            watched: refused.iter().copied().collect(),
            admitted_in_time: 0,
        }
    }

    /// Run A admitted attempt `key` at `now`, its deadline being `deadline`.
    pub fn admitted(&mut self, key: AttemptKey, now: u64, deadline: u64) {
        if now <= deadline && self.watched.remove(&key) {
            self.admitted_in_time += 1;
        }
    }

    /// The block, from B's refusal count and A's completed and shed arrivals.
    pub fn finish(self, refused: u64, completed: u64, shed: u64) -> DeadlineRefusals {
        DeadlineRefusals {
            refused,
            false_refusals: self.admitted_in_time,
            completed_without_refusals: completed,
            shed_without_refusals: shed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_watched_attempts_admitted_by_their_deadline_are_false_refusals() {
        let mut watch = RefusalWatch::new(&[(1, 1), (2, 1), (3, 2)]);
        watch.admitted((1, 1), 100, 100); // admitted at its deadline: a false refusal
        watch.admitted((1, 1), 100, 100); // the same attempt again: counted once
        watch.admitted((2, 2), 50, 900); // another attempt of arrival 2: not watched
        watch.admitted((3, 2), 901, 900); // after its deadline: not in time
        watch.admitted((4, 1), 10, 900); // never refused in B
        let block = watch.finish(3, 7, 2);
        assert_eq!(block.false_refusals, 1);
        assert_eq!(block.refused, 3);
        assert_eq!(
            (
                block.completed_without_refusals,
                block.shed_without_refusals
            ),
            (7, 2)
        );
    }
}
