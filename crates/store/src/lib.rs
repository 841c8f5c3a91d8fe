//! Durable state for turnstile. SQLite is the embedded default; every store sits behind a small
//! trait with an in-memory twin for tests.
#![forbid(unsafe_code)]

pub mod roster;
pub mod service;

pub use roster::{MemoryRosterStore, RosterStore, RosterStoreError, SqliteRosterStore};
