//! Admission profiles: the limits of one workspace at one `profileVersion`.
//!
//! A profile holds the workspace limits, the limits of every provider lane and the limits of the
//! principals it knows. [`Profile::validate`] checks every scope's limits and the cross-scope
//! rule: reservations may not add up to more than the workspace concurrency or any provider's.
//! The profile digest covers `{providers, workspace}` only (principal limits are checked for
//! immutability separately by the registry). It is defined on the profile **as written**
//! (REFERENCE §6: sha256 of the canonical JSON of `{"providers", "workspace"}`): no default is
//! filled in before hashing (an absent `circuitBreaker.openMs` stays absent, see
//! [`crate::CircuitBreakerConfig`]), so a profile digests like the reference's canonical JSON of
//! the same document. Serializing a `Profile` writes the same form back, so a profile stored as
//! `serde_json::to_string(&profile)` and read again keeps its digest. The one normalisation left
//! is JSON's own: key order, whitespace, number spelling (`1.0` is `1`), and an explicit `null`
//! limit, which reads as absent.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::digest::{canonical_digest, CanonicalJsonError};
use crate::limits::{Limits, LimitsError, ScopeKind};

/// The limits of one workspace: workspace, providers and principals.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    /// The workspace-wide limits.
    pub workspace: Limits,
    /// Provider lane limits by provider ID; a provider not named here is not configured.
    pub providers: BTreeMap<String, Limits>,
    /// Principal limits by principal ID. Accepts a map, or a list of `{id, limits}` entries
    /// (the load-manifest form, whose extra fields such as `class` and `weight` are ignored).
    #[serde(default, deserialize_with = "principal_table")]
    pub principals: BTreeMap<String, Limits>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PrincipalTable {
    Map(BTreeMap<String, Limits>),
    List(Vec<PrincipalEntry>),
}

#[derive(Deserialize)]
struct PrincipalEntry {
    id: String,
    limits: Limits,
}

fn principal_table<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, Limits>, D::Error> {
    Ok(match PrincipalTable::deserialize(deserializer)? {
        PrincipalTable::Map(map) => map,
        PrincipalTable::List(list) => list.into_iter().map(|e| (e.id, e.limits)).collect(),
    })
}

/// A profile that breaks a rule. Messages name the field or scope, never a limit of another
/// tenant.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProfileError {
    /// The workspace limits are invalid.
    #[error("workspace limits: {0}")]
    Workspace(LimitsError),
    /// A provider's limits are invalid.
    #[error("provider {provider} limits: {error}")]
    Provider {
        /// The provider ID (a lane name).
        provider: String,
        /// What is wrong with its limits.
        error: LimitsError,
    },
    /// A principal's limits are invalid. The principal is named by its position only.
    #[error("principal limits: {0}")]
    Principal(LimitsError),
    /// The principals' reserved concurrency adds up to more than a pool's concurrency.
    #[error("reservations exceed the {pool} concurrency ({reserved} > {concurrency})")]
    ReservationsExceed {
        /// The pool (`workspace` or a provider).
        pool: String,
        /// The sum of the reservations in it.
        reserved: u64,
        /// The pool's concurrency.
        concurrency: u32,
    },
}

impl ProfileError {
    /// The camelCase name of the offending field, for typed API errors.
    pub fn field(&self) -> &'static str {
        match self {
            ProfileError::Workspace(e) | ProfileError::Principal(e) => e.field(),
            ProfileError::Provider { error, .. } => error.field(),
            ProfileError::ReservationsExceed { .. } => "reservedConcurrency",
        }
    }
}

/// The part of a profile its digest covers.
#[derive(Serialize)]
struct DigestedPart<'a> {
    providers: &'a BTreeMap<String, Limits>,
    workspace: &'a Limits,
}

impl Profile {
    /// Checks every scope's limits and the reservation sums.
    pub fn validate(&self) -> Result<(), ProfileError> {
        self.workspace
            .validate(ScopeKind::Workspace)
            .map_err(ProfileError::Workspace)?;
        for (provider, limits) in &self.providers {
            limits
                .validate(ScopeKind::Provider)
                .map_err(|error| ProfileError::Provider {
                    provider: provider.clone(),
                    error,
                })?;
        }
        for limits in self.principals.values() {
            limits
                .validate(ScopeKind::Principal)
                .map_err(ProfileError::Principal)?;
        }
        let reserved: u64 = self
            .principals
            .values()
            .map(|l| u64::from(l.reserved_concurrency.unwrap_or(0)))
            .sum();
        if reserved > 0 {
            if reserved > u64::from(self.workspace.concurrency) {
                return Err(ProfileError::ReservationsExceed {
                    pool: "workspace".into(),
                    reserved,
                    concurrency: self.workspace.concurrency,
                });
            }
            for (provider, limits) in &self.providers {
                if reserved > u64::from(limits.concurrency) {
                    return Err(ProfileError::ReservationsExceed {
                        pool: format!("provider {provider}"),
                        reserved,
                        concurrency: limits.concurrency,
                    });
                }
            }
        }
        Ok(())
    }

    /// `"sha256:" + hex(sha256(canonical JSON of {"providers", "workspace"}))`, on the limits as
    /// written (no defaults filled in). O(size of the limits).
    pub fn digest(&self) -> Result<String, CanonicalJsonError> {
        canonical_digest(&DigestedPart {
            providers: &self.providers,
            workspace: &self.workspace,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_form_reads_principals_from_a_list() {
        let json = r#"{"workspace":{"concurrency":4},"providers":{"jev":{"concurrency":2}},
            "principals":[{"id":"a","class":"quiet","weight":0.5,"limits":{"concurrency":1}}]}"#;
        let profile: Profile = serde_json::from_str(json).unwrap();
        assert_eq!(profile.principals["a"].concurrency, 1);
        profile.validate().unwrap();
    }

    #[test]
    fn a_misspelt_top_level_key_is_refused() {
        let json = r#"{"workspace":{"concurrency":4},"providers":{},"principal":{}}"#;
        assert!(serde_json::from_str::<Profile>(json).is_err());
    }

    /// The digest is taken on the profile as written: a breaker that omits `openMs` and
    /// `halfOpenMaxCalls` digests differently from one that spells out their defaults (as in the
    /// reference, which hashes the document it was given), and serializing the parsed profile
    /// gives back what was written.
    #[test]
    fn digest_is_defined_on_the_profile_as_written() {
        let omitted = r#"{"workspace":{"concurrency":2},"providers":{"jev":{"concurrency":1,
            "circuitBreaker":{"failureThreshold":3}}}}"#;
        let spelled = r#"{"workspace":{"concurrency":2},"providers":{"jev":{"concurrency":1,
            "circuitBreaker":{"failureThreshold":3,"openMs":30000,"halfOpenMaxCalls":1}}}}"#;
        let omitted: Profile = serde_json::from_str(omitted).unwrap();
        let spelled: Profile = serde_json::from_str(spelled).unwrap();
        assert_ne!(omitted.digest().unwrap(), spelled.digest().unwrap());
        let breaker = omitted.providers["jev"].circuit_breaker.clone().unwrap();
        assert_eq!(breaker.open_ms_or_default(), 30_000);
        assert_eq!(breaker.half_open_max_calls_or_default(), 1);
        let written = serde_json::to_string(&omitted).unwrap();
        assert!(!written.contains("openMs"), "{written}");
        let reread: Profile = serde_json::from_str(&written).unwrap();
        assert_eq!(reread.digest().unwrap(), omitted.digest().unwrap());
    }

    #[test]
    fn reservations_above_a_provider_concurrency_are_refused() {
        let mut profile = Profile {
            workspace: Limits::with_concurrency(4),
            ..Profile::default()
        };
        profile
            .providers
            .insert("jev".into(), Limits::with_concurrency(2));
        for id in ["a", "b", "c"] {
            let mut limits = Limits::with_concurrency(2);
            limits.reserved_concurrency = Some(1);
            profile.principals.insert(id.into(), limits);
        }
        let err = profile.validate().unwrap_err();
        assert!(err.to_string().contains("reservations exceed"), "{err}");
    }
}
