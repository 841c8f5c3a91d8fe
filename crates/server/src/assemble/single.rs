//! Start-up of a single process: keys, revocations and profiles live in this process's SQLite
//! store; nothing is shared, so admission is the local core's alone.
//!
//! Invariant: a single process never opens a Redis connection (no `[coordination] redis_url`).

use std::sync::Arc;

use turnstile_admission::Registry;
use turnstile_shell::DriverHandle;
use turnstile_store::ServiceStore;

use super::Deployment;
use crate::bootstrap::{self, BootstrapError, BootstrapKeys};
use crate::durability::persist::StoreHandle;
use crate::keys::KeyRing;
use crate::replicas::deployment::{LocalIdentity, SingleNode};

/// The first start of a data directory creates the admin key (and, with `demo`, a demo
/// workspace); later starts create nothing.
pub(super) fn bootstrap(
    store: &mut dyn ServiceStore,
    registry: &mut Registry,
    demo: bool,
    now: u64,
) -> Result<Option<BootstrapKeys>, BootstrapError> {
    bootstrap::first_start(store, registry, demo, now)
}

/// The single-process deployment: the store, the key ring and the driver behind the handlers'
/// traits.
pub(super) fn deployment(
    store: StoreHandle,
    keys: Arc<KeyRing>,
    driver: DriverHandle,
) -> Deployment {
    Deployment {
        identity: Arc::new(LocalIdentity {
            store,
            keys,
            driver,
        }),
        books: Arc::new(SingleNode),
        shared: None,
        coord: None,
        mirror: None,
    }
}
