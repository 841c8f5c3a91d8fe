//! Canonical JSON and `sha256:` digests.
//!
//! Canonical JSON: object keys sorted by their UTF-8 bytes at every depth, no insignificant
//! whitespace, strings escaped as `serde_json` escapes them, numbers as `serde_json` prints them.
//! The writer sorts keys itself, so the result does not depend on whether some other crate in the
//! build enables `serde_json`'s `preserve_order` feature. A digest is `"sha256:"` + lowercase hex.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Canonical JSON of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Canonical JSON of any serializable value.
pub fn canonical_json_of<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    Ok(canonical_json(&serde_json::to_value(value)?))
}

/// `"sha256:"` + hex SHA-256 of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn write_string(text: &str, out: &mut String) {
    // Serializing a &str cannot fail; fall back to a lossless manual quote if it ever did.
    match serde_json::to_string(text) {
        Ok(quoted) => out.push_str(&quoted),
        Err(_) => {
            out.push('"');
            out.push_str(&text.escape_default().to_string());
            out.push('"');
        }
    }
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
        Value::Number(number) => out.push_str(&number.to_string()),
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Evidence;

    #[test]
    fn keys_are_sorted_and_output_is_compact() {
        let value: Value =
            serde_json::from_str(r#"{"b": [1, {"z": true, "a": null}], "a": "x\"y"}"#).unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"a":"x\"y","b":[1,{"a":null,"z":true}]}"#
        );
    }

    #[test]
    fn digest_of_empty_input_is_the_known_sha256() {
        assert_eq!(
            sha256_digest(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn omitted_defaults_and_spelled_out_defaults_share_a_digest() {
        let short: Evidence =
            serde_json::from_str(r#"{"lifecycle":"active","generationId":"g"}"#).unwrap();
        let long: Evidence = serde_json::from_str(
            r#"{"generationId":"g","lifecycle":"active","attention":false,"summary":"","recentActions":[]}"#,
        )
        .unwrap();
        assert_eq!(
            canonical_json_of(&short).unwrap(),
            canonical_json_of(&long).unwrap()
        );
    }
}
