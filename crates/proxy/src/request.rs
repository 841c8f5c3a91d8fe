//! The client's request: which endpoint, the few body fields admission needs, and the body
//! that goes upstream.
//!
//! Only `model`, `stream`, `stream_options.include_usage`, the output caps and `n` are read;
//! every other field (known or unknown to us) is forwarded untouched. The body is rewritten
//! only when it must be: a configured upstream model name, or `stream_options.include_usage`
//! forced on a streamed OpenAI chat or completions call (so the provider reports usage).
//!
//! Invariant: a body that is not a JSON object, or whose read fields have the wrong type, is
//! a typed 400 ([`RequestError`]), never a panic or a 5xx.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::format::ApiFormat;

/// The proxied endpoints that take a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    ChatCompletions,
    Responses,
    Embeddings,
    Completions,
    Messages,
}

impl Endpoint {
    pub const ALL: [Endpoint; 5] = [
        Endpoint::ChatCompletions,
        Endpoint::Responses,
        Endpoint::Embeddings,
        Endpoint::Completions,
        Endpoint::Messages,
    ];

    /// The endpoint's position in [`Endpoint::ALL`].
    pub fn index(self) -> usize {
        match self {
            Endpoint::ChatCompletions => 0,
            Endpoint::Responses => 1,
            Endpoint::Embeddings => 2,
            Endpoint::Completions => 3,
            Endpoint::Messages => 4,
        }
    }

    /// The surface (and so the wire format) the endpoint belongs to.
    pub fn format(self) -> ApiFormat {
        match self {
            Endpoint::Messages => ApiFormat::Anthropic,
            _ => ApiFormat::Openai,
        }
    }

    /// The path appended to the upstream's base URL.
    pub fn upstream_path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Responses => "/responses",
            Endpoint::Embeddings => "/embeddings",
            Endpoint::Completions => "/completions",
            Endpoint::Messages => "/v1/messages",
        }
    }

    /// Whether the endpoint can stream.
    pub fn streams(self) -> bool {
        !matches!(self, Endpoint::Embeddings)
    }

    /// Whether usage in a stream must be asked for with `stream_options.include_usage`.
    pub fn needs_include_usage(self) -> bool {
        matches!(self, Endpoint::ChatCompletions | Endpoint::Completions)
    }
}

/// A request body that cannot be proxied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("the request body is not valid JSON: {0}")]
    Malformed(String),
    #[error("the request body must be a JSON object")]
    NotAnObject,
    #[error("`{field}`: {message}")]
    Invalid {
        field: &'static str,
        message: &'static str,
    },
}

impl RequestError {
    /// The body field the error names, if any.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            RequestError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// The fields admission reads. Anything else is ignored here and forwarded.
#[derive(Deserialize)]
struct Fields {
    model: Option<Value>,
    #[serde(default)]
    stream: Option<Value>,
    #[serde(default)]
    stream_options: Option<Value>,
    #[serde(default)]
    max_tokens: Option<Value>,
    #[serde(default)]
    max_completion_tokens: Option<Value>,
    #[serde(default)]
    max_output_tokens: Option<Value>,
    #[serde(default)]
    n: Option<Value>,
}

/// The largest output cap or `n` accepted (2^53-1; JSON clients lose exactness above).
const MAX_COUNT: u64 = 9_007_199_254_740_991;

/// The parsed request.
#[derive(Debug, Clone)]
pub struct ProxyRequest {
    pub model: String,
    pub stream: bool,
    /// The client itself asked for the usage chunk.
    pub client_wants_usage: bool,
    /// `max_tokens` / `max_completion_tokens` / `max_output_tokens`, if given.
    pub max_output_tokens: Option<u64>,
    /// Choices asked for (`n`, default 1).
    pub n: u64,
    /// The request body size in bytes.
    pub body_bytes: u64,
}

/// A count: an integer, also spelled as a whole number (`5.0`), as JSON Schema (and so
/// `openapi.json`) defines an integer and as the admission API reads one.
fn count(value: &Option<Value>, field: &'static str) -> Result<Option<u64>, RequestError> {
    let whole =
        |n: f64| (n.fract() == 0.0 && (0.0..=MAX_COUNT as f64).contains(&n)).then_some(n as u64);
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64().or_else(|| n.as_f64().and_then(whole)) {
            Some(v) if v <= MAX_COUNT => Ok(Some(v)),
            _ => Err(RequestError::Invalid {
                field,
                message: "must be an integer from 0 to 2^53-1",
            }),
        },
        Some(_) => Err(RequestError::Invalid {
            field,
            message: "must be an integer",
        }),
    }
}

/// Reads the fields admission needs from `body`.
pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<ProxyRequest, RequestError> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => {}
        Some(_) => return Err(RequestError::NotAnObject),
        None => return Err(RequestError::Malformed("empty body".into())),
    }
    let fields: Fields =
        serde_json::from_slice(body).map_err(|e| RequestError::Malformed(e.to_string()))?;
    let model = match fields.model {
        Some(Value::String(model)) if !model.is_empty() => model,
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(RequestError::Invalid {
                field: "model",
                message: "is required",
            })
        }
        Some(_) => {
            return Err(RequestError::Invalid {
                field: "model",
                message: "must be a string",
            })
        }
    };
    let stream = match fields.stream {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => stream,
        Some(_) => {
            return Err(RequestError::Invalid {
                field: "stream",
                message: "must be a boolean",
            })
        }
    };
    if stream && !endpoint.streams() {
        return Err(RequestError::Invalid {
            field: "stream",
            message: "this endpoint does not stream",
        });
    }
    let client_wants_usage = match fields.stream_options {
        None | Some(Value::Null) => false,
        Some(value @ Value::Object(_)) => {
            let options: StreamOptions =
                serde_json::from_value(value).map_err(|_| RequestError::Invalid {
                    field: "stream_options.include_usage",
                    message: "must be a boolean",
                })?;
            options.include_usage.unwrap_or(false)
        }
        Some(_) => {
            return Err(RequestError::Invalid {
                field: "stream_options",
                message: "must be an object",
            })
        }
    };
    let max_output_tokens = [
        count(&fields.max_tokens, "max_tokens")?,
        count(&fields.max_completion_tokens, "max_completion_tokens")?,
        count(&fields.max_output_tokens, "max_output_tokens")?,
    ]
    .into_iter()
    .flatten()
    .max();
    let n = count(&fields.n, "n")?.unwrap_or(1);
    if n > 128 {
        return Err(RequestError::Invalid {
            field: "n",
            message: "must be at most 128",
        });
    }
    Ok(ProxyRequest {
        model,
        stream,
        client_wants_usage,
        max_output_tokens,
        n: n.max(1),
        body_bytes: body.len() as u64,
    })
}

/// The body to send upstream: `body` itself when nothing changes, otherwise re-serialized with
/// the upstream model name and/or `stream_options.include_usage: true`.
pub fn upstream_body(
    endpoint: Endpoint,
    request: &ProxyRequest,
    body: Bytes,
    upstream_model: Option<&str>,
) -> Result<Bytes, RequestError> {
    let force_usage =
        request.stream && endpoint.needs_include_usage() && !request.client_wants_usage;
    let rename = upstream_model.filter(|m| *m != request.model);
    if !force_usage && rename.is_none() {
        return Ok(body);
    }
    let mut object: Map<String, Value> =
        serde_json::from_slice(&body).map_err(|e| RequestError::Malformed(e.to_string()))?;
    if let Some(model) = rename {
        object.insert("model".into(), Value::String(model.to_owned()));
    }
    if force_usage {
        let options = object
            .entry("stream_options")
            .or_insert_with(|| Value::Object(Map::new()));
        if !options.is_object() {
            *options = Value::Object(Map::new());
        }
        if let Value::Object(options) = options {
            options.insert("include_usage".into(), Value::Bool(true));
        }
    }
    serde_json::to_vec(&object)
        .map(Bytes::from)
        .map_err(|e| RequestError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_what_admission_needs_and_forwards_unknown_fields() {
        let body = br#"{"model":"m","stream":true,"max_tokens":50,"n":2,"whatever":{"x":1}}"#;
        let request = parse(Endpoint::ChatCompletions, body).unwrap();
        assert_eq!(request.model, "m");
        assert!(request.stream && !request.client_wants_usage);
        assert_eq!((request.max_output_tokens, request.n), (Some(50), 2));
        let sent = upstream_body(
            Endpoint::ChatCompletions,
            &request,
            Bytes::from_static(body),
            Some("up"),
        )
        .unwrap();
        let sent: Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(sent["model"], "up");
        assert_eq!(sent["stream_options"]["include_usage"], true);
        assert_eq!(sent["whatever"]["x"], 1);
    }

    #[test]
    fn the_body_is_untouched_when_nothing_changes() {
        let body = Bytes::from_static(br#"{"model":"m","max_tokens":5}"#);
        let request = parse(Endpoint::Messages, &body).unwrap();
        let sent = upstream_body(Endpoint::Messages, &request, body.clone(), None).unwrap();
        assert_eq!(sent, body);
    }

    #[test]
    fn wrong_types_are_typed_errors() {
        for (body, field) in [
            (&br#"{"model":1}"#[..], Some("model")),
            (br#"{"model":"m","stream":"yes"}"#, Some("stream")),
            (br#"{"model":"m","max_tokens":-1}"#, Some("max_tokens")),
            (br#"{"model":"m","max_tokens":1.5}"#, Some("max_tokens")),
            (br#"{"model":"m","n":1000}"#, Some("n")),
            (
                br#"{"model":"m","stream_options":3}"#,
                Some("stream_options"),
            ),
            (br#"[1]"#, None),
            (b"{", None),
            (b"", None),
        ] {
            let error = parse(Endpoint::ChatCompletions, body).unwrap_err();
            assert_eq!(error.param(), field, "{error}");
        }
        assert!(parse(Endpoint::Embeddings, br#"{"model":"m","stream":true}"#).is_err());
        for body in [
            &br#"{"model":"m","max_tokens":9007199254740992.0}"#[..],
            br#"{"model":"m","n":-0.5}"#,
            br#"{"model":"m","n":129.0}"#,
        ] {
            assert!(parse(Endpoint::ChatCompletions, body).is_err());
        }
    }

    #[test]
    fn a_count_spelled_as_a_whole_number_is_that_integer() {
        let body = br#"{"model":"m","max_tokens":50.0,"n":2.0}"#;
        let request = parse(Endpoint::ChatCompletions, body).unwrap();
        assert_eq!((request.max_output_tokens, request.n), (Some(50), 2));
        let zero = parse(Endpoint::Messages, br#"{"model":"m","max_tokens":-0.0}"#).unwrap();
        assert_eq!(zero.max_output_tokens, Some(0));
    }
}
