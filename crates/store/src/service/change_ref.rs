//! The borrowed form of a [`LeaseChange`](super::LeaseChange), for the writer that holds the
//! parts of a change and not owned strings: the service's driver journals every grant and
//! release through it, so a grant costs no copy of its IDs on the way to the lease log.
//!
//! Invariant: a [`LeaseChangeRef`] encodes to exactly the JSON of the `LeaseChange` with the
//! same values (same names, same field order, `null` for `None`), so the lease log reads it
//! back as a `LeaseChange`; [`LeaseChangeRef::write_json`], the encoder the driver's hot path
//! uses, writes the same bytes as serde's derived encoding (both tested below, the second
//! over random strings and numbers).

use std::fmt::{Display, Write as _};

use serde::{Serialize, Serializer};

/// One change, borrowed; `T` is the lease token, written as its `Display` (32 hex digits).
#[derive(Debug, Serialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    bound = "T: Display"
)]
pub enum LeaseChangeRef<'a, T: Display> {
    /// A lease was granted.
    Granted(StoredLeaseRef<'a, T>),
    /// A lease was released, reclaimed or expired.
    Released {
        /// The lease released.
        #[serde(serialize_with = "display")]
        token: &'a T,
        /// The tokens the call used, when reported.
        actual_tokens: Option<u64>,
        /// The cost in USD the call had, when reported.
        actual_cost_usd: Option<f64>,
    },
    /// An invocation's budget was released.
    BudgetReleased {
        /// The workspace.
        workspace_id: &'a str,
        /// The invocation.
        budget_id: &'a str,
    },
    /// A provider lane was paused (or its pause extended).
    Paused {
        /// The workspace.
        workspace_id: &'a str,
        /// The provider lane.
        provider_id: &'a str,
        /// When the pause ends (epoch milliseconds).
        until_epoch_ms: u64,
    },
    /// A breaker transition: the fields of a [`StoredBreaker`](super::StoredBreaker), in its
    /// order (rare: encoded by serde, not by hand).
    Breaker {
        /// The workspace.
        workspace_id: &'a str,
        /// The provider lane.
        provider_id: &'a str,
        /// The state before.
        from: &'a str,
        /// The state after.
        to: &'a str,
        /// When it changed.
        at_epoch_ms: u64,
        /// Consecutive failures counted when it changed.
        failures: u32,
    },
}

/// A [`StoredLease`](super::StoredLease), borrowed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase", bound = "T: Display")]
pub struct StoredLeaseRef<'a, T: Display> {
    /// The lease ID its holder knows.
    #[serde(serialize_with = "display")]
    pub token: &'a T,
    /// The workspace.
    pub workspace_id: &'a str,
    /// The principal holding it.
    pub principal_id: &'a str,
    /// The provider lane.
    pub provider_id: &'a str,
    /// The invocation charged, if any.
    pub budget_id: Option<&'a str>,
    /// Attempts charged.
    pub attempts: u64,
    /// Tokens charged, when estimated.
    pub tokens: Option<u64>,
    /// Cost charged in USD, when estimated.
    pub cost_usd: Option<f64>,
    /// When it was granted.
    pub admitted_at_ms: u64,
    /// When it expires without a heartbeat (`None`: never).
    pub expires_at_ms: Option<u64>,
}

impl<T: Display> LeaseChangeRef<'_, T> {
    /// Appends this change's JSON to `buf`: the bytes of `serde_json::to_writer(buf, self)`,
    /// with the field names written as constants and an ID that needs no escaping copied as
    /// it is (serde's encoder looks up every byte of every name and value in its escape
    /// table). Numbers and IDs that do need escaping go through `serde_json` itself.
    pub fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        match self {
            LeaseChangeRef::Granted(lease) => {
                buf.extend_from_slice(br#"{"granted":{"token":"#);
                write_display(buf, lease.token)?;
                buf.extend_from_slice(br#","workspaceId":"#);
                write_str(buf, lease.workspace_id)?;
                buf.extend_from_slice(br#","principalId":"#);
                write_str(buf, lease.principal_id)?;
                buf.extend_from_slice(br#","providerId":"#);
                write_str(buf, lease.provider_id)?;
                buf.extend_from_slice(br#","budgetId":"#);
                match lease.budget_id {
                    Some(budget) => write_str(buf, budget)?,
                    None => buf.extend_from_slice(b"null"),
                }
                buf.extend_from_slice(br#","attempts":"#);
                serde_json::to_writer(&mut *buf, &lease.attempts)?;
                buf.extend_from_slice(br#","tokens":"#);
                serde_json::to_writer(&mut *buf, &lease.tokens)?;
                buf.extend_from_slice(br#","costUsd":"#);
                serde_json::to_writer(&mut *buf, &lease.cost_usd)?;
                buf.extend_from_slice(br#","admittedAtMs":"#);
                serde_json::to_writer(&mut *buf, &lease.admitted_at_ms)?;
                buf.extend_from_slice(br#","expiresAtMs":"#);
                serde_json::to_writer(&mut *buf, &lease.expires_at_ms)?;
                buf.extend_from_slice(b"}}");
            }
            LeaseChangeRef::Released {
                token,
                actual_tokens,
                actual_cost_usd,
            } => {
                buf.extend_from_slice(br#"{"released":{"token":"#);
                write_display(buf, *token)?;
                buf.extend_from_slice(br#","actualTokens":"#);
                serde_json::to_writer(&mut *buf, actual_tokens)?;
                buf.extend_from_slice(br#","actualCostUsd":"#);
                serde_json::to_writer(&mut *buf, actual_cost_usd)?;
                buf.extend_from_slice(b"}}");
            }
            LeaseChangeRef::BudgetReleased {
                workspace_id,
                budget_id,
            } => {
                buf.extend_from_slice(br#"{"budgetReleased":{"workspaceId":"#);
                write_str(buf, workspace_id)?;
                buf.extend_from_slice(br#","budgetId":"#);
                write_str(buf, budget_id)?;
                buf.extend_from_slice(b"}}");
            }
            // Rare (at most about one a second per lane): serde's own encoding.
            LeaseChangeRef::Paused { .. } | LeaseChangeRef::Breaker { .. } => {
                serde_json::to_writer(&mut *buf, self)?;
            }
        }
        Ok(())
    }
}

/// `text` as a JSON string: copied between quotes when no byte needs an escape (serde_json
/// escapes only `"`, `\` and control characters; other bytes, UTF-8 included, pass as they
/// are), else encoded by `serde_json`.
fn write_str(buf: &mut Vec<u8>, text: &str) -> Result<(), serde_json::Error> {
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        buf.push(b'"');
        buf.extend_from_slice(text.as_bytes());
        buf.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(&mut *buf, text)
    }
}

/// A value's `Display` as a JSON string, formatted straight into `buf` (the lease token: 32 hex
/// digits, which need no escaping); a value that displays with characters to escape is
/// re-encoded by `serde_json`.
fn write_display<T: Display>(buf: &mut Vec<u8>, value: &T) -> Result<(), serde_json::Error> {
    struct Bytes<'a>(&'a mut Vec<u8>);
    impl std::fmt::Write for Bytes<'_> {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            self.0.extend_from_slice(text.as_bytes());
            Ok(())
        }
    }
    let start = buf.len();
    buf.push(b'"');
    // Writing into a `Vec` cannot fail.
    let _ = write!(Bytes(buf), "{value}");
    if buf[start + 1..]
        .iter()
        .all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
    {
        buf.push(b'"');
        Ok(())
    } else {
        buf.truncate(start);
        serde_json::to_writer(&mut *buf, &value.to_string())
    }
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
        let borrowed: LeaseChangeRef<'_, String> = LeaseChangeRef::Paused {
            workspace_id: "w",
            provider_id: "llm",
            until_epoch_ms: 12,
        };
        let owned = LeaseChange::Paused {
            workspace_id: "w".into(),
            provider_id: "llm".into(),
            until_epoch_ms: 12,
        };
        let mut ours = Vec::new();
        borrowed.write_json(&mut ours).unwrap();
        assert_eq!(ours, serde_json::to_vec(&owned).unwrap());
        let transition = crate::service::StoredBreaker {
            workspace_id: "w".into(),
            provider_id: "llm".into(),
            from: "closed".into(),
            to: "open".into(),
            at_epoch_ms: 3,
            failures: 5,
        };
        let borrowed: LeaseChangeRef<'_, String> = LeaseChangeRef::Breaker {
            workspace_id: "w",
            provider_id: "llm",
            from: "closed",
            to: "open",
            at_epoch_ms: 3,
            failures: 5,
        };
        let mut ours = Vec::new();
        borrowed.write_json(&mut ours).unwrap();
        let back: LeaseChange = serde_json::from_slice(&ours).unwrap();
        assert_eq!(back, LeaseChange::Breaker(transition));
    }
}

#[cfg(test)]
mod write_json_tests {
    use super::*;
    use proptest::prelude::*;

    fn same_bytes<T: Display>(change: &LeaseChangeRef<'_, T>) {
        let mut ours = b"prefix ".to_vec();
        change.write_json(&mut ours).unwrap();
        let mut serde = b"prefix ".to_vec();
        serde_json::to_writer(&mut serde, change).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&serde)
        );
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9_.:-]{0,40}",
            any::<String>(),
            "[\\x00-\\x21\\\\\"\\u{7f}\\u{e9}\\u{2028}]{0,8}",
        ]
    }

    fn cost() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            Just(None),
            any::<f64>().prop_map(Some),
            (0u64..10_000_000).prop_map(|micro| Some(micro as f64 / 1e6)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn a_grant_writes_serdes_bytes(
            token in text(), workspace in text(), principal in text(), provider in text(),
            budget in proptest::option::of(text()), attempts in any::<u64>(),
            tokens in proptest::option::of(any::<u64>()), cost in cost(),
            admitted in any::<u64>(), expires in proptest::option::of(any::<u64>()),
        ) {
            same_bytes(&LeaseChangeRef::Granted(StoredLeaseRef {
                token: &token,
                workspace_id: &workspace,
                principal_id: &principal,
                provider_id: &provider,
                budget_id: budget.as_deref(),
                attempts,
                tokens,
                cost_usd: cost,
                admitted_at_ms: admitted,
                expires_at_ms: expires,
            }));
        }

        #[test]
        fn a_release_and_a_budget_release_write_serdes_bytes(
            token in text(), tokens in proptest::option::of(any::<u64>()), cost in cost(),
            workspace in text(), budget in text(),
        ) {
            same_bytes(&LeaseChangeRef::Released {
                token: &token,
                actual_tokens: tokens,
                actual_cost_usd: cost,
            });
            same_bytes::<String>(&LeaseChangeRef::BudgetReleased {
                workspace_id: &workspace,
                budget_id: &budget,
            });
        }
    }
}
