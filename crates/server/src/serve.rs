//! The accept loop: hyper's HTTP/1 connection builder with a timer, a connection cap and
//! graceful shutdown.
//!
//! - **Header read timeout.** `axum::serve` gives hyper no timer, so hyper's header timeout
//!   never fires there. Here every connection is served by `hyper::server::conn::http1::Builder`
//!   with a `TokioTimer` and `header_read_timeout`: a client that has not sent a complete
//!   request head in time (a byte-by-byte slowloris) is disconnected.
//! - **Connection cap.** A semaphore permit is taken *before* `accept`, so at most
//!   `http.max_connections` + `http.reserved_connections` connections are open; further
//!   clients wait in the kernel backlog. A connection accepted while the general pool is full
//!   takes a permit of the operators' reserved slice and is served by the reserved router
//!   (health, metrics, OpenAPI and admin calls; anything else 503 `overloaded`), so operators
//!   can reach a service whose pool hostile clients fill.
//! - **Per-address cap.** A client address holding `http.max_connections_per_address`
//!   connections has further ones closed at accept (`turnstile_http_cuts_total{kind="address-cap"}`).
//! - **Deadlines.** Body, response-write and keep-alive idle deadlines: [`crate::conn`],
//!   [`crate::body`].
//! - **Body cap.** Each body reader caps what it reads ([`crate::body`], the proxy's
//!   `body::read`): 413 while reading, never buffered whole.
//! - **Graceful shutdown.** Readiness flips to 503, the listener closes, the driver cancels
//!   every queued admission (answered 503 `shutting-down`), in-flight requests get up to
//!   `http.shutdown_grace_ms` to finish, then the driver's bucket levels are read (it admits
//!   nothing any more), the driver stops, the bucket checkpoint is written into the data
//!   directory ([`crate::checkpoint`]: the next start restores the levels instead of draining
//!   them) and the store thread flushes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;
use turnstile_admission::{BudgetBounds, Registry};
use turnstile_store::{LeaseLog, ServiceStore, SqliteServiceStore};

use crate::api::{AppParts, AppState};
use crate::bootstrap::{self, BootstrapError, BootstrapKeys};
use crate::checkpoint::{self, BucketCheckpoint, CheckpointError};
use crate::config::{Config, ConfigError};
use crate::conn::DeadlineIo;
use crate::metrics::Cut;
use turnstile_shell::{Clock, Driver, DriverConfig, DriverHandle, Feed, LeaseMetrics, Telemetry};

use crate::data_lock::{DataDirLock, DataLockError};
use crate::journal::{LastGrant, StoreJournal};
use crate::keys::KeyRing;
use crate::metrics::Metrics;
use crate::persist::StoreHandle;
use crate::recover::{self, RecoverError};
use crate::routes::router;
use crate::slots::Slots;
use turnstile_coord::Coordinator;

/// A failure to start or run the service.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot open the data directory: {0}")]
    Store(#[from] turnstile_store::ServiceStoreError),
    #[error("start-up failed: {0}")]
    Bootstrap(#[from] BootstrapError),
    #[error("start-up failed: {0}")]
    Recover(#[from] RecoverError),
    #[error("cannot open the lease log: {0}")]
    LeaseLog(#[from] turnstile_store::LeaseLogError),
    #[error(transparent)]
    DataLock(#[from] DataLockError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the store thread: {0}")]
    Thread(std::io::Error),
    #[error("the server task failed: {0}")]
    Join(String),
    #[error("proxy configuration: {0}")]
    Proxy(#[from] turnstile_proxy::ProxySetupError),
    #[error("coordination: {0}")]
    Coordination(turnstile_coord::CoordError),
    #[error("shared keys and profiles: {0}")]
    Identity(#[from] crate::identity::join::JoinError),
    #[error("start-up failed: {0}")]
    Checkpoint(#[from] CheckpointError),
}

/// A started service. Dropping it without [`RunningServer::shutdown`] leaves it running until
/// the runtime ends.
pub struct RunningServer {
    addr: SocketAddr,
    bootstrap: Option<BootstrapKeys>,
    joining: Option<crate::identity::join::Joining>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<Stopped>,
    metrics: Arc<Metrics>,
    restored: Restored,
    /// Held while the server runs: no second process serves the same data directory.
    _data_lock: DataDirLock,
}

/// What this start put back from the previous process (counts only, never IDs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// Held leases reinstated.
    pub leases: usize,
    /// Pauses, breakers and rate buckets ([`recover::restore_lane_state`]).
    pub lanes: recover::LaneStateRestored,
}

/// How a graceful stop ended.
#[derive(Debug)]
pub struct Stopped {
    /// The bucket checkpoint: how many workspaces it holds, or why it was not written (the
    /// next start then drains every rate bucket, as after a crash).
    pub checkpoint: Result<usize, CheckpointError>,
}

impl RunningServer {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Keys generated by this start, if it was the first.
    pub fn bootstrap_keys(&self) -> Option<&BootstrapKeys> {
        self.bootstrap.as_ref()
    }

    /// Replicas: how this start met the deployment's shared keys and profiles.
    pub fn joining(&self) -> Option<&crate::identity::join::Joining> {
        self.joining.as_ref()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// What this start put back from the previous process.
    pub fn restored(&self) -> Restored {
        self.restored
    }

    /// Stops gracefully and waits until everything is flushed.
    pub async fn shutdown(mut self) -> Result<Stopped, ServerError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        (&mut self.task)
            .await
            .map_err(|e| ServerError::Join(e.to_string()))
    }

    /// Waits until the server stops (after [`RunningServer::shutdown_signal`] fires).
    pub async fn run_until(
        mut self,
        signal: impl std::future::Future<Output = ()>,
    ) -> Result<Stopped, ServerError> {
        signal.await;
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        (&mut self.task)
            .await
            .map_err(|e| ServerError::Join(e.to_string()))
    }
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
    let mut store = SqliteServiceStore::open_dir(&config.data_dir)?;
    let (lease_log, recovered) = LeaseLog::open(
        &config.data_dir,
        config.leases.durability.store(),
        config.leases.segment_bytes,
    )?;
    let clock = Clock::system();
    let mut registry = Registry::new();
    registry.set_budget_bounds(BudgetBounds {
        idle_ms: Some(config.budgets.idle_ms),
        max_open: Some(config.budgets.max_open_per_workspace),
    });
    // Replicas: keys, registrations and the audit log are the deployment's (a mirror of the
    // shared feed): seed, adopt or catch up before anything is read from the store.
    let identity = match &config.coordination.redis_url {
        Some(url) => {
            let timeout = Duration::from_millis(config.coordination.identity_timeout_ms());
            let topology = config.coordination.topology();
            let redis = turnstile_coord::IdentityStore::new(url, topology, timeout)
                .map_err(ServerError::Coordination)?;
            let joined =
                crate::identity::join::join(&mut store, &redis, config.demo, clock.now_ms())
                    .await?;
            Some((redis, joined))
        }
        None => None,
    };
    bootstrap::replay(&store, &mut registry)?;
    let bootstrap_keys = match &identity {
        Some((_, joined)) => joined.bootstrap.clone(),
        None => bootstrap::first_start(&mut store, &mut registry, config.demo, clock.now_ms())?,
    };
    // What the previous process charged and granted counts again before anything is answered,
    // and its lanes' pauses, open breakers and spent rate buckets hold again (the leases are
    // reinstated into the driver below, after the buckets are drained).
    // A clean stop left its bucket levels (`crate::checkpoint`): used once at most.
    recover::restore_spend(&recovered.spend, &mut registry, clock.now_ms())?;
    let found = checkpoint::read(&config.data_dir);
    let had_checkpoint = !matches!(found, Ok(None));
    let lane_state = recover::restore_lane_state(&recovered, found, &mut registry, clock.now_ms());
    let last_grant = LastGrant::new(recovered.last_grant_at_ms);
    let keys = Arc::new(KeyRing::from_stored(&store.keys()?));

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
    // first admission; then the background task probes and renews.
    let coord = match config.coordination.coord()? {
        Some(coord_config) => {
            let coord = Coordinator::new(coord_config).map_err(ServerError::Coordination)?;
            crate::shared::adopt_reinstated(&coord, &registry, &recovered.leases);
            coord.tick(clock.now_ms(), false).await;
            let task_clock = clock;
            tokio::spawn(coord.clone().run(move || task_clock.now_ms()));
            Some(coord)
        }
        None => None,
    };
    // Replicas: breaker transitions and pauses are shared through the feed; the driver starts
    // journaling before the mirror exists, so they wait in a channel the mirror reads.
    let (shared_audit, audit_records) = match &identity {
        Some(_) => {
            let (audit, records) = crate::journal::SharedAudit::channel();
            (audit, Some(records))
        }
        None => (crate::journal::SharedAudit::default(), None),
    };
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
    let joining = identity.as_ref().map(|(_, joined)| joined.how.clone());
    let mirror = match identity {
        Some((redis, joined)) => {
            let mirror = crate::identity::Mirror::new(
                redis,
                joined.cursor,
                (store.clone(), keys.clone(), driver_handle.clone(), clock),
            )
            .map_err(ServerError::Coordination)?;
            let every = Duration::from_millis(config.coordination.follow_every_ms);
            tokio::spawn(mirror.clone().follow(every));
            if let Some(records) = audit_records {
                tokio::spawn(mirror.clone().share_audit_from(records));
            }
            Some(mirror)
        }
        None => None,
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
    // Replicas: the shared limits, installed once; proxied calls take the same shared step as
    // `POST /v1/admissions`.
    let shared: turnstile_shell::SharedHook = coord.as_ref().map(|coord| {
        Arc::new(crate::shared::CoordLimits {
            clock,
            coord: coord.clone(),
        }) as Arc<dyn turnstile_shell::SharedLimits>
    });
    if let Some(shared) = &shared {
        proxy = proxy.with_shared(shared.clone());
    }
    let proxy = Arc::new(proxy);
    let ready = Arc::new(AtomicBool::new(false));
    let key_slots = Slots::new(config.http.max_requests_per_key);
    let pending = Slots::new(config.admission.max_pending_per_key);
    // The deployment mode, chosen once: handlers call these without asking which it is.
    let (identity_store, books): (
        Arc<dyn crate::deployment::IdentityStore>,
        Arc<dyn crate::deployment::SharedBooks>,
    ) = (
        match &mirror {
            Some(mirror) => mirror.clone(),
            None => Arc::new(crate::deployment::LocalIdentity {
                store: store.clone(),
                keys: keys.clone(),
                driver: driver_handle.clone(),
            }),
        },
        match &coord {
            Some(coord) => Arc::new(crate::shared::CoordLimits {
                clock,
                coord: coord.clone(),
            }),
            None => Arc::new(crate::deployment::SingleNode),
        },
    );
    let state = AppState::new(AppParts {
        key_slots,
        pending,
        driver: driver_handle.clone(),
        store,
        keys,
        metrics: metrics.clone(),
        lease_metrics,
        clock,
        config: config.clone(),
        ready: ready.clone(),
        telemetry,
        feed,
        proxy,
        shared,
        coord,
        mirror: mirror.clone(),
        identity: identity_store,
        books,
    });
    // Restored (or not usable): gone before anything is served, so a later crash never finds
    // these levels (see `crate::checkpoint`).
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
            mirror,
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
        metrics,
        restored: Restored {
            leases: reinstated,
            lanes: lane_state,
        },
        _data_lock: data_lock,
    })
}

struct AcceptParts {
    /// Replicas: the follower of the shared identity feed (stopped at shutdown).
    mirror: Option<Arc<crate::identity::Mirror>>,
    driver: DriverHandle,
    driver_task: JoinHandle<()>,
    store_thread: std::thread::JoinHandle<()>,
    ready: Arc<AtomicBool>,
    /// The lease log's latest grant, for the bucket checkpoint.
    last_grant: LastGrant,
}

async fn accept_loop(
    listener: TcpListener,
    state: AppState,
    mut shutdown: oneshot::Receiver<()>,
    parts: AcceptParts,
) -> Stopped {
    let config = state.config.clone();
    let metrics = state.metrics.clone();
    let app = router(state.clone(), false);
    let operators_app = router(state, true);
    let graceful = GracefulShutdown::new();
    let general = Arc::new(Semaphore::new(config.http.max_connections));
    let reserved = Arc::new(Semaphore::new(config.http.reserved_connections));
    let addresses = Slots::new(config.http.max_connections_per_address);
    let header_timeout = Duration::from_millis(config.http.header_read_timeout_ms);
    let write_timeout = Duration::from_millis(config.http.response_write_timeout_ms);
    let idle_timeout = Duration::from_millis(config.http.keep_alive_idle_ms);

    loop {
        let taken = match general.clone().try_acquire_owned() {
            Ok(permit) => Some((permit, false)),
            Err(_) => reserved.clone().try_acquire_owned().ok().map(|p| (p, true)),
        };
        let (permit, operators_only) = match taken {
            Some(taken) => taken,
            None => tokio::select! {
                permit = general.clone().acquire_owned() => match permit {
                    Ok(permit) => (permit, false),
                    Err(_) => break,
                },
                permit = reserved.clone().acquire_owned() => match permit {
                    Ok(permit) => (permit, true),
                    Err(_) => break,
                },
                _ = &mut shutdown => break,
            },
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => {
                    // Out of file descriptors and similar: back off briefly, keep serving.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Some(address_slot) = addresses.take(peer.ip()) else {
            metrics.cut(Cut::AddressCap);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        metrics.connections_total.fetch_add(1, Ordering::Relaxed);
        metrics.connections_open.fetch_add(1, Ordering::Relaxed);
        let service = TowerToHyperService::new(if operators_only {
            operators_app.clone()
        } else {
            app.clone()
        });
        let (io, conn_state) =
            DeadlineIo::new(stream, write_timeout, idle_timeout, metrics.clone());
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(io), service);
        let connection = graceful.watch(connection);
        let metrics = metrics.clone();
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                if error.is_timeout() {
                    metrics.cut(conn_state.header_cut());
                }
            }
            metrics.connections_open.fetch_sub(1, Ordering::Relaxed);
            drop((permit, address_slot));
        });
    }

    parts.ready.store(false, Ordering::Relaxed);
    if let Some(mirror) = &parts.mirror {
        mirror.stop();
    }
    drop(listener);
    let _ = parts.driver.drain().await;
    let grace = Duration::from_millis(config.http.shutdown_grace_ms);
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
    drop((app, operators_app));
    // Drained: no grant follows this reading, so the levels are the last ones.
    let levels = parts.driver.bucket_levels().await;
    parts.driver.stop();
    let _ = parts.driver_task.await;
    drop(parts.driver);
    // Every grant of this process is in the lease log (and in `last_grant`) now.
    let checkpoint = match levels {
        Ok(Some(levels)) => {
            let checkpoint = BucketCheckpoint::new(parts.last_grant.get(), levels);
            let dir = config.data_dir.clone();
            tokio::task::spawn_blocking(move || {
                checkpoint::write(&dir, &checkpoint).map(|()| checkpoint.workspaces.len())
            })
            .await
            .unwrap_or_else(|e| Err(checkpoint_gone(e.to_string())))
        }
        Ok(None) => Err(checkpoint_gone("the driver did not drain".into())),
        Err(e) => Err(checkpoint_gone(e.to_string())),
    };
    // The store thread ends once every handle is gone; wait for its last writes.
    let store_thread = parts.store_thread;
    let _ = tokio::time::timeout(
        grace,
        tokio::task::spawn_blocking(move || store_thread.join()),
    )
    .await;
    Stopped { checkpoint }
}

/// A checkpoint that could not be read from the driver or written.
fn checkpoint_gone(reason: String) -> CheckpointError {
    CheckpointError::Io {
        path: checkpoint::CHECKPOINT_FILE.into(),
        source: std::io::Error::other(reason),
    }
}
