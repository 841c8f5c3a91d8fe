//! The borrowed form of a [`LeaseChange`](super::LeaseChange), for the writer that holds the
//! parts of a change and not owned strings: the service's driver journals every grant and
//! release through it, so a grant costs no copy of its IDs on the way to the lease log.
//!
//! Invariant: a [`LeaseChangeRef`] encodes to exactly the JSON of the `LeaseChange` with the
//! same values (same names, same field order, `null` for `None`), so the lease log reads it
//! back as a `LeaseChange` (tested below).

use std::fmt::Display;

use serde::{Serialize, Serializer};

/// One change, borrowed; `T` is the lease token, written as its `Display` (32 hex digits).
#[derive(Debug, Serialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    bound = "T: Display"
)]
pub enum LeaseChangeRef<'a, T: Display> {
    Granted(StoredLeaseRef<'a, T>),
    Released {
        #[serde(serialize_with = "display")]
        token: &'a T,
        actual_tokens: Option<u64>,
        actual_cost_usd: Option<f64>,
    },
    BudgetReleased {
        workspace_id: &'a str,
        budget_id: &'a str,
    },
}

/// A [`StoredLease`](super::StoredLease), borrowed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase", bound = "T: Display")]
pub struct StoredLeaseRef<'a, T: Display> {
    #[serde(serialize_with = "display")]
    pub token: &'a T,
    pub workspace_id: &'a str,
    pub principal_id: &'a str,
    pub provider_id: &'a str,
    pub budget_id: Option<&'a str>,
    pub attempts: u64,
    pub tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub admitted_at_ms: u64,
    pub expires_at_ms: Option<u64>,
}

fn display<T: Display, S: Serializer>(value: &&T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(*value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{LeaseChange, StoredLease};

    fn lease(budget: Option<&str>, expires: Option<u64>) -> StoredLease {
        StoredLease {
            token: "00ff".repeat(8),
            workspace_id: "w \"quoted\"".into(),
            principal_id: "p\u{e9}".into(),
            provider_id: "openai".into(),
            budget_id: budget.map(str::to_owned),
            attempts: 1,
            tokens: Some(300),
            cost_usd: Some(0.25),
            admitted_at_ms: 7,
            expires_at_ms: expires,
        }
    }

    fn borrowed(lease: &StoredLease) -> LeaseChangeRef<'_, String> {
        LeaseChangeRef::Granted(StoredLeaseRef {
            token: &lease.token,
            workspace_id: &lease.workspace_id,
            principal_id: &lease.principal_id,
            provider_id: &lease.provider_id,
            budget_id: lease.budget_id.as_deref(),
            attempts: lease.attempts,
            tokens: lease.tokens,
            cost_usd: lease.cost_usd,
            admitted_at_ms: lease.admitted_at_ms,
            expires_at_ms: lease.expires_at_ms,
        })
    }

    #[test]
    fn every_borrowed_change_encodes_as_its_owned_change() {
        for owned in [lease(Some("inv-1"), Some(9)), lease(None, None)] {
            let json = serde_json::to_string(&borrowed(&owned)).unwrap();
            assert_eq!(
                json,
                serde_json::to_string(&LeaseChange::Granted(owned.clone())).unwrap()
            );
            let back: LeaseChange = serde_json::from_str(&json).unwrap();
            assert_eq!(back, LeaseChange::Granted(owned));
        }
        let token = "ab".repeat(16);
        for (tokens, cost) in [(Some(5), Some(0.5)), (None, None)] {
            let borrowed = LeaseChangeRef::Released {
                token: &token,
                actual_tokens: tokens,
                actual_cost_usd: cost,
            };
            let owned = LeaseChange::Released {
                token: token.clone(),
                actual_tokens: tokens,
                actual_cost_usd: cost,
            };
            assert_eq!(
                serde_json::to_string(&borrowed).unwrap(),
                serde_json::to_string(&owned).unwrap()
            );
        }
        let borrowed: LeaseChangeRef<'_, String> = LeaseChangeRef::BudgetReleased {
            workspace_id: "w",
            budget_id: "b",
        };
        let owned = LeaseChange::BudgetReleased {
            workspace_id: "w".into(),
            budget_id: "b".into(),
        };
        assert_eq!(
            serde_json::to_string(&borrowed).unwrap(),
            serde_json::to_string(&owned).unwrap()
        );
    }
}
