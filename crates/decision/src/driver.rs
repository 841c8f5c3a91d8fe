//! The async admission driver: the sans-IO [`Registry`] run on tokio time.
//!
//! # Design
//!
//! The registry sits behind one `std::sync::Mutex` that is never held across an `.await`. Every
//! entry point locks it, reads the [`Clock`] (the only clock read of the admission path), calls
//! the core with that `now`, hands any resolved waiters to their pending futures, unlocks and
//! pokes the timer task. One background task owns exactly **one** tokio timer: after every
//! wake-up it asks the core for `poll_timeout()`, resets its single `Sleep` to that instant
//! (or waits for a poke when the core has nothing scheduled), and on expiry calls
//! `Registry::handle_due`, which handles only the workspaces that are due. Nothing polls on a
//! fixed interval, so the driver works unchanged under `tokio::time::pause()`: the paused clock
//! auto-advances straight to the armed instant.
//!
//! # Invariants
//!
//! - A queued acquire is resolved exactly once: by its pending future (lease or rejection), or by
//!   [`PendingGuard`]'s drop, which cancels the waiter; if the lease was already granted but not
//!   yet received, the guard releases it with `Outcome::None`. Dropping an acquire future
//!   therefore never leaks a permit or a queue entry.
//! - Resolutions are drained inside the same critical section that produced them, so when any
//!   caller takes the lock the core's resolution queue is empty.
//! - The timer task holds only a weak reference: dropping the last driver handle stops it.
//! - [`AdmissionDriver::peak_totals`] is the core's high-water mark of the workspace totals
//!   (`Registry::peak_totals`), sampled by the core at the end of every operation, so it sees
//!   every state a caller or the timer can observe.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;
use turnstile_admission::{
    Acquired, ActualUsage, AdmissionRequest, Lease, LeaseId, Millis, Outcome, Profile,
    ProfileChangeRecord, Registry, RegistryError, Rejection, Released, Snapshot, WaiterId,
};

use crate::clock::Clock;
use crate::error::AdmissionError;
use crate::lease::AdmissionLease;

type Resolved = Result<Lease, Rejection>;

struct DriverState {
    registry: Registry,
    pending: HashMap<(String, WaiterId), oneshot::Sender<Resolved>>,
    armed: Option<Millis>,
}

struct Shared {
    clock: Clock,
    state: Mutex<DriverState>,
    wake: Arc<Notify>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Lets the timer task observe that the driver is gone.
        self.wake.notify_one();
    }
}

/// A cloneable handle to one registry driven on tokio time.
#[derive(Clone)]
pub struct AdmissionDriver {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AdmissionDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionDriver").finish_non_exhaustive()
    }
}

impl AdmissionDriver {
    /// Drives `registry` with a clock that reads Unix epoch milliseconds. Must be called inside
    /// a tokio runtime (it spawns the timer task).
    pub fn new(registry: Registry) -> Self {
        Self::with_clock(registry, Clock::system())
    }

    /// Drives `registry` with the given clock (tests use `Clock::starting_at(0)`).
    pub fn with_clock(registry: Registry, clock: Clock) -> Self {
        let wake = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            clock,
            state: Mutex::new(DriverState {
                registry,
                pending: HashMap::new(),
                armed: None,
            }),
            wake: Arc::clone(&wake),
        });
        tokio::spawn(run_timer(Arc::downgrade(&shared), wake));
        AdmissionDriver { shared }
    }

    /// The driver's clock.
    pub fn clock(&self) -> Clock {
        self.shared.clock
    }

    /// The clock's current reading.
    pub fn now_ms(&self) -> Millis {
        self.shared.clock.now_ms()
    }

    fn lock(&self) -> MutexGuard<'_, DriverState> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn poke(&self) {
        self.shared.wake.notify_one();
    }

    /// Registers a profile revision (see `Registry::register`).
    pub fn register(
        &self,
        workspace_id: &str,
        profile_version: &str,
        profile: Profile,
    ) -> Result<Option<ProfileChangeRecord>, RegistryError> {
        let result = {
            let mut state = self.lock();
            let now = self.now_ms();
            let result = state
                .registry
                .register(workspace_id, profile_version, profile, now);
            deliver(&mut state, workspace_id);
            result
        };
        self.poke();
        result
    }

    /// Runs `f` on the registry (read access for snapshots, histories and tests).
    pub fn with_registry<T>(&self, f: impl FnOnce(&Registry) -> T) -> T {
        f(&self.lock().registry)
    }

    /// Aggregate counts of a workspace.
    pub fn snapshot(&self, workspace_id: &str) -> Option<Snapshot> {
        self.lock().registry.snapshot(workspace_id)
    }

    /// The largest workspace-wide `(active, queued)` counts seen at the end of any operation of
    /// this driver on `workspace_id` (registration, acquire, release, cancellation, budget
    /// release, Retry-After, timer expiry); `None` before the first operation on it.
    pub fn peak_totals(&self, workspace_id: &str) -> Option<(u64, u64)> {
        self.lock()
            .registry
            .peak_totals(workspace_id)
            .map(|peak| (peak.active, peak.queued))
    }

    /// The instant the single timer is armed for, if any.
    pub fn armed_timer(&self) -> Option<Millis> {
        self.lock().armed
    }

    /// Forgets the budgets of one invocation.
    pub fn release_budget(&self, workspace_id: &str, budget_id: &str) -> bool {
        let known = {
            let mut state = self.lock();
            let now = self.now_ms();
            let known = state
                .registry
                .release_budget(workspace_id, budget_id, now)
                .unwrap_or(false);
            deliver(&mut state, workspace_id);
            known
        };
        self.poke();
        known
    }

    /// Pauses a provider lane of a workspace.
    pub fn coordinate_retry_after(
        &self,
        workspace_id: &str,
        provider_id: &str,
        retry_after_ms: Millis,
    ) -> Result<(), RegistryError> {
        let result = {
            let mut state = self.lock();
            let now = self.now_ms();
            let result = state
                .registry
                .coordinate_retry_after(workspace_id, provider_id, retry_after_ms, now)
                .map(|_paused_until| ());
            deliver(&mut state, workspace_id);
            result
        };
        self.poke();
        result
    }

    /// Asks for a permit and waits for it. Dropping the returned future while the request is
    /// queued cancels the waiter.
    pub async fn acquire(
        &self,
        workspace_id: &str,
        request: AdmissionRequest,
    ) -> Result<AdmissionLease, AdmissionError> {
        self.acquire_inner(workspace_id, request, None).await
    }

    /// Like [`acquire`](Self::acquire), but a queued request is cancelled as soon as `cancel`
    /// fires, and the `cancelled` rejection (with its evidence) is returned.
    pub async fn acquire_or_cancel(
        &self,
        workspace_id: &str,
        request: AdmissionRequest,
        cancel: &CancellationToken,
    ) -> Result<AdmissionLease, AdmissionError> {
        self.acquire_inner(workspace_id, request, Some(cancel))
            .await
    }

    async fn acquire_inner(
        &self,
        workspace_id: &str,
        request: AdmissionRequest,
        cancel: Option<&CancellationToken>,
    ) -> Result<AdmissionLease, AdmissionError> {
        let (waiter, receiver) = {
            let mut state = self.lock();
            let now = self.now_ms();
            let acquired = state.registry.acquire(workspace_id, request, now);
            let outcome = match acquired {
                Err(error) => Err(AdmissionError::Registry(error)),
                Ok(Acquired::Admitted(lease)) => Ok(Ok(lease)),
                Ok(Acquired::Rejected(rejection)) => Err(AdmissionError::Rejected(rejection)),
                Ok(Acquired::Queued { waiter, .. }) => {
                    let (sender, receiver) = oneshot::channel();
                    state
                        .pending
                        .insert((workspace_id.to_owned(), waiter), sender);
                    Ok(Err((waiter, receiver)))
                }
            };
            deliver(&mut state, workspace_id);
            drop(state);
            self.poke();
            match outcome? {
                Ok(lease) => return Ok(AdmissionLease::new(self.clone(), workspace_id, lease)),
                Err(pending) => pending,
            }
        };
        let mut guard = PendingGuard {
            driver: self.clone(),
            workspace_id: workspace_id.to_owned(),
            waiter,
            receiver: Some(receiver),
        };
        let resolved = match cancel {
            None => guard.wait().await,
            Some(token) => {
                tokio::select! {
                    biased;
                    resolved = guard.wait() => resolved,
                    _ = token.cancelled() => guard.cancel(),
                }
            }
        };
        match resolved {
            Ok(lease) => Ok(AdmissionLease::new(self.clone(), workspace_id, lease)),
            Err(rejection) => Err(AdmissionError::Rejected(rejection)),
        }
    }

    /// Releases a lease (used by [`AdmissionLease`]); `usage` corrects the invocation's
    /// budgets when the call reported what it used.
    pub(crate) fn release(
        &self,
        workspace_id: &str,
        lease: LeaseId,
        outcome: Outcome,
        usage: ActualUsage,
    ) -> Option<Released> {
        let released = {
            let mut state = self.lock();
            let now = self.now_ms();
            let released = state
                .registry
                .release_with_usage(workspace_id, lease, outcome, usage, now)
                .ok()
                .flatten();
            deliver(&mut state, workspace_id);
            released
        };
        self.poke();
        released
    }
}

/// Hands every resolution of `workspace_id` to its pending future. A resolution whose future
/// is gone gives its lease straight back.
fn deliver(state: &mut DriverState, workspace_id: &str) {
    while let Some(resolution) = state.registry.poll_resolution(workspace_id) {
        let key = (workspace_id.to_owned(), resolution.waiter);
        let unclaimed = match state.pending.remove(&key) {
            Some(sender) => sender.send(resolution.outcome).err(),
            None => Some(resolution.outcome),
        };
        if let Some(Ok(lease)) = unclaimed {
            let now = state.registry.now_of(workspace_id).unwrap_or(0);
            let _ = state
                .registry
                .release(workspace_id, lease.id, Outcome::None, now);
        }
    }
}

/// A queued acquire. Dropping it before it resolved cancels the waiter (or gives back a lease
/// that was granted but not received).
struct PendingGuard {
    driver: AdmissionDriver,
    workspace_id: String,
    waiter: WaiterId,
    receiver: Option<oneshot::Receiver<Resolved>>,
}

impl PendingGuard {
    async fn wait(&mut self) -> Resolved {
        let Some(receiver) = self.receiver.as_mut() else {
            return Err(self.cancel_locked());
        };
        let resolved = receiver.await;
        self.receiver = None;
        match resolved {
            Ok(resolved) => resolved,
            // The sender is only dropped without sending if the waiter vanished from the core.
            Err(_) => Err(self.cancel_locked()),
        }
    }

    /// Cancels the waiter now; when it had already been resolved, returns that resolution.
    fn cancel(&mut self) -> Resolved {
        let mut state = self.driver.lock();
        let now = self.driver.now_ms();
        let cancelled = state
            .registry
            .cancel(&self.workspace_id, self.waiter, now)
            .ok()
            .flatten();
        state
            .pending
            .remove(&(self.workspace_id.clone(), self.waiter));
        deliver(&mut state, &self.workspace_id);
        drop(state);
        self.driver.poke();
        let already = self.receiver.take().and_then(|mut r| r.try_recv().ok());
        match (cancelled, already) {
            (Some(rejection), _) => Err(rejection),
            (None, Some(resolved)) => resolved,
            (None, None) => Err(self.cancel_locked()),
        }
    }

    /// A synthetic `cancelled` rejection for a waiter the core no longer knows.
    fn cancel_locked(&self) -> Rejection {
        Rejection::refusal(turnstile_admission::Reason::Cancelled, 0)
    }
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if self.receiver.is_none() {
            return;
        }
        if let Ok(lease) = self.cancel() {
            self.driver.release(
                &self.workspace_id,
                lease.id,
                Outcome::None,
                ActualUsage::none(),
            );
        }
    }
}

/// The timer task: one `Sleep`, re-armed at the core's `poll_timeout()` after every wake-up.
async fn run_timer(shared: Weak<Shared>, wake: Arc<Notify>) {
    let sleep = tokio::time::sleep(std::time::Duration::ZERO);
    tokio::pin!(sleep);
    loop {
        let (next, clock) = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            let now = shared.clock.now_ms();
            // Only the due workspaces are touched: the registry keeps their timeouts ordered.
            for workspace_id in state.registry.handle_due(now) {
                deliver(&mut state, &workspace_id);
            }
            let next = state.registry.poll_timeout();
            state.armed = next;
            (next, shared.clock)
        };
        match next {
            Some(at) => {
                sleep.as_mut().reset(clock.instant_at(at));
                tokio::select! {
                    _ = &mut sleep => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}
