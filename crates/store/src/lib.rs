//! Durable state for turnstile. SQLite is the embedded default; every store sits behind a small
//! trait with an in-memory twin for tests.
#![forbid(unsafe_code)]

pub mod receipt;
pub mod roster;
pub mod service;

pub use receipt::{
    Acquired, GroupCommitStore, IntegrityKey, MemoryReceiptStore, Pending, Receipt, ReceiptError,
    ReceiptKey, ReceiptState, ReceiptStore, SqliteReceiptStore,
};
pub use roster::{MemoryRosterStore, RosterStore, RosterStoreError, SqliteRosterStore};
