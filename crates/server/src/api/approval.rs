//! The approval on record of a revision change (issue 33, item 4): every change of a
//! workspace's revision (`PUT …/profiles/{profileVersion}`, a rollback through it, a rollout's
//! start, promotion and abort) is stored with the acting admin key's ID, the operator's `note`
//! and `approvedBy`, and answered with them.
//!
//! Decides what a request may carry: `note` (1..=[`NOTE_MAX_CHARS`] characters, line breaks
//! and tabs allowed, no other control character) and `approvedBy` (1..=[`APPROVED_BY_MAX_CHARS`]
//! characters, no control character), each optional (absent or `null`); anything else is a
//! 422 `invalid-request` naming the field. Blank text counts as absent-but-sent: refused, so an
//! approval on record always says something.
//!
//! Invariants: the acting key is named by its key ID (`key_…`, never the key, never a
//! principal ID); the text is stored and answered exactly as sent (never logged); records
//! written before the audit log kept approvals answer `null` for all three.

use serde_json::{Map, Value};
use turnstile_shell::Approval;
use turnstile_store::AuditRecord;

use crate::http::error::ApiError;
use crate::keys::auth::ActingKey;

/// The longest `note`, in characters.
pub const NOTE_MAX_CHARS: usize = 1000;
/// The longest `approvedBy`, in characters.
pub const APPROVED_BY_MAX_CHARS: usize = 128;

/// Checks one text field: `None` passes; otherwise non-blank, at most `max` characters, and no
/// control character except (when `lines`) line feed, carriage return and tab.
fn checked(
    field: &str,
    value: Option<String>,
    max: usize,
    lines: bool,
) -> Result<Option<String>, ApiError> {
    let Some(text) = value else {
        return Ok(None);
    };
    if text.trim().is_empty() {
        return Err(ApiError::invalid(
            field,
            format!("{field} must not be blank"),
        ));
    }
    if text.chars().count() > max {
        return Err(ApiError::invalid(
            field,
            format!("{field} must be at most {max} characters"),
        ));
    }
    let allowed = |c: char| !c.is_control() || (lines && matches!(c, '\n' | '\r' | '\t'));
    if !text.chars().all(allowed) {
        return Err(ApiError::invalid(
            field,
            format!("{field} must not contain control characters"),
        ));
    }
    Ok(Some(text))
}

/// The approval of a change `acting` makes, with its `note` and `approvedBy` checked.
pub fn approval(
    acting: &ActingKey,
    note: Option<String>,
    approved_by: Option<String>,
) -> Result<Approval, ApiError> {
    Ok(Approval {
        actor: Some(acting.key_id()),
        note: checked("note", note, NOTE_MAX_CHARS, true)?,
        approved_by: checked("approvedBy", approved_by, APPROVED_BY_MAX_CHARS, false)?,
    })
}

/// Takes `note` and `approvedBy` out of a request object (the rest is the document the route
/// reads) and checks them: each must be a string or `null`.
pub fn take(acting: &ActingKey, object: &mut Map<String, Value>) -> Result<Approval, ApiError> {
    let mut text = |field: &str| match object.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(ApiError::invalid(
            field,
            format!("{field} must be a string"),
        )),
    };
    let note = text("note")?;
    let approved_by = text("approvedBy")?;
    approval(acting, note, approved_by)
}

/// A record as the API answers it: the stored record with `actorKeyId`, `note` and
/// `approvedBy` added (`null` when unknown).
pub fn on_record(mut record: Value, approval: &Approval) -> Value {
    if let Some(object) = record.as_object_mut() {
        object.insert("actorKeyId".into(), approval.actor.clone().into());
        object.insert("note".into(), approval.note.clone().into());
        object.insert("approvedBy".into(), approval.approved_by.clone().into());
    }
    record
}

/// The approval a stored audit record carries.
pub fn of_stored(record: &AuditRecord) -> Approval {
    Approval {
        actor: record.actor_key_id.clone(),
        note: record.note.clone(),
        approved_by: record.approved_by.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acting() -> ActingKey {
        ActingKey::of_hash(&[7; 32])
    }

    #[test]
    fn note_and_approver_are_bounded_plain_text() {
        let ok = approval(
            &acting(),
            Some("line one\nline two".into()),
            Some("Dana".into()),
        )
        .unwrap();
        assert!(ok.actor.as_deref().unwrap().starts_with("key_"));
        assert_eq!(ok.approved_by.as_deref(), Some("Dana"));
        assert!(approval(&acting(), None, None).unwrap().note.is_none());
        let field = |result: Result<Approval, ApiError>| match result {
            Err(ApiError::InvalidRequest { field, .. }) => field,
            other => panic!("expected invalid-request, got {other:?}"),
        };
        assert_eq!(field(approval(&acting(), Some("  ".into()), None)), "note");
        let long = "é".repeat(NOTE_MAX_CHARS + 1);
        assert_eq!(field(approval(&acting(), Some(long), None)), "note");
        assert!(approval(&acting(), Some("é".repeat(NOTE_MAX_CHARS)), None).is_ok());
        assert_eq!(
            field(approval(&acting(), None, Some("a\nb".into()))),
            "approvedBy"
        );
        let long = "a".repeat(APPROVED_BY_MAX_CHARS + 1);
        assert_eq!(field(approval(&acting(), None, Some(long))), "approvedBy");
        assert_eq!(
            field(approval(&acting(), Some("bell\u{7}".into()), None)),
            "note"
        );
        let mut object = serde_json::json!({"note": 3, "workspace": {}});
        let object = object.as_object_mut().unwrap();
        assert_eq!(field(take(&acting(), object)), "note");
    }
}
