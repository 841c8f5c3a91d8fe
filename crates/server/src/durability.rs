//! What outlives the process: the data directory's lock (`data_lock.rs`), the store thread
//! that owns SQLite (`persist.rs`), the driver's journal of held leases and spend
//! (`journal.rs`), the bucket checkpoint of a clean stop (`checkpoint.rs`), and the start-up
//! that puts it all back (`recover.rs`).
//!
//! Invariants: one process per data directory; a lease or a spend is durable before its reply
//! leaves, so a crash of the process frees no slot and forgets no spend.

pub(crate) mod checkpoint;
pub(crate) mod data_lock;
pub(crate) mod journal;
pub(crate) mod log_loss;
pub(crate) mod persist;
pub(crate) mod recover;
