//! The invocation fingerprint: `sha256` over the canonical JSON of the invocation id, the input
//! and the pins of ruleset, binding and every definition (in ruleset order). Two requests with
//! the same invocation id and a different fingerprint are a `replay-mismatch`.

use serde_json::{json, Value};
use turnstile_admission::digest::{canonical_digest, CanonicalJsonError};

use crate::artifact::Pin;

/// `"sha256:" + hex` of `{invocationId, input, ruleset, binding, definitions}`.
pub fn fingerprint(
    invocation_id: &str,
    input: &Value,
    ruleset: &Pin,
    binding: &Pin,
    definitions: &[Pin],
) -> Result<String, CanonicalJsonError> {
    canonical_digest(&json!({
        "invocationId": invocation_id,
        "input": input,
        "ruleset": ruleset,
        "binding": binding,
        "definitions": definitions,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(id: &str) -> Pin {
        Pin {
            id: id.into(),
            version: "1.0.0".into(),
            digest: "sha256:00".into(),
        }
    }

    #[test]
    fn the_fingerprint_changes_with_input_and_pins_only() {
        let a = fingerprint("i", &json!({"x": 1}), &pin("r"), &pin("b"), &[pin("d")]).unwrap();
        let same = fingerprint("i", &json!({"x": 1}), &pin("r"), &pin("b"), &[pin("d")]).unwrap();
        let other = fingerprint("i", &json!({"x": 2}), &pin("r"), &pin("b"), &[pin("d")]).unwrap();
        assert_eq!(a, same);
        assert_ne!(a, other);
        assert!(a.starts_with("sha256:"));
    }
}
