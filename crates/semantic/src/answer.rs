//! The prompt and answer contract of a read.
//!
//! The model receives [`SYSTEM_PROMPT`] and the canonical evidence JSON, and must answer with one
//! JSON object `{"headline": string, "detail"?: string}`. [`parse_answer`] accepts the object
//! alone or inside one Markdown code fence; it refuses anything else (that read is *invalid*).
//! Changing either the prompt or the validation must bump [`CONTRACT_VERSION`], which is part of
//! the reader configuration and therefore of the cache key.

use serde::Deserialize;

use crate::Reading;

/// Version of the prompt and answer contract.
pub const CONTRACT_VERSION: u32 = 1;

/// Maximum headline length in characters.
pub const MAX_HEADLINE_CHARS: usize = 160;
/// Maximum detail length in characters.
pub const MAX_DETAIL_CHARS: usize = 2_000;

/// The system prompt sent with every read.
pub const SYSTEM_PROMPT: &str = "You read the activity evidence of one AI agent generation and \
describe what it is doing for a dashboard card. The user message is a JSON evidence document \
(generationId, lifecycle, attention/error/waiting/blocker/terminal flags, summary, \
recentActions). Answer with exactly one JSON object and nothing else: \
{\"headline\": \"<one line, at most 160 characters>\", \"detail\": \"<optional, at most 2000 \
characters>\"}. Use only facts present in the evidence.";

/// Why an answer is outside the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// Not a JSON object of the contract's shape.
    #[error("answer is not a JSON object with a string headline")]
    NotAnObject,
    /// The headline is empty.
    #[error("answer headline is empty")]
    EmptyHeadline,
    /// The headline or detail is too long.
    #[error("answer {field} is longer than {max} characters")]
    TooLong {
        /// Which field.
        field: &'static str,
        /// The maximum.
        max: usize,
    },
}

#[derive(Deserialize)]
struct Answer {
    headline: String,
    #[serde(default)]
    detail: Option<String>,
}

fn strip_fence(content: &str) -> &str {
    let trimmed = content.trim();
    let Some(rest) = trimmed.strip_prefix("```") else {
        return trimmed;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return trimmed;
    };
    // Drop an info string such as `json` on the opening line.
    match body.split_once('\n') {
        Some((info, inner)) if !info.trim_start().starts_with('{') => inner.trim(),
        _ => body.trim(),
    }
}

/// Validates a model answer against the contract.
pub fn parse_answer(content: &str) -> Result<Reading, AnswerError> {
    let answer: Answer =
        serde_json::from_str(strip_fence(content)).map_err(|_| AnswerError::NotAnObject)?;
    let headline = answer.headline.trim().to_owned();
    if headline.is_empty() {
        return Err(AnswerError::EmptyHeadline);
    }
    if headline.chars().count() > MAX_HEADLINE_CHARS {
        return Err(AnswerError::TooLong {
            field: "headline",
            max: MAX_HEADLINE_CHARS,
        });
    }
    let detail = answer
        .detail
        .map(|detail| detail.trim().to_owned())
        .filter(|detail| !detail.is_empty());
    if detail
        .as_ref()
        .is_some_and(|detail| detail.chars().count() > MAX_DETAIL_CHARS)
    {
        return Err(AnswerError::TooLong {
            field: "detail",
            max: MAX_DETAIL_CHARS,
        });
    }
    Ok(Reading { headline, detail })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_fenced_objects_are_accepted() {
        let reading =
            parse_answer(r#"{"headline":" Running tests ","detail":"cargo test"}"#).unwrap();
        assert_eq!(reading.headline, "Running tests");
        assert_eq!(reading.detail.as_deref(), Some("cargo test"));
        let fenced = parse_answer("```json\n{\"headline\":\"x\"}\n```").unwrap();
        assert_eq!(fenced.headline, "x");
        assert_eq!(fenced.detail, None);
    }

    #[test]
    fn everything_else_is_invalid() {
        assert_eq!(
            parse_answer("The agent is running tests."),
            Err(AnswerError::NotAnObject)
        );
        assert_eq!(
            parse_answer(r#"{"headline":"  "}"#),
            Err(AnswerError::EmptyHeadline)
        );
        assert!(matches!(
            parse_answer(&format!("{{\"headline\":\"{}\"}}", "x".repeat(161))),
            Err(AnswerError::TooLong {
                field: "headline",
                ..
            })
        ));
    }
}
