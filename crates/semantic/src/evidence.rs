//! The evidence document: what is known about a generation now.
//!
//! Format (JSON, camelCase; unknown fields are refused so a typo cannot silently change the band):
//!
//! ```json
//! {
//!   "generationId": "agent-3/gen-17",
//!   "lifecycle": "active",
//!   "attention": false,
//!   "error": false,
//!   "waiting": false,
//!   "blocker": false,
//!   "terminal": false,
//!   "summary": "Running the store tests after editing roster.rs",
//!   "recentActions": ["edit crates/store/src/roster.rs", "cargo test -p turnstile-store"]
//! }
//! ```
//!
//! Only `generationId` and `lifecycle` are required; flags default to `false`, `summary` to
//! empty, `recentActions` to none. The evidence digest is computed over the *normalized*
//! document (every field present), so omitting a default and spelling it out give one digest.

use serde::{Deserialize, Serialize};

/// Lifecycle state of a generation. Anything other than `active` puts it in band 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// Working normally.
    Active,
    /// Waiting for input (a wait).
    Waiting,
    /// Blocked on something outside itself (a blocker).
    Blocked,
    /// Finished successfully (a terminal transition).
    Completed,
    /// Finished with a failure (a terminal transition).
    Failed,
    /// Stopped before finishing (a terminal transition).
    Cancelled,
}

/// Maximum length of a generation id, in bytes.
pub const MAX_GENERATION_ID_BYTES: usize = 256;
/// Maximum length of the summary, in bytes.
pub const MAX_SUMMARY_BYTES: usize = 16 * 1024;
/// Maximum number of recent actions.
pub const MAX_RECENT_ACTIONS: usize = 64;

/// What is known about one generation now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerationEvidence {
    /// The generation this evidence describes.
    pub generation_id: String,
    /// Lifecycle state.
    pub lifecycle: Lifecycle,
    /// The generation explicitly asks for attention.
    #[serde(default)]
    pub attention: bool,
    /// The generation hit an error.
    #[serde(default)]
    pub error: bool,
    /// The generation is waiting (for a person, a tool, a lock…).
    #[serde(default)]
    pub waiting: bool,
    /// Something blocks the generation.
    #[serde(default)]
    pub blocker: bool,
    /// The generation just made a terminal transition.
    #[serde(default)]
    pub terminal: bool,
    /// Free text: what the generation is doing.
    #[serde(default)]
    pub summary: String,
    /// Recent actions, newest last.
    #[serde(default)]
    pub recent_actions: Vec<String>,
}

/// Why an evidence document was refused.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// The text is not valid evidence JSON (syntax, a missing field, an unknown field…).
    #[error("evidence is not valid JSON for the evidence format: {0}")]
    Json(#[from] serde_json::Error),
    /// `generationId` is empty or only whitespace.
    #[error("generationId must not be empty")]
    EmptyGenerationId,
    /// A field is longer than allowed.
    #[error("{field} is too long: {len} (at most {max})")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The maximum.
        max: usize,
    },
}

impl GenerationEvidence {
    /// A routine, active evidence document (convenient in tests and examples).
    pub fn active(generation_id: impl Into<String>, summary: impl Into<String>) -> Self {
        GenerationEvidence {
            generation_id: generation_id.into(),
            lifecycle: Lifecycle::Active,
            attention: false,
            error: false,
            waiting: false,
            blocker: false,
            terminal: false,
            summary: summary.into(),
            recent_actions: Vec::new(),
        }
    }

    /// Checks the size and emptiness limits.
    pub fn validate(&self) -> Result<(), EvidenceError> {
        if self.generation_id.trim().is_empty() {
            return Err(EvidenceError::EmptyGenerationId);
        }
        let checks = [
            (
                "generationId",
                self.generation_id.len(),
                MAX_GENERATION_ID_BYTES,
            ),
            ("summary", self.summary.len(), MAX_SUMMARY_BYTES),
            (
                "recentActions",
                self.recent_actions.len(),
                MAX_RECENT_ACTIONS,
            ),
        ];
        for (field, len, max) in checks {
            if len > max {
                return Err(EvidenceError::TooLong { field, len, max });
            }
        }
        Ok(())
    }

    /// Parses one evidence object or an array of them, validating each.
    pub fn parse_documents(text: &str) -> Result<Vec<GenerationEvidence>, EvidenceError> {
        let value: serde_json::Value = serde_json::from_str(text)?;
        let documents: Vec<GenerationEvidence> = if value.is_array() {
            serde_json::from_value(value)?
        } else {
            vec![serde_json::from_value(value)?]
        };
        for document in &documents {
            document.validate()?;
        }
        Ok(documents)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_document_parses_with_defaults() {
        let docs =
            GenerationEvidence::parse_documents(r#"{"generationId":"g","lifecycle":"waiting"}"#)
                .unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].lifecycle, Lifecycle::Waiting);
        assert!(!docs[0].attention);
    }

    #[test]
    fn arrays_unknown_fields_and_empty_ids() {
        let docs = GenerationEvidence::parse_documents(
            r#"[{"generationId":"a","lifecycle":"active"},{"generationId":"b","lifecycle":"failed"}]"#,
        )
        .unwrap();
        assert_eq!(docs.len(), 2);
        assert!(GenerationEvidence::parse_documents(
            r#"{"generationId":"a","lifecycle":"active","atention":true}"#
        )
        .is_err());
        assert!(matches!(
            GenerationEvidence::parse_documents(r#"{"generationId":" ","lifecycle":"active"}"#),
            Err(EvidenceError::EmptyGenerationId)
        ));
        assert!(GenerationEvidence::parse_documents(
            r#"{"generationId":"a","lifecycle":"sleeping"}"#
        )
        .is_err());
    }
}
