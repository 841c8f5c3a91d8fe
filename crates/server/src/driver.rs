//! The driver: the one task that owns the sans-IO admission [`Registry`].
//!
//! # Design
//!
//! - **One owner, one clock, one timer.** Only this task touches the registry and reads the
//!   [`Clock`]. After every command it arms a single timer at the earliest of
//!   `registry.poll_timeout()` and the next lease expiry; when it fires, due workspaces get
//!   `handle_timeout(now)` and expired leases are reclaimed (released with `Outcome::None`).
//!   Nothing polls on an interval.
//! - **Commands in, oneshots out.** Handlers send a [`Command`] over an unbounded channel (the
//!   connection cap bounds how many can be in flight) and await a oneshot. A queued admission
//!   keeps its oneshot in `pending` until the core resolves the waiter.
//! - **Nobody is left behind.** A handler waiting on a queued admission holds a
//!   [`CancelGuard`]: if the client disconnects, the handler future is dropped and the guard
//!   sends [`Command::Cancel`], which removes the waiter from the core's queue. A grant that
//!   reaches a handler which is already gone is a [`Grant`] dropped unaccepted: its `Drop` sends
//!   [`Command::Reclaim`] and the lease is released at once.
//!
//! # Invariants
//!
//! - Every waiter the core queued for a client is either resolved to that client, or cancelled
//!   (client gone, shutdown); `pending` and `tickets` always describe the same waiters.
//! - Every lease in the [`LeaseTable`] is held in the core, and is released exactly once.
//! - Every granted lease has one open `decision.admit` span in `spans`, ended exactly when the
//!   lease leaves the table (release with its breaker transitions, reclaim, undeliverable); a
//!   request that is refused ends its span with the decision at once.
//! - Workspace and principal IDs are never logged; metrics get decisions and reasons only.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use turnstile_admission::{
    Acquired, ActualUsage, AdmissionRequest, BreakerTransition, Decision, Estimate, Evidence,
    LeaseId, Millis, Outcome, Profile, ProfileChangeRecord, Reason, Registry, RegistryError,
    Rejection, Snapshot, WaiterId,
};
use turnstile_decision::AdmitSpan;
use turnstile_store::service::{AuditKind, AuditRecord, StoredProfile};

use crate::clock::Clock;
use crate::error::ApiError;
use crate::lease::{LeaseEntry, LeaseTable, LeaseToken};
use crate::metrics::Metrics;
use crate::persist::{StoreHandle, StoreOp};

/// A request for a permit, already authenticated and validated.
pub struct AcquireCommand {
    pub ticket: u64,
    pub workspace: Arc<str>,
    pub principal: Arc<str>,
    pub provider_id: String,
    pub budget_id: String,
    pub estimate: Estimate,
    /// How long the request may wait, from the moment the driver sees it; 0 means "only if
    /// free now" (the core's `try_acquire`).
    pub wait_ms: Millis,
    /// The request's `decision.admit` span: closed on rejection, kept open with the lease.
    pub span: AdmitSpan,
    pub reply: oneshot::Sender<AcquireReply>,
}

/// Everything the driver can be asked.
pub enum Command {
    Acquire(AcquireCommand),
    /// The client of a queued admission is gone.
    Cancel {
        ticket: u64,
    },
    /// A grant could not be delivered; release it.
    Reclaim {
        token: LeaseToken,
    },
    Release {
        token: LeaseToken,
        workspace: Arc<str>,
        principal: Arc<str>,
        outcome: Outcome,
        /// What the call actually used (corrects the invocation's budgets).
        usage: ActualUsage,
        reply: oneshot::Sender<Result<Vec<BreakerTransition>, ApiError>>,
    },
    Heartbeat {
        token: LeaseToken,
        workspace: Arc<str>,
        principal: Arc<str>,
        reply: oneshot::Sender<Result<Millis, ApiError>>,
    },
    Register {
        workspace: String,
        version: String,
        profile: Profile,
        profile_json: String,
        reply: oneshot::Sender<Result<Option<ProfileChangeRecord>, ApiError>>,
    },
    ReleaseBudget {
        workspace: Arc<str>,
        budget: String,
        reply: oneshot::Sender<Result<bool, ApiError>>,
    },
    RetryAfter {
        workspace: Arc<str>,
        provider: String,
        retry_after_ms: Millis,
        reply: oneshot::Sender<Result<Millis, ApiError>>,
    },
    Snapshot {
        workspace: String,
        reply: oneshot::Sender<Option<WorkspaceSnapshot>>,
    },
    /// Shutdown: refuse new admissions, cancel every queued one.
    Drain {
        reply: oneshot::Sender<()>,
    },
    /// Ends the driver task (after connections have closed).
    Stop,
}

/// The answer to an admission request.
pub enum AcquireReply {
    Admitted(Grant),
    Rejected(Rejection),
    NoProfile,
    ShuttingDown,
    Internal,
}

/// A granted lease on its way to a client. Dropped without [`Grant::accept`], it gives the
/// lease back at once.
pub struct Grant {
    pub token: LeaseToken,
    pub expires_at: Millis,
    pub ttl_ms: Millis,
    pub evidence: Evidence,
    undo: Option<mpsc::UnboundedSender<Command>>,
}

impl Grant {
    /// The client has the lease now; dropping the grant no longer releases it.
    pub fn accept(&mut self) {
        self.undo = None;
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if let Some(tx) = self.undo.take() {
            let _ = tx.send(Command::Reclaim { token: self.token });
        }
    }
}

/// Aggregate state of one workspace (admin view); never a principal ID.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSnapshot {
    #[serde(flatten)]
    pub core: Snapshot,
    /// Leases the server holds for clients in this workspace.
    pub leases: usize,
    /// Admission requests of this workspace waiting for an answer.
    pub waiters: usize,
}

/// Cancels a queued admission when the handler waiting on it is dropped.
pub struct CancelGuard {
    ticket: u64,
    tx: mpsc::UnboundedSender<Command>,
    armed: bool,
}

impl CancelGuard {
    /// The answer arrived; nothing to cancel.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.tx.send(Command::Cancel {
                ticket: self.ticket,
            });
        }
    }
}

/// The handlers' side of the driver.
#[derive(Clone)]
pub struct DriverHandle {
    tx: mpsc::UnboundedSender<Command>,
    tickets: Arc<AtomicU64>,
}

impl DriverHandle {
    /// Sends a command built around a fresh oneshot and awaits its answer.
    pub async fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(command(reply))
            .map_err(|_| ApiError::ShuttingDown)?;
        rx.await.map_err(|_| ApiError::ShuttingDown)
    }

    /// A ticket and the guard that cancels it if the caller goes away.
    pub fn ticket(&self) -> (u64, CancelGuard) {
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        let guard = CancelGuard {
            ticket,
            tx: self.tx.clone(),
            armed: true,
        };
        (ticket, guard)
    }

    /// Sends without waiting for an answer.
    pub fn send(&self, command: Command) -> Result<(), ApiError> {
        self.tx.send(command).map_err(|_| ApiError::ShuttingDown)
    }
}

struct Pending {
    ticket: u64,
    principal: Arc<str>,
    span: AdmitSpan,
    reply: oneshot::Sender<AcquireReply>,
}

/// The task state. Build with [`Driver::new`], run with [`Driver::run`].
pub struct Driver {
    registry: Registry,
    clock: Clock,
    leases: LeaseTable,
    /// The open `decision.admit` span of every granted lease; ends with the lease.
    spans: HashMap<LeaseToken, AdmitSpan>,
    pending: HashMap<Arc<str>, HashMap<WaiterId, Pending>>,
    tickets: HashMap<u64, (Arc<str>, WaiterId)>,
    store: StoreHandle,
    metrics: Arc<Metrics>,
    lease_ttl_ms: Millis,
    tx: mpsc::UnboundedSender<Command>,
    rx: mpsc::UnboundedReceiver<Command>,
    /// No timer is armed before this instant (set after a timer fired, so a core that reports
    /// a due instant it did not consume cannot spin the task).
    timer_floor: Millis,
    draining: bool,
    stopped: bool,
}

impl Driver {
    /// A driver over `registry` (already holding the replayed profiles).
    pub fn new(
        registry: Registry,
        clock: Clock,
        store: StoreHandle,
        metrics: Arc<Metrics>,
        lease_ttl_ms: Millis,
    ) -> (Self, DriverHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = DriverHandle {
            tx: tx.clone(),
            tickets: Arc::new(AtomicU64::new(1)),
        };
        let driver = Driver {
            registry,
            clock,
            leases: LeaseTable::new(),
            spans: HashMap::new(),
            pending: HashMap::new(),
            tickets: HashMap::new(),
            store,
            metrics,
            lease_ttl_ms,
            tx,
            rx,
            timer_floor: 0,
            draining: false,
            stopped: false,
        };
        (driver, handle)
    }

    /// Runs until [`Command::Stop`].
    pub async fn run(mut self) {
        let sleep = tokio::time::sleep_until(tokio::time::Instant::now());
        tokio::pin!(sleep);
        let mut armed: Option<Millis> = None;
        loop {
            let wake = self.next_wake();
            if wake != armed {
                if let Some(at) = wake {
                    sleep
                        .as_mut()
                        .reset(tokio::time::Instant::from_std(self.clock.instant_at(at)));
                }
                armed = wake;
            }
            tokio::select! {
                biased;
                command = self.rx.recv() => {
                    let Some(command) = command else { break };
                    self.handle(command);
                    // Take whatever else is ready before re-arming the timer.
                    for _ in 0..256 {
                        match self.rx.try_recv() {
                            Ok(command) => self.handle(command),
                            Err(_) => break,
                        }
                    }
                }
                () = &mut sleep, if armed.is_some() => {
                    armed = None;
                    self.on_timer();
                }
            }
            self.update_gauges();
            if self.stopped {
                break;
            }
        }
    }

    fn next_wake(&self) -> Option<Millis> {
        let core = self.registry.poll_timeout();
        let lease = self.leases.next_expiry();
        let wake = match (core, lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
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
        let now = self.clock.now();
        self.timer_floor = now + 1;
        self.reclaim_expired(now);
        // Only the due workspaces are touched: the registry keeps their timeouts ordered.
        for ws in self.registry.handle_due(now) {
            self.drain(&ws, now);
        }
    }

    fn reclaim_expired(&mut self, now: Millis) {
        while let Some((token, entry)) = self.leases.pop_expired(now) {
            self.metrics.leases_expired.fetch_add(1, Ordering::Relaxed);
            self.end_span(&token, &[]);
            let _ = self
                .registry
                .release(&entry.workspace, entry.lease, Outcome::None, now);
            self.drain(&entry.workspace, now);
        }
    }

    fn handle(&mut self, command: Command) {
        let now = self.clock.now();
        self.reclaim_expired(now);
        match command {
            Command::Acquire(acquire) => self.acquire(acquire, now),
            Command::Cancel { ticket } => self.cancel(ticket, now),
            Command::Reclaim { token } => {
                if let Some(entry) = self.leases.remove(&token) {
                    self.metrics
                        .leases_undeliverable
                        .fetch_add(1, Ordering::Relaxed);
                    self.end_span(&token, &[]);
                    let _ =
                        self.registry
                            .release(&entry.workspace, entry.lease, Outcome::None, now);
                    self.drain(&entry.workspace, now);
                }
            }
            Command::Release {
                token,
                workspace,
                principal,
                outcome,
                usage,
                reply,
            } => {
                let result = self.release(token, &workspace, &principal, outcome, usage, now);
                let _ = reply.send(result);
            }
            Command::Heartbeat {
                token,
                workspace,
                principal,
                reply,
            } => {
                let owned = self
                    .leases
                    .get(&token)
                    .is_some_and(|e| e.workspace == workspace && e.principal == principal);
                let expires_at = now.saturating_add(self.lease_ttl_ms);
                let result = if owned && self.leases.extend(&token, expires_at) {
                    Ok(expires_at)
                } else {
                    Err(ApiError::unknown_lease())
                };
                let _ = reply.send(result);
            }
            Command::Register {
                workspace,
                version,
                profile,
                profile_json,
                reply,
            } => self.register(workspace, version, profile, profile_json, reply, now),
            Command::ReleaseBudget {
                workspace,
                budget,
                reply,
            } => {
                let result = self
                    .registry
                    .release_budget(&workspace, &budget, now)
                    .map_err(|_| ApiError::no_profile());
                self.drain(&workspace, now);
                let _ = reply.send(result);
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
                    .map_err(registry_error);
                self.drain(&workspace, now);
                let _ = reply.send(result);
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
            Command::Drain { reply } => {
                self.draining = true;
                let tickets: Vec<u64> = self.tickets.keys().copied().collect();
                for ticket in tickets {
                    if let Some((workspace, waiter)) = self.tickets.remove(&ticket) {
                        let pending = self
                            .pending
                            .get_mut(&workspace)
                            .and_then(|m| m.remove(&waiter));
                        if let Some(rejection) =
                            self.registry.cancel(&workspace, waiter, now).ok().flatten()
                        {
                            self.metrics.decision(Decision::Reject, rejection.reason);
                        }
                        if let Some(pending) = pending {
                            let _ = pending.reply.send(AcquireReply::ShuttingDown);
                        }
                        self.drain(&workspace, now);
                    }
                }
                let _ = reply.send(());
            }
            Command::Stop => self.stopped = true,
        }
    }

    fn acquire(&mut self, command: AcquireCommand, now: Millis) {
        let AcquireCommand {
            ticket,
            workspace,
            principal,
            provider_id,
            budget_id,
            estimate,
            wait_ms,
            span,
            reply,
        } = command;
        if self.draining {
            span.failed();
            let _ = reply.send(AcquireReply::ShuttingDown);
            return;
        }
        // The core refuses unknown providers (without keeping state for them), a pause or open
        // breaker that outlasts the deadline, and, for a zero wait, anything not free now.
        let request = AdmissionRequest::new(principal.to_string(), provider_id, budget_id)
            .with_estimate(estimate);
        let acquired = if wait_ms == 0 {
            self.registry
                .try_acquire(&workspace, request, now)
                .map(|tried| match tried {
                    Ok(lease) => Acquired::Admitted(lease),
                    Err(rejection) => Acquired::Rejected(rejection),
                })
        } else {
            let request = request.with_deadline(now.saturating_add(wait_ms));
            self.registry.acquire(&workspace, request, now)
        };
        match acquired {
            Err(_) => {
                span.failed();
                let _ = reply.send(AcquireReply::NoProfile);
            }
            Ok(Acquired::Admitted(lease)) => {
                self.metrics.decision(Decision::Admit, Reason::Admitted);
                let admitted = Admitted {
                    lease: lease.id,
                    evidence: lease.evidence,
                    span,
                    reply,
                };
                self.grant(&workspace, &principal, admitted, now);
            }
            Ok(Acquired::Rejected(rejection)) => {
                self.metrics.decision(Decision::Reject, rejection.reason);
                span.rejected(&rejection.evidence);
                let _ = reply.send(AcquireReply::Rejected(rejection));
            }
            Ok(Acquired::Queued { waiter, evidence }) => {
                self.metrics.decision(Decision::Defer, evidence.reason);
                self.tickets.insert(ticket, (workspace.clone(), waiter));
                self.pending.entry(workspace.clone()).or_default().insert(
                    waiter,
                    Pending {
                        ticket,
                        principal,
                        span,
                        reply,
                    },
                );
            }
        }
        self.drain(&workspace, now);
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
        let expires_at = now.saturating_add(self.lease_ttl_ms);
        let entry = LeaseEntry {
            workspace: workspace.clone(),
            principal: principal.clone(),
            lease,
            expires_at,
        };
        match self.leases.insert(entry) {
            Ok(token) => {
                self.metrics.leases_granted.fetch_add(1, Ordering::Relaxed);
                span.admitted(&evidence);
                self.spans.insert(token, span);
                let grant = Grant {
                    token,
                    expires_at,
                    ttl_ms: self.lease_ttl_ms,
                    evidence,
                    undo: Some(self.tx.clone()),
                };
                // A closed receiver hands the grant back; dropping it queues its reclaim.
                let _ = reply.send(AcquireReply::Admitted(grant));
            }
            Err(_) => {
                span.failed();
                let _ = self.registry.release(workspace, lease, Outcome::None, now);
                let _ = reply.send(AcquireReply::Internal);
            }
        }
    }

    fn cancel(&mut self, ticket: u64, now: Millis) {
        let Some((workspace, waiter)) = self.tickets.remove(&ticket) else {
            return;
        };
        if let Some(map) = self.pending.get_mut(&workspace) {
            map.remove(&waiter);
        }
        self.metrics
            .waiters_disconnected
            .fetch_add(1, Ordering::Relaxed);
        if let Some(rejection) = self.registry.cancel(&workspace, waiter, now).ok().flatten() {
            self.metrics.decision(Decision::Reject, rejection.reason);
        }
        self.drain(&workspace, now);
    }

    fn release(
        &mut self,
        token: LeaseToken,
        workspace: &str,
        principal: &str,
        outcome: Outcome,
        usage: ActualUsage,
        now: Millis,
    ) -> Result<Vec<BreakerTransition>, ApiError> {
        let owned = self
            .leases
            .get(&token)
            .is_some_and(|e| &*e.workspace == workspace && &*e.principal == principal);
        if !owned {
            return Err(ApiError::unknown_lease());
        }
        let entry = self
            .leases
            .remove(&token)
            .ok_or_else(ApiError::unknown_lease)?;
        self.metrics.leases_released.fetch_add(1, Ordering::Relaxed);
        let released = self
            .registry
            .release_with_usage(workspace, entry.lease, outcome, usage, now)
            .ok()
            .flatten();
        let transitions = released.map(|r| r.breaker_transitions).unwrap_or_default();
        self.end_span(&token, &transitions);
        self.drain(workspace, now);
        Ok(transitions)
    }

    fn register(
        &mut self,
        workspace: String,
        version: String,
        profile: Profile,
        profile_json: String,
        reply: oneshot::Sender<Result<Option<ProfileChangeRecord>, ApiError>>,
        now: Millis,
    ) {
        match self.registry.register(&workspace, &version, profile, now) {
            Err(error) => {
                let _ = reply.send(Err(registry_error(error)));
            }
            Ok(record) => {
                let change = record.as_ref().and_then(|r| {
                    serde_json::to_string(r).ok().map(|json| AuditRecord {
                        workspace_id: workspace.clone(),
                        kind: AuditKind::ProfileChange,
                        record_json: json,
                        at_epoch_ms: r.at_epoch_ms,
                    })
                });
                let stored = StoredProfile {
                    workspace_id: workspace.clone(),
                    profile_version: version,
                    profile_json,
                    registered_at_ms: now,
                };
                let op = StoreOp::AppendProfile {
                    profile: stored,
                    change,
                    done: Box::new(move |result| {
                        let _ = reply.send(result.map(|()| record).map_err(|_| ApiError::Storage));
                    }),
                };
                if !self.store.send(op) {
                    self.metrics.store_errors.fetch_add(1, Ordering::Relaxed);
                }
                self.drain(&workspace, now);
            }
        }
    }

    /// Ends the span of a lease that left the table (released, reclaimed, undeliverable).
    fn end_span(&mut self, token: &LeaseToken, transitions: &[BreakerTransition]) {
        if let Some(span) = self.spans.remove(token) {
            span.released(transitions);
        }
    }

    /// Delivers every resolution of `workspace` and persists its breaker transitions.
    fn drain(&mut self, workspace: &str, now: Millis) {
        while let Some(resolution) = self.registry.poll_resolution(workspace) {
            let pending = self
                .pending
                .get_mut(workspace)
                .and_then(|m| m.remove(&resolution.waiter));
            match (pending, resolution.outcome) {
                (Some(pending), Ok(lease)) => {
                    self.tickets.remove(&pending.ticket);
                    self.metrics.decision(Decision::Admit, Reason::Admitted);
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
                    self.metrics.decision(Decision::Reject, rejection.reason);
                    pending.span.rejected(&rejection.evidence);
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
        if let Some(map) = self.pending.get(workspace) {
            if map.is_empty() {
                self.pending.remove(workspace);
            }
        }
        self.flush_transitions();
    }

    /// Persists every breaker transition the core has emitted, each under the workspace the
    /// core tagged it with.
    fn flush_transitions(&mut self) {
        let mut records = Vec::new();
        while let Some((workspace_id, transition)) = self.registry.poll_transition() {
            self.metrics.breaker_transition(transition.to);
            if let Ok(json) = serde_json::to_string(&transition) {
                records.push(AuditRecord {
                    workspace_id,
                    kind: AuditKind::BreakerTransition,
                    record_json: json,
                    at_epoch_ms: transition.at_epoch_ms,
                });
            }
        }
        if records.is_empty() {
            return;
        }
        if !self.store.send(StoreOp::AppendAudit(records)) {
            self.metrics.store_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// An admission the core granted, on its way into the lease table.
struct Admitted {
    lease: LeaseId,
    evidence: Evidence,
    span: AdmitSpan,
    reply: oneshot::Sender<AcquireReply>,
}

/// The typed API error of a refused registration.
pub fn registry_error(error: RegistryError) -> ApiError {
    match error {
        RegistryError::Conflict { .. } | RegistryError::PrincipalConflict { .. } => {
            ApiError::Conflict(error.to_string())
        }
        RegistryError::InvalidProfile(profile_error) => ApiError::InvalidDefinition {
            field: profile_error.field().to_owned(),
            message: format!("invalid-definition: {profile_error}"),
        },
        RegistryError::Undigestable => ApiError::InvalidDefinition {
            field: "body".into(),
            message: error.to_string(),
        },
        RegistryError::UnknownWorkspace => ApiError::no_profile(),
        RegistryError::UnconfiguredProvider => ApiError::NotFound {
            code: "unconfigured-provider",
            message: "the workspace profile does not configure this provider".into(),
        },
    }
}
