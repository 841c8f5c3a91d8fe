//! What a legal next revision looks like: the one rule book every store applies before a write.
//!
//! `check_successor(previous, next)` accepts `next` only when it is revision `previous + 1` of
//! the same invocation (same project, invocation, fingerprint, acquisition time and schema), the
//! state change is legal ([`ReceiptState::can_become`]), `updatedAtEpochMs` did not go back,
//! every earlier evaluation is still there unchanged, `remoteHandles` only grew at the end,
//! `result` is present exactly in `completed`, `completedAtEpochMs` is set exactly in terminal
//! states, and `dispatched` names its pending call. O(evaluations + handles).

use serde_json::Value;
use turnstile_admission::digest::canonical_json;

use super::document::{Receipt, RECEIPT_SCHEMA};
use super::error::ReceiptError;
use super::state::ReceiptState;

fn refuse(rule: &'static str) -> Result<(), ReceiptError> {
    Err(ReceiptError::Invariant { rule })
}

/// Equal as stored: a value read back from canonical JSON (`1`) equals the value written (`1.0`).
fn same(a: &Value, b: &Value) -> bool {
    a == b || matches!((canonical_json(a), canonical_json(b)), (Ok(x), Ok(y)) if x == y)
}

/// Checks the shape of any single revision.
pub(crate) fn check_document(receipt: &Receipt) -> Result<(), ReceiptError> {
    if receipt.schema != RECEIPT_SCHEMA {
        return refuse("schema must be decision-receipt/v2");
    }
    if receipt.revision == 0 {
        return refuse("revisions start at 1");
    }
    if receipt.result.is_some() != (receipt.state == ReceiptState::Completed) {
        return refuse("result is present exactly in state completed");
    }
    if receipt.completed_at_epoch_ms.is_some() != receipt.state.is_terminal() {
        return refuse("completedAtEpochMs is set exactly in terminal states");
    }
    if receipt.state == ReceiptState::Dispatched && receipt.pending.is_none() {
        return refuse("a dispatched receipt names its pending call");
    }
    if receipt.updated_at_epoch_ms < receipt.acquired_at_epoch_ms {
        return refuse("updatedAtEpochMs never precedes acquiredAtEpochMs");
    }
    Ok(())
}

/// Whether `next` may follow `previous`.
pub fn check_successor(previous: &Receipt, next: &Receipt) -> Result<(), ReceiptError> {
    if previous.state.is_terminal() || !previous.state.can_become(next.state) {
        return Err(ReceiptError::IllegalTransition {
            from: previous.state,
            to: next.state,
        });
    }
    check_document(next)?;
    if next.revision != previous.revision.saturating_add(1) {
        return refuse("the next revision is the previous one plus 1");
    }
    if next.project_id != previous.project_id
        || next.invocation_id != previous.invocation_id
        || next.fingerprint != previous.fingerprint
        || next.acquired_at_epoch_ms != previous.acquired_at_epoch_ms
    {
        return refuse("identity, fingerprint and acquisition time never change");
    }
    if next.updated_at_epoch_ms < previous.updated_at_epoch_ms {
        return refuse("updatedAtEpochMs never goes back");
    }
    if next.remote_handles.len() < previous.remote_handles.len()
        || !previous
            .remote_handles
            .iter()
            .zip(&next.remote_handles)
            .all(|(a, b)| same(a, b))
    {
        return refuse("remoteHandles are append-only");
    }
    for (alias, evaluation) in &previous.evaluations {
        if !next
            .evaluations
            .get(alias)
            .is_some_and(|e| same(e, evaluation))
        {
            return refuse("evaluations are immutable once written");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::receipt::document::ReceiptKey;

    fn first() -> Receipt {
        Receipt::acquired(&ReceiptKey::new("p", "i"), "sha256:f", 10)
    }

    #[test]
    fn a_plain_successor_is_accepted() {
        let a = first();
        let b = a.successor(ReceiptState::Composed, 20);
        check_successor(&a, &b).unwrap();
    }

    #[test]
    fn illegal_states_and_broken_rules_are_refused() {
        let a = first();
        let b = a.successor(ReceiptState::Completed, 20);
        assert!(matches!(
            check_successor(&a, &b),
            Err(ReceiptError::IllegalTransition { .. })
        ));

        let mut b = a.successor(ReceiptState::ObservationReceived, 20);
        b.evaluations.insert("x".into(), json!(1));
        check_successor(&a, &b).unwrap();
        let mut c = b.successor(ReceiptState::ObservationReceived, 30);
        c.evaluations.insert("x".into(), json!(2));
        assert!(matches!(
            check_successor(&b, &c),
            Err(ReceiptError::Invariant { .. })
        ));

        let mut c = b.successor(ReceiptState::ObservationReceived, 5);
        c.updated_at_epoch_ms = 5;
        assert!(check_successor(&b, &c).is_err());

        let mut c = b.successor(ReceiptState::ObservationReceived, 30);
        c.fingerprint = "other".into();
        assert!(check_successor(&b, &c).is_err());

        let c = b.successor(ReceiptState::Dispatched, 30);
        assert!(check_successor(&b, &c).is_err(), "dispatched needs pending");
    }
}
