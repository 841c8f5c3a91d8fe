//! The evaluator's admission driver: the shell's one driver task
//! ([`turnstile_shell::Driver`]) with an in-process face.
//!
//! # Design
//!
//! The evaluator shares the service's driver: one task owns the registry, reads the one
//! [`Clock`] (tokio time, so evaluations run unchanged under `tokio::time::pause()`), arms one
//! timer at the core's `poll_timeout()`, and handles due workspaces with `handle_due`. The core
//! makes every admission decision, so the evaluator and the service answer the same situation
//! the same way. This type only turns an [`AdmissionRequest`] into the driver's command and
//! its answer into an [`AdmissionLease`] or an [`AdmissionError`].
//!
//! # Invariants
//!
//! - A queued acquire is resolved exactly once: with a lease or a rejection. Dropping the
//!   acquire future cancels the waiter; a lease granted after that is given back.
//! - An [`AdmissionLease`] is released exactly once: explicitly with its outcome, or with no
//!   outcome when dropped. Its `decision.admit` span ends with it.
//! - Leases of in-process holders have no TTL: they release on drop.
//! - Profile changes and breaker transitions are kept as history (the last 64 of each per
//!   workspace, `crate::history`), shared by every clone, and answered like the service's
//!   `GET …/profiles` and `GET …/breakers`.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use turnstile_admission::{
    AdmissionRequest, BreakerTransition, Millis, Profile, ProfileChangeRecord, RegistryError,
    Snapshot,
};
use turnstile_shell::{
    Acquire, AcquireReply, AdmitSpan, Clock, Driver, DriverConfig, DriverError, DriverHandle,
    LeaseMetrics, Wait,
};

use crate::error::AdmissionError;
use crate::history::History;
use crate::AdmissionLease;

/// A cloneable handle to one registry driven on tokio time.
#[derive(Clone, Debug)]
pub struct AdmissionDriver {
    handle: DriverHandle,
    clock: Clock,
    history: History,
}

impl AdmissionDriver {
    /// Drives `registry` with a clock that reads Unix epoch milliseconds. Must be called inside
    /// a tokio runtime (it spawns the driver task).
    pub fn new(registry: turnstile_admission::Registry) -> Self {
        Self::with_clock(registry, Clock::system())
    }

    /// Drives `registry` with the given clock (tests use `Clock::starting_at(0)`).
    pub fn with_clock(registry: turnstile_admission::Registry, clock: Clock) -> Self {
        let config = DriverConfig { lease_ttl_ms: None };
        let history = History::default();
        let (handle, _task) = Driver::spawn(
            registry,
            clock,
            config,
            Box::new(history.journal()),
            Arc::new(LeaseMetrics::default()),
        );
        AdmissionDriver {
            handle,
            clock,
            history,
        }
    }

    /// The driver's clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The clock's current reading.
    pub fn now_ms(&self) -> Millis {
        self.clock.now_ms()
    }

    /// The shell handle (for hosts that need the raw protocol).
    pub fn handle(&self) -> &DriverHandle {
        &self.handle
    }

    /// Registers a profile revision (see `Registry::register`).
    pub async fn register(
        &self,
        workspace_id: &str,
        profile_version: &str,
        profile: Profile,
    ) -> Result<Option<ProfileChangeRecord>, AdmissionError> {
        self.handle
            .register(workspace_id, profile_version, profile, String::new())
            .await
            .map_err(admission_error)
    }

    /// The workspace's last profile-change records (at most 64), oldest first, like the
    /// service's `GET /v1/workspaces/{id}/profiles`: one per registration that changed the
    /// current revision (`initial`, `change`, `rollback`); empty for an unknown workspace.
    pub async fn profile_history(&self, workspace_id: &str) -> Vec<ProfileChangeRecord> {
        self.history.profiles(workspace_id)
    }

    /// The workspace's last breaker transitions (at most 64), oldest first, like the service's
    /// `GET /v1/workspaces/{id}/breakers`; empty for an unknown workspace.
    pub async fn breaker_history(&self, workspace_id: &str) -> Vec<BreakerTransition> {
        self.history.breakers(workspace_id)
    }

    /// Aggregate counts of a workspace (with the core's peak totals).
    pub async fn snapshot(&self, workspace_id: &str) -> Option<Snapshot> {
        self.handle
            .snapshot(workspace_id)
            .await
            .ok()
            .flatten()
            .map(|s| s.core)
    }

    /// The largest workspace-wide `(active, queued)` counts the core has seen (its high-water
    /// marks, kept in the core's snapshot); `None` without a profile.
    pub async fn peak_totals(&self, workspace_id: &str) -> Option<(u64, u64)> {
        self.snapshot(workspace_id)
            .await
            .map(|s| (s.peak_active, s.peak_queued))
    }

    /// The instant the driver's one timer is armed for, if any.
    pub async fn armed_timer(&self) -> Option<Millis> {
        self.handle.timer().await.ok().and_then(|(_, armed)| armed)
    }

    /// Forgets the budgets of one invocation.
    pub async fn release_budget(&self, workspace_id: &str, budget_id: &str) -> bool {
        self.handle
            .release_budget(workspace_id, budget_id)
            .await
            .unwrap_or(false)
    }

    /// Pauses a provider lane of a workspace; answers when the pause ends.
    pub async fn coordinate_retry_after(
        &self,
        workspace_id: &str,
        provider_id: &str,
        retry_after_ms: Millis,
    ) -> Result<Millis, AdmissionError> {
        self.handle
            .retry_after(workspace_id, provider_id, retry_after_ms)
            .await
            .map_err(admission_error)
    }

    /// Asks for a permit and waits for it. Dropping the returned future while the request is
    /// queued cancels the waiter.
    pub async fn acquire(
        &self,
        workspace_id: &str,
        request: AdmissionRequest,
    ) -> Result<AdmissionLease, AdmissionError> {
        self.acquire_traced(workspace_id, request, None, None).await
    }

    /// Like [`acquire`](Self::acquire), but a queued request is cancelled as soon as `cancel`
    /// fires, and the `cancelled` rejection (with its evidence) is returned.
    pub async fn acquire_or_cancel(
        &self,
        workspace_id: &str,
        request: AdmissionRequest,
        cancel: &CancellationToken,
    ) -> Result<AdmissionLease, AdmissionError> {
        self.acquire_traced(workspace_id, request, Some(cancel), None)
            .await
    }

    /// The general form: an optional cancellation and an optional `decision.admit` span, which
    /// the driver ends on refusal and the lease owns on admission.
    pub async fn acquire_traced(
        &self,
        workspace_id: &str,
        request: AdmissionRequest,
        cancel: Option<&CancellationToken>,
        span: Option<AdmitSpan>,
    ) -> Result<AdmissionLease, AdmissionError> {
        let wait = match request.deadline {
            Some(deadline) => Wait::Until(deadline),
            None => Wait::Unbounded,
        };
        let acquire = Acquire {
            workspace: Arc::from(workspace_id),
            principal: Arc::from(request.principal_id),
            provider_id: request.provider_id,
            budget_id: request.budget_id,
            estimate: request.estimate,
            wait,
            span,
        };
        let reply = match cancel {
            None => self.handle.acquire(acquire).await,
            Some(token) => self.handle.acquire_until(acquire, token.cancelled()).await,
        };
        match reply {
            Ok(AcquireReply::Admitted(grant)) => Ok(grant),
            Ok(AcquireReply::Rejected(rejection)) => Err(AdmissionError::Rejected(rejection)),
            Ok(AcquireReply::NoProfile) => {
                Err(AdmissionError::Registry(RegistryError::UnknownWorkspace))
            }
            Ok(AcquireReply::ShuttingDown | AcquireReply::Internal) | Err(_) => {
                Err(AdmissionError::Unavailable)
            }
        }
    }
}

fn admission_error(error: DriverError) -> AdmissionError {
    match error {
        DriverError::Registry(error) => AdmissionError::Registry(error),
        // The evaluator sends no rollout command.
        DriverError::UnknownLease
        | DriverError::Journal(_)
        | DriverError::ShuttingDown
        | DriverError::Rollout(_) => AdmissionError::Unavailable,
    }
}
