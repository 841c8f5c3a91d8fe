//! The owner's receipt writer: every state change of one receipt-backed run, as
//! compare-and-swap writes on the revision it last wrote.
//!
//! Invariants: the writer only ever replaces its own last revision, so a write that loses the
//! compare-and-swap (someone — a waiter that presumed this owner dead — wrote in between) is a
//! failure, never retried over the other writer. Once the receipt is terminal nothing more is
//! written. Writes are synchronous and short (see `turnstile_store::ReceiptStore`).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use turnstile_store::{Pending, Receipt, ReceiptError, ReceiptKey, ReceiptState, ReceiptStore};

use crate::attempt::AttemptRecord;
use crate::result::{DecisionResult, RulesetResult};
use crate::Clock;

/// Why a receipt write did not happen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteFailure {
    /// Another writer replaced the revision this writer held.
    #[error("receipt revision {0} was replaced by another writer")]
    Lost(u64),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] ReceiptError),
    /// A record could not be written as JSON (a non-finite number).
    #[error("receipt record could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Writes the revisions of one owned receipt.
pub(crate) struct ReceiptWriter {
    store: Arc<dyn ReceiptStore>,
    key: ReceiptKey,
    current: Mutex<Receipt>,
    clock: Clock,
}

impl ReceiptWriter {
    pub(crate) fn new(store: Arc<dyn ReceiptStore>, receipt: Receipt, clock: Clock) -> Self {
        ReceiptWriter {
            store,
            key: receipt.key(),
            current: Mutex::new(receipt),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Receipt> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state of the last revision written.
    pub(crate) fn state(&self) -> ReceiptState {
        self.lock().state
    }

    fn write(
        &self,
        state: ReceiptState,
        edit: impl FnOnce(&mut Receipt) -> Result<(), WriteFailure>,
    ) -> Result<(), WriteFailure> {
        let mut current = self.lock();
        let mut next = current.successor(state, self.clock.now_ms());
        edit(&mut next)?;
        if self
            .store
            .compare_and_swap(&self.key, current.revision, &next)?
        {
            *current = next;
            Ok(())
        } else {
            Err(WriteFailure::Lost(current.revision))
        }
    }

    /// The pending slot, written before the adapter is called.
    pub(crate) fn dispatching(
        &self,
        alias: &str,
        target_index: usize,
        ordinal: u32,
        prior: &[AttemptRecord],
    ) -> Result<(), WriteFailure> {
        let attempts = prior
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()?;
        self.write(ReceiptState::Dispatched, |next| {
            next.pending = Some(Pending {
                alias: alias.to_owned(),
                target_index: u32::try_from(target_index).unwrap_or(u32::MAX),
                ordinal,
                attempts,
            });
            Ok(())
        })
    }

    /// The pending call was answered (or ended with a certainty that it was not sent).
    pub(crate) fn observed(&self) -> Result<(), WriteFailure> {
        self.write(ReceiptState::ObservationReceived, |next| {
            next.pending = None;
            Ok(())
        })
    }

    /// The pending call's outcome is unknown: terminal `execution-uncertain`, pending kept as
    /// the record of what may have been sent.
    pub(crate) fn uncertain(&self) -> Result<(), WriteFailure> {
        if self.state().is_terminal() {
            return Ok(());
        }
        self.write(ReceiptState::ExecutionUncertain, |_| Ok(()))
    }

    /// One alias's final result (immutable from now on).
    pub(crate) fn evaluation(&self, result: &DecisionResult) -> Result<(), WriteFailure> {
        let value = serde_json::to_value(result)?;
        let alias = result.spec.alias.clone();
        self.write(ReceiptState::ObservationReceived, |next| {
            next.pending = None;
            next.evaluations.entry(alias).or_insert(value);
            Ok(())
        })
    }

    /// `composed`, then `completed` with the result.
    pub(crate) fn finish(&self, result: &RulesetResult) -> Result<(), WriteFailure> {
        let value = serde_json::to_value(result)?;
        self.write(ReceiptState::Composed, |next| {
            next.pending = None;
            Ok(())
        })?;
        self.write(ReceiptState::Completed, |next| {
            next.result = Some(value);
            Ok(())
        })
    }

    /// The run could not finish normally: `failed` where the state machine allows it,
    /// `execution-uncertain` otherwise (a call may be pending).
    pub(crate) fn fail(&self) -> Result<(), WriteFailure> {
        let state = self.state();
        if state.is_terminal() {
            return Ok(());
        }
        if state.can_become(ReceiptState::Failed) {
            self.write(ReceiptState::Failed, |_| Ok(()))
        } else {
            self.write(ReceiptState::ExecutionUncertain, |_| Ok(()))
        }
    }
}
