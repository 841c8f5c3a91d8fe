//! The store thread: one OS thread owns the SQLite connection and applies operations in the
//! order they were sent.
//!
//! The driver sends profile registrations and breaker transitions here in the order it applied
//! them to the registry, so the durable registration order is the registry's order, and the
//! driver never blocks on disk. A registration is acknowledged to its client only after its
//! transaction committed (the completion callback runs on this thread).
//!
//! Lease events do not come here: the driver's journal appends them to the lease log itself
//! (`journal.rs`).
//!
//! Invariant: operations are applied strictly in send order; the thread ends when every
//! handle is dropped.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;
use turnstile_store::{
    AuditKind, AuditRecord, ServiceStore, ServiceStoreError, StoredKey, StoredProfile,
};

use crate::http::error::ApiError;
use crate::metrics::Metrics;

/// Runs on the store thread once a registration has been written (or failed to be).
pub type Completion = Box<dyn FnOnce(Result<(), ServiceStoreError>) + Send>;

/// Work run on the store thread ([`StoreOp::With`]).
pub type StoreTask = Box<dyn FnOnce(&mut dyn ServiceStore) + Send>;

/// One operation for the store thread.
pub enum StoreOp {
    InsertKey {
        key: StoredKey,
        reply: oneshot::Sender<Result<(), ServiceStoreError>>,
    },
    AppendProfile {
        profile: StoredProfile,
        change: Option<AuditRecord>,
        done: Completion,
    },
    Keys {
        reply: oneshot::Sender<Result<Vec<StoredKey>, ServiceStoreError>>,
    },
    RevokeKey {
        workspace: String,
        hash: String,
        record: AuditRecord,
        reply: oneshot::Sender<Result<bool, ServiceStoreError>>,
    },
    AppendAudit(Vec<AuditRecord>),
    /// Every registration, oldest first (the console's revision view).
    Profiles {
        reply: oneshot::Sender<Result<Vec<StoredProfile>, ServiceStoreError>>,
    },
    Audit {
        workspace: String,
        kind: AuditKind,
        limit: usize,
        reply: oneshot::Sender<Result<Vec<AuditRecord>, ServiceStoreError>>,
    },
    /// Runs on the store, in order with the other operations (replicas: applying the shared
    /// feed to the mirror, reading the mirror to seed the feed; `crate::replicas::identity`).
    With(StoreTask),
}

/// Sends `result` to whoever asked; returns whether it is a failure (for the error count).
fn answer<T>(
    reply: oneshot::Sender<Result<T, ServiceStoreError>>,
    result: Result<T, ServiceStoreError>,
) -> bool {
    let failed = result.is_err();
    let _ = reply.send(result);
    failed
}

/// A handle to the store thread.
#[derive(Clone)]
pub struct StoreHandle {
    tx: mpsc::Sender<StoreOp>,
}

impl StoreHandle {
    /// Moves `store` onto its own thread.
    pub fn spawn(
        mut store: Box<dyn ServiceStore>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<(Self, JoinHandle<()>)> {
        let (tx, rx) = mpsc::channel::<StoreOp>();
        let thread = std::thread::Builder::new()
            .name("turnstile-store".into())
            .spawn(move || {
                while let Ok(op) = rx.recv() {
                    let failed = match op {
                        StoreOp::InsertKey { key, reply } => answer(reply, store.insert_key(&key)),
                        StoreOp::AppendProfile {
                            profile,
                            change,
                            done,
                        } => {
                            let result = store.append_profile(&profile, change.as_ref());
                            let failed = result.is_err();
                            done(result);
                            failed
                        }
                        StoreOp::Keys { reply } => answer(reply, store.keys()),
                        StoreOp::RevokeKey {
                            workspace,
                            hash,
                            record,
                            reply,
                        } => answer(reply, store.revoke_key(&workspace, &hash, &record)),
                        StoreOp::AppendAudit(records) => store.append_audit(&records).is_err(),
                        StoreOp::Profiles { reply } => answer(reply, store.profiles()),
                        StoreOp::Audit {
                            workspace,
                            kind,
                            limit,
                            reply,
                        } => {
                            let _ = reply.send(store.audit(&workspace, kind, limit));
                            false
                        }
                        StoreOp::With(operation) => {
                            operation(store.as_mut());
                            false
                        }
                    };
                    if failed {
                        metrics.store_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(target: "turnstile::store", "store operation failed");
                    }
                }
            })?;
        Ok((StoreHandle { tx }, thread))
    }

    /// Queues an operation. Returns `false` when the store thread is gone.
    pub fn send(&self, op: StoreOp) -> bool {
        self.tx.send(op).is_ok()
    }

    /// Sends the operation built around a fresh reply channel and awaits the store's answer;
    /// a store that is gone or failed is [`ApiError::Storage`].
    async fn ask<T>(
        &self,
        op: impl FnOnce(oneshot::Sender<Result<T, ServiceStoreError>>) -> StoreOp,
    ) -> Result<T, ApiError> {
        let (reply, rx) = oneshot::channel();
        if !self.send(op(reply)) {
            return Err(ApiError::Storage);
        }
        match rx.await {
            Ok(Ok(value)) => Ok(value),
            _ => Err(ApiError::Storage),
        }
    }

    /// Runs `operation` on the store thread, in order with every other operation, and answers
    /// its result (a store thread that is gone is [`ApiError::Storage`]).
    pub async fn with<T: Send + 'static>(
        &self,
        operation: impl FnOnce(&mut dyn ServiceStore) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (reply, rx) = oneshot::channel();
        let op = StoreOp::With(Box::new(move |store| {
            let _ = reply.send(operation(store));
        }));
        if !self.send(op) {
            return Err(ApiError::Storage);
        }
        rx.await.map_err(|_| ApiError::Storage)
    }

    /// Stores a key hash.
    pub async fn insert_key(&self, key: StoredKey) -> Result<(), ApiError> {
        self.ask(|reply| StoreOp::InsertKey { key, reply }).await
    }

    /// Every stored key (hashes only).
    pub async fn keys(&self) -> Result<Vec<StoredKey>, ApiError> {
        self.ask(|reply| StoreOp::Keys { reply }).await
    }

    /// Deletes a principal key of `workspace` and records the revocation (one transaction).
    /// `false` when no such key is stored.
    pub async fn revoke_key(
        &self,
        workspace: &str,
        hash: &str,
        record: AuditRecord,
    ) -> Result<bool, ApiError> {
        self.ask(|reply| StoreOp::RevokeKey {
            workspace: workspace.to_owned(),
            hash: hash.to_owned(),
            record,
            reply,
        })
        .await
    }

    /// Every registration, oldest first.
    pub async fn profiles(&self) -> Result<Vec<StoredProfile>, ApiError> {
        self.ask(|reply| StoreOp::Profiles { reply }).await
    }

    /// Reads the last `limit` audit records of one kind.
    pub async fn audit(
        &self,
        workspace: &str,
        kind: AuditKind,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, ApiError> {
        self.ask(|reply| StoreOp::Audit {
            workspace: workspace.to_owned(),
            kind,
            limit,
            reply,
        })
        .await
    }
}
