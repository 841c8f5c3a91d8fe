//! The bounded fair scheduler: run work items under a concurrency ceiling, lanes served
//! round-robin, results in input order.
//!
//! # Fairness
//!
//! Items are grouped by lane (in order of first appearance); each lane is a FIFO. Lanes with
//! unstarted items sit in a ring: a free permit goes to the ring front's head, and that lane
//! moves to the back, so every lane gets at most one new start per round, whatever its length.
//! A noisy lane with thousands of items delays a quiet lane's first item by at most one round.
//!
//! # Suspension
//!
//! A running item may [`Slot::suspend`] around a wait (a retry backoff): its permit is given
//! back for the duration, so another lane can start, and when the wait ends the item asks for a
//! permit again **ahead of unstarted work**: a permit that frees up goes to the oldest
//! suspended item first, and no new item starts while any suspended item is waiting.
//!
//! # Invariants
//!
//! - Items holding a permit never exceed the ceiling (`max(concurrency, 1)`).
//! - Results are returned in input order, whatever the completion order.
//! - After an interruption (cancellation or deadline) no new item starts; every unstarted item
//!   is returned as [`Scheduled::Unstarted`] with the cause. Running items finish on their own
//!   (they observe the same signal).
//!
//! Complexity: O(1) per start and per completion; memory O(items + lanes).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One unit of work and the lane it belongs to.
#[derive(Debug, Clone)]
pub struct WorkItem<T> {
    pub value: T,
    pub lane: String,
}

impl<T> WorkItem<T> {
    pub fn new(value: T, lane: impl Into<String>) -> Self {
        WorkItem {
            value,
            lane: lane.into(),
        }
    }
}

/// What stops a run from starting more items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// The caller's signal fired.
    Cancelled,
    /// The run's deadline passed.
    Deadline,
}

/// Options of one run.
#[derive(Debug, Clone, Default)]
pub struct FairOptions {
    /// Stops new starts when cancelled.
    pub cancel: Option<CancellationToken>,
    /// Stops new starts at this instant.
    pub deadline: Option<Instant>,
}

/// The result of one item.
#[derive(Debug, Clone, PartialEq)]
pub enum Scheduled<T, R> {
    /// The worker ran to completion.
    Completed(R),
    /// The run was interrupted before the item started.
    Unstarted { value: T, cause: Interrupt },
}

struct GateState {
    available: usize,
    resumers: VecDeque<oneshot::Sender<()>>,
}

struct Gate {
    state: Mutex<GateState>,
    changed: Notify,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a permit for an unstarted item: only when no suspended item is waiting.
    fn try_take_for_new(&self) -> bool {
        let mut state = self.lock();
        if state.available > 0 && state.resumers.is_empty() {
            state.available -= 1;
            true
        } else {
            false
        }
    }

    /// Gives a permit back: straight to the oldest waiting suspended item, else to the pool.
    fn release(&self) {
        let mut state = self.lock();
        while let Some(resumer) = state.resumers.pop_front() {
            if resumer.send(()).is_ok() {
                return;
            }
        }
        state.available += 1;
        drop(state);
        self.changed.notify_one();
    }

    /// Waits for a permit for a suspended item.
    async fn regain(self: &Arc<Self>) {
        let receiver = {
            let mut state = self.lock();
            if state.available > 0 && state.resumers.is_empty() {
                state.available -= 1;
                return;
            }
            let (sender, receiver) = oneshot::channel();
            state.resumers.push_back(sender);
            receiver
        };
        let mut pending = PendingRegain {
            gate: Arc::clone(self),
            receiver: Some(receiver),
        };
        pending.wait().await;
    }
}

/// A suspended item waiting for its permit; if dropped after the permit was handed over but
/// before it was taken, gives the permit back.
struct PendingRegain {
    gate: Arc<Gate>,
    receiver: Option<oneshot::Receiver<()>>,
}

impl PendingRegain {
    async fn wait(&mut self) {
        if let Some(receiver) = self.receiver.as_mut() {
            // The sender lives in the gate, which outlives this wait: an error cannot happen
            // while the run is alive.
            let _ = receiver.await;
        }
        self.receiver = None;
    }
}

impl Drop for PendingRegain {
    fn drop(&mut self) {
        if let Some(mut receiver) = self.receiver.take() {
            receiver.close();
            if receiver.try_recv().is_ok() {
                self.gate.release();
            }
        }
    }
}

/// A running item's hold on the ceiling.
pub struct Slot {
    gate: Arc<Gate>,
    holds: Arc<AtomicBool>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("holds", &self.holds.load(Ordering::SeqCst))
            .finish()
    }
}

impl Slot {
    /// Runs `wait` without holding a permit, then regains one ahead of unstarted work.
    pub async fn suspend<F: Future>(&self, wait: F) -> F::Output {
        if self.holds.swap(false, Ordering::SeqCst) {
            self.gate.release();
        }
        let output = wait.await;
        self.gate.regain().await;
        self.holds.store(true, Ordering::SeqCst);
        output
    }

    /// Whether the item holds a permit now.
    pub fn holds_permit(&self) -> bool {
        self.holds.load(Ordering::SeqCst)
    }
}

/// Runs `work` under `concurrency` permits, lanes round-robin; see the module docs.
pub async fn run_bounded_fair<T, R, F, Fut>(
    work: Vec<WorkItem<T>>,
    concurrency: usize,
    mut worker: F,
    options: FairOptions,
) -> Vec<Scheduled<T, R>>
where
    F: FnMut(T, Slot) -> Fut,
    Fut: Future<Output = R>,
{
    let total = work.len();
    let gate = Arc::new(Gate {
        state: Mutex::new(GateState {
            available: concurrency.max(1),
            resumers: VecDeque::new(),
        }),
        changed: Notify::new(),
    });

    let mut lane_index: HashMap<String, usize> = HashMap::new();
    let mut lanes: Vec<VecDeque<(usize, T)>> = Vec::new();
    let mut ring: VecDeque<usize> = VecDeque::new();
    for (index, item) in work.into_iter().enumerate() {
        let lane = *lane_index.entry(item.lane).or_insert_with(|| {
            lanes.push(VecDeque::new());
            lanes.len() - 1
        });
        if lanes[lane].is_empty() {
            ring.push_back(lane);
        }
        lanes[lane].push_back((index, item.value));
    }

    let mut results: Vec<Option<Scheduled<T, R>>> = (0..total).map(|_| None).collect();
    let mut running = FuturesUnordered::new();
    let mut interrupted: Option<Interrupt> = None;

    let cancel = options.cancel.clone();
    let deadline = options.deadline;
    let interruption = async move {
        tokio::select! {
            _ = async {
                match &cancel {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            } => Interrupt::Cancelled,
            _ = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => Interrupt::Deadline,
        }
    };
    tokio::pin!(interruption);

    loop {
        if interrupted.is_none() {
            if options.cancel.as_ref().is_some_and(|t| t.is_cancelled()) {
                interrupted = Some(Interrupt::Cancelled);
            } else if options.deadline.is_some_and(|at| Instant::now() >= at) {
                interrupted = Some(Interrupt::Deadline);
            }
        }
        if interrupted.is_none() {
            while !ring.is_empty() && gate.try_take_for_new() {
                let Some(lane) = ring.pop_front() else {
                    break;
                };
                let Some((index, value)) = lanes[lane].pop_front() else {
                    gate.release();
                    continue;
                };
                if !lanes[lane].is_empty() {
                    ring.push_back(lane);
                }
                let holds = Arc::new(AtomicBool::new(true));
                let slot = Slot {
                    gate: Arc::clone(&gate),
                    holds: Arc::clone(&holds),
                };
                let future = worker(value, slot);
                running.push(async move { (index, holds, future.await) });
            }
        }
        if running.is_empty() && (ring.is_empty() || interrupted.is_some()) {
            break;
        }
        tokio::select! {
            Some((index, holds, output)) = running.next(), if !running.is_empty() => {
                results[index] = Some(Scheduled::Completed(output));
                if holds.swap(false, Ordering::SeqCst) {
                    gate.release();
                }
            }
            _ = gate.changed.notified() => {}
            cause = &mut interruption, if interrupted.is_none() => {
                interrupted = Some(cause);
            }
        }
    }

    if let Some(cause) = interrupted {
        for lane in lanes {
            for (index, value) in lane {
                results[index] = Some(Scheduled::Unstarted { value, cause });
            }
        }
    }
    results.into_iter().flatten().collect()
}
