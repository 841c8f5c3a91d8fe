//! JSON request bodies with typed errors.
//!
//! - Not JSON at all (syntax error, truncated, empty) → 400 `malformed-json`.
//! - JSON that does not fit the schema (missing, unknown, wrong type, negative where unsigned,
//!   out of range) → 422 `invalid-request` naming the field by its path.
//! - Over the configured size → 413 `body-too-large` (the cap is enforced while reading, and a
//!   `Content-Length` above it is refused before reading).
//! - Without `Content-Type: application/json` → 415 `unsupported-media-type`.
//! - A duplicate key in any object at any depth → 422 `invalid-request` naming its path (serde
//!   refuses duplicates of a struct's fields, but a nested map or `serde_json::Value` keeps the
//!   last one silently; a first pass refuses them everywhere).
//! - **Deadlines** ([`RawBody`]): the body must arrive whole within
//!   `http.body_read_timeout_ms` of the end of the head, and, after a one-second grace, at
//!   `http.body_min_bytes_per_sec` on average at least; otherwise 408 `body-timeout` and the
//!   connection closes (a slow-body client holds a connection for a bounded time only).
//!
//! Invariant: no body can make a handler answer 5xx or panic.

use std::borrow::Cow;
use std::collections::HashSet;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use axum::body::{Bytes, HttpBody};
use axum::extract::{FromRequest, Request};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http_body_util::BodyExt;
use serde::de::{DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use tokio::time::Instant;

use crate::api::AppState;
use crate::http::error::ApiError;
use crate::metrics::Cut;

/// The slow-start allowance before the minimum rate applies.
pub const RATE_GRACE: Duration = Duration::from_secs(1);

/// A request body read under the service's size cap and deadlines, or the typed error that
/// ended the read. Extracting it never fails: handlers decide when to look at the error (after
/// authentication).
pub struct RawBody(pub Result<Bytes, ApiError>);

impl FromRequest<AppState> for RawBody {
    type Rejection = Infallible;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Infallible> {
        Ok(RawBody(read(request, state).await))
    }
}

/// Whether a `Content-Type` value is `application/json` (parameters allowed).
pub fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// The instant by which the next part of the body must arrive, `received` bytes after `start`:
/// the total deadline, or earlier when the average rate since the grace would fall below the
/// minimum.
pub fn next_deadline(
    start: Instant,
    received: u64,
    total: Duration,
    min_bytes_per_sec: u64,
) -> (Instant, Cut) {
    let rate_ms = received
        .saturating_add(1)
        .saturating_mul(1000)
        .checked_div(min_bytes_per_sec.max(1))
        .unwrap_or(u64::MAX);
    let by_rate = RATE_GRACE.saturating_add(Duration::from_millis(rate_ms));
    if by_rate < total {
        (start + by_rate, Cut::BodyTooSlow)
    } else {
        (start + total, Cut::BodyTimeout)
    }
}

async fn read(request: Request, state: &AppState) -> Result<Bytes, ApiError> {
    let http = &state.config.http;
    let headers = request.headers();
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_json);
    if !json {
        return Err(ApiError::UnsupportedMediaType);
    }
    let max = http.max_body_bytes;
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(ApiError::BodyTooLarge);
    }
    let total = Duration::from_millis(http.body_read_timeout_ms);
    let rate = http.body_min_bytes_per_sec;
    let start = Instant::now();
    let mut body = request.into_body();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        // A frame that is already here needs no timer: a small body usually arrives with its
        // head, so most requests never touch the timer wheel.
        let mut next = std::pin::pin!(body.frame());
        let ready = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match next.as_mut().poll(cx) {
                std::task::Poll::Ready(frame) => Some(frame),
                std::task::Poll::Pending => None,
            })
        })
        .await;
        let waited = match ready {
            Some(frame) => Ok(frame),
            None => {
                let (deadline, _) = next_deadline(start, buf.len() as u64, total, rate);
                tokio::time::timeout_at(deadline, next).await
            }
        };
        let frame = match waited {
            Ok(frame) => frame,
            Err(_) => {
                let (_, cut) = next_deadline(start, buf.len() as u64, total, rate);
                state.metrics.cut(cut);
                return Err(ApiError::BodyTimeout(match cut {
                    Cut::BodyTooSlow => {
                        "the request body arrived slower than http.body_min_bytes_per_sec"
                    }
                    _ => "the request body did not arrive within http.body_read_timeout_ms",
                }));
            }
        };
        let Some(frame) = frame else { break };
        let frame = frame
            .map_err(|_| ApiError::MalformedJson("the request body could not be read".into()))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(ApiError::BodyTooLarge);
            }
            if buf.is_empty() && body.is_end_stream() {
                // The whole body in one frame: hand it on without a copy.
                return Ok(data);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

/// Reads the extracted body (or its error) into `T`.
pub fn parse<T: DeserializeOwned>(body: RawBody) -> Result<T, ApiError> {
    parse_slice(&bytes(body)?)
}

/// The extracted body bytes, or the error that ended the read.
pub fn bytes(body: RawBody) -> Result<Bytes, ApiError> {
    body.0
}

/// Any JSON value, refusing a duplicate key in any object at any depth.
struct Unique;

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_none<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        while seq.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        // Borrowed keys (an escaped key is the only one that allocates) in a small list: a
        // request object has a handful of keys, where a linear scan beats hashing.
        let mut seen: Vec<Cow<'de, str>> = Vec::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format!("duplicate field `{key}`")));
            }
            if seen.len() >= LINEAR_KEYS {
                return visit_large_map(map, seen, key);
            }
            seen.push(key);
            map.next_value::<Unique>()?;
        }
        Ok(Unique)
    }
}

/// Objects with more keys than this switch from a list scan to a hash set.
const LINEAR_KEYS: usize = 16;

/// The rest of a large object, its first keys already seen.
fn visit_large_map<'de, A: MapAccess<'de>>(
    mut map: A,
    first: Vec<Cow<'de, str>>,
    key: Cow<'de, str>,
) -> Result<Unique, A::Error> {
    let mut seen: HashSet<Cow<'de, str>> = first.into_iter().collect();
    seen.insert(key);
    map.next_value::<Unique>()?;
    while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
        if seen.contains(&key) {
            return Err(serde::de::Error::custom(format!("duplicate field `{key}`")));
        }
        seen.insert(key);
        map.next_value::<Unique>()?;
    }
    Ok(Unique)
}

/// An object key, borrowed from the body unless it had to be unescaped.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(key)))
    }

    fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key.to_owned())))
    }
}

/// Reads the extracted body into a `T` that refuses every duplicate key itself: see
/// [`parse_self_checked_slice`].
pub fn parse_self_checked<T: DeserializeOwned + SelfChecked>(body: RawBody) -> Result<T, ApiError> {
    parse_self_checked_slice(&bytes(body)?)
}

/// A body type whose derived parse refuses a duplicate key by itself, except where it read a
/// value loosely (a lenient field that swallowed an object or an array): [`SelfChecked::
/// read_loosely`] says when, and the body is then checked by the full parse.
pub trait SelfChecked {
    fn read_loosely(&self) -> bool;
}

/// [`parse_slice`] without the separate duplicate-key pass on a valid body, for a `T` whose
/// every JSON object is a derived struct with `deny_unknown_fields` (or read with [`object`]),
/// with no `serde_json::Value`, map or `flatten` inside: serde's derived code refuses a repeated
/// field of such a struct by itself. A body that fails, or that `T` says it read loosely, is
/// parsed again exactly as [`parse_slice`] does, so every answer is the same; a test holds each
/// such `T` to it.
pub fn parse_self_checked_slice<T: DeserializeOwned + SelfChecked>(
    bytes: &[u8],
) -> Result<T, ApiError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        if let Ok(value) = T::deserialize(&mut deserializer).and_then(|value| {
            deserializer.end()?;
            Ok(value)
        }) {
            if !value.read_loosely() {
                return Ok(value);
            }
        }
    }
    parse_slice(bytes)
}

/// Parses a complete JSON document into `T`.
pub fn parse_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Serde's derived structs also accept a JSON array of positional fields; bodies are
    // objects only.
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => return Err(ApiError::invalid("body", "the body must be a JSON object")),
        Some(_) => {}
        None => return Err(ApiError::MalformedJson("empty body".into())),
    }
    // Most bodies are valid: parse them without tracking the path, which costs about as much
    // as the parse itself. A body that fails is parsed again with tracking, so its error names
    // the field exactly as before.
    match parse_untracked(bytes) {
        Ok(value) => Ok(value),
        Err(_) => parse_tracked(bytes),
    }
}

fn parse_untracked<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    Unique::deserialize(&mut serde_json::Deserializer::from_slice(bytes))?;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = T::deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

fn parse_tracked<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut unique = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize::<_, Unique>(&mut unique).map_err(|error| {
        let path = error.path().to_string();
        classify(path, error.into_inner())
    })?;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        classify(path, inner)
    })?;
    deserializer
        .end()
        .map_err(|error| ApiError::MalformedJson(error.to_string()))?;
    Ok(value)
}

/// A whole number as JSON Schema means it: `5` or `5.0` (a number with a zero fractional part).
/// An integer literal may be any `u64` (the handler's own range check names the field); a
/// fractional spelling must be at most 2^53 - 1, where `f64` is exact. `-1`, `0.5` and `1e300`
/// are refused.
fn whole_number(value: &serde_json::Value) -> Option<u64> {
    const MAX_SAFE: u64 = turnstile_admission::MAX_SAFE_INTEGER;
    if let Some(n) = value.as_u64() {
        return Some(n);
    }
    let f = value.as_f64()?;
    // The range check bounds the cast, so `as` is exact here.
    (f.fract() == 0.0 && (0.0..=MAX_SAFE as f64).contains(&f)).then_some(f as u64)
}

/// Deserializes a required whole-number field (see [`whole_number`]).
pub fn whole<'de, D>(deserializer: D) -> Result<u64, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    use serde::Deserialize;
    let value = serde_json::Value::deserialize(deserializer)?;
    whole_number(&value)
        .ok_or_else(|| D::Error::custom(format!("expected a whole number >= 0, found {value}")))
}

/// Deserializes an optional whole-number field: absent or `null` is `None` (use with
/// `#[serde(default)]`).
pub fn optional_whole<'de, D>(deserializer: D) -> Result<Option<u64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    use serde::Deserialize;
    let value = serde_json::Value::deserialize(deserializer)?;
    if value.is_null() {
        return Ok(None);
    }
    whole_number(&value)
        .map(Some)
        .ok_or_else(|| D::Error::custom(format!("expected a whole number >= 0, found {value}")))
}

/// Deserializes a field that must be a JSON object (not a positional array) into `T`, straight
/// from the document (no intermediate `Value`): a derived `T` then refuses a duplicate key of
/// the object itself.
pub fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct ObjectOnly<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOnly<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }

    deserializer.deserialize_map(ObjectOnly(std::marker::PhantomData))
}

fn classify(path: String, error: serde_json::Error) -> ApiError {
    match error.classify() {
        serde_json::error::Category::Data => {
            let field = if path == "." { "body".to_owned() } else { path };
            ApiError::invalid(field, error.to_string())
        }
        _ => ApiError::MalformedJson(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn a_whole_number_is_what_json_schema_calls_an_integer() {
        use serde_json::json;
        assert_eq!(whole_number(&json!(5)), Some(5));
        assert_eq!(whole_number(&json!(4847417.0)), Some(4_847_417));
        assert_eq!(whole_number(&json!(u64::MAX)), Some(u64::MAX));
        for refused in [json!(-1), json!(0.5), json!(1e300), json!("5"), json!(-0.5)] {
            assert_eq!(whole_number(&refused), None, "{refused}");
        }
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Body {
        retry_after_ms: u64,
    }

    #[test]
    fn errors_are_typed_and_name_the_field() {
        let err = parse_slice::<Body>(br#"{"retryAfterMs":-1}"#).unwrap_err();
        assert_eq!(
            err,
            ApiError::invalid(
                "retryAfterMs",
                err.to_string() // message checked loosely below
            )
        );
        assert!(matches!(
            parse_slice::<Body>(b"{"),
            Err(ApiError::MalformedJson(_))
        ));
        assert!(matches!(
            parse_slice::<Body>(b""),
            Err(ApiError::MalformedJson(_))
        ));
        match parse_slice::<Body>(br#"{"retryAfterMs":1,"x":2}"#) {
            Err(ApiError::InvalidRequest { message, .. }) => assert!(message.contains("unknown")),
            other => panic!("{other:?}"),
        }
        match parse_slice::<Body>(b"{}") {
            Err(ApiError::InvalidRequest { field, message }) => {
                assert_eq!(field, "body");
                assert!(message.contains("retryAfterMs"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_admission_body_refuses_every_duplicate_without_the_extra_pass() {
        use crate::api::admissions::AdmissionBody;
        let bodies: [&str; 14] = [
            r#"{"providerId":"p","budgetId":"b","estimate":{"tokens":5},"deadlineMs":10}"#,
            r#"{"providerId":"p","budgetId":"b","estimate":{}}"#,
            r#"{"providerId":"p","providerId":"q","budgetId":"b","estimate":{}}"#,
            r#"{"providerId":"p","budgetId":"b","estimate":{"tokens":1,"tokens":2}}"#,
            r#"{"providerId":"p","budgetId":"b","estimate":{"tokens":1,"\u0074okens":2}}"#,
            r#"{"providerId":"p","budgetId":"b","estimate":{"tokens":{"a":1,"a":2}}}"#,
            r#"{"providerId":"p","budgetId":"b","estimate":{"costUsd":[{"a":1,"a":2}]}}"#,
            r#"{"providerId":"p","budgetId":"b","estimate":{"items":"NaN"}}"#,
            r#"{"providerId":"p","budgetId":"b","estimate":{"bogus":1}}"#,
            r#"{"providerId":"p","budgetId":"b","estimate":[1]}"#,
            r#"{"providerId":"p","budgetId":"b","estimate":{},"deadlineMs":{"x":1,"x":2}}"#,
            r#"{"providerId":"p","budgetId":"b","estimate":{},"extra":1}"#,
            r#"["p","b",{}]"#,
            r#"{"providerId":"p","budgetId":"b","estimate":{}} trailing"#,
        ];
        for body in bodies {
            let fast = parse_self_checked_slice::<AdmissionBody>(body.as_bytes());
            let full = parse_slice::<AdmissionBody>(body.as_bytes());
            assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{body}");
        }
        assert!(parse_self_checked_slice::<AdmissionBody>(bodies[3].as_bytes()).is_err());
        assert!(parse_self_checked_slice::<AdmissionBody>(bodies[4].as_bytes()).is_err());
        assert!(parse_self_checked_slice::<AdmissionBody>(bodies[5].as_bytes()).is_err());
    }

    #[test]
    fn duplicate_keys_are_refused_at_every_depth() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Outer {
            inner: serde_json::Value,
        }
        match parse_slice::<Outer>(br#"{"inner":{"a":{"b":1,"b":2}}}"#) {
            Err(ApiError::InvalidRequest { field, message }) => {
                assert_eq!(field, "inner.a");
                assert!(message.contains("duplicate"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_slice::<Outer>(br#"{"inner":[{"a":1},{"a":1}]}"#).is_ok());
        // An escaped spelling is the same key.
        assert!(parse_slice::<Outer>(br#"{"inner":{"a":1,"\u0061":2}}"#).is_err());
        // Past the list scan: a large object's last key repeats its first.
        let mut large: String = (0..40).map(|i| format!("\"k{i}\":{i},")).collect();
        large = format!("{{\"inner\":{{{large}\"k0\":0}}}}");
        match parse_slice::<Outer>(large.as_bytes()) {
            Err(ApiError::InvalidRequest { field, message }) => {
                assert_eq!(field, "inner");
                assert!(message.contains("duplicate field `k0`"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let distinct: String = (0..40)
            .map(|i| format!("\"k{i}\":{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(parse_slice::<Outer>(format!("{{\"inner\":{{{distinct}}}}}").as_bytes()).is_ok());
    }

    #[test]
    fn the_body_deadline_is_the_earlier_of_total_time_and_minimum_rate() {
        let start = Instant::now();
        let total = Duration::from_secs(10);
        // Nothing received: the first byte is due after the grace plus 1 ms at 1000 B/s.
        let (at, cut) = next_deadline(start, 0, total, 1000);
        assert_eq!(
            (at - start, cut),
            (Duration::from_millis(1001), Cut::BodyTooSlow)
        );
        // 5,000 bytes in: the next one is due at 1 s + 5.001 s.
        let (at, _) = next_deadline(start, 5000, total, 1000);
        assert_eq!(at - start, Duration::from_millis(6001));
        // Fast enough for the rate: the total deadline binds.
        assert_eq!(
            next_deadline(start, 1 << 20, total, 1000),
            (start + total, Cut::BodyTimeout)
        );
        assert!(is_json("application/json; charset=utf-8") && is_json("Application/JSON"));
        assert!(!is_json("text/plain") && !is_json("application/jsonx"));
    }
}
