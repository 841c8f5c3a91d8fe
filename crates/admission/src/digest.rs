//! Canonical JSON and sha256 digests.
//!
//! Canonical JSON here is RFC 8785 style: object keys sorted by their UTF-16 code units, no
//! whitespace, numbers as serde_json writes them (shortest round-trip form; integers without a
//! fraction). The same value always yields the same bytes, so a digest identifies content.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A value that cannot be turned into canonical JSON (a non-finite float, say).
#[derive(Debug, thiserror::Error)]
#[error("value cannot be written as canonical JSON: {0}")]
pub struct CanonicalJsonError(#[from] pub serde_json::Error);

/// Canonical JSON text of any serializable value.
pub fn canonical_json<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalJsonError> {
    let value = serde_json::to_value(value)?;
    let mut out = String::new();
    write_canonical(&value, &mut out)?;
    Ok(out)
}

fn write_canonical(value: &Value, out: &mut String) -> Result<(), CanonicalJsonError> {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(key)?);
                out.push(':');
                write_canonical(item, out)?;
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out)?;
            }
            out.push(']');
        }
        Value::Number(number) => match number.as_f64() {
            // JavaScript prints integral doubles without a fraction; so does RFC 8785.
            Some(float)
                if number.is_f64()
                    && float.fract() == 0.0
                    && float.abs() < 9.007_199_254_740_992e15 =>
            {
                out.push_str(&format!("{}", float as i64));
            }
            _ => out.push_str(&number.to_string()),
        },
        scalar => out.push_str(&serde_json::to_string(scalar)?),
    }
    Ok(())
}

/// `"sha256:" + hex(sha256(bytes))`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The sha256 digest of a value's canonical JSON.
pub fn canonical_digest<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalJsonError> {
    Ok(sha256_digest(canonical_json(value)?.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sorted_and_whitespace_dropped() {
        let value: Value =
            serde_json::from_str(r#"{ "b": [1, {"d": 2, "c": 1.5}], "a": null }"#).unwrap();
        assert_eq!(
            canonical_json(&value).unwrap(),
            r#"{"a":null,"b":[1,{"c":1.5,"d":2}]}"#
        );
    }

    #[test]
    fn integral_floats_are_written_as_integers() {
        let value = serde_json::json!({"maxCostUsd": 1.0_f64, "share": 0.75});
        assert_eq!(
            canonical_json(&value).unwrap(),
            r#"{"maxCostUsd":1,"share":0.75}"#
        );
    }

    #[test]
    fn digest_has_the_documented_shape() {
        let digest = canonical_digest(&serde_json::json!({"a": 1})).unwrap();
        assert!(digest.starts_with("sha256:"));
        assert_eq!(digest.len(), 7 + 64);
    }
}
