//! `DecisionRuleset`: the ordered evaluations, the rules and how matches compose.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::artifact::Pin;
use crate::predicate::Predicate;

/// The artifact kind name.
pub const KIND: &str = "DecisionRuleset";

/// `spec` of a DecisionRuleset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RulesetSpec {
    #[serde(default)]
    pub purpose: String,
    pub input_schema: Value,
    pub evaluations: Vec<EvaluationRef>,
    pub rules: Vec<Rule>,
    pub composition: Composition,
    pub conflict: ConflictPolicy,
    pub default_outcome: Value,
    pub failure_outcome: Value,
    pub output_schema: Value,
}

/// One question of the ruleset: an alias, the pinned definition, and which part of the input
/// it sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluationRef {
    pub alias: String,
    pub decision: Pin,
    /// JSON Pointer into the input; `""` is the whole input.
    #[serde(default)]
    pub input_pointer: String,
}

/// A rule: when its predicate is true, it proposes its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub id: String,
    pub priority: i64,
    pub when: Predicate,
    pub outcome: Value,
}

/// How matched rules combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Composition {
    /// The top-priority matches decide; they must agree.
    FirstMatch,
    /// Every matched outcome, in rule order.
    Collect,
}

/// What a first-match disagreement at the top priority gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConflictPolicy {
    /// `error` / `conflicting-outcomes`.
    Error,
    /// `review` / `conflicting-outcomes` with the failure outcome.
    Review,
}
