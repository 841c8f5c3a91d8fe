//! Errors of the receipt stores. Messages name revisions, states and rules; never a result, a
//! principal or a workspace.

use super::state::ReceiptState;

/// A failure of a receipt store.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    /// The SQLite database could not be opened, read or written (a `busy_timeout` expiry
    /// included).
    #[error("receipt database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A receipt could not be encoded or a stored revision decoded.
    #[error("receipt document could not be encoded or decoded: {0}")]
    Json(#[from] serde_json::Error),
    /// A receipt could not be written as canonical JSON.
    #[error(transparent)]
    Canonical(#[from] turnstile_admission::digest::CanonicalJsonError),
    /// The write breaks the state machine.
    #[error("illegal receipt transition {from} → {to}")]
    IllegalTransition {
        /// The state stored.
        from: ReceiptState,
        /// The state the write asked for.
        to: ReceiptState,
    },
    /// The write breaks an immutability rule (named).
    #[error("receipt write refused: {rule}")]
    Invariant {
        /// The rule the write breaks.
        rule: &'static str,
    },
    /// Compare-and-swap on a key that was never acquired.
    #[error("no receipt to replace")]
    NotFound,
    /// A stored revision's MAC does not verify (the row was altered or re-signed with another
    /// key).
    #[error("receipt revision {revision} failed its integrity check")]
    Tampered {
        /// The revision that does not verify.
        revision: u64,
    },
    /// A stored revision has no MAC although the store verifies integrity.
    #[error("receipt revision {revision} is not signed")]
    Unsigned {
        /// The revision without a MAC.
        revision: u64,
    },
    /// The revision chain has a hole or a revision that disagrees with its row.
    #[error("receipt revision chain is broken: expected revision {expected}, found {found}")]
    Gap {
        /// The revision the chain needs next.
        expected: u64,
        /// The revision found there.
        found: u64,
    },
    /// The group commit transaction failed as a whole (its message); nothing of it was written.
    #[error("receipt group commit failed: {0}")]
    BatchFailed(String),
    /// The group committer's thread could not be started.
    #[error("receipt group committer could not start: {0}")]
    CommitterSpawn(std::io::Error),
    /// The group committer's thread is gone.
    #[error("receipt group committer is not running")]
    CommitterGone,
    /// Creating the data directory failed.
    #[error("could not create receipt directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// Why it could not be created.
        source: std::io::Error,
    },
}
