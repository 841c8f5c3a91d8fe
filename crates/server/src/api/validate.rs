//! Shape rules for identifiers in paths and bodies.
//!
//! IDs are 1..=128 characters of `[A-Za-z0-9._:-]` that do not start with `.` (pattern
//! `^[A-Za-z0-9_:-][A-Za-z0-9._:-]*$`, so `.` and `..` are never IDs): enough for UUIDs, slugs
//! and revision names, and nothing that needs escaping in a path, a log or a SQL literal.
//! Budget IDs allow up to 256 characters of the same alphabet (invocation IDs are often
//! composite).

use crate::http::error::ApiError;

fn well_formed(value: &str, max: usize) -> bool {
    !value.is_empty()
        && !value.starts_with('.')
        && value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Checks a workspace, principal, provider or profile-version ID.
pub fn id(field: &str, value: &str) -> Result<(), ApiError> {
    if well_formed(value, 128) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!(
                "{field} must be 1 to 128 characters of A-Z a-z 0-9 . _ : - not starting with ."
            ),
        ))
    }
}

/// Checks a budget ID.
pub fn budget_id(field: &str, value: &str) -> Result<(), ApiError> {
    if well_formed(value, 256) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!(
                "{field} must be 1 to 256 characters of A-Z a-z 0-9 . _ : - not starting with ."
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bounded_and_plain() {
        assert!(id("x", "llm-subagent").is_ok());
        assert!(id("x", "").is_err());
        assert!(id("x", "a b").is_err());
        assert!(id("x", &"a".repeat(129)).is_err());
        assert!(budget_id("x", &"a".repeat(256)).is_ok());
        assert!(id("x", "..").is_err() && id("x", ".").is_err() && id("x", ".hidden").is_err());
        assert!(id("x", "v1.2..3").is_ok());
    }
}
