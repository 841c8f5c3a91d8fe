//! Natural batching of a replica's acquires and releases: per workspace, while one call to
//! Redis is in flight, the operations that arrive queue; when it returns, everything queued
//! (up to [`MAX_BATCH`]) goes to Redis as one `FCALL ts_batch_v4`. Nothing in flight: an
//! operation is sent at once, alone. No timer, no added latency at low load.
//!
//! Each workspace has one task (`drive`) that owns its queue (an unbounded channel, bounded
//! in practice by the callers: each caller has one operation queued at a time) and sends one
//! batch at a time, through a connection of its own ([`Direct`]: one write and one read per
//! batch in the task itself; measured in docs/performance.md, session 9) for the first
//! [`MAX_DIRECT`] workspaces, else (and for a TLS URL) through the replica's multiplexed
//! connection.
//!
//! # Invariants
//!
//! - One batch holds operations of one workspace only (one hash tag: one Redis Cluster slot).
//! - Operations run in Redis in arrival order (the channel's order), each all or nothing on its
//!   own, and each caller gets its own operation's answer.
//! - At most one call per workspace is in flight; a batch holds at most [`MAX_BATCH`]
//!   operations.
//! - Every call is bounded by the command timeout from its send (as a single call was). When
//!   a batch fails or times out, every operation queued behind it is answered with the failure
//!   at once (never sent), and the caller decides it by the degraded share as a failed single
//!   call is: when Redis hangs, no operation waits longer than one timeout (the call in flight
//!   fails, and with it everything queued); an operation waits longer only when the call
//!   ahead of it was answered (slowly) and its own then hangs: at most that answer's time plus
//!   one timeout.
//! - An operation is sent at most once (a failed batch is never re-sent; the library-missing
//!   retry re-sends only a call that did not run).
//! - The map of workspaces holds one sender per workspace this replica has coordinated
//!   (workspaces are created by an administrator, not by clients); its tasks end when the
//!   [`Batcher`] is dropped. At most [`MAX_DIRECT`] connections of their own per replica.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use redis::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::direct::Direct;
use crate::error::CoordError;
use crate::protocol::{batch_command, Op};
use crate::store::{batch_answers, is_missing_function_reply, RedisStore};

/// The most operations one `ts_batch_v4` call carries.
pub const MAX_BATCH: usize = 64;

/// The most workspace tasks with a connection of their own ([`Direct`]); the tasks of further
/// workspaces send through the replica's multiplexed connection (bounded connections to
/// Redis per replica).
pub const MAX_DIRECT: usize = 64;

/// Why an operation got no answer from Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub error: CoordError,
    /// The first operation of the failed call (the one that counts the failure, so the error
    /// counter counts calls, not operations).
    pub first: bool,
}

/// An operation's answer: its place in the batch's answer, or why there is none.
pub type Reply = Result<Value, Failure>;

struct Pending {
    op: Op,
    reply: oneshot::Sender<Reply>,
}

/// The per-workspace queues of one replica.
pub struct Batcher {
    store: RedisStore,
    /// Each workspace task's own connection to this URL ([`Direct`]; the first
    /// [`MAX_DIRECT`] workspaces, TCP and unix sockets only), instead of the shared multiplexed
    /// connection.
    direct: Option<String>,
    max: usize,
    lanes: Mutex<HashMap<String, mpsc::UnboundedSender<Pending>>>,
    /// Bumped when any call to Redis fails: every task's own connection is opened again
    /// before its next batch (Redis may have restarted while the connection sat idle).
    epoch: Arc<AtomicU64>,
}

impl Batcher {
    /// Batches of at most `max` operations (at least one) through `store`.
    pub fn new(store: RedisStore, max: usize, direct: Option<String>) -> Self {
        Batcher {
            store,
            direct,
            max: max.max(1),
            lanes: Mutex::new(HashMap::new()),
            epoch: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A call to Redis failed (any call of this replica): the tasks' own connections are not
    /// trusted any more; each is opened again before its next batch.
    pub fn invalidate(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<Pending>>> {
        self.lanes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `op` (every key under `slot`, the workspace's `ts:{W}:` prefix) in the workspace's
    /// next batch and answers its own answer. Must be called inside a tokio runtime (the first
    /// call for a workspace spawns its task).
    pub async fn call(&self, slot: &str, op: Op) -> Reply {
        let (reply, answer) = oneshot::channel();
        let pending = Pending { op, reply };
        {
            let mut lanes = self.lock();
            let sender = match lanes.get(slot) {
                Some(sender) => sender,
                None => {
                    let (sender, queue) = mpsc::unbounded_channel();
                    let timeout_ms =
                        u64::try_from(self.store.timeout().as_millis()).unwrap_or(u64::MAX);
                    let direct = self.direct.as_ref().filter(|_| lanes.len() < MAX_DIRECT);
                    let link = match direct {
                        Some(url) => match Direct::new(url, timeout_ms) {
                            Ok(direct) => Link::Direct {
                                direct: Box::new(direct),
                                store: self.store.clone(),
                                epoch: self.epoch.clone(),
                                seen: self.epoch.load(Ordering::Relaxed),
                            },
                            Err(_) => Link::Shared(self.store.clone()),
                        },
                        None => Link::Shared(self.store.clone()),
                    };
                    tokio::spawn(drive(link, queue, self.max));
                    lanes.entry(slot.to_owned()).or_insert(sender)
                }
            };
            if sender.send(pending).is_err() {
                // The workspace's task is gone (its runtime shut down): start over next time.
                lanes.remove(slot);
                return Err(Failure {
                    error: CoordError::Redis("the batch task ended".into()),
                    first: true,
                });
            }
        }
        answer.await.unwrap_or_else(|_| {
            Err(Failure {
                error: CoordError::Redis("the batch task ended".into()),
                first: true,
            })
        })
    }
}

/// How a workspace's task reaches Redis.
enum Link {
    /// The replica's multiplexed connection (redis-rs `ConnectionManager`).
    Shared(RedisStore),
    /// The task's own connection; the store loads the library when a call finds it missing.
    /// `seen`: the [`Batcher::invalidate`] epoch the connection was opened in.
    Direct {
        direct: Box<Direct>,
        store: RedisStore,
        epoch: Arc<AtomicU64>,
        seen: u64,
    },
}

impl Link {
    fn timeout(&self) -> std::time::Duration {
        match self {
            Link::Shared(store) | Link::Direct { store, .. } => store.timeout(),
        }
    }

    async fn batch(
        &mut self,
        ops: &[Pending],
        deadline: Instant,
    ) -> Result<Vec<Value>, CoordError> {
        match self {
            Link::Shared(store) => store.batch(ops.iter().map(|p| &p.op), deadline).await,
            Link::Direct {
                direct,
                store,
                epoch,
                seen,
            } => {
                let now = epoch.load(Ordering::Relaxed);
                if now != *seen {
                    direct.disconnect();
                    *seen = now;
                }
                let mut cmd = redis::cmd("FCALL");
                batch_command(&mut cmd, ops.iter().map(|p| &p.op));
                let mut value = direct.call(&cmd, deadline).await?;
                if is_missing_function_reply(&value) {
                    // Redis lost its functions (restarted empty): load them, send again (the
                    // call did not run).
                    tokio::time::timeout_at(deadline, store.load_library())
                        .await
                        .map_err(|_| CoordError::Timeout(direct.timeout_ms()))??;
                    value = direct.call(&cmd, deadline).await?;
                }
                batch_answers(value, ops.len())
            }
        }
    }
}

/// A workspace's task: takes the first queued operation (waiting for one), everything else
/// queued up to `max`, sends them as one batch and answers each; repeats.
async fn drive(mut link: Link, mut queue: mpsc::UnboundedReceiver<Pending>, max: usize) {
    let mut batch: Vec<Pending> = Vec::with_capacity(max);
    while let Some(first) = queue.recv().await {
        batch.push(first);
        while batch.len() < max {
            match queue.try_recv() {
                Ok(pending) => batch.push(pending),
                Err(_) => break,
            }
        }
        // The command timeout, counted from the send (as for a single call): time spent queued
        // behind the call in flight is not Redis's (a replica stalled by its host would
        // otherwise time out every queued operation at once).
        let deadline = Instant::now() + link.timeout();
        match link.batch(&batch, deadline).await {
            Ok(answers) => {
                for (pending, answer) in batch.drain(..).zip(answers) {
                    // A caller that went away (cancelled request) needs no answer.
                    let _ = pending.reply.send(Ok(answer));
                }
            }
            Err(error) => {
                let mut first = true;
                for pending in batch.drain(..) {
                    let _ = pending.reply.send(Err(Failure {
                        error: error.clone(),
                        first,
                    }));
                    first = false;
                }
                // Queued behind a failed call: not sent (the replica is degraded now).
                while let Ok(pending) = queue.try_recv() {
                    let _ = pending.reply.send(Err(Failure {
                        error: error.clone(),
                        first: false,
                    }));
                }
            }
        }
    }
}
