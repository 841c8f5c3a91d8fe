//! Canonical JSON and `sha256:` digests: the project's one implementation lives in
//! `turnstile_admission::digest` (keys sorted, compact, integral doubles without a fraction);
//! this module only adapts its error type for the roster.

use serde::Serialize;
#[cfg(test)]
use serde_json::Value;

pub use turnstile_admission::digest::sha256_digest;

/// Canonical JSON of a JSON value.
#[cfg(test)]
fn canonical_json(value: &Value) -> String {
    turnstile_admission::digest::canonical_json(value).unwrap_or_default()
}

/// Canonical JSON of any serializable value.
pub fn canonical_json_of<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    turnstile_admission::digest::canonical_json(value).map_err(|error| error.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GenerationEvidence;

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
        let short: GenerationEvidence =
            serde_json::from_str(r#"{"lifecycle":"active","generationId":"g"}"#).unwrap();
        let long: GenerationEvidence = serde_json::from_str(
            r#"{"generationId":"g","lifecycle":"active","attention":false,"summary":"","recentActions":[]}"#,
        )
        .unwrap();
        assert_eq!(
            canonical_json_of(&short).unwrap(),
            canonical_json_of(&long).unwrap()
        );
    }
}
