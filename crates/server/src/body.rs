//! JSON request bodies with typed errors.
//!
//! - Not JSON at all (syntax error, truncated, empty) → 400 `malformed-json`.
//! - JSON that does not fit the schema (missing, unknown, wrong type, negative where unsigned,
//!   out of range) → 422 `invalid-request` naming the field by its path.
//! - Over the configured size → 413 `body-too-large` (the cap is enforced while reading).
//!
//! Invariant: no body can make a handler answer 5xx or panic.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Reads the extracted body bytes (or their rejection) into `T`.
pub fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    parse_slice(&bytes(body)?)
}

/// The extracted body bytes, or the typed error for the extractor's rejection.
pub fn bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::BodyTooLarge
        } else {
            ApiError::MalformedJson(rejection.body_text())
        }
    })
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

/// Deserializes a field that must be a JSON object (not a positional array) into `T`.
pub fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    use serde::de::Error;
    use serde::Deserialize;
    let value = serde_json::Value::deserialize(deserializer)?;
    if !value.is_object() {
        return Err(D::Error::custom("expected a JSON object"));
    }
    T::deserialize(value).map_err(D::Error::custom)
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
}
