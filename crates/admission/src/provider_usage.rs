//! What a provider reported it used, read from its answer: one type, [`ProviderUsage`], and
//! one set of readers for every host (the proxy, the evaluator's chat adapter, the roster's
//! chat reader). Pure and sans-IO: bytes or JSON in, counts out.
//!
//! | answer | where | input | output | cached input | reasoning |
//! |---|---|---|---|---|---|
//! | OpenAI chat / completions | `usage` | `prompt_tokens` | `completion_tokens` (reasoning included) | `prompt_tokens_details.cached_tokens` | `completion_tokens_details.reasoning_tokens` |
//! | OpenAI embeddings | `usage` | `prompt_tokens` | 0 | — | — |
//! | OpenAI responses | `usage` (stream: `response.usage` of `response.completed`) | `input_tokens` | `output_tokens` | `input_tokens_details.cached_tokens` | `output_tokens_details.reasoning_tokens` |
//! | Anthropic messages | `usage` (stream: `message.usage` of `message_start`, then `usage` of `message_delta`) | `input_tokens` + `cache_creation_input_tokens` + `cache_read_input_tokens` | `output_tokens` (cumulative) | `cache_read_input_tokens` | — |
//!
//! Input counts include cached input; output counts include reasoning.
//!
//! Invariants: a usage object is merged field by field; a later report of a field replaces an
//! earlier one (stream deltas are cumulative), so what is settled is the last reported value. A
//! count is read as `Value::as_u64` reads it (a non-negative integer, else not reported). A
//! whole answer's usage is read without building a `Value` tree, by the same rule and with the
//! same result as reading it through `Value` (a test holds the two readers to each other).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde_json::Value;

/// Tokens a provider reported; `None` fields were not reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderUsage {
    /// Input (prompt) tokens, cached ones included.
    pub input: Option<u64>,
    /// Output (completion) tokens, reasoning included.
    pub output: Option<u64>,
    /// Input tokens served from the provider's prompt cache.
    pub cached_input: Option<u64>,
    /// Reasoning tokens, when the provider reports them.
    pub reasoning: Option<u64>,
}

impl ProviderUsage {
    /// Whether the provider reported input or output tokens.
    pub fn is_reported(&self) -> bool {
        self.input.is_some() || self.output.is_some()
    }

    /// Input and output tokens (a missing one as 0).
    pub fn counts(&self) -> (u64, u64) {
        (self.input.unwrap_or(0), self.output.unwrap_or(0))
    }

    /// Merges a provider usage object into this one.
    pub fn merge(&mut self, usage: &Value) {
        let field = |name: &str| usage.get(name).and_then(Value::as_u64);
        let detail = |name: &str, count: &str| {
            usage
                .get(name)
                .and_then(|details| details.get(count))
                .and_then(Value::as_u64)
        };
        self.merge_fields(&Fields {
            prompt_tokens: field("prompt_tokens"),
            input_tokens: field("input_tokens"),
            cache_creation_input_tokens: field("cache_creation_input_tokens"),
            cache_read_input_tokens: field("cache_read_input_tokens"),
            completion_tokens: field("completion_tokens"),
            output_tokens: field("output_tokens"),
            total_tokens: usage.get("total_tokens").is_some(),
            prompt_cached_tokens: detail("prompt_tokens_details", "cached_tokens"),
            input_cached_tokens: detail("input_tokens_details", "cached_tokens"),
            completion_reasoning_tokens: detail("completion_tokens_details", "reasoning_tokens"),
            output_reasoning_tokens: detail("output_tokens_details", "reasoning_tokens"),
        });
    }

    /// Merges the fields of one usage object (the one rule behind every reader).
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
        let cached_input = usage
            .prompt_cached_tokens
            .or(usage.input_cached_tokens)
            .or(usage.cache_read_input_tokens);
        if cached_input.is_some() {
            self.cached_input = cached_input;
        }
        let reasoning = usage
            .completion_reasoning_tokens
            .or(usage.output_reasoning_tokens);
        if reasoning.is_some() {
            self.reasoning = reasoning;
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

    /// The usage of a whole (non-streamed) answer already read as JSON: its top-level `usage`
    /// object, as [`ProviderUsage::from_body`] reads it from bytes.
    pub fn from_answer(answer: &Value) -> ProviderUsage {
        let mut usage = ProviderUsage::default();
        if let Some(object) = answer.get("usage").filter(|u| u.is_object()) {
            usage.merge(object);
        }
        usage
    }

    /// The usage of a whole (non-streamed) JSON answer: its top-level `usage` object, read
    /// straight into its counts (no `Value` tree; everything else in the answer is skipped).
    pub fn from_body(body: &[u8]) -> ProviderUsage {
        #[derive(serde::Deserialize)]
        struct Top {
            #[serde(default)]
            usage: Option<UsageObject>,
        }
        match serde_json::from_slice::<Top>(body) {
            Ok(Top {
                usage: Some(UsageObject(Some(usage))),
            }) => usage,
            _ => ProviderUsage::default(),
        }
    }
}

/// Reads one usage object (a type's field, e.g. a chat completion's `usage`). Counts are read
/// leniently (a value that is not a non-negative integer is not reported), but anything other
/// than an object is an error.
impl<'de> Deserialize<'de> for ProviderUsage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match UsageObject::deserialize(deserializer)? {
            UsageObject(Some(usage)) => Ok(usage),
            UsageObject(None) => Err(de::Error::custom("usage is not a JSON object")),
        }
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
    /// `prompt_tokens_details.cached_tokens`
    prompt_cached_tokens: Option<u64>,
    /// `input_tokens_details.cached_tokens`
    input_cached_tokens: Option<u64>,
    /// `completion_tokens_details.reasoning_tokens`
    completion_reasoning_tokens: Option<u64>,
    /// `output_tokens_details.reasoning_tokens`
    output_reasoning_tokens: Option<u64>,
}

/// A `usage` value: its usage when it is an object, `None` for anything else. Reads like a
/// `Value` object would: unknown keys and any nested value are skipped, a repeated key's last
/// value wins.
struct UsageObject(Option<ProviderUsage>);

/// A JSON value read as `Value::as_u64` would read it.
struct Count(Option<u64>);

/// A `*_tokens_details` value read as `Value::get` then `Value::as_u64` would read it: its
/// `cached_tokens` and `reasoning_tokens` when it is an object, nothing otherwise.
#[derive(Default)]
struct Details {
    cached_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
}

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

/// A key of a usage object (or of its details), compared without allocating.
enum Key {
    PromptTokens,
    InputTokens,
    CacheCreationInputTokens,
    CacheReadInputTokens,
    CompletionTokens,
    OutputTokens,
    TotalTokens,
    PromptTokensDetails,
    InputTokensDetails,
    CompletionTokensDetails,
    OutputTokensDetails,
    CachedTokens,
    ReasoningTokens,
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
                    "prompt_tokens_details" => Key::PromptTokensDetails,
                    "input_tokens_details" => Key::InputTokensDetails,
                    "completion_tokens_details" => Key::CompletionTokensDetails,
                    "output_tokens_details" => Key::OutputTokensDetails,
                    "cached_tokens" => Key::CachedTokens,
                    "reasoning_tokens" => Key::ReasoningTokens,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A value read key by key from a JSON object; any other JSON value reads as
/// [`ObjectOr::otherwise`] (skipped, as `Value::get` finds nothing in it).
trait ObjectOr: Sized {
    /// Reads the object's entries.
    fn read_map<'de, A: de::MapAccess<'de>>(map: A) -> Result<Self, A::Error>;
    /// What a value that is not an object reads as.
    fn otherwise() -> Self;
}

/// Reads a [`ObjectOr`] value.
fn object_or<'de, D: Deserializer<'de>, T: ObjectOr>(deserializer: D) -> Result<T, D::Error> {
    struct ObjectVisitor<T>(PhantomData<T>);
    impl<'de, T: ObjectOr> Visitor<'de> for ObjectVisitor<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::read_map(map)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<T, E> {
            Ok(T::otherwise())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<T, E> {
            Ok(T::otherwise())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<T, E> {
            Ok(T::otherwise())
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<T, E> {
            Ok(T::otherwise())
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<T, E> {
            Ok(T::otherwise())
        }
        fn visit_unit<E: de::Error>(self) -> Result<T, E> {
            Ok(T::otherwise())
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
            de::IgnoredAny.visit_seq(seq).map(|_| T::otherwise())
        }
    }
    deserializer.deserialize_any(ObjectVisitor(PhantomData))
}

impl ObjectOr for UsageObject {
    fn read_map<'de, A: de::MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
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
                Key::PromptTokensDetails => {
                    fields.prompt_cached_tokens = map.next_value::<Details>()?.cached_tokens;
                    continue;
                }
                Key::InputTokensDetails => {
                    fields.input_cached_tokens = map.next_value::<Details>()?.cached_tokens;
                    continue;
                }
                Key::CompletionTokensDetails => {
                    fields.completion_reasoning_tokens =
                        map.next_value::<Details>()?.reasoning_tokens;
                    continue;
                }
                Key::OutputTokensDetails => {
                    fields.output_reasoning_tokens = map.next_value::<Details>()?.reasoning_tokens;
                    continue;
                }
                Key::CachedTokens | Key::ReasoningTokens | Key::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value::<Count>()?.0;
        }
        let mut usage = ProviderUsage::default();
        usage.merge_fields(&fields);
        Ok(UsageObject(Some(usage)))
    }

    fn otherwise() -> Self {
        UsageObject(None)
    }
}

impl<'de> Deserialize<'de> for UsageObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        object_or(deserializer)
    }
}

impl ObjectOr for Details {
    fn read_map<'de, A: de::MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut details = Details::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::CachedTokens => details.cached_tokens = map.next_value::<Count>()?.0,
                Key::ReasoningTokens => details.reasoning_tokens = map.next_value::<Count>()?.0,
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(details)
    }

    fn otherwise() -> Self {
        Details::default()
    }
}

impl<'de> Deserialize<'de> for Details {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        object_or(deserializer)
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
            ProviderUsage::from_body(chat),
            ProviderUsage {
                input: Some(12),
                output: Some(30),
                ..ProviderUsage::default()
            }
        );
        let embeddings = br#"{"data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}"#;
        assert_eq!(
            ProviderUsage::from_body(embeddings),
            ProviderUsage {
                input: Some(8),
                output: Some(0),
                ..ProviderUsage::default()
            }
        );
        let anthropic =
            br#"{"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":7}}"#;
        assert_eq!(
            ProviderUsage::from_body(anthropic),
            ProviderUsage {
                input: Some(15),
                output: Some(7),
                cached_input: Some(5),
                reasoning: None,
            }
        );
        let responses = br#"{"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3}}}"#;
        assert_eq!(
            ProviderUsage::from_body(responses),
            ProviderUsage {
                input: Some(10),
                output: Some(7),
                cached_input: Some(4),
                reasoning: Some(3),
            }
        );
        let chat_details = br#"{"usage":{"prompt_tokens":1200,"completion_tokens":40,"prompt_tokens_details":{"cached_tokens":1000},"completion_tokens_details":{"reasoning_tokens":16}}}"#;
        assert_eq!(
            ProviderUsage::from_body(chat_details),
            ProviderUsage {
                input: Some(1200),
                output: Some(40),
                cached_input: Some(1000),
                reasoning: Some(16),
            }
        );
        assert!(!ProviderUsage::from_body(b"{}").is_reported());
        assert!(!ProviderUsage::from_body(b"not json").is_reported());
    }

    #[test]
    fn as_a_field_a_usage_object_is_read_and_anything_else_refused() {
        #[derive(serde::Deserialize)]
        struct Answer {
            #[serde(default)]
            usage: Option<ProviderUsage>,
        }
        let read = |body: &str| serde_json::from_str::<Answer>(body).map(|a| a.usage);
        assert_eq!(
            read(r#"{"usage":{"prompt_tokens":3,"completion_tokens":4}}"#).unwrap(),
            Some(ProviderUsage {
                input: Some(3),
                output: Some(4),
                ..ProviderUsage::default()
            })
        );
        assert_eq!(
            read(r#"{"usage":{}}"#).unwrap(),
            Some(ProviderUsage::default())
        );
        assert_eq!(read(r#"{"usage":null}"#).unwrap(), None);
        assert_eq!(read(r#"{}"#).unwrap(), None);
        assert!(read(r#"{"usage":5}"#).is_err());
        assert!(read(r#"{"usage":[]}"#).is_err());
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
            r#"{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":2,"reasoning_tokens":9},"completion_tokens_details":{"reasoning_tokens":1,"cached_tokens":7}}"#,
            r#"{"input_tokens_details":{"cached_tokens":-2},"output_tokens_details":{"reasoning_tokens":"1"},"cache_read_input_tokens":3}"#,
            r#"{"prompt_tokens_details":null,"completion_tokens_details":[{"reasoning_tokens":1}],"input_tokens_details":5,"output_tokens_details":{"x":{"reasoning_tokens":1}}}"#,
            r#"{"prompt_tokens_details":{"cached_tokens":1},"prompt_tokens_details":{},"cached_tokens":4,"reasoning_tokens":4}"#,
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
            let document: Value = serde_json::from_str(&body).unwrap();
            let by_value = ProviderUsage::from_answer(&document);
            assert_eq!(
                ProviderUsage::from_body(body.as_bytes()),
                by_value,
                "{usage}"
            );
        }
        assert!(
            !ProviderUsage::from_body(br#"{"usage":{"prompt_tokens":1},"usage":{}}"#).is_reported()
        );
        assert!(!ProviderUsage::from_body(br#"{"usage":{"prompt_tokens":1}} x"#).is_reported());
    }

    #[test]
    fn stream_events_merge_cumulatively() {
        let mut usage = ProviderUsage::default();
        usage.merge_document(&json!({"type":"message_start","message":{"usage":{"input_tokens":20,"output_tokens":1}}}));
        usage.merge_document(&json!({"type":"message_delta","usage":{"output_tokens":9}}));
        usage.merge_document(&json!({"type":"message_delta","usage":{"output_tokens":15}}));
        assert_eq!(
            usage,
            ProviderUsage {
                input: Some(20),
                output: Some(15),
                ..ProviderUsage::default()
            }
        );
        let mut usage = ProviderUsage::default();
        usage.merge_document(&json!({"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":4}}}));
        assert_eq!(usage.counts(), (3, 4));
    }
}
