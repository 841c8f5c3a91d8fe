//! The replica's side of the books' reconciliation window (`docs/replicas.md`, "Redis loses
//! the books"): the library answers `reconciling` to an acquire that would be granted while a
//! workspace's books epoch is missing or younger than its window; the admission waits for the
//! window's end and asks again, and the replica reports `reconciling` meanwhile.
//!
//! Invariants: an admission waits for the books at most [`BOOKS_WAIT_MAX_MS`] in all, whatever
//! its deadline (then it is told to wait as for a full scope); the probe interval is at most
//! half the window ([`PROBE_EVERY_MAX_MS`]), so the replicas holding leases check the books,
//! and register their leases again, well before the window ends.

use std::time::Duration;

use turnstile_admission::{Millis, Reason};

use super::{Admission, CoordConfig, Coordinator, Mode};
use crate::error::CoordError;
use crate::health::Health;

/// The library's books reconciliation window (`RECONCILE_MS` in the Lua, tested equal): after
/// Redis lost a workspace's books, nothing is granted there for this long.
pub const BOOKS_RECONCILE_MS: Millis = 1_000;

/// The longest probe interval: the replicas holding leases check the books every probe and
/// must register them again well inside [`BOOKS_RECONCILE_MS`].
pub const PROBE_EVERY_MAX_MS: Millis = BOOKS_RECONCILE_MS / 2;

/// The longest an acquire waits, in all, for a workspace's books to be rebuilt (past this the
/// admission is told to wait, as for a full scope).
const BOOKS_WAIT_MAX_MS: Millis = 3 * BOOKS_RECONCILE_MS;

/// Refuses a probe interval over [`PROBE_EVERY_MAX_MS`].
pub(super) fn check_probe(config: &CoordConfig) -> Result<(), CoordError> {
    let probe_ms = u64::try_from(config.probe_every.as_millis()).unwrap_or(u64::MAX);
    if probe_ms > PROBE_EVERY_MAX_MS {
        return Err(CoordError::ProbeTooSlow(probe_ms));
    }
    Ok(())
}

impl Coordinator {
    /// The state to report (`/readyz`): [`health`](Self::health), but `Reconciling` while a
    /// healthy replica knows books Redis lost are being rebuilt (grants there wait meanwhile).
    pub fn reported_health(&self) -> Health {
        self.health.reported()
    }

    /// An acquire was answered `reconciling` until `until` (server ms; the server's clock read
    /// `server`): reports it, and waits for it unless the admission already waited `waited` ms
    /// for the books and this would take it past [`BOOKS_WAIT_MAX_MS`]; then answers what to
    /// tell the admission (`None`: ask again).
    pub(super) async fn wait_for_books(
        &self,
        until: Millis,
        server: Millis,
        waited: &mut Millis,
    ) -> Option<Admission> {
        let wait = until.saturating_sub(server).max(1);
        self.health.books_reconcile_for(wait);
        if waited.saturating_add(wait) > BOOKS_WAIT_MAX_MS {
            return Some(Admission::Wait {
                reason: Reason::Concurrency,
                after_ms: Some(wait),
                mode: Mode::Shared,
            });
        }
        *waited += wait;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        None
    }
}
