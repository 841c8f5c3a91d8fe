//! The receipt store trait.
//!
//! Calls are synchronous and short (an in-memory map, or one SQLite transaction); only
//! [`ReceiptStore::wait_for_terminal`] blocks for long, so async callers run it on a blocking
//! thread. Every implementation applies [`check_successor`](super::check_successor) before a
//! write and verifies the chain on every read.

use std::time::Duration;

use super::document::{Receipt, ReceiptKey};
use super::error::ReceiptError;

/// What [`ReceiptStore::acquire`] found: the claim on an invocation's receipt.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptClaim {
    /// True for the one caller that created revision 1.
    pub owner: bool,
    /// Revision 1 for the owner; the latest revision for everyone else.
    pub receipt: Receipt,
}

/// Durable receipts keyed by (project, invocation).
pub trait ReceiptStore: Send + Sync {
    /// The latest revision, verified.
    fn read(&self, key: &ReceiptKey) -> Result<Option<Receipt>, ReceiptError>;

    /// Creates revision 1 (`acquired`, with `fingerprint`) unless the key exists. Exactly one
    /// caller — across threads and processes sharing the store — is the owner.
    fn acquire(
        &self,
        key: &ReceiptKey,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<ReceiptClaim, ReceiptError>;

    /// Writes `next` as revision `expected_revision + 1`. `Ok(false)` when the latest revision
    /// is no longer `expected_revision` (someone else wrote); an error when `next` is not a
    /// legal successor or the key was never acquired.
    fn compare_and_swap(
        &self,
        key: &ReceiptKey,
        expected_revision: u64,
        next: &Receipt,
    ) -> Result<bool, ReceiptError>;

    /// Blocks until the receipt is terminal or `timeout` passed, and returns the latest
    /// revision either way (`None` if the key does not exist).
    fn wait_for_terminal(
        &self,
        key: &ReceiptKey,
        timeout: Duration,
    ) -> Result<Option<Receipt>, ReceiptError>;
}
