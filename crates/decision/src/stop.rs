//! What interrupted an invocation, and which interruption wins.
//!
//! Invariant: once several stops happened, the one reported is the highest ranked: an
//! uncertain dispatch (what a replay must report), then a failed receipt write, then the
//! caller's signal, then the total deadline.

use crate::reason::{AttemptReason, Status};
use crate::scheduler::Interrupt;

/// What interrupted the invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Cancelled,
    TotalDeadline,
    /// A dispatched call's outcome is unknown (receipt-backed runs).
    Uncertain,
    /// The receipt could not be written.
    ReceiptFailed,
}

impl From<Interrupt> for Stop {
    fn from(interrupt: Interrupt) -> Self {
        match interrupt {
            Interrupt::Cancelled => Stop::Cancelled,
            Interrupt::Deadline => Stop::TotalDeadline,
        }
    }
}

impl Stop {
    pub(crate) fn status_reason(self) -> (Status, AttemptReason) {
        match self {
            Stop::Cancelled => (Status::Cancelled, AttemptReason::Cancelled),
            Stop::TotalDeadline => (Status::Error, AttemptReason::Timeout),
            Stop::Uncertain => (Status::Error, AttemptReason::ExecutionUncertain),
            Stop::ReceiptFailed => (Status::Error, AttemptReason::ReceiptUnavailable),
        }
    }

    /// Which stop wins when several happened: an uncertain dispatch outranks everything (it is
    /// what a replay must report), then a receipt failure, then the caller, then the deadline.
    pub(crate) fn rank(self) -> u8 {
        match self {
            Stop::Uncertain => 3,
            Stop::ReceiptFailed => 2,
            Stop::Cancelled => 1,
            Stop::TotalDeadline => 0,
        }
    }
}
