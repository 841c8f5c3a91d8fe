//! Acquiring an invocation's receipt, and the replay rules for everyone who is not its owner.
//!
//! | existing receipt | answer |
//! |---|---|
//! | none | this run owns it (revision 1, `acquired`) |
//! | other fingerprint | `replay-mismatch`, no call |
//! | `completed` | the stored result, no call |
//! | `failed`, `execution-uncertain` | `execution-uncertain`, no call |
//! | anything else | wait for a terminal state up to `totalTimeoutMs + 1 s`, then apply this table; still not terminal → the owner is presumed dead: the receipt becomes `execution-uncertain` (never re-dispatched) |
//!
//! The wait runs on a blocking thread (`ReceiptStore::wait_for_terminal`), on real time.

use std::time::Duration;

use serde_json::Value;
use turnstile_store::{Receipt, ReceiptError, ReceiptKey, ReceiptState};

use super::writer::ReceiptWriter;
use super::ReceiptRun;
use crate::Clock;

/// How a receipt-backed run starts.
pub(crate) enum Begin {
    /// This run owns the receipt and executes.
    Owner(Box<ReceiptWriter>),
    /// Another run owns (or owned) it: answer without dispatching.
    Replay(Replay),
}

/// The answer for a non-owner.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Replay {
    /// The stored result of a completed receipt.
    Stored(Value),
    /// The invocation id was used with a different fingerprint.
    Mismatch,
    /// A call may have been dispatched and its outcome is unknown.
    Uncertain,
}

/// What an existing receipt answers, if it answers already.
fn decide(receipt: &Receipt, fingerprint: &str) -> Option<Replay> {
    if receipt.fingerprint != fingerprint {
        return Some(Replay::Mismatch);
    }
    match receipt.state {
        ReceiptState::Completed => Some(
            receipt
                .result
                .clone()
                .map_or(Replay::Uncertain, Replay::Stored),
        ),
        ReceiptState::Failed | ReceiptState::ExecutionUncertain => Some(Replay::Uncertain),
        _ => None,
    }
}

/// Acquires the receipt of `invocation_id`, or answers the replay.
pub(crate) async fn begin(
    run: &ReceiptRun,
    invocation_id: &str,
    fingerprint: &str,
    clock: Clock,
    total_timeout_ms: u64,
) -> Result<Begin, ReceiptError> {
    let key = ReceiptKey::new(run.project_id.clone(), invocation_id);
    let acquired = run.store.acquire(&key, fingerprint, clock.now_ms())?;
    if acquired.owner {
        return Ok(Begin::Owner(Box::new(ReceiptWriter::new(
            std::sync::Arc::clone(&run.store),
            acquired.receipt,
            clock,
        ))));
    }
    if let Some(answer) = decide(&acquired.receipt, fingerprint) {
        return Ok(Begin::Replay(answer));
    }

    let wait = Duration::from_millis(total_timeout_ms.saturating_add(1_000));
    let store = std::sync::Arc::clone(&run.store);
    let wait_key = key.clone();
    let waited = tokio::task::spawn_blocking(move || store.wait_for_terminal(&wait_key, wait))
        .await
        .unwrap_or(Ok(None))?;
    let mut latest = waited;
    // The owner is presumed dead: mark the receipt uncertain, unless someone wrote meanwhile
    // (then that write decides).
    for _ in 0..8 {
        let Some(receipt) = latest else {
            return Ok(Begin::Replay(Replay::Uncertain));
        };
        if let Some(answer) = decide(&receipt, fingerprint) {
            return Ok(Begin::Replay(answer));
        }
        let next = receipt.successor(ReceiptState::ExecutionUncertain, clock.now_ms());
        if run.store.compare_and_swap(&key, receipt.revision, &next)? {
            return Ok(Begin::Replay(Replay::Uncertain));
        }
        latest = run.store.read(&key)?;
    }
    Ok(Begin::Replay(Replay::Uncertain))
}
