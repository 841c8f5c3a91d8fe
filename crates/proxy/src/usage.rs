//! The usage a provider reported, read from its answer.
//!
//! | answer | where | input | output |
//! |---|---|---|---|
//! | OpenAI chat / completions | `usage` | `prompt_tokens` | `completion_tokens` (reasoning included) |
//! | OpenAI embeddings | `usage` | `prompt_tokens` | 0 |
//! | OpenAI responses | `usage` (stream: `response.usage` of `response.completed`) | `input_tokens` | `output_tokens` |
//! | Anthropic messages | `usage` (stream: `message.usage` of `message_start`, then `usage` of `message_delta`) | `input_tokens` + `cache_creation_input_tokens` + `cache_read_input_tokens` | `output_tokens` (cumulative) |
//!
//! Invariant: a usage object is merged field by field; a later report of a field replaces an
//! earlier one (stream deltas are cumulative), so what is settled is the last reported value.

use serde_json::Value;

/// Tokens a provider reported; `None` fields were not reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: Option<u64>,
    pub output: Option<u64>,
}

impl Usage {
    /// Whether the provider reported anything.
    pub fn is_reported(&self) -> bool {
        self.input.is_some() || self.output.is_some()
    }

    /// Both counts (a missing one as 0).
    pub fn counts(&self) -> (u64, u64) {
        (self.input.unwrap_or(0), self.output.unwrap_or(0))
    }

    /// Merges a provider usage object into this one.
    pub fn merge(&mut self, usage: &Value) {
        let field = |name: &str| usage.get(name).and_then(Value::as_u64);
        let input = field("prompt_tokens").or_else(|| {
            field("input_tokens").map(|input| {
                input
                    .saturating_add(field("cache_creation_input_tokens").unwrap_or(0))
                    .saturating_add(field("cache_read_input_tokens").unwrap_or(0))
            })
        });
        if input.is_some() {
            self.input = input;
        }
        let output = field("completion_tokens").or_else(|| field("output_tokens"));
        if output.is_some() {
            self.output = output;
        }
        // Embeddings report only prompt and total tokens: nothing was generated.
        if output.is_none() && input.is_some() && usage.get("total_tokens").is_some() {
            self.output.get_or_insert(0);
        }
    }

    /// Merges the usage found in one JSON document (a whole answer or one stream event).
    pub fn merge_document(&mut self, document: &Value) {
        for usage in [
            document.get("usage"),
            document.get("response").and_then(|r| r.get("usage")),
            document.get("message").and_then(|m| m.get("usage")),
        ]
        .into_iter()
        .flatten()
        {
            if usage.is_object() {
                self.merge(usage);
            }
        }
    }

    /// The usage of a whole (non-streamed) JSON answer.
    pub fn from_body(body: &[u8]) -> Usage {
        #[derive(serde::Deserialize)]
        struct Top {
            #[serde(default)]
            usage: Option<Value>,
        }
        let mut usage = Usage::default();
        if let Ok(Top { usage: Some(value) }) = serde_json::from_slice::<Top>(body) {
            if value.is_object() {
                usage.merge(&value);
            }
        }
        usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_wire_format_is_read() {
        let chat = br#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}"#;
        assert_eq!(
            Usage::from_body(chat),
            Usage {
                input: Some(12),
                output: Some(30)
            }
        );
        let embeddings = br#"{"data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}"#;
        assert_eq!(
            Usage::from_body(embeddings),
            Usage {
                input: Some(8),
                output: Some(0)
            }
        );
        let anthropic =
            br#"{"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":7}}"#;
        assert_eq!(
            Usage::from_body(anthropic),
            Usage {
                input: Some(15),
                output: Some(7)
            }
        );
        assert!(!Usage::from_body(b"{}").is_reported());
        assert!(!Usage::from_body(b"not json").is_reported());
    }

    #[test]
    fn stream_events_merge_cumulatively() {
        let mut usage = Usage::default();
        usage.merge_document(&json!({"type":"message_start","message":{"usage":{"input_tokens":20,"output_tokens":1}}}));
        usage.merge_document(&json!({"type":"message_delta","usage":{"output_tokens":9}}));
        usage.merge_document(&json!({"type":"message_delta","usage":{"output_tokens":15}}));
        assert_eq!(
            usage,
            Usage {
                input: Some(20),
                output: Some(15)
            }
        );
        let mut usage = Usage::default();
        usage.merge_document(&json!({"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":4}}}));
        assert_eq!(usage.counts(), (3, 4));
    }
}
