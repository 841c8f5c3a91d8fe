//! Start-up: the service assembled from its parts, in a fixed order, with the deployment mode
//! chosen once, here. A single process ([`single`]) keeps keys and profiles in its SQLite store
//! and shares nothing; a replica ([`replicas`]) mirrors them from a feed in Redis and shares its
//! limits through the coordinator. Either way the result is one [`Deployment`]: the handlers'
//! [`IdentityStore`] and [`SharedBooks`], and the admission step's
//! [`SharedLimits`](turnstile_shell::SharedLimits); no handler asks which mode it runs in.
//!
//! The order, and why:
//! 1. the data directory's lock, before anything reads or writes it;
//! 2. the store and the lease log; a replica joins the shared feed before the store is read;
//! 3. profiles replayed, the first start's keys, what the previous process charged, granted and
//!    paused (`crate::durability::recover`), and a clean stop's bucket levels (`crate::durability::checkpoint`);
//! 4. the listener, the store thread, then (replicas) the coordinator holding the reinstated
//!    leases again;
//! 5. the driver, with the journal, and the leases reinstated into it;
//! 6. the deployment's traits (a replica's mirror needs the driver), the proxy, the handlers'
//!    state, and the accept loop (`crate::http::serve`).

mod replicas;
mod single;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use turnstile_admission::{BudgetBounds, Registry};
use turnstile_coord::Coordinator;
use turnstile_shell::{
    Clock, Driver, DriverConfig, Exposition, Feed, LeaseMetrics, SharedHook, Telemetry,
};
use turnstile_store::{LeaseLog, OnDamage, ServiceStore, SqliteServiceStore};

use crate::api::{AppParts, AppState};
use crate::bootstrap;
use crate::config::Config;
use crate::durability::checkpoint;
use crate::durability::data_lock::DataDirLock;
use crate::durability::journal::{LastGrant, SharedAudit, StoreJournal};
use crate::durability::log_loss;
use crate::durability::persist::StoreHandle;
use crate::durability::recover;
use crate::http::serve::{accept_loop, AcceptParts, Restored, RunningServer, ServerError};
use crate::http::slots::Slots;
use crate::keys::KeyRing;
use crate::metrics::Metrics;
use crate::replicas::deployment::{IdentityStore, SharedBooks};
use crate::replicas::identity::Mirror;

/// What the deployment mode decides, as the rest of the service holds it.
pub(crate) struct Deployment {
    /// Where key and profile writes go.
    pub(crate) identity: Arc<dyn IdentityStore>,
    /// The shared side of releases, budget releases and pauses.
    pub(crate) books: Arc<dyn SharedBooks>,
    /// The limits the admission step tries after the local core (`None`: a single process).
    pub(crate) shared: SharedHook,
    /// Replicas: the coordinator (its metrics).
    pub(crate) coord: Option<Arc<Coordinator>>,
    /// Replicas: the mirror of the shared feed (its metrics; stopped at shutdown).
    pub(crate) mirror: Option<Arc<Mirror>>,
}

impl Deployment {
    /// What the deployment adds to `/metrics` (on a replica: coordination, then the identity
    /// mirror).
    fn collectors(&self, mut exposition: Exposition) -> Exposition {
        if let Some(coord) = &self.coord {
            exposition = exposition.with(coord.collector());
        }
        if let Some(mirror) = &self.mirror {
            exposition = exposition.with(mirror.collector());
        }
        exposition
    }
}

/// The mode, from joining (step 2) to the coordinator (step 4).
enum Mode {
    Single,
    Replica(Box<replicas::Replica>),
}

/// The mode, from the coordinator (step 4) to the deployment (step 6).
enum Wired {
    Single,
    Replica(Box<replicas::Coordinated>),
}

/// Opens the store, reloads state, binds and starts serving, with telemetry on the global
/// OpenTelemetry providers. Must run inside a tokio runtime.
pub async fn start(config: Config) -> Result<RunningServer, ServerError> {
    start_with_telemetry(config, Telemetry::global()).await
}

/// [`start`] with a given telemetry handle (its tracer receives one `decision.admit` span per
/// admission request; a granted lease's span stays open until the lease ends).
pub async fn start_with_telemetry(
    config: Config,
    telemetry: Telemetry,
) -> Result<RunningServer, ServerError> {
    config.validate()?;
    let config = Arc::new(config);
    // Before anything reads or writes the directory: one process per data directory.
    let data_lock = DataDirLock::acquire(&config.data_dir)?;
    // Bound before the data directory is initialised: a first start whose address is taken
    // fails here, before it generates (and would print only once) the admin and demo keys.
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: config.listen,
        source,
    })?;
    let mut store = SqliteServiceStore::open_dir(&config.data_dir)?;
    let (lease_log, recovered) = LeaseLog::open_checked(
        &config.data_dir,
        config.leases.durability.store(),
        config.leases.segment_bytes,
        if config.accept_lease_log_loss {
            OnDamage::Accept
        } else {
            OnDamage::Refuse
        },
    )?;
    let clock = Clock::system();
    let mut registry = Registry::new();
    registry.set_budget_bounds(BudgetBounds {
        idle_ms: Some(config.budgets.idle_ms),
        max_open: Some(config.budgets.max_open_per_workspace),
        max_open_per_principal: Some(config.budgets.principal_cap()),
    });
    // The deployment mode, chosen once. Replicas: keys, registrations and the audit log are
    // the deployment's (a mirror of the shared feed): seed, adopt or catch up before anything
    // is read from the store.
    let mode = match config.coordination.coord()? {
        Some(coord_config) => Mode::Replica(Box::new(
            replicas::join(coord_config, &config, &mut store, clock).await?,
        )),
        None => Mode::Single,
    };
    bootstrap::replay(&store, &mut registry)?;
    let bootstrap_keys = match &mode {
        Mode::Replica(replica) => replica.bootstrap_keys(),
        Mode::Single => {
            // A rollout does not survive a restart: its record is closed (`api::rollout_record`).
            crate::api::rollout_record::end_interrupted(&mut store, clock.now_ms())?;
            single::bootstrap(&mut store, &mut registry, config.demo, clock.now_ms())?
        }
    };
    // What the previous process charged and granted counts again before anything is answered,
    // and its lanes' pauses, open breakers and spent rate buckets hold again (the leases are
    // reinstated into the driver below, after the buckets are drained).
    // A clean stop left its bucket levels (`crate::durability::checkpoint`): used once at most.
    recover::restore_spend(&recovered.spend, &mut registry, clock.now_ms())?;
    let found = checkpoint::read(&config.data_dir);
    let had_checkpoint = !matches!(found, Ok(None));
    let lane_state = recover::restore_lane_state(&recovered, found, &mut registry, clock.now_ms());
    if let Some(damage) = &recovered.damage {
        log_loss::pause_every_lane(damage, &mut registry, config.leases.ttl_ms, clock.now_ms());
    }
    let last_grant = LastGrant::new(recovered.last_grant_at_ms);
    let keys = Arc::new(KeyRing::from_stored(&store.keys()?));

    let metrics = Arc::new(Metrics::default());
    if lane_state.checkpoint_ignored.is_some() {
        metrics
            .bucket_checkpoints_ignored
            .fetch_add(1, Ordering::Relaxed);
    }
    let boxed: Box<dyn ServiceStore> = Box::new(store);
    let (store, store_thread) =
        StoreHandle::spawn(boxed, metrics.clone()).map_err(ServerError::Thread)?;
    let lease_metrics = Arc::new(LeaseMetrics::default());
    let feed = Feed::new();
    // Replicas: one probe before the first answer, so a reachable Redis is shared from the
    // first admission; then the background task probes and renews. Breaker transitions and
    // pauses are shared through the feed; the driver journals before the mirror exists, so
    // they wait in a channel the mirror reads.
    let wired = match mode {
        Mode::Replica(replica) => Wired::Replica(Box::new(
            replica
                .coordinate(&registry, &recovered.leases, clock)
                .await?,
        )),
        Mode::Single => Wired::Single,
    };
    let (coord, shared_audit) = match &wired {
        Wired::Replica(c) => (Some(c.coord.clone()), c.audit.clone()),
        Wired::Single => (None, SharedAudit::default()),
    };
    let journal_stats = lease_log.stats();
    let (mut driver, driver_handle) = Driver::new(
        registry,
        clock,
        DriverConfig {
            lease_ttl_ms: Some(config.leases.ttl_ms),
        },
        Box::new(
            StoreJournal::new(store.clone(), lease_log, metrics.clone())
                .with_coordination(coord.clone())
                .with_shared_audit(shared_audit.clone())
                .with_last_grant(last_grant.clone()),
        ),
        lease_metrics.clone(),
    );
    let reinstated = recover::reinstate_leases(recovered.leases, &mut driver)?;
    let (joining, deployment) = match wired {
        Wired::Replica(coordinated) => (
            Some(coordinated.joining()),
            coordinated.deployment(
                (store.clone(), keys.clone(), driver_handle.clone(), clock),
                Duration::from_millis(config.coordination.follow_every_ms),
            )?,
        ),
        Wired::Single => (
            None,
            single::deployment(store.clone(), keys.clone(), driver_handle.clone()),
        ),
    };
    let driver_task = tokio::spawn(driver.with_feed(feed.clone()).run());

    let mut proxy = turnstile_proxy::Proxy::new(
        config.proxy.clone(),
        |name| std::env::var(name).ok(),
        driver_handle.clone(),
        telemetry.clone(),
        turnstile_proxy::HostLimits {
            body_read_timeout: Duration::from_millis(config.http.body_read_timeout_ms),
            body_min_bytes_per_sec: config.http.body_min_bytes_per_sec,
            max_retry_after_ms: config.admission.max_retry_after_ms,
        },
    )?;
    // Replicas: proxied calls take the same shared step as `POST /v1/admissions`.
    if let Some(shared) = &deployment.shared {
        proxy = proxy.with_shared(shared.clone());
    }
    let proxy = Arc::new(proxy);
    let ready = Arc::new(AtomicBool::new(false));
    let key_slots = Slots::new(config.http.max_requests_per_key);
    let pending = Slots::new(config.admission.max_pending_per_key);
    let exposition = Arc::new(deployment.collectors(crate::api::ops::exposition(
        &telemetry,
        &lease_metrics,
        &metrics,
        &proxy,
    )));
    let state = AppState::new(AppParts {
        key_slots,
        pending,
        driver: driver_handle.clone(),
        store,
        keys,
        metrics: metrics.clone(),
        clock,
        config: config.clone(),
        ready: ready.clone(),
        telemetry,
        feed,
        proxy,
        shared: deployment.shared,
        exposition,
        identity: deployment.identity,
        books: deployment.books,
        candidates: Arc::default(),
        journal: journal_stats,
    });
    // Restored (or not usable): gone before anything is served, so a later crash never finds
    // these levels (see `crate::durability::checkpoint`).
    if had_checkpoint {
        checkpoint::remove(&config.data_dir)?;
    }
    let (shutdown_tx, shutdown_rx) = oneshot::channel();
    let task = tokio::spawn(accept_loop(
        listener,
        state,
        shutdown_rx,
        AcceptParts {
            driver: driver_handle,
            driver_task,
            store_thread,
            ready: ready.clone(),
            mirror: deployment.mirror,
            last_grant,
        },
    ));
    ready.store(true, Ordering::Relaxed);
    Ok(RunningServer {
        addr,
        bootstrap: bootstrap_keys,
        joining,
        shutdown: Some(shutdown_tx),
        task,
        restored: Restored {
            leases: reinstated,
            lanes: lane_state,
        },
        _data_lock: data_lock,
    })
}
