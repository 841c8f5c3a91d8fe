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
//!   can reach a service whose pool hostile clients fill. While every slot of both is taken, the
//!   oldest connection that has sent nothing gives its place up after
//!   `http.full_pool_first_byte_ms` ([`crate::http::fresh`]), so idle connections cannot keep
//!   a waiting `/healthz` in the backlog for the whole header timeout.
//! - **Per-address cap.** A client address holding `http.max_connections_per_address`
//!   connections has further ones closed at accept (`turnstile_http_cuts_total{kind="address-cap"}`).
//! - **Deadlines.** Body, response-write and keep-alive idle deadlines: [`crate::http::conn`],
//!   [`crate::http::body`].
//! - **Body cap.** Each body reader caps what it reads ([`crate::http::body`], the proxy's
//!   `body::read`): 413 while reading, never buffered whole.
//! - **Graceful shutdown.** Readiness flips to 503, the listener closes, the driver cancels
//!   every queued admission (answered 503 `shutting-down`), in-flight requests get up to
//!   `http.shutdown_grace_ms` to finish, then the driver's bucket levels are read (it admits
//!   nothing any more), the driver stops, the bucket checkpoint is written into the data
//!   directory ([`crate::durability::checkpoint`]: the next start restores the levels instead of draining
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

use crate::api::AppState;
use crate::bootstrap::{BootstrapError, BootstrapKeys};
use crate::config::ConfigError;
use crate::durability::checkpoint::{self, BucketCheckpoint, CheckpointError};
use crate::http::conn::DeadlineIo;
use crate::http::fresh::Fresh;
use crate::http::panics::CatchPanic;
use crate::metrics::Cut;
use turnstile_shell::DriverHandle;

use crate::durability::data_lock::{DataDirLock, DataLockError};
use crate::durability::journal::LastGrant;
use crate::durability::recover::{self, RecoverError};
use crate::http::routes::router;
use crate::http::slots::Slots;

/// A failure to start or run the service.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The data directory's store cannot be opened.
    #[error("cannot open the data directory: {0}")]
    Store(#[from] turnstile_store::ServiceStoreError),
    /// The first start's set-up or the profile replay failed.
    #[error("start-up failed: {0}")]
    Bootstrap(#[from] BootstrapError),
    /// A journaled lease or spend cannot be put back.
    #[error("start-up failed: {0}")]
    Recover(#[from] RecoverError),
    /// The lease log cannot be opened.
    #[error("cannot open the lease log: {0}")]
    LeaseLog(#[from] turnstile_store::LeaseLogError),
    /// The data directory is held by another process, or cannot be locked.
    #[error(transparent)]
    DataLock(#[from] DataLockError),
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
    /// The store thread cannot be started.
    #[error("cannot start the store thread: {0}")]
    Thread(std::io::Error),
    /// The server task failed (panicked or was cancelled).
    #[error("the server task failed: {0}")]
    Join(String),
    /// The proxy's configuration cannot be used.
    #[error("proxy configuration: {0}")]
    Proxy(#[from] turnstile_proxy::ProxySetupError),
    /// Coordination through Redis cannot be set up.
    #[error("coordination: {0}")]
    Coordination(turnstile_coord::CoordError),
    /// The replica cannot join the shared keys and profiles.
    #[error("shared keys and profiles: {0}")]
    Identity(#[from] crate::replicas::identity::join::JoinError),
    /// The bucket checkpoint cannot be read.
    #[error("start-up failed: {0}")]
    Checkpoint(#[from] CheckpointError),
}

/// A started service. Dropping it without [`RunningServer::shutdown`] leaves it running until
/// the runtime ends.
pub struct RunningServer {
    pub(crate) addr: SocketAddr,
    pub(crate) bootstrap: Option<BootstrapKeys>,
    pub(crate) joining: Option<crate::replicas::identity::join::Joining>,
    pub(crate) shutdown: Option<oneshot::Sender<()>>,
    pub(crate) task: JoinHandle<Stopped>,
    pub(crate) restored: Restored,
    /// Held while the server runs: no second process serves the same data directory.
    pub(crate) _data_lock: DataDirLock,
}

/// What this start put back from the previous process (counts only, never IDs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// Held leases reinstated.
    pub leases: usize,
    /// Pauses, breakers and rate buckets.
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
    pub fn joining(&self) -> Option<&crate::replicas::identity::join::Joining> {
        self.joining.as_ref()
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

    /// Stops gracefully once `signal` fires, and waits until everything is flushed.
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

pub(crate) struct AcceptParts {
    /// Replicas: the follower of the shared identity feed (stopped at shutdown).
    pub(crate) mirror: Option<Arc<crate::replicas::identity::Mirror>>,
    pub(crate) driver: DriverHandle,
    pub(crate) driver_task: JoinHandle<()>,
    pub(crate) store_thread: std::thread::JoinHandle<()>,
    pub(crate) ready: Arc<AtomicBool>,
    /// The lease log's latest grant, for the bucket checkpoint.
    pub(crate) last_grant: LastGrant,
}

pub(crate) async fn accept_loop(
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
    let fresh = Fresh::new(Duration::from_millis(config.http.full_pool_first_byte_ms));
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
            // Every slot is taken: a freed one first, else the oldest connection that has sent
            // nothing gives its place up once due (`crate::http::fresh`).
            None => tokio::select! {
                biased;
                _ = &mut shutdown => break,
                permit = general.clone().acquire_owned() => match permit {
                    Ok(permit) => (permit, false),
                    Err(_) => break,
                },
                permit = reserved.clone().acquire_owned() => match permit {
                    Ok(permit) => (permit, true),
                    Err(_) => break,
                },
                () = fresh.evict_when_due() => continue,
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
        let service = TowerToHyperService::new(CatchPanic::new(
            if operators_only {
                operators_app.clone()
            } else {
                app.clone()
            },
            metrics.clone(),
        ));
        let (arrival, fresh_guard) = fresh.arrive();
        let (io, conn_state) = DeadlineIo::new(
            stream,
            write_timeout,
            idle_timeout,
            metrics.clone(),
            Some(arrival),
        );
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
            // The slot first: an eviction under way ends once its slot is free.
            drop((permit, address_slot, fresh_guard));
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
