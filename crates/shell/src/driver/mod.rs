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
//!   scheduler) and await a oneshot. A queued admission keeps its oneshot in `waiters` until the
//!   core resolves the waiter. Commands are taken in batches, which is what makes one task
//!   faster than a mutex here (measured: `docs/performance.md`).
//! - **The core decides.** The driver makes no admission decision of its own: refusals,
//!   "the pause outlasts your deadline", try-now and unknown providers all come from the core.
//!   The driver only translates a [`Wait`](crate::Wait) into the core's request, delivers
//!   resolutions, journals events and keeps the lease table.
//! - **Durable before the reply (group commit).** When the journal keeps leases, every grant,
//!   release and budget release of a batch becomes a [`LeaseEvent`](crate::LeaseEvent); after
//!   the batch the events go to the journal in one call and the replies that depend on them are
//!   held back until the journal reports them durable (see [`crate::journal`]). The task itself
//!   never waits: it takes the next batch while the journal commits the previous one.
//! - **Restarts.** A host reinstates the leases a previous process journaled with
//!   [`Driver::reinstate`] before [`Driver::run`]: each keeps its token (so its holder can
//!   release and heartbeat it) and counts in the core again; its expiry is the later of the
//!   journaled one and a full TTL from the restart (holders could not heartbeat while the
//!   service was down, and a restart must never free a lease early).
//! - **Nobody is left behind.** A caller waiting on a queued admission holds a
//!   [`CancelGuard`](crate::CancelGuard): if it goes away, the guard sends `Cancel`, which
//!   removes the waiter from the core's queue. A grant that reaches a caller who is already gone
//!   is a [`Grant`](crate::Grant) dropped unaccepted: its `Drop` sends `Reclaim` and the lease
//!   comes back.
//!
//! # Layout (one file per job)
//!
//! - `mod.rs` (this file): the task, its loop and timer, and the dispatch of each [`Command`]
//!   to one call into a job below; profile registration.
//! - `admit.rs`: admission delivery. Acquire, delivery of the core's resolutions, cancel and
//!   drain all end an admission through one `conclude`, which observes it, and answers its
//!   caller, exactly once; the queued callers (`Waiters`).
//! - `leases.rs`: the lease table's life cycle: grant, release, heartbeat, reclaim and expiry,
//!   budget releases, reinstatement after a restart.
//! - `commit.rs`: the group commit (`GroupCommit`): a batch's lease events go to the journal in
//!   one call, and the replies that depend on them wait until it is durable.
//! - `pauses.rs`: lane state a restart puts back: Retry-After pauses (and when one is worth
//!   journaling) and breaker transitions.
//! - `observe.rs`: what hosts and operators see: the one observation of each decision (feed
//!   tally and fairness window; the span is ended by `conclude`), the read-only queries, gauges.
//!
//! # Invariants
//!
//! - Every waiter the core queued for a caller is either resolved to that caller, or cancelled
//!   (caller gone, shutdown); the waiters by workspace and by ticket always describe the same
//!   waiters (`admit::Waiters` keeps both).
//! - Every lease in the [`LeaseTable`] is held in the core and is released exactly once; its
//!   span ends when it leaves the table.
//! - With a journal that keeps leases, no caller learns a lease token before the lease's
//!   `Granted` event is durable, and every lease that leaves the table is journaled `Released`
//!   once, after its `Granted` (`commit::GroupCommit`).
//! - Every breaker transition is handed to the [`Journal`] once, under its own workspace (the
//!   core tags it), right after the operation that made it.
//! - Every decision is observed once, by `admit::conclude` (span, feed tally, fairness window),
//!   and counted once, by the request's span (one metrics family).
//! - Workspace and principal IDs are never logged; metrics get decisions and reasons only.

mod admit;
mod commit;
mod leases;
mod observe;
mod pauses;
mod rollouts;

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use turnstile_admission::{Millis, Profile, ProfileChangeRecord, Registry};

use crate::clock::Clock;
use crate::command::Command;
use crate::error::DriverError;
use crate::feed::Feed;
use crate::handle::DriverHandle;
use crate::journal::{Approval, Journal, Registration};
use crate::lease_metrics::LeaseMetrics;
use crate::lease_table::LeaseTable;

use admit::Waiters;
use commit::GroupCommit;
pub use leases::ReinstateFailure;
use observe::Observer;
use pauses::JournaledPauses;

/// Commands taken per wake-up before the timer is re-armed.
const BATCH: usize = 256;

/// How the driver treats leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverConfig {
    /// Time to live of a lease without a heartbeat; `None`: leases never expire (in-process
    /// holders that release on drop).
    pub lease_ttl_ms: Option<Millis>,
}

/// The task state. Build with [`Driver::new`], run with [`Driver::run`] (or [`Driver::spawn`]).
pub struct Driver {
    registry: Registry,
    clock: Clock,
    config: DriverConfig,
    leases: LeaseTable,
    /// Queued admissions and their callers (`admit.rs`).
    waiters: Waiters,
    journal: Box<dyn Journal>,
    /// The current batch's lease events and the replies waiting for them (`commit.rs`).
    commit: GroupCommit,
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
    /// The event feed's tally and the fairness windows (`observe.rs`).
    observer: Observer,
    /// The last journaled pause end of each lane (`pauses.rs`).
    journaled_pauses: JournaledPauses,
    /// The profile text of each running rollout's candidate, by workspace (`rollouts.rs`).
    candidates: std::collections::HashMap<String, String>,
}

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
        let commit = GroupCommit::new(journal.keeps_leases());
        let driver = Driver {
            registry,
            clock,
            config,
            leases: LeaseTable::new(),
            waiters: Waiters::default(),
            journal,
            commit,
            metrics,
            tx: weak,
            rx,
            armed: None,
            timer_floor: 0,
            draining: false,
            stopped: false,
            observer: Observer::default(),
            journaled_pauses: JournaledPauses::default(),
            candidates: std::collections::HashMap::new(),
        };
        (driver, handle)
    }

    /// Publishes what changes on `feed` (see [`Feed`](crate::Feed) and `feed.rs`).
    pub fn with_feed(mut self, feed: Feed) -> Self {
        self.observer.set_feed(feed);
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
                    self.observer.start_batch();
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
            self.commit.flush(&mut *self.journal, &self.metrics);
            self.update_gauges();
            self.observer.flush_feed(&self.registry, &self.clock);
            if self.stopped {
                break;
            }
        }
    }

    fn next_wake(&self) -> Option<Millis> {
        let core = self.registry.poll_timeout();
        let lease = self.leases.next_expiry();
        let wake = [core, lease, self.observer.due()]
            .into_iter()
            .flatten()
            .min();
        wake.map(|at| at.max(self.timer_floor))
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

    /// One command: each arm is one call into the job that owns it.
    fn handle(&mut self, command: Command) {
        let now = self.clock.now_ms();
        self.reclaim_expired(now);
        match command {
            Command::Acquire(acquire) => self.acquire(*acquire, now),
            Command::Cancel { ticket } => self.cancel(ticket, now),
            Command::Reclaim { token } => self.reclaim(token, now),
            Command::Release {
                token,
                workspace,
                principal,
                outcome,
                usage,
                forget_budget,
                reply,
            } => self.release_command(
                token,
                (&workspace, &principal),
                (outcome, usage),
                forget_budget,
                reply,
                now,
            ),
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
                approval,
                at,
                reply,
            } => {
                let revision = (workspace, version, *profile, profile_json);
                self.register(revision, *approval, reply, at.unwrap_or(now))
            }
            Command::ReleaseBudget {
                workspace,
                budget,
                reply,
            } => self.release_budget(&workspace, budget, reply, now),
            Command::RetryAfter {
                workspace,
                provider,
                retry_after_ms,
                reply,
            } => self.retry_after(&workspace, provider, retry_after_ms, reply, now),
            Command::ProviderQuota {
                workspace,
                provider,
                quota,
            } => {
                let observed = self
                    .registry
                    .observe_provider_quota(&workspace, &provider, &quota, now);
                if observed.is_ok() {
                    self.deliver(&workspace, now);
                }
            }
            Command::Snapshot { workspace, reply } => {
                let _ = reply.send(self.snapshot(&workspace));
            }
            Command::Standing {
                workspace,
                principal,
                reply,
            } => {
                let _ = reply.send(self.standing(&workspace, &principal));
            }
            Command::LaneLimits {
                workspace,
                principal,
                provider,
                reply,
            } => {
                let _ = reply.send(self.lane_limits(&workspace, &principal, &provider));
            }
            Command::Lanes { workspace, reply } => {
                let _ = reply.send(self.lanes(&workspace, now));
            }
            Command::Workspaces { reply } => {
                let _ = reply.send(self.registry.workspaces());
            }
            Command::Fairness { workspace, reply } => {
                let _ = reply.send(self.fairness(&workspace, now));
            }
            Command::Timer { reply } => {
                let _ = reply.send((now, self.next_wake()));
            }
            Command::Drain { reply } => {
                self.drain(now);
                let _ = reply.send(());
            }
            Command::BucketLevels { reply } => {
                let _ = reply.send(self.draining.then(|| self.registry.bucket_levels(now)));
            }
            Command::Rollout(rollout) => self.rollout_command(*rollout, now),
            Command::Stop => self.stopped = true,
        }
        self.journal_transitions();
    }

    fn register(
        &mut self,
        (workspace, version, profile, profile_json): (String, String, Profile, String),
        approval: Approval,
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
                    self.observer.profile_change(&workspace, record, now);
                }
                let registration = Registration {
                    workspace: workspace.clone(),
                    profile_version: version,
                    profile_json,
                    change,
                    at: now,
                    approval,
                };
                self.journal_registration(registration, answer, reply);
                self.deliver(&workspace, now);
            }
        }
    }

    /// Journals a registration; `reply` gets `answer` once it is durable.
    fn journal_registration<T: Send + 'static>(
        &mut self,
        registration: Registration,
        answer: T,
        reply: oneshot::Sender<Result<T, DriverError>>,
    ) {
        self.journal.profile_registered(
            registration,
            Box::new(move |result| {
                let _ = reply.send(result.map(|()| answer).map_err(DriverError::Journal));
            }),
        );
    }
}
