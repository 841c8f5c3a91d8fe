//! Start-up of a replica (`[coordination] redis_url`): the deployment's keys, profiles and audit
//! log are a mirror of a feed in Redis, and its limits are shared through the coordinator.
//!
//! The order is fixed, and each step needs the one before:
//! 1. [`join`]: before anything is read from the store, seed the shared feed, adopt it, or catch
//!    up with it (`crate::replicas::identity::join`);
//! 2. [`Replica::coordinate`]: after the leases of the previous process are known, hand them to
//!    the coordinator and probe Redis once, so a reachable Redis is shared from the first
//!    admission; then its task probes and renews;
//! 3. [`Replica::deployment`]: once the driver exists, the mirror follows the feed (registering
//!    profiles through the driver) and reads the audit records the journal has sent since its
//!    start (`crate::durability::journal::SharedAudit`: a channel made before the driver, so the driver ↔
//!    mirror cycle needs no late-set cell).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use turnstile_admission::Registry;
use turnstile_coord::{CoordConfig, Coordinator};
use turnstile_shell::{Clock, DriverHandle, SharedLimits};
use turnstile_store::{AuditRecord, StoredLease};

use super::Deployment;
use crate::bootstrap::BootstrapKeys;
use crate::config::Config;
use crate::durability::journal::SharedAudit;
use crate::durability::persist::StoreHandle;
use crate::http::serve::ServerError;
use crate::keys::KeyRing;
use crate::replicas::identity::join::{Joined, Joining};
use crate::replicas::identity::Mirror;
use crate::replicas::shared::CoordLimits;

/// A replica between joining the shared feed and serving.
pub(super) struct Replica {
    coord_config: CoordConfig,
    redis: turnstile_coord::IdentityStore,
    joined: Joined,
}

/// Joins the deployment's shared keys and profiles (seeds, adopts or catches up), before
/// anything is read from `store`.
pub(super) async fn join(
    coord_config: CoordConfig,
    config: &Config,
    store: &mut dyn turnstile_store::ServiceStore,
    clock: Clock,
) -> Result<Replica, ServerError> {
    let timeout = Duration::from_millis(config.coordination.identity_timeout_ms());
    let redis = turnstile_coord::IdentityStore::new(
        &coord_config.redis_url,
        coord_config.topology,
        timeout,
    )
    .map_err(ServerError::Coordination)?;
    let joined =
        crate::replicas::identity::join::join(store, &redis, config.demo, clock.now_ms()).await?;
    Ok(Replica {
        coord_config,
        redis,
        joined,
    })
}

impl Replica {
    /// The keys the deployment's first start created (seeded by this replica), if any.
    pub(super) fn bootstrap_keys(&self) -> Option<BootstrapKeys> {
        self.joined.bootstrap.clone()
    }

    /// The coordinator, holding the reinstated `leases` again and probed once; its background
    /// task runs from here on. Also the journal's end of the shared audit channel and the
    /// mirror's.
    pub(super) async fn coordinate(
        self,
        registry: &Registry,
        leases: &[StoredLease],
        clock: Clock,
    ) -> Result<Coordinated, ServerError> {
        let coord =
            Coordinator::new(self.coord_config.clone()).map_err(ServerError::Coordination)?;
        crate::replicas::shared::adopt_reinstated(&coord, registry, leases);
        coord.tick(clock.now_ms(), false).await;
        coord.warn_if_evicting().await;
        tokio::spawn(coord.clone().run(move || clock.now_ms()));
        let (audit, audit_records) = SharedAudit::channel();
        Ok(Coordinated {
            replica: self,
            coord,
            audit,
            audit_records,
        })
    }
}

/// A replica with its coordinator, and the shared audit channel's two ends.
pub(super) struct Coordinated {
    replica: Replica,
    pub(super) coord: Arc<Coordinator>,
    pub(super) audit: SharedAudit,
    audit_records: UnboundedReceiver<Vec<AuditRecord>>,
}

impl Coordinated {
    /// How this start met the shared feed.
    pub(super) fn joining(&self) -> Joining {
        self.replica.joined.how.clone()
    }

    /// The replica deployment: the mirror (following the feed from now on) and the shared
    /// limits behind the handlers' traits.
    pub(super) fn deployment(
        self,
        (store, keys, driver, clock): (StoreHandle, Arc<KeyRing>, DriverHandle, Clock),
        follow_every: Duration,
    ) -> Result<Deployment, ServerError> {
        let replica = self.replica;
        let mirror = Mirror::new(
            replica.redis,
            replica.joined.cursor,
            (store, keys, driver, clock),
        )
        .map_err(ServerError::Coordination)?;
        tokio::spawn(mirror.clone().follow(follow_every));
        tokio::spawn(mirror.clone().share_audit_from(self.audit_records));
        let limits = Arc::new(CoordLimits {
            clock,
            coord: self.coord.clone(),
        });
        Ok(Deployment {
            identity: mirror.clone(),
            books: limits.clone(),
            shared: Some(limits as Arc<dyn SharedLimits>),
            coord: Some(self.coord),
            mirror: Some(mirror),
        })
    }
}
