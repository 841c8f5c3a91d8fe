//! `DecisionBinding`: which adapters answer each alias, and the invocation's limits.
//!
//! `maxAttempts` is **one** budget for the whole invocation: every alias, every retry, every
//! fallback and every failed capability check draws from it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::artifact::Pin;
use crate::reason::AttemptReason;

/// The artifact kind name.
pub const KIND: &str = "DecisionBinding";

/// `spec` of a DecisionBinding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingSpec {
    pub ruleset: Pin,
    pub total_timeout_ms: u64,
    pub max_attempts: u64,
    #[serde(default = "one")]
    pub concurrency: u64,
    pub evaluations: BTreeMap<String, AliasBinding>,
}

fn one() -> u64 {
    1
}

/// The targets of one alias, tried in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AliasBinding {
    pub targets: Vec<AliasTarget>,
    /// Final reasons of a target that move on to the next target.
    #[serde(default)]
    pub fallback_on: Vec<AttemptReason>,
}

/// One adapter configuration for an alias.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AliasTarget {
    /// The adapter (provider) id: `jev`, `llm-subagent`, …
    pub adapter: String,
    pub adapter_version: String,
    pub model: String,
    #[serde(default)]
    pub required_capabilities: Vec<String>,
    pub acceptance: Acceptance,
    /// Per-attempt timeout.
    pub timeout_ms: u64,
    pub retry: RetryPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<Pin>,
}

/// How an answer is accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Acceptance {
    /// A valid value of the answer kind suffices.
    TypedValue,
    /// The answer must carry a confidence of `profile` with confidence × 10000 ≥ `minimumBps`.
    #[serde(rename_all = "camelCase")]
    ConfidenceThreshold { profile: String, minimum_bps: u64 },
}

/// Retries of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub initial_delay_ms: u64,
    pub max_delay_ms: u64,
}
