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
//! A whole answer's usage is read without building a `Value` tree, by the same rule and with
//! the same result as reading it through `Value` (a test holds the two readers to each other).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};
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
        self.merge_fields(&Fields {
            prompt_tokens: field("prompt_tokens"),
            input_tokens: field("input_tokens"),
            cache_creation_input_tokens: field("cache_creation_input_tokens"),
            cache_read_input_tokens: field("cache_read_input_tokens"),
            completion_tokens: field("completion_tokens"),
            output_tokens: field("output_tokens"),
            total_tokens: usage.get("total_tokens").is_some(),
        });
    }

    /// Merges the fields of one usage object (the one rule behind both readers).
    fn merge_fields(&mut self, usage: &Fields) {
        let input = usage.prompt_tokens.or_else(|| {
            usage.input_tokens.map(|input| {
                input
                    .saturating_add(usage.cache_creation_input_tokens.unwrap_or(0))
                    .saturating_add(usage.cache_read_input_tokens.unwrap_or(0))
            })
        });
        if input.is_some() {
            self.input = input;
        }
        let output = usage.completion_tokens.or(usage.output_tokens);
        if output.is_some() {
            self.output = output;
        }
        // Embeddings report only prompt and total tokens: nothing was generated.
        if output.is_none() && input.is_some() && usage.total_tokens {
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

    /// The usage of a whole (non-streamed) JSON answer: its top-level `usage` object, read
    /// straight into [`Fields`] (no `Value` tree; everything else in the answer is skipped).
    pub fn from_body(body: &[u8]) -> Usage {
        #[derive(serde::Deserialize)]
        struct Top {
            #[serde(default)]
            usage: Option<UsageObject>,
        }
        let mut usage = Usage::default();
        if let Ok(Top {
            usage: Some(UsageObject(Some(fields))),
        }) = serde_json::from_slice::<Top>(body)
        {
            usage.merge_fields(&fields);
        }
        usage
    }
}

/// The fields of a usage object that count, as `Value::as_u64` reads them: a field is `Some`
/// only when it holds a non-negative integer. `total_tokens` counts when present at all.
#[derive(Debug, Default)]
struct Fields {
    prompt_tokens: Option<u64>,
    input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    output_tokens: Option<u64>,
    total_tokens: bool,
}

/// A `usage` value: `Some` fields when it is an object, `None` for anything else. Reads like a
/// `Value` object would: unknown keys and any nested value are skipped, a repeated key's last
/// value wins.
struct UsageObject(Option<Fields>);

/// A JSON value read as `Value::as_u64` would read it.
struct Count(Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl<'de> Visitor<'de> for CountVisitor {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(v).ok()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Count, D::Error> {
                Count::deserialize(d)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Count, A::Error> {
                de::IgnoredAny.visit_seq(seq).map(|_| Count(None))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Count, A::Error> {
                de::IgnoredAny.visit_map(map).map(|_| Count(None))
            }
        }
        deserializer.deserialize_any(CountVisitor)
    }
}

/// A key of a usage object, compared without allocating.
enum Key {
    PromptTokens,
    InputTokens,
    CacheCreationInputTokens,
    CacheReadInputTokens,
    CompletionTokens,
    OutputTokens,
    TotalTokens,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "prompt_tokens" => Key::PromptTokens,
                    "input_tokens" => Key::InputTokens,
                    "cache_creation_input_tokens" => Key::CacheCreationInputTokens,
                    "cache_read_input_tokens" => Key::CacheReadInputTokens,
                    "completion_tokens" => Key::CompletionTokens,
                    "output_tokens" => Key::OutputTokens,
                    "total_tokens" => Key::TotalTokens,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for UsageObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor;
        impl<'de> Visitor<'de> for ObjectVisitor {
            type Value = UsageObject;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<UsageObject, A::Error> {
                let mut fields = Fields::default();
                while let Some(key) = map.next_key::<Key>()? {
                    let slot = match key {
                        Key::PromptTokens => &mut fields.prompt_tokens,
                        Key::InputTokens => &mut fields.input_tokens,
                        Key::CacheCreationInputTokens => &mut fields.cache_creation_input_tokens,
                        Key::CacheReadInputTokens => &mut fields.cache_read_input_tokens,
                        Key::CompletionTokens => &mut fields.completion_tokens,
                        Key::OutputTokens => &mut fields.output_tokens,
                        Key::TotalTokens => {
                            map.next_value::<de::IgnoredAny>()?;
                            fields.total_tokens = true;
                            continue;
                        }
                        Key::Other => {
                            map.next_value::<de::IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = map.next_value::<Count>()?.0;
                }
                Ok(UsageObject(Some(fields)))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<UsageObject, E> {
                Ok(UsageObject(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<UsageObject, E> {
                Ok(UsageObject(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<UsageObject, E> {
                Ok(UsageObject(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<UsageObject, E> {
                Ok(UsageObject(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<UsageObject, E> {
                Ok(UsageObject(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<UsageObject, E> {
                Ok(UsageObject(None))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<UsageObject, A::Error> {
                de::IgnoredAny.visit_seq(seq).map(|_| UsageObject(None))
            }
        }
        deserializer.deserialize_any(ObjectVisitor)
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
    fn the_typed_reader_reads_like_the_value_reader() {
        for usage in [
            r#"{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}"#,
            r#"{"prompt_tokens":8,"total_tokens":null}"#,
            r#"{"prompt_tokens":8}"#,
            r#"{"input_tokens":10,"cache_creation_input_tokens":2,"cache_read_input_tokens":5,"output_tokens":7}"#,
            r#"{"input_tokens":-1,"output_tokens":1.5,"prompt_tokens":"3"}"#,
            r#"{"prompt_tokens":1,"prompt_tokens":null,"input_tokens":4,"x":{"a":[1,{"b":2}]}}"#,
            r#"{"completion_tokens":[1],"output_tokens":{"a":1},"prompt\u005ftokens":9}"#,
            r#"{"prompt_tokens":18446744073709551615,"completion_tokens":18446744073709551616}"#,
            r#"{}"#,
            r#"null"#,
            r#"5"#,
            r#""usage""#,
            r#"[{"prompt_tokens":1}]"#,
            r#"true"#,
        ] {
            let body = format!(
                r#"{{"id":"x","choices":[{{"usage":{{"prompt_tokens":99}}}}],"usage":{usage}}}"#
            );
            let mut by_value = Usage::default();
            let document: Value = serde_json::from_str(&body).unwrap();
            if let Some(value) = document.get("usage").filter(|v| v.is_object()) {
                by_value.merge(value);
            }
            assert_eq!(Usage::from_body(body.as_bytes()), by_value, "{usage}");
        }
        assert!(!Usage::from_body(br#"{"usage":{"prompt_tokens":1},"usage":{}}"#).is_reported());
        assert!(!Usage::from_body(br#"{"usage":{"prompt_tokens":1}} x"#).is_reported());
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
