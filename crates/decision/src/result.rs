//! `DecisionResult` (one alias) and `RulesetResult` (the invocation).
//!
//! `RulesetResult.spec.evaluations` keeps the ruleset's canonical alias order, whatever the
//! completion order: it is stored as an ordered list and written as a JSON object in that
//! order. Results also deserialize (a receipt's stored result is replayed), and an
//! `Evaluations` map read back keeps the order of the document.

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::artifact::{Artifact, Metadata, Pin, API_VERSION};
use crate::attempt::AttemptRecord;
use crate::observation::Uncertainty;
use crate::reason::{AttemptReason, ResultReason, RulesetStatus, Status};

/// `spec` of a DecisionResult.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionResultSpec {
    pub decision: Pin,
    pub ruleset: Pin,
    pub binding: Pin,
    pub alias: String,
    pub run_id: String,
    pub invocation_id: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    pub reason: AttemptReason,
    pub uncertainty: Option<Uncertainty>,
    pub attempts: Vec<AttemptRecord>,
}

impl DecisionResultSpec {
    /// Accepted: a successful answer that passed validation and acceptance.
    pub fn accepted(&self) -> bool {
        self.status == Status::Success && self.reason == AttemptReason::None
    }
}

/// A DecisionResult artifact.
pub type DecisionResult = Artifact<DecisionResultSpec>;

/// The ordered alias → result map.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evaluations(pub Vec<(String, DecisionResult)>);

impl Evaluations {
    pub fn get(&self, alias: &str) -> Option<&DecisionResult> {
        self.0.iter().find(|(a, _)| a == alias).map(|(_, r)| r)
    }

    pub fn aliases(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(a, _)| a.as_str())
    }

    /// Puts the entries in the order of `aliases` (unknown aliases keep their place at the end).
    pub fn reorder<'a>(&mut self, aliases: impl IntoIterator<Item = &'a str>) {
        let position: Vec<&str> = aliases.into_iter().collect();
        self.0.sort_by_key(|(alias, _)| {
            position
                .iter()
                .position(|a| a == alias)
                .unwrap_or(usize::MAX)
        });
    }
}

impl<'de> Deserialize<'de> for Evaluations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ordered;
        impl<'de> Visitor<'de> for Ordered {
            type Value = Evaluations;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of alias to DecisionResult")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Evaluations, A::Error> {
                let mut entries = Vec::new();
                while let Some((alias, result)) = map.next_entry::<String, DecisionResult>()? {
                    entries.push((alias, result));
                }
                Ok(Evaluations(entries))
            }
        }
        deserializer.deserialize_map(Ordered)
    }
}

impl Serialize for Evaluations {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (alias, result) in &self.0 {
            map.serialize_entry(alias, result)?;
        }
        map.end()
    }
}

/// `spec` of a RulesetResult.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RulesetResultSpec {
    pub ruleset: Option<Pin>,
    pub binding: Option<Pin>,
    pub run_id: String,
    pub invocation_id: String,
    pub status: RulesetStatus,
    pub reason: ResultReason,
    pub outcome: Value,
    pub matched_rules: Vec<String>,
    pub evaluations: Evaluations,
    /// What failed validation (never an ID of a principal or workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A RulesetResult artifact.
pub type RulesetResult = Artifact<RulesetResultSpec>;

/// How result artifacts are named: `{idPrefix}composed-result` and `{idPrefix}result-{alias}`,
/// described as `{descriptionPrefix} composed result` / `{descriptionPrefix} result {alias}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultNaming {
    pub id_prefix: String,
    pub description_prefix: String,
    pub version: String,
}

impl Default for ResultNaming {
    fn default() -> Self {
        ResultNaming {
            id_prefix: String::new(),
            description_prefix: "decision".into(),
            version: "1.0.0".into(),
        }
    }
}

impl ResultNaming {
    pub fn ruleset_metadata(&self) -> Metadata {
        Metadata {
            id: format!("{}composed-result", self.id_prefix),
            version: self.version.clone(),
            description: format!("{} composed result", self.description_prefix),
        }
    }

    pub fn decision_metadata(&self, alias: &str) -> Metadata {
        Metadata {
            id: format!("{}result-{alias}", self.id_prefix),
            version: self.version.clone(),
            description: format!("{} result {alias}", self.description_prefix),
        }
    }

    pub fn decision_result(&self, spec: DecisionResultSpec) -> DecisionResult {
        Artifact {
            api_version: API_VERSION.into(),
            kind: "DecisionResult".into(),
            metadata: self.decision_metadata(&spec.alias),
            spec,
        }
    }

    pub fn ruleset_result(&self, spec: RulesetResultSpec) -> RulesetResult {
        Artifact {
            api_version: API_VERSION.into(),
            kind: "RulesetResult".into(),
            metadata: self.ruleset_metadata(),
            spec,
        }
    }
}
