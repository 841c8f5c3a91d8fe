//! The scheduler policy of an evaluation request (the first seed's `scheduler` field) and its
//! mapping onto the admission core.
//!
//! `{enabled, profileVersion, callerConcurrency?, graphConcurrency?, workspace: {id, limits},
//! principal: {id, limits}, providers: {adapterId: limits}}` becomes a
//! `Profile { workspace, providers, principals: {principal.id: limits} }` registered as revision
//! `profileVersion` of `workspace.id`. The IDs are trusted host identities: they key lanes and
//! controllers, and never appear in evidence, results or errors.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use turnstile_admission::{Limits, Profile};

/// A trusted scope and its limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScopeLimits {
    pub id: String,
    pub limits: Limits,
}

/// The admission policy of one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerPolicy {
    pub enabled: bool,
    pub profile_version: String,
    #[serde(default)]
    pub caller_concurrency: Option<u64>,
    #[serde(default)]
    pub graph_concurrency: Option<u64>,
    pub workspace: ScopeLimits,
    pub principal: ScopeLimits,
    #[serde(default)]
    pub providers: BTreeMap<String, Limits>,
}

impl SchedulerPolicy {
    /// The admission profile this policy registers.
    pub fn profile(&self) -> Profile {
        let mut principals = BTreeMap::new();
        principals.insert(self.principal.id.clone(), self.principal.limits.clone());
        Profile {
            workspace: self.workspace.limits.clone(),
            providers: self.providers.clone(),
            principals,
        }
    }

    /// The minimum positive ceiling of binding, caller, graph, principal, workspace and every
    /// provider (at least 1).
    pub fn ceiling(&self, binding_concurrency: u64) -> usize {
        let candidates = [
            Some(binding_concurrency),
            self.caller_concurrency,
            self.graph_concurrency,
            Some(u64::from(self.principal.limits.concurrency)),
            Some(u64::from(self.workspace.limits.concurrency)),
        ]
        .into_iter()
        .flatten()
        .chain(self.providers.values().map(|l| u64::from(l.concurrency)));
        let ceiling = candidates.filter(|&c| c > 0).min().unwrap_or(1);
        usize::try_from(ceiling).unwrap_or(usize::MAX)
    }
}
