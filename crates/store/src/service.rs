//! Durable state of the admission service (`turnstile serve`): API keys, registered profiles and
//! the audit log (profile-change records, breaker transitions, provider pauses, key
//! revocations).
//!
//! Invariants every implementation of [`ServiceStore`] upholds:
//!
//! - **Keys are stored only as hashes.** A [`StoredKey`] holds the hex sha256 of the key, never
//!   the key; the plaintext exists only in the response that created it.
//! - **Registrations are kept in order.** [`ServiceStore::profiles`] returns every accepted
//!   registration oldest first, so re-registering them in that order rebuilds the registry's
//!   current profiles, revisions and rollback history exactly.
//! - **A registration and its profile-change record commit together** (one transaction), so
//!   the audit log never misses a change that the profiles table holds, nor the reverse.
//! - **The audit log is append-only** and read back per workspace and kind, oldest first. A
//!   record keeps who made the change ([`AuditRecord::actor_key_id`], an admin key's key ID)
//!   exactly as written, and the approval on record of a revision change
//!   ([`AuditRecord::note`], [`AuditRecord::approved_by`]); records from before these were kept
//!   read back with none.
//! - **Held leases and budget spend follow their changes exactly** ([`LeaseChange`], rules in
//!   `leases.rs`); they live in the [`LeaseLog`], an append-only file beside the database, not
//!   in it (`lease_log/mod.rs` says why).
//!
//! The store is deliberately ignorant of the admission types: profiles and records travel as
//! the JSON documents the service produced, so this crate stays below `turnstile-admission`'s
//! vocabulary changes.

mod change_ref;
mod lease_log;
mod leases;
mod memory;
mod schema;
mod sqlite;
mod types;

pub use change_ref::{LeaseChangeRef, StoredLeaseRef};
pub use lease_log::{
    Damage, DamageKind, Done as LeaseLogDone, LeaseLog, LeaseLogError, LeaseLogStats, LeaseState,
    OnDamage, Recovered, DEFAULT_SEGMENT_BYTES, LEASE_LOG_DIR,
};
pub use leases::{
    LeaseChange, LeaseDurability, StoredBreaker, StoredLease, StoredPause, StoredSpend,
    BREAKER_CLOSED, PAUSE_KEPT_AFTER_END_MS,
};
pub use memory::MemoryServiceStore;
pub use sqlite::{SqliteServiceStore, SERVICE_DB_FILE};
pub use types::{
    AuditKind, AuditRecord, KeyRole, ServiceStore, ServiceStoreError, StoredKey, StoredProfile,
};
