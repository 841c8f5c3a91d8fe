//! Natural batching of a replica's acquires and releases: per workspace, while one call to
//! Redis is in flight, the operations that arrive queue; when it returns, everything queued
//! (up to [`MAX_BATCH`]) goes to Redis as one `FCALL ts_batch_v5` (a lone operation as its
//! single call, `ts_acquire_v5` / `ts_release_v5`: cheaper for Redis). Nothing in flight and
//! nothing queued: the caller sends its operation itself, alone, in its own task (no task hop
//! at low load: docs/performance.md, session 10). No timer, no added latency at low load.
//!
//! Each workspace has one [`Lane`]: its link to Redis (the connection a call borrows while it
//! is in flight), its queue, and one task (`drive`) that sends what queued, one batch at a
//! time. The link is a connection of its own ([`Direct`]: one write and one read per call, in
//! the task that borrowed it; measured in docs/performance.md, session 9) for the first
//! [`MAX_DIRECT`] workspaces, else (and for a TLS URL) the replica's multiplexed connection.
//!
//! # Invariants
//!
//! - One batch holds operations of one workspace only (one hash tag: one Redis Cluster slot).
//! - Operations run in Redis in arrival order: a caller sends its operation itself only when
//!   the link is free *and* nothing is queued (checked and taken under the lane's lock);
//!   otherwise it queues, and the task sends the queue in order. Each operation is all or
//!   nothing on its own, and each caller gets its own operation's answer.
//! - At most one call per workspace is in flight: a call holds the lane's only link (taken
//!   out of the lane under its lock, put back when the answer is read); a batch holds at most
//!   [`MAX_BATCH`] operations.
//! - Every call is bounded by the command timeout from its send (as a single call was). When
//!   a call fails or times out, every operation queued behind it is answered with the failure
//!   at once (never sent), and the caller decides it by the degraded share as a failed single
//!   call is: when Redis hangs, no operation waits longer than one timeout (the call in flight
//!   fails, and with it everything queued); an operation waits longer only when the call
//!   ahead of it was answered (slowly), or abandoned by its caller before its answer, and its
//!   own then hangs: at most that answer's (or abandonment's) time plus one timeout.
//! - An operation is sent at most once (a failed batch is never re-sent; the library-missing
//!   retry re-sends only a call that did not run).
//! - A call dropped while in flight (its caller's request was cancelled, or the task's runtime
//!   shut down) puts the link back with its own connection closed (its state is unknown: an
//!   answer may still come), so the next call opens a new one; nothing queued is lost: the
//!   task is woken if anything waits, and a task that ended is started again by the next call.
//! - Whoever puts the link back with operations queued wakes the task (one stored permit: no
//!   wake-up is lost between the task's look at the queue and its wait).
//! - The map of workspaces holds one lane per workspace this replica has coordinated
//!   (workspaces are created by an administrator, not by clients); its tasks end when the
//!   [`Batcher`] is dropped. At most [`MAX_DIRECT`] connections of their own per replica.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use redis::Value;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::direct::{redirect_of, Direct, Redirect};
use crate::error::CoordError;
use crate::link::{Topology, MAX_REDIRECTS};
use crate::protocol::{is_missing_function_reply, ops_answers};
use crate::protocol::{write_ops, Op};
use crate::store::RedisStore;

/// The most operations one `ts_batch_v5` call carries.
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

/// One workspace's link to Redis, its queue and its task's wake-up.
struct Lane {
    state: Mutex<LaneState>,
    /// Wakes the task: something is queued and the link is back.
    wake: Notify,
    /// The [`Batcher`] was dropped: the task ends.
    closed: AtomicBool,
}

struct LaneState {
    /// The link to Redis; `None` while a call is in flight (borrowed by a caller or the task).
    link: Option<Link>,
    /// Operations waiting for the link, in arrival order.
    queue: VecDeque<Pending>,
    /// Whether the lane's task runs (it clears this when it ends, e.g. with its runtime).
    task: bool,
}

impl Lane {
    fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The per-workspace lanes (link, queue, task) of one replica.
pub struct Batcher {
    store: RedisStore,
    /// Each lane's own connection to this URL ([`Direct`]; the first [`MAX_DIRECT`]
    /// workspaces, TCP and unix sockets only), instead of the shared multiplexed connection.
    direct: Option<String>,
    max: usize,
    lanes: Mutex<HashMap<String, Arc<Lane>, foldhash::fast::RandomState>>,
    /// Bumped when any call to Redis fails: every lane's own connection is opened again
    /// before its next call (Redis may have restarted while the connection sat idle).
    epoch: Arc<AtomicU64>,
}

impl Batcher {
    /// Batches of at most `max` operations (at least one) through `store`.
    pub fn new(store: RedisStore, max: usize, direct: Option<String>) -> Self {
        Batcher {
            store,
            direct,
            max: max.max(1),
            lanes: Mutex::new(HashMap::default()),
            epoch: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A call to Redis failed (any call of this replica): the lanes' own connections are not
    /// trusted any more; each is opened again before its next call.
    pub fn invalidate(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Lane>, foldhash::fast::RandomState>> {
        self.lanes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The lane of `slot`, made (with its link and task) on first use.
    fn lane(&self, slot: &str) -> Arc<Lane> {
        let mut lanes = self.lock();
        if let Some(lane) = lanes.get(slot) {
            return lane.clone();
        }
        let timeout_ms = u64::try_from(self.store.timeout().as_millis()).unwrap_or(u64::MAX);
        let direct = self.direct.as_ref().filter(|_| lanes.len() < MAX_DIRECT);
        let link = match direct {
            Some(url) => match Direct::new(url, timeout_ms) {
                Ok(direct) => Link::Direct {
                    direct: Box::new(direct),
                    packed: Vec::new(),
                    store: self.store.clone(),
                    epoch: self.epoch.clone(),
                    seen: self.epoch.load(Ordering::Relaxed),
                    cluster: (self.store.topology() == Topology::Cluster)
                        .then(|| (slot.to_owned(), false)),
                },
                Err(_) => Link::Shared(self.store.clone()),
            },
            None => Link::Shared(self.store.clone()),
        };
        let lane = Arc::new(Lane {
            state: Mutex::new(LaneState {
                link: Some(link),
                queue: VecDeque::new(),
                task: false,
            }),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
        });
        lanes.insert(slot.to_owned(), lane.clone());
        lane
    }

    /// Runs `op` (every key under `slot`, the workspace's `ts:{W}:` prefix) in the workspace's
    /// next call and answers its own answer: sent at once by this caller when nothing is in
    /// flight or queued, else queued for the workspace's next batch. Must be called inside a
    /// tokio runtime (the lane's task is spawned on first need).
    pub async fn call(&self, slot: &str, op: Op) -> Reply {
        let lane = self.lane(slot);
        let route = {
            let mut state = lane.lock();
            match state.link.take() {
                Some(link) if state.queue.is_empty() => Route::Send(link, op),
                link => {
                    state.link = link;
                    let (reply, answer) = oneshot::channel();
                    state.queue.push_back(Pending { op, reply });
                    if !state.task {
                        state.task = true;
                        tokio::spawn(drive(lane.clone(), self.max));
                    }
                    Route::Queued(answer)
                }
            }
        };
        match route {
            Route::Send(link, op) => {
                let mut borrowed = Borrowed {
                    lane: &lane,
                    link: Some(link),
                };
                let deadline = Instant::now() + self.store.timeout();
                let result = match borrowed.link.as_mut() {
                    Some(link) => link.batch(std::iter::once(&op), deadline).await,
                    None => Err(CoordError::Redis("the link was given back".into())),
                };
                let result = result.and_then(|mut answers| {
                    answers
                        .pop()
                        .ok_or_else(|| CoordError::Protocol("an empty batch answer".into()))
                });
                borrowed.give_back(result.as_ref().err());
                result.map_err(|error| Failure { error, first: true })
            }
            Route::Queued(answer) => answer.await.unwrap_or_else(|_| {
                Err(Failure {
                    error: CoordError::Redis("the batch task ended".into()),
                    first: true,
                })
            }),
        }
    }
}

/// Where a caller's operation goes.
enum Route {
    /// The link was free and nothing queued: the caller sends it itself.
    Send(Link, Op),
    /// Queued for the lane's task; the answer comes here.
    Queued(oneshot::Receiver<Reply>),
}

impl Drop for Batcher {
    fn drop(&mut self) {
        for lane in self.lock().values() {
            lane.closed.store(true, Ordering::Relaxed);
            lane.wake.notify_one();
        }
    }
}

/// The lane's link while one call is in flight. Put back by [`Borrowed::give_back`] when the
/// answer is read, or, when the call is dropped before that, by `Drop` with its own
/// connection closed (its state is unknown: an answer may still come).
struct Borrowed<'a> {
    lane: &'a Lane,
    link: Option<Link>,
}

impl Borrowed<'_> {
    /// Puts the link back after a complete call; `failed`: the call failed, and every
    /// operation queued behind it is answered with that failure (never sent). Wakes the task
    /// when operations are left queued.
    fn give_back(mut self, failed: Option<&CoordError>) {
        let link = self.link.take();
        put_back(self.lane, link, failed);
    }
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        if let Some(mut link) = self.link.take() {
            link.disconnect();
            put_back(self.lane, Some(link), None);
        }
    }
}

fn put_back(lane: &Lane, link: Option<Link>, failed: Option<&CoordError>) {
    let mut state = lane.lock();
    if link.is_some() {
        state.link = link;
    }
    if let Some(error) = failed {
        // Queued behind a failed call: not sent (the replica is degraded now).
        while let Some(pending) = state.queue.pop_front() {
            let _ = pending.reply.send(Err(Failure {
                error: error.clone(),
                first: false,
            }));
        }
    }
    if !state.queue.is_empty() {
        lane.wake.notify_one();
    }
}

/// How a workspace's calls reach Redis (the lane's link, borrowed by the call in flight).
enum Link {
    /// The replica's multiplexed connection (redis-rs `ConnectionManager`).
    Shared(RedisStore),
    /// The lane's own connection; the store loads the library when a call finds it missing.
    /// `seen`: the [`Batcher::invalidate`] epoch the connection was opened in; `packed`: the
    /// call being sent, in RESP (the buffer is kept from call to call).
    Direct {
        direct: Box<Direct>,
        packed: Vec<u8>,
        store: RedisStore,
        epoch: Arc<AtomicU64>,
        seen: u64,
        /// On a cluster: a key of the workspace (its slot), and whether the connection points
        /// at the slot's primary as last known (asked of the slot map before the first call
        /// and again after any failed call of the replica, e.g. a failover).
        cluster: Option<(String, bool)>,
    },
}

impl Link {
    fn timeout(&self) -> std::time::Duration {
        match self {
            Link::Shared(store) | Link::Direct { store, .. } => store.timeout(),
        }
    }

    /// Drops the link's own connection (a call on it was abandoned in flight); the shared
    /// connection needs nothing (redis-rs matches answers to requests).
    fn disconnect(&mut self) {
        if let Link::Direct { direct, .. } = self {
            direct.disconnect();
        }
    }

    async fn batch<'a>(
        &mut self,
        ops: impl Iterator<Item = &'a Op> + Clone,
        deadline: Instant,
    ) -> Result<Vec<Value>, CoordError> {
        match self {
            Link::Shared(store) => store.batch(ops, deadline).await,
            Link::Direct {
                direct,
                packed,
                store,
                epoch,
                seen,
                cluster,
            } => {
                let now = epoch.load(Ordering::Relaxed);
                if now != *seen {
                    direct.disconnect();
                    *seen = now;
                    if let Some((_, placed)) = cluster.as_mut() {
                        *placed = false;
                    }
                }
                if let Some((key, placed)) = cluster.as_mut().filter(|(_, placed)| !placed) {
                    match tokio::time::timeout_at(deadline, store.owner_of(key)).await {
                        Ok(Ok(Some((host, port)))) => {
                            direct.follow(&host, port);
                            *placed = true;
                        }
                        // No slot map: the cluster link routes this call.
                        _ => return store.batch(ops, deadline).await,
                    }
                }
                let count = ops.clone().count();
                packed.clear();
                write_ops(packed, ops.clone());
                let mut value = direct.call(packed, deadline).await?;
                let mut redirects = 0;
                // Only a cluster link follows redirects: on a standalone link a cluster's
                // answer is a misconfiguration, and fails like any error reply.
                while let Some(redirect) = redirect_of(&value).filter(|_| cluster.is_some()) {
                    // A cluster's answer that the call did not run on that node.
                    match redirect {
                        Redirect::Moved { host, port } if redirects < MAX_REDIRECTS => {
                            // The workspace's slot lives elsewhere: follow it for good.
                            redirects += 1;
                            direct.follow(&host, port);
                            value = direct.call(packed, deadline).await?;
                        }
                        // A migration in progress (or too many moves): the cluster link
                        // follows `ASK`, `TRYAGAIN` and `CLUSTERDOWN`.
                        _ => return store.batch(ops, deadline).await,
                    }
                }
                if is_missing_function_reply(&value) {
                    // Redis lost its functions (restarted empty): load them, send again (the
                    // call did not run).
                    tokio::time::timeout_at(deadline, store.load_library())
                        .await
                        .map_err(|_| CoordError::Timeout(direct.timeout_ms()))??;
                    value = direct.call(packed, deadline).await?;
                }
                ops_answers(value, count)
            }
        }
    }
}

/// Marks the lane's task as ended when it ends (its runtime shut down, or the batcher was
/// dropped): the next call that queues starts another.
struct TaskRuns<'a>(&'a Lane);

impl Drop for TaskRuns<'_> {
    fn drop(&mut self) {
        self.0.lock().task = false;
    }
}

/// A workspace's task: whenever operations are queued and the link is free, takes them (up to
/// `max`, in order), sends them as one batch and answers each; waits to be woken otherwise.
async fn drive(lane: Arc<Lane>, max: usize) {
    let _runs = TaskRuns(&lane);
    let mut batch: Vec<Pending> = Vec::with_capacity(max);
    loop {
        if lane.closed.load(Ordering::Relaxed) {
            return;
        }
        let link = {
            let mut state = lane.lock();
            match state.link.take() {
                Some(link) if !state.queue.is_empty() => {
                    let n = state.queue.len().min(max);
                    batch.extend(state.queue.drain(..n));
                    Some(link)
                }
                link => {
                    state.link = link;
                    None
                }
            }
        };
        let Some(link) = link else {
            lane.wake.notified().await;
            continue;
        };
        let mut borrowed = Borrowed {
            lane: &lane,
            link: Some(link),
        };
        // The command timeout, counted from the send (as for a single call): time spent queued
        // behind the call in flight is not Redis's (a replica stalled by its host would
        // otherwise time out every queued operation at once).
        let result = match borrowed.link.as_mut() {
            Some(link) => {
                let deadline = Instant::now() + link.timeout();
                link.batch(batch.iter().map(|p| &p.op), deadline).await
            }
            None => Err(CoordError::Redis("the link was given back".into())),
        };
        borrowed.give_back(result.as_ref().err());
        match result {
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
            }
        }
    }
}
