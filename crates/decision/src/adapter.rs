//! The adapter trait: how the evaluator asks a provider one question.
//!
//! An adapter is identified by the provider id a binding target names (`jev`,
//! `llm-subagent`, …) and reports its version and [`Capabilities`]. The evaluator checks
//! capabilities before any call, then calls [`Adapter::invoke`] under admission and a deadline;
//! the adapter answers with an [`Observation`] and never panics or errors out of band: every
//! transport outcome is an observation.
//!
//! Subagent workers: an adapter that runs a pinned worker (an LLM subagent with a fixed task)
//! reports that worker's pin ([`Adapter::worker`]). The evaluator dispatches a target that pins
//! a `subagent` only to an adapter reporting exactly that pin; anything else is
//! `digest-mismatch` before any call ([`crate::plan::verify_subagents`]).
//!
//! Version compatibility: the adapter's version matches a target's `adapterVersion` when they
//! are equal, or when the adapter's version is the target's plus a pre-release or build suffix
//! (`1.0.0-design` serves `1.0.0`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::artifact::{self, Loaded};
use crate::binding::AliasTarget;
use crate::definition::{AnswerKind, DefinitionSpec};
use crate::observation::Observation;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What an adapter can do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub answer_kinds: Vec<AnswerKind>,
    /// Named capabilities (`choice`, `ordinal-score`, …) a target or definition may require.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Confidence profiles it reports (for `confidence-threshold` acceptance).
    #[serde(default)]
    pub confidence_profiles: Vec<String>,
}

impl Capabilities {
    /// Every answer kind, with the kind names as capabilities.
    pub fn all_kinds() -> Self {
        let kinds = [
            AnswerKind::Choice,
            AnswerKind::OrdinalScore,
            AnswerKind::TruthProbability,
        ];
        Capabilities {
            answer_kinds: kinds.to_vec(),
            capabilities: kinds.iter().map(|k| k.as_str().to_owned()).collect(),
            confidence_profiles: Vec::new(),
        }
    }
}

/// One call.
#[derive(Debug, Clone, Copy)]
pub struct AdapterRequest<'a> {
    pub alias: &'a str,
    pub definition: &'a Loaded<DefinitionSpec>,
    /// The alias's projection of the input.
    pub input: &'a Value,
    pub target: &'a AliasTarget,
    /// The attempt's ordinal within its alias.
    pub ordinal: u32,
    /// Time left before the attempt deadline.
    pub timeout: Duration,
}

/// A provider behind a uniform interface.
pub trait Adapter: Send + Sync {
    /// The provider id.
    fn id(&self) -> &str;
    /// The adapter's version.
    fn version(&self) -> &str;
    fn capabilities(&self) -> &Capabilities;
    /// The pin (`id`, `version`, `digest`) of the subagent worker this adapter runs, if it runs
    /// one. The default runs none, so a target pinning a subagent cannot be served by it.
    fn worker(&self) -> Option<&artifact::Pin> {
        None
    }
    /// Asks one question.
    fn invoke<'a>(&'a self, request: AdapterRequest<'a>) -> BoxFuture<'a, Observation>;
}

/// Whether an adapter of version `actual` serves a target pinned to `wanted`.
pub fn version_serves(actual: &str, wanted: &str) -> bool {
    if actual == wanted {
        return true;
    }
    actual
        .strip_prefix(wanted)
        .is_some_and(|rest| rest.starts_with('-') || rest.starts_with('+'))
}

/// The adapters of an invocation, by provider id.
#[derive(Clone, Default)]
pub struct AdapterSet {
    adapters: HashMap<String, Arc<dyn Adapter>>,
}

impl std::fmt::Debug for AdapterSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids: Vec<&String> = self.adapters.keys().collect();
        ids.sort();
        f.debug_struct("AdapterSet").field("ids", &ids).finish()
    }
}

impl AdapterSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) an adapter under its id.
    pub fn with(mut self, adapter: Arc<dyn Adapter>) -> Self {
        self.insert(adapter);
        self
    }

    pub fn insert(&mut self, adapter: Arc<dyn Adapter>) {
        self.adapters.insert(adapter.id().to_owned(), adapter);
    }

    pub fn get(&self, id: &str) -> Option<&Arc<dyn Adapter>> {
        self.adapters.get(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prerelease_versions_serve_their_release() {
        assert!(version_serves("1.0.0", "1.0.0"));
        assert!(version_serves("1.0.0-design", "1.0.0"));
        assert!(version_serves("1.0.0+build.7", "1.0.0"));
        assert!(!version_serves("1.0.01", "1.0.0"));
        assert!(!version_serves("2.0.0", "1.0.0"));
    }
}
