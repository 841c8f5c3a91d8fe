//! `DecisionDefinition`: one question, its input schema and the kind of answer it takes.
//!
//! Answer kinds and their value domains:
//! - `choice`: an option id;
//! - `ordinal-score`: a number in `[0, levels − 1]` (fractions allowed);
//! - `truth-probability`: a number in `[0, 1]`.
//!
//! [`Answer::accepts`] is the one check of a value against its kind (`invalid-output`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The artifact kind name.
pub const KIND: &str = "DecisionDefinition";

/// `spec` of a DecisionDefinition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefinitionSpec {
    #[serde(default)]
    pub purpose: String,
    pub input_schema: Value,
    pub question: String,
    pub answer: Answer,
    #[serde(default)]
    pub required_capabilities: Vec<String>,
}

/// One option of a `choice` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChoiceOption {
    pub id: String,
    #[serde(default)]
    pub description: String,
}

/// The answer a definition takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Answer {
    Choice {
        options: Vec<ChoiceOption>,
    },
    OrdinalScore {
        levels: Vec<String>,
    },
    #[serde(rename_all = "camelCase")]
    TruthProbability {
        #[serde(default)]
        true_description: Option<String>,
        #[serde(default)]
        false_description: Option<String>,
    },
}

/// The closed vocabulary of answer kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnswerKind {
    Choice,
    OrdinalScore,
    TruthProbability,
}

impl AnswerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerKind::Choice => "choice",
            AnswerKind::OrdinalScore => "ordinal-score",
            AnswerKind::TruthProbability => "truth-probability",
        }
    }
}

impl Answer {
    pub fn kind(&self) -> AnswerKind {
        match self {
            Answer::Choice { .. } => AnswerKind::Choice,
            Answer::OrdinalScore { .. } => AnswerKind::OrdinalScore,
            Answer::TruthProbability { .. } => AnswerKind::TruthProbability,
        }
    }

    /// Whether `value` is a valid answer of this kind.
    pub fn accepts(&self, value: &Value) -> bool {
        match self {
            Answer::Choice { options } => value
                .as_str()
                .is_some_and(|v| options.iter().any(|o| o.id == v)),
            Answer::OrdinalScore { levels } => {
                let top = levels.len().saturating_sub(1) as f64;
                !levels.is_empty()
                    && value
                        .as_f64()
                        .is_some_and(|v| v.is_finite() && (0.0..=top).contains(&v))
            }
            Answer::TruthProbability { .. } => value
                .as_f64()
                .is_some_and(|v| v.is_finite() && (0.0..=1.0).contains(&v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_checked_against_their_kind() {
        let choice: Answer = serde_json::from_value(
            json!({"kind": "choice", "options": [{"id": "a"}, {"id": "b"}]}),
        )
        .unwrap();
        assert!(choice.accepts(&json!("a")));
        assert!(!choice.accepts(&json!("c")));
        let ordinal: Answer =
            serde_json::from_value(json!({"kind": "ordinal-score", "levels": ["x", "y", "z"]}))
                .unwrap();
        assert!(ordinal.accepts(&json!(0.01)));
        assert!(ordinal.accepts(&json!(2)));
        assert!(!ordinal.accepts(&json!(2.5)));
        let truth: Answer = serde_json::from_value(json!({"kind": "truth-probability"})).unwrap();
        assert!(truth.accepts(&json!(0.05)));
        assert!(!truth.accepts(&json!(1.5)));
        assert!(!truth.accepts(&json!("yes")));
    }
}
