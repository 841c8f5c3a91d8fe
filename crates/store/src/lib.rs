//! Durable state for turnstile. SQLite is the embedded default; every store sits behind a small
//! trait with an in-memory twin for tests.
//!
//! # Layout
//!
//! - `receipt`: the evaluator's durable decision receipts ([`ReceiptStore`]): revisions without
//!   gaps, compare-and-swap writes, an optional HMAC chain.
//! - `roster`: the semantic roster scheduler's pending items, call history, records and cache
//!   ([`RosterStore`]).
//! - `service`: the admission service's keys (as hashes only), profile registrations and audit
//!   log ([`ServiceStore`]), and the append-only [`LeaseLog`] of held leases and spend.
//!
//! The modules are private; this file re-exports the crate's API. Each module's own docs state
//! the invariants every implementation of its trait upholds.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod receipt;
mod roster;
mod service;

pub use receipt::{
    check_successor, CasWrite, GroupCommitStats, GroupCommitStore, IntegrityKey,
    MemoryReceiptStore, Pending, Receipt, ReceiptClaim, ReceiptError, ReceiptKey, ReceiptState,
    ReceiptStore, SqliteReceiptOptions, SqliteReceiptStore, Synchronous, RECEIPT_DB_FILE,
    RECEIPT_SCHEMA,
};
pub use roster::{
    meta_keys, Band, CallId, CallOutcome, CallReceipt, CallUsage, MemoryRosterStore, PendingItem,
    ReasonCode, RecordKind, RosterStore, RosterStoreError, SemanticRecord, SqliteRosterStore,
    StoredEvidence, ROSTER_DB_FILE,
};
pub use service::{
    AuditKind, AuditRecord, Damage, DamageKind, KeyRole, LeaseChange, LeaseChangeRef,
    LeaseDurability, LeaseLog, LeaseLogDone, LeaseLogError, LeaseLogStats, LeaseState,
    MemoryServiceStore, OnDamage, Recovered, ServiceStore, ServiceStoreError, SqliteServiceStore,
    StoredBreaker, StoredKey, StoredLease, StoredLeaseRef, StoredPause, StoredProfile, StoredSpend,
    BREAKER_CLOSED, DEFAULT_SEGMENT_BYTES, LEASE_LOG_DIR, PAUSE_KEPT_AFTER_END_MS, SERVICE_DB_FILE,
};
