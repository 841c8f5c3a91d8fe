//! The driver: the one task that owns the sans-IO admission [`Registry`].
//!
//! # Design
//!
//! - **One owner, one clock, one timer.** Only this task touches the registry and reads the
//!   [`Clock`]. After every batch of commands it arms a single timer at the earliest of
//!   `registry.poll_timeout()` and the next lease expiry; when it fires, the due workspaces get
//!   `handle_due(now)` and expired leases are reclaimed (released with `Outcome::None`).
//!   Nothing polls on an interval, and because the [`Clock`] reads tokio time, the whole driver
//!   runs unchanged under `tokio::time::pause()`.
//! - **Commands in, oneshots out.** Hosts send a [`Command`] over an unbounded channel (the
//!   host bounds how many can be in flight: the service's connection cap, the evaluator's
//!   scheduler) and await a oneshot. A queued admission keeps its oneshot in `pending` until the
//!   core resolves the waiter. Commands are taken in batches, which is what makes one task
//!   faster than a mutex here (measured: `docs/performance.md`).
//! - **The core decides.** The driver makes no admission decision of its own: refusals,
//!   "the pause outlasts your deadline", try-now and unknown providers all come from the core.
//!   The driver only translates a [`Wait`] into the core's request, delivers resolutions,
//!   journals events and keeps the lease table.
//! - **Durable before the reply (group commit).** When the journal keeps leases, every grant,
//!   release and budget release of a batch becomes a [`LeaseEvent`]; after the batch the events
//!   go to the journal in one call and the replies that depend on them are held back until the
//!   journal reports them durable (see [`crate::journal`]). The task itself never waits: it
//!   takes the next batch while the journal commits the previous one.
//! - **Restarts.** A host reinstates the leases a previous process journaled with
//!   [`Driver::reinstate`] before [`Driver::run`]: each keeps its token (so its holder can
//!   release and heartbeat it) and counts in the core again; its expiry is the later of the
//!   journaled one and a full TTL from the restart (holders could not heartbeat while the
//!   service was down, and a restart must never free a lease early).
//! - **Nobody is left behind.** A caller waiting on a queued admission holds a
//!   [`CancelGuard`](crate::CancelGuard): if it goes away, the guard sends `Cancel`, which
//!   removes the waiter from the core's queue. A grant that reaches a caller who is already gone
//!   is a [`Grant`] dropped unaccepted: its `Drop` sends `Reclaim` and the lease comes back.
//!
//! # Invariants
//!
//! - Every waiter the core queued for a caller is either resolved to that caller, or cancelled
//!   (caller gone, shutdown); `pending` and `tickets` always describe the same waiters.
//! - Every lease in the [`LeaseTable`] is held in the core and is released exactly once; its
//!   span ends when it leaves the table.
//! - With a journal that keeps leases, no caller learns a lease token before the lease's
//!   `Granted` event is durable, and every lease that leaves the table is journaled `Released`
//!   once, after its `Granted`.
//! - Every breaker transition is handed to the [`Journal`] once, under its own workspace (the
//!   core tags it), right after the operation that made it.
//! - Every decision is counted once, by the request's span (one metrics family).
//! - Workspace and principal IDs are never logged; metrics get decisions and reasons only.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use foldhash::HashMap;
use tokio::sync::{mpsc, oneshot};
use turnstile_admission::{
    Acquired, ActualUsage, AdmissionRequest, BreakerTransition, Evidence, LeaseId, Millis, Outcome,
    Profile, ProfileChangeRecord, Reason, Registry, ReinstateError, WaiterId,
};

use crate::clock::Clock;
use crate::command::{
    Acquire, AcquireCommand, AcquireReply, Command, LaneLimits, Standing, Wait, WorkspaceSnapshot,
};
use crate::error::DriverError;
use crate::fairness::FairnessWindows;
use crate::feed::{Feed, Tally};
use crate::grant::Grant;
use crate::handle::DriverHandle;
use crate::journal::{HeldLease, Journal, LeaseEvent, Registration};
use crate::lease_metrics::LeaseMetrics;
use crate::lease_table::{LeaseEntry, LeaseTable, LeaseToken};
use crate::pause::{Pause, PauseCause};
use crate::telemetry::AdmitSpan;

/// Commands taken per wake-up before the timer is re-armed.
const BATCH: usize = 256;

/// How the driver treats leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverConfig {
    /// Time to live of a lease without a heartbeat; `None`: leases never expire (in-process
    /// holders that release on drop).
    pub lease_ttl_ms: Option<Millis>,
}

struct Pending {
    ticket: u64,
    principal: Arc<str>,
    /// The provider lane (for the event feed's counts).
    provider: Arc<str>,
    span: Option<AdmitSpan>,
    reply: oneshot::Sender<AcquireReply>,
}

/// A reply held back until its batch's lease events are durable; called with whether they are.
type HeldReply = Box<dyn FnOnce(bool) + Send>;

/// Why a journaled lease could not be reinstated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReinstateFailure {
    /// The core refused it (its workspace, provider or principal is unknown).
    #[error(transparent)]
    Core(#[from] ReinstateError),
    /// Another reinstated lease already has this token.
    #[error("a lease with this token is already held")]
    DuplicateToken,
}

/// An admission the core granted, on its way into the lease table.
struct Admitted {
    lease: LeaseId,
    evidence: Evidence,
    span: Option<AdmitSpan>,
    reply: oneshot::Sender<AcquireReply>,
}

/// The task state. Build with [`Driver::new`], run with [`Driver::run`] (or [`Driver::spawn`]).
pub struct Driver {
    registry: Registry,
    clock: Clock,
    config: DriverConfig,
    leases: LeaseTable,
    pending: HashMap<Arc<str>, HashMap<WaiterId, Pending>>,
    tickets: HashMap<u64, (Arc<str>, WaiterId)>,
    journal: Box<dyn Journal>,
    /// Whether the journal keeps leases (then grants and releases are journaled).
    keeps_leases: bool,
    /// Lease events of the current batch, not yet handed to the journal.
    lease_events: Vec<LeaseEvent>,
    /// Replies of the current batch waiting for its lease events to be durable.
    held: Vec<HeldReply>,
    metrics: Arc<LeaseMetrics>,
    /// For the grants' `Drop`; weak, so the channel closes (and the task ends) once every
    /// handle and every unaccepted grant is gone.
    tx: mpsc::WeakUnboundedSender<Command>,
    rx: mpsc::UnboundedReceiver<Command>,
    /// The instant the one timer is armed for.
    armed: Option<Millis>,
    /// No timer is armed before this instant (set after a timer fired, so a core that reports
    /// a due instant it did not consume cannot spin the task).
    timer_floor: Millis,
    draining: bool,
    stopped: bool,
    /// The console's event feed, when a host asked for one ([`Driver::with_feed`]).
    feed: Option<Feed>,
    tally: Tally,
    /// Grants per principal over the last minutes, always kept (`crate::fairness`).
    fairness: FairnessWindows,
    /// Per (workspace, provider lane): the end of the last pause handed to the journal, so a
    /// lane's journaled end is never more than [`JOURNAL_EXTENSION_MS`](crate::pause::JOURNAL_EXTENSION_MS)
    /// before its real one (a restart pauses the lane again from the journal).
    journaled_pauses: HashMap<(Arc<str>, String), Millis>,
}

/// Lanes whose last journaled pause end the driver remembers before it forgets the ended ones
/// (lanes are profile-named providers, so this is rarely reached).
const JOURNALED_PAUSES_KEPT: usize = 4_096;

impl Driver {
    /// A driver over `registry` (which may already hold replayed profiles).
    pub fn new(
        registry: Registry,
        clock: Clock,
        config: DriverConfig,
        journal: Box<dyn Journal>,
        metrics: Arc<LeaseMetrics>,
    ) -> (Self, DriverHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        let weak = tx.downgrade();
        let handle = DriverHandle::new(tx);
        let keeps_leases = journal.keeps_leases();
        let driver = Driver {
            registry,
            clock,
            config,
            leases: LeaseTable::new(),
            pending: HashMap::default(),
            tickets: HashMap::default(),
            journal,
            keeps_leases,
            lease_events: Vec::new(),
            held: Vec::new(),
            metrics,
            tx: weak,
            rx,
            armed: None,
            timer_floor: 0,
            draining: false,
            stopped: false,
            feed: None,
            tally: Tally::default(),
            fairness: FairnessWindows::default(),
            journaled_pauses: HashMap::default(),
        };
        (driver, handle)
    }

    /// Publishes what changes on `feed` (see [`crate::feed`]).
    pub fn with_feed(mut self, feed: Feed) -> Self {
        self.feed = Some(feed);
        self
    }

    /// Builds a driver and spawns it on the current tokio runtime.
    pub fn spawn(
        registry: Registry,
        clock: Clock,
        config: DriverConfig,
        journal: Box<dyn Journal>,
        metrics: Arc<LeaseMetrics>,
    ) -> (DriverHandle, tokio::task::JoinHandle<()>) {
        let (driver, handle) = Driver::new(registry, clock, config, journal, metrics);
        (handle, tokio::spawn(driver.run()))
    }

    /// Runs until [`Command::Stop`] or until every handle and unaccepted grant is gone.
    pub async fn run(mut self) {
        let sleep = tokio::time::sleep_until(tokio::time::Instant::now());
        tokio::pin!(sleep);
        loop {
            let wake = self.next_wake();
            if wake != self.armed {
                if let Some(at) = wake {
                    sleep.as_mut().reset(self.clock.instant_at(at));
                }
                self.armed = wake;
            }
            tokio::select! {
                biased;
                command = self.rx.recv() => {
                    let Some(command) = command else { break };
                    self.tally
                        .set_enabled(self.feed.as_ref().is_some_and(Feed::has_subscribers));
                    self.handle(command);
                    for _ in 0..BATCH {
                        match self.rx.try_recv() {
                            Ok(command) => self.handle(command),
                            Err(_) => break,
                        }
                    }
                }
                () = &mut sleep, if self.armed.is_some() => {
                    self.armed = None;
                    self.on_timer();
                }
            }
            self.journal_evicted_budgets();
            self.flush_lease_events();
            self.update_gauges();
            if let Some(feed) = &self.feed {
                self.tally.flush(&self.registry, feed, self.clock.now_ms());
            }
            if self.stopped {
                break;
            }
        }
    }

    fn next_wake(&self) -> Option<Millis> {
        let core = self.registry.poll_timeout();
        let lease = self.leases.next_expiry();
        let wake = [core, lease, self.tally.due()].into_iter().flatten().min();
        wake.map(|at| at.max(self.timer_floor))
    }

    fn update_gauges(&self) {
        self.metrics
            .leases_active
            .store(self.leases.len() as u64, Ordering::Relaxed);
        self.metrics
            .waiters_queued
            .store(self.tickets.len() as u64, Ordering::Relaxed);
    }

    fn on_timer(&mut self) {
        let now = self.clock.now_ms();
        self.timer_floor = now + 1;
        self.reclaim_expired(now);
        // Only the due workspaces are touched: the registry keeps their timeouts ordered.
        for workspace in self.registry.handle_due(now) {
            self.deliver(&workspace, now);
        }
        self.journal_transitions();
    }

    fn reclaim_expired(&mut self, now: Millis) {
        while let Some((token, entry)) = self.leases.pop_expired(now) {
            self.metrics.leases_expired.fetch_add(1, Ordering::Relaxed);
            self.give_back(token, entry, now);
        }
    }

    /// Releases a lease whose holder is gone, with no outcome; ends its span.
    fn give_back(&mut self, token: LeaseToken, entry: LeaseEntry, now: Millis) {
        self.journal_lease(|| LeaseEvent::Released {
            token,
            usage: ActualUsage::none(),
        });
        let _ = self
            .registry
            .release(&entry.workspace, entry.lease, Outcome::None, now);
        if let Some(span) = entry.span {
            span.released(&[]);
        }
        self.deliver(&entry.workspace, now);
    }

    fn handle(&mut self, command: Command) {
        let now = self.clock.now_ms();
        self.reclaim_expired(now);
        match command {
            Command::Acquire(acquire) => self.acquire(*acquire, now),
            Command::Cancel { ticket } => self.cancel(ticket, now),
            Command::Reclaim { token } => {
                if let Some(entry) = self.leases.remove(&token) {
                    self.metrics
                        .leases_undeliverable
                        .fetch_add(1, Ordering::Relaxed);
                    self.give_back(token, entry, now);
                }
            }
            Command::Release {
                token,
                workspace,
                principal,
                outcome,
                usage,
                forget_budget,
                reply,
            } => {
                let result = self.release(token, &workspace, &principal, outcome, usage, now);
                // Journaled before the answer: a caller that reads the audit log after the
                // release sees the transitions it caused (the journal's store applies in order).
                self.journal_transitions();
                if let Some(budget) = forget_budget {
                    // The answer held below waits for this budget's record too.
                    let _ = self.forget_budget(&workspace, budget, now);
                }
                if result.is_ok() {
                    // Answered once the release is durable (or could not be made so).
                    self.hold(Box::new(move |_durable| {
                        let _ = reply.send(result);
                    }));
                } else {
                    let _ = reply.send(result);
                }
            }
            Command::Heartbeat {
                token,
                workspace,
                principal,
                reply,
            } => {
                let _ = reply.send(self.heartbeat(token, &workspace, &principal, now));
            }
            Command::Register {
                workspace,
                version,
                profile,
                profile_json,
                actor,
                at,
                reply,
            } => {
                let revision = (workspace, version, *profile, profile_json);
                self.register(revision, actor, reply, at.unwrap_or(now))
            }
            Command::ReleaseBudget {
                workspace,
                budget,
                reply,
            } => {
                let result = self.forget_budget(&workspace, budget, now);
                if result.is_ok() && self.keeps_leases {
                    self.hold(Box::new(move |_durable| {
                        let _ = reply.send(result);
                    }));
                } else {
                    let _ = reply.send(result);
                }
            }
            Command::RetryAfter {
                workspace,
                provider,
                retry_after_ms,
                reply,
            } => {
                let result = self
                    .registry
                    .coordinate_retry_after(&workspace, &provider, retry_after_ms, now)
                    .map_err(DriverError::from);
                if let Ok(until) = result {
                    let pause = Pause {
                        provider_id: provider,
                        retry_after_ms,
                        until_epoch_ms: until,
                        at_epoch_ms: now,
                        cause: PauseCause::RetryAfterCall,
                    };
                    self.paused(&workspace, pause, now);
                }
                self.deliver(&workspace, now);
                if result.is_ok() {
                    // Answered once the pause is durable (a restart pauses the lane again).
                    self.hold(Box::new(move |_durable| {
                        let _ = reply.send(result);
                    }));
                } else {
                    let _ = reply.send(result);
                }
            }
            Command::Snapshot { workspace, reply } => {
                let snapshot = self.registry.snapshot(&workspace).map(|core| {
                    let waiters = self.pending.get(workspace.as_str()).map_or(0, HashMap::len);
                    WorkspaceSnapshot {
                        core,
                        leases: self.leases.count_in(&workspace),
                        waiters,
                    }
                });
                let _ = reply.send(snapshot);
            }
            Command::Standing {
                workspace,
                principal,
                reply,
            } => {
                let standing = match self.registry.profile(&workspace) {
                    None => Standing::NoProfile,
                    Some(profile) if profile.principals.contains_key(&*principal) => {
                        Standing::Named
                    }
                    Some(_) => Standing::NotNamed,
                };
                let _ = reply.send(standing);
            }
            Command::LaneLimits {
                workspace,
                principal,
                provider,
                reply,
            } => {
                let limits = self.registry.profile(&workspace).and_then(|profile| {
                    Some(LaneLimits {
                        principal: profile.principals.get(&*principal)?.clone(),
                        workspace: profile.workspace.clone(),
                        provider: profile.providers.get(&provider)?.clone(),
                    })
                });
                let _ = reply.send(limits);
            }
            Command::Lanes { workspace, reply } => {
                let _ = reply.send(
                    self.registry
                        .lane_views(&workspace, now)
                        .map(|lanes| (now, lanes)),
                );
            }
            Command::Fairness { workspace, reply } => {
                self.fairness.forget_idle(now);
                let view = self
                    .registry
                    .profile(&workspace)
                    .map(|_| self.fairness.view(&workspace, now));
                let _ = reply.send(view);
            }
            Command::Timer { reply } => {
                let _ = reply.send((now, self.next_wake()));
            }
            Command::Drain { reply } => {
                self.drain(now);
                let _ = reply.send(());
            }
            Command::BucketLevels { reply } => {
                let levels = self.draining.then(|| self.registry.bucket_levels(now));
                let _ = reply.send(levels);
            }
            Command::Stop => self.stopped = true,
        }
        self.journal_transitions();
    }

    fn drain(&mut self, now: Millis) {
        self.draining = true;
        let tickets: Vec<u64> = self.tickets.keys().copied().collect();
        for ticket in tickets {
            let Some((workspace, waiter)) = self.tickets.remove(&ticket) else {
                continue;
            };
            let pending = self
                .pending
                .get_mut(&workspace)
                .and_then(|m| m.remove(&waiter));
            let rejection = self.registry.cancel(&workspace, waiter, now).ok().flatten();
            if let Some(pending) = pending {
                if let (Some(span), Some(rejection)) = (pending.span, &rejection) {
                    span.rejected(&rejection.evidence);
                }
                let _ = pending.reply.send(AcquireReply::ShuttingDown);
            }
            self.deliver(&workspace, now);
        }
    }

    fn acquire(&mut self, command: AcquireCommand, now: Millis) {
        let AcquireCommand {
            ticket,
            request,
            reply,
        } = command;
        let Acquire {
            workspace,
            principal,
            provider_id,
            budget_id,
            estimate,
            wait,
            span,
        } = request;
        if self.draining {
            if let Some(span) = span {
                span.failed();
            }
            let _ = reply.send(AcquireReply::ShuttingDown);
            return;
        }
        let provider: Arc<str> = Arc::from(provider_id.as_str());
        let request =
            AdmissionRequest::new(&*principal, provider_id, budget_id).with_estimate(estimate);
        let acquired = match wait {
            // Admit now or refuse at once, with the real reason: the core never queues it.
            Wait::NoWait | Wait::For(0) => {
                self.registry
                    .try_acquire(&workspace, request, now)
                    .map(|answer| match answer {
                        Ok(lease) => Acquired::Admitted(lease),
                        Err(rejection) => Acquired::Rejected(rejection),
                    })
            }
            Wait::For(ms) => {
                let request = request.with_deadline(now.saturating_add(ms));
                self.registry.acquire(&workspace, request, now)
            }
            Wait::Until(deadline) => {
                let request = request.with_deadline(deadline);
                self.registry.acquire(&workspace, request, now)
            }
            Wait::Unbounded => self.registry.acquire(&workspace, request, now),
        };
        match acquired {
            Err(_) => {
                if let Some(span) = span {
                    span.failed();
                }
                let _ = reply.send(AcquireReply::NoProfile);
            }
            Ok(Acquired::Admitted(lease)) => {
                let delay = lease.evidence.queue_delay_ms;
                self.fairness.grant(&workspace, &principal, delay, now);
                self.tally.decision(
                    &workspace,
                    &provider,
                    &principal,
                    Reason::Admitted,
                    delay,
                    now,
                );
                let admitted = Admitted {
                    lease: lease.id,
                    evidence: lease.evidence,
                    span,
                    reply,
                };
                self.grant(&workspace, &principal, admitted, now);
            }
            Ok(Acquired::Rejected(rejection)) => {
                let reason = rejection.reason;
                self.tally
                    .decision(&workspace, &provider, &principal, reason, 0, now);
                if let Some(span) = span {
                    span.rejected(&rejection.evidence);
                }
                let _ = reply.send(AcquireReply::Rejected(rejection));
            }
            Ok(Acquired::Queued { waiter, evidence }) => {
                let mut span = span;
                if let Some(span) = span.as_mut() {
                    span.queued(&evidence);
                }
                self.tickets.insert(ticket, (workspace.clone(), waiter));
                self.pending.entry(workspace.clone()).or_default().insert(
                    waiter,
                    Pending {
                        ticket,
                        principal,
                        provider,
                        span,
                        reply,
                    },
                );
            }
        }
        self.deliver(&workspace, now);
    }

    fn grant(
        &mut self,
        workspace: &Arc<str>,
        principal: &Arc<str>,
        admitted: Admitted,
        now: Millis,
    ) {
        let Admitted {
            lease,
            evidence,
            mut span,
            reply,
        } = admitted;
        if let Some(span) = span.as_mut() {
            span.admitted(&evidence);
        }
        let ttl_ms = self.config.lease_ttl_ms;
        let expires_at = ttl_ms.map(|ttl| now.saturating_add(ttl));
        let entry = LeaseEntry {
            workspace: workspace.clone(),
            principal: principal.clone(),
            lease,
            expires_at,
            span,
        };
        let Some(driver) = self.tx.upgrade() else {
            // Every handle is gone: nobody can hold this lease.
            let _ = self.registry.release(workspace, lease, Outcome::None, now);
            let _ = reply.send(AcquireReply::ShuttingDown);
            return;
        };
        match self.leases.insert(entry) {
            Ok(token) => {
                self.metrics.leases_granted.fetch_add(1, Ordering::Relaxed);
                self.journal_evicted_budgets();
                if self.keeps_leases {
                    if let Some(lease) = self.registry.lease_charge(workspace, lease) {
                        self.lease_events.push(LeaseEvent::Granted(HeldLease {
                            token,
                            workspace: workspace.clone(),
                            principal: principal.clone(),
                            lease,
                            expires_at,
                        }));
                    }
                }
                let grant = Grant::new(
                    token,
                    expires_at,
                    ttl_ms,
                    evidence,
                    (workspace.clone(), principal.clone()),
                    driver,
                );
                // A closed receiver hands the grant back; dropping it queues its reclaim. A
                // grant that could not be made durable is given back the same way.
                self.hold(Box::new(move |durable| {
                    if durable {
                        let _ = reply.send(AcquireReply::Admitted(grant));
                    } else {
                        drop(grant);
                        let _ = reply.send(AcquireReply::Internal);
                    }
                }));
            }
            Err(_) => {
                // Only when the OS random source fails on the first lease; the entry (and its
                // span) was dropped with the error.
                let _ = self.registry.release(workspace, lease, Outcome::None, now);
                let _ = reply.send(AcquireReply::Internal);
            }
        }
    }

    fn cancel(&mut self, ticket: u64, now: Millis) {
        let Some((workspace, waiter)) = self.tickets.remove(&ticket) else {
            return;
        };
        let pending = self
            .pending
            .get_mut(&workspace)
            .and_then(|m| m.remove(&waiter));
        self.metrics
            .waiters_disconnected
            .fetch_add(1, Ordering::Relaxed);
        let rejection = self.registry.cancel(&workspace, waiter, now).ok().flatten();
        if let (Some(pending), Some(rejection)) = (pending, rejection) {
            if let Some(span) = pending.span {
                span.rejected(&rejection.evidence);
            }
            // An in-process caller that cancelled is still listening for this.
            let _ = pending.reply.send(AcquireReply::Rejected(rejection));
        }
        self.deliver(&workspace, now);
    }

    /// Forgets a budget of `workspace` (`ReleaseBudget`, or a release's `forget_budget`); with
    /// a lease log, its record joins the next flush.
    fn forget_budget(
        &mut self,
        workspace: &Arc<str>,
        budget: String,
        now: Millis,
    ) -> Result<bool, DriverError> {
        let result = self
            .registry
            .release_budget(workspace, &budget, now)
            .map_err(DriverError::from);
        self.deliver(workspace, now);
        self.journal_evicted_budgets();
        if result.is_ok() && self.keeps_leases {
            self.lease_events.push(LeaseEvent::BudgetReleased {
                workspace: workspace.clone(),
                budget,
            });
        }
        result
    }

    fn owned(&self, token: &LeaseToken, workspace: &str, principal: &str) -> bool {
        self.leases
            .get(token)
            .is_some_and(|e| &*e.workspace == workspace && &*e.principal == principal)
    }

    fn release(
        &mut self,
        token: LeaseToken,
        workspace: &str,
        principal: &str,
        outcome: Outcome,
        usage: ActualUsage,
        now: Millis,
    ) -> Result<Vec<BreakerTransition>, DriverError> {
        if !self.owned(&token, workspace, principal) {
            return Err(DriverError::UnknownLease);
        }
        let entry = self
            .leases
            .remove(&token)
            .ok_or(DriverError::UnknownLease)?;
        self.metrics.leases_released.fetch_add(1, Ordering::Relaxed);
        self.journal_lease(|| LeaseEvent::Released { token, usage });
        let paused_provider = match outcome {
            Outcome::RetryAfter { retry_after_ms } => self
                .registry
                .lease_charge(workspace, entry.lease)
                .map(|charge| (charge.provider_id, retry_after_ms)),
            _ => None,
        };
        let released = self
            .registry
            .release_with_usage(workspace, entry.lease, outcome, usage, now)
            .ok()
            .flatten();
        if let Some((provider_id, retry_after_ms)) = paused_provider {
            self.release_paused(workspace, provider_id, retry_after_ms, now);
        }
        let transitions = released.map(|r| r.breaker_transitions).unwrap_or_default();
        if let Some(span) = entry.span {
            span.released(&transitions);
        }
        self.deliver(workspace, now);
        Ok(transitions)
    }

    /// When the pause of a provider lane ends, if one is in force at `now`.
    fn pause_end(&self, workspace: &str, provider_id: &str, now: Millis) -> Option<Millis> {
        self.registry
            .lane_views(workspace, now)?
            .into_iter()
            .find(|lane| lane.provider_id == provider_id)?
            .paused_until
            .filter(|&until| until > now)
    }

    /// Reports a pause the core applied to the feed, and to the journal when no journaled
    /// pause of the lane is in force or it moves the end of the last journaled one by at least
    /// [`JOURNAL_EXTENSION_MS`](crate::pause::JOURNAL_EXTENSION_MS) (compared with the last
    /// *journaled* end, so extensions too small to journal one by one never add up to more).
    fn paused(&mut self, workspace: &str, pause: Pause, now: Millis) {
        let key: (Arc<str>, String) = (workspace.into(), pause.provider_id.clone());
        let journaled = match self.journaled_pauses.get(&key) {
            Some(&end) if end > now => {
                pause.until_epoch_ms >= end.saturating_add(crate::pause::JOURNAL_EXTENSION_MS)
            }
            _ => true,
        };
        if journaled {
            if self.journaled_pauses.len() >= JOURNALED_PAUSES_KEPT {
                self.journaled_pauses.retain(|_, end| *end > now);
            }
            self.journaled_pauses.insert(key, pause.until_epoch_ms);
            self.journal.provider_paused(workspace, &pause);
            // In this batch: the answer that caused the pause waits until it is durable.
            self.journal_lease(|| LeaseEvent::Paused {
                workspace: Arc::from(workspace),
                provider: pause.provider_id.clone(),
                until_epoch_ms: pause.until_epoch_ms,
            });
        }
        self.tally.pause(workspace, pause, now);
    }

    /// A lease released with outcome `retry-after` paused its provider lane: reports the pause
    /// with the instant the lane's pause now ends (the core keeps the later of the two).
    fn release_paused(
        &mut self,
        workspace: &str,
        provider_id: String,
        retry_after_ms: Millis,
        now: Millis,
    ) {
        // No pause in the lane view: the core applied none (a zero Retry-After).
        let Some(until) = self.pause_end(workspace, &provider_id, now) else {
            return;
        };
        let pause = Pause {
            provider_id,
            retry_after_ms,
            until_epoch_ms: until,
            at_epoch_ms: now,
            cause: PauseCause::ReleaseOutcome,
        };
        self.paused(workspace, pause, now);
    }

    fn heartbeat(
        &mut self,
        token: LeaseToken,
        workspace: &str,
        principal: &str,
        now: Millis,
    ) -> Result<Millis, DriverError> {
        let ttl = self.config.lease_ttl_ms.ok_or(DriverError::UnknownLease)?;
        let expires_at = now.saturating_add(ttl);
        if self.owned(&token, workspace, principal) && self.leases.extend(&token, expires_at) {
            Ok(expires_at)
        } else {
            Err(DriverError::UnknownLease)
        }
    }

    fn register(
        &mut self,
        (workspace, version, profile, profile_json): (String, String, Profile, String),
        actor: Option<String>,
        reply: oneshot::Sender<Result<Option<ProfileChangeRecord>, DriverError>>,
        now: Millis,
    ) {
        match self.registry.register(&workspace, &version, profile, now) {
            Err(error) => {
                let _ = reply.send(Err(DriverError::Registry(error)));
            }
            Ok(change) => {
                let answer = change.clone();
                if let Some(record) = &change {
                    self.tally.profile_change(&workspace, record, now);
                }
                let registration = Registration {
                    workspace: workspace.clone(),
                    profile_version: version,
                    profile_json,
                    change,
                    at: now,
                    actor,
                };
                self.journal.profile_registered(
                    registration,
                    Box::new(move |result| {
                        let _ = reply.send(result.map(|()| answer).map_err(DriverError::Journal));
                    }),
                );
                self.deliver(&workspace, now);
            }
        }
    }

    /// Puts back a lease a previous process granted and journaled (call before [`Driver::run`],
    /// after the registry replayed its profiles and restored budget spend). The lease keeps its
    /// token; it expires at the later of its journaled expiry and a full TTL from now. It is not
    /// journaled again (its `Granted` event is already durable).
    pub fn reinstate(&mut self, held: HeldLease) -> Result<(), ReinstateFailure> {
        if self.leases.get(&held.token).is_some() {
            return Err(ReinstateFailure::DuplicateToken);
        }
        let now = self.clock.now_ms();
        let lease = self
            .registry
            .reinstate(&held.workspace, &held.principal, &held.lease, now)?;
        let expires_at = match self.config.lease_ttl_ms {
            Some(ttl) => Some(now.saturating_add(ttl).max(held.expires_at.unwrap_or(0))),
            None => held.expires_at,
        };
        let entry = LeaseEntry {
            workspace: held.workspace,
            principal: held.principal,
            lease,
            expires_at,
            span: None,
        };
        if !self.leases.insert_with_token(held.token, entry) {
            return Err(ReinstateFailure::DuplicateToken);
        }
        self.metrics
            .leases_reinstated
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Adds a lease event to the current batch, when the journal keeps leases.
    fn journal_lease(&mut self, event: impl FnOnce() -> LeaseEvent) {
        // Evictions of the same core operation came first (the core evicts before it charges).
        self.journal_evicted_budgets();
        if self.keeps_leases {
            self.lease_events.push(event());
        }
    }

    /// Holds a reply until the current batch's lease events are durable; answers at once when
    /// the journal keeps no leases.
    fn hold(&mut self, reply: HeldReply) {
        if self.keeps_leases {
            self.held.push(reply);
        } else {
            reply(true);
        }
    }

    /// Budgets the core forgot for idleness are forgotten by the journal too (their spend lines
    /// would otherwise stay stored, and come back at every restart). Called before any other
    /// lease event is recorded, so an eviction is journaled before the grant that re-opened the
    /// same budget ID in the same operation.
    fn journal_evicted_budgets(&mut self) {
        while let Some((workspace, budget)) = self.registry.poll_evicted_budget() {
            if self.keeps_leases {
                self.lease_events.push(LeaseEvent::BudgetReleased {
                    workspace: Arc::from(workspace.as_str()),
                    budget,
                });
            }
        }
    }

    /// Hands the batch's lease events to the journal; its held replies go out when the journal
    /// reports them durable (on the journal's thread, in order).
    fn flush_lease_events(&mut self) {
        if self.held.is_empty() && self.lease_events.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        if self.lease_events.is_empty() {
            for reply in held {
                reply(true);
            }
            return;
        }
        let events = std::mem::take(&mut self.lease_events);
        let metrics = self.metrics.clone();
        self.journal.lease_events(
            events,
            Box::new(move |result| {
                let durable = result.is_ok();
                if !durable {
                    metrics.journal_failures.fetch_add(1, Ordering::Relaxed);
                }
                for reply in held {
                    reply(durable);
                }
            }),
        );
    }

    /// Delivers every resolution of `workspace`.
    fn deliver(&mut self, workspace: &str, now: Millis) {
        self.tally.touch(workspace, now);
        while let Some(resolution) = self.registry.poll_resolution(workspace) {
            let pending = self
                .pending
                .get_mut(workspace)
                .and_then(|m| m.remove(&resolution.waiter));
            if let Some(pending) = &pending {
                let (reason, delay) = match &resolution.outcome {
                    Ok(lease) => (Reason::Admitted, lease.evidence.queue_delay_ms),
                    Err(rejection) => (rejection.reason, 0),
                };
                if reason == Reason::Admitted {
                    self.fairness
                        .grant(workspace, &pending.principal, delay, now);
                }
                self.tally.decision(
                    workspace,
                    &pending.provider,
                    &pending.principal,
                    reason,
                    delay,
                    now,
                );
            }
            match (pending, resolution.outcome) {
                (Some(pending), Ok(lease)) => {
                    self.tickets.remove(&pending.ticket);
                    let ws: Arc<str> = Arc::from(workspace);
                    let admitted = Admitted {
                        lease: lease.id,
                        evidence: lease.evidence,
                        span: pending.span,
                        reply: pending.reply,
                    };
                    self.grant(&ws, &pending.principal, admitted, now);
                }
                (Some(pending), Err(rejection)) => {
                    self.tickets.remove(&pending.ticket);
                    if let Some(span) = pending.span {
                        span.rejected(&rejection.evidence);
                    }
                    let _ = pending.reply.send(AcquireReply::Rejected(rejection));
                }
                (None, Ok(lease)) => {
                    // Nobody waits for it (cancelled in the meantime): give it back.
                    let _ = self
                        .registry
                        .release(workspace, lease.id, Outcome::None, now);
                }
                (None, Err(_)) => {}
            }
        }
        if self.pending.get(workspace).is_some_and(HashMap::is_empty) {
            self.pending.remove(workspace);
        }
    }

    /// Hands every breaker transition the core made to the journal, each under its own
    /// workspace, consecutive transitions of one workspace in one call, and adds each to the
    /// current lease batch (`LeaseEvent::Breaker`), so the answer that caused it waits for it.
    fn journal_transitions(&mut self) {
        let mut batch: Option<(String, Vec<BreakerTransition>)> = None;
        while let Some((workspace, transition)) = self.registry.poll_transition() {
            self.tally
                .transition(&workspace, &transition, transition.at_epoch_ms);
            // In this batch: the answer that caused the transition waits until it is durable.
            self.journal_lease(|| LeaseEvent::Breaker {
                workspace: Arc::from(workspace.as_str()),
                transition: transition.clone(),
            });
            match &mut batch {
                Some((current, list)) if *current == workspace => list.push(transition),
                _ => {
                    if let Some((current, list)) = batch.take() {
                        self.journal.breaker_transitions(&current, &list);
                    }
                    batch = Some((workspace, vec![transition]));
                }
            }
        }
        if let Some((current, list)) = batch {
            self.journal.breaker_transitions(&current, &list);
        }
        self.metrics
            .transitions_dropped
            .store(self.registry.transitions_dropped(), Ordering::Relaxed);
        self.metrics
            .budgets_evicted
            .store(self.registry.budgets_evicted(), Ordering::Relaxed);
    }
}
