//! Who governs an evaluation's admissions: a closed choice between the in-process driver
//! ([`Governor::Local`], an [`AdmissionDriver`] whose registry the evaluation's policy is
//! registered in) and a running turnstile service ([`Governor::Remote`], whose workspace profile
//! governs; nothing is registered).
//!
//! Decides, for both kinds, the four steps the evaluator takes: prepare (register the policy,
//! or check the service's profile covers every adapter of the binding), acquire (with the
//! attempt's deadline, estimate and the caller's cancellation), release (outcome and actual
//! usage, answering the breaker transitions it caused) and the invocation's budget release.
//!
//! Invariants: a [`GovernedLease`] is released exactly once, explicitly or (outcome `none`)
//! on drop, for both kinds; the release path answers `Vec<BreakerTransition>` for both; an
//! acquire cancelled by the caller answers the core's `cancelled` rejection for both.

use tokio_util::sync::CancellationToken;
use turnstile_admission::{
    ActualUsage, AdmissionRequest, BreakerTransition, Evidence, Millis, Outcome,
};

use crate::driver::AdmissionDriver;
use crate::error::AdmissionError;
use crate::plan::Plan;
use crate::policy::SchedulerPolicy;
use crate::reason::ResultReason;
use crate::remote::RemoteGovernor;
use crate::telemetry::AdmitSpan;
use crate::{AdmissionLease, Clock};

/// The admission source of a scheduled evaluation.
#[derive(Clone, Debug)]
pub enum Governor {
    /// The in-process driver: the policy is registered as a profile revision.
    Local(AdmissionDriver),
    /// A running service: its workspace profile governs (the key decides the workspace and
    /// principal; the policy's IDs and limits are not sent).
    Remote(RemoteGovernor),
}

impl From<AdmissionDriver> for Governor {
    fn from(driver: AdmissionDriver) -> Self {
        Governor::Local(driver)
    }
}

impl From<RemoteGovernor> for Governor {
    fn from(remote: RemoteGovernor) -> Self {
        Governor::Remote(remote)
    }
}

/// Why an evaluation could not be prepared for its governor: the result's reason and detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unprepared {
    pub reason: ResultReason,
    pub detail: String,
}

impl Governor {
    /// The in-process driver, when local.
    pub fn local(&self) -> Option<&AdmissionDriver> {
        match self {
            Governor::Local(driver) => Some(driver),
            Governor::Remote(_) => None,
        }
    }

    /// The clock attempts are timed with: the driver's, or the system clock for a service.
    pub fn clock(&self) -> Clock {
        match self {
            Governor::Local(driver) => driver.clock(),
            Governor::Remote(_) => Clock::system(),
        }
    }

    /// Registers the policy (local) or checks the service's profile covers every adapter of
    /// the binding (remote).
    pub(crate) async fn prepare(
        &self,
        policy: &SchedulerPolicy,
        plan: &Plan,
    ) -> Result<(), Unprepared> {
        match self {
            Governor::Local(driver) => driver
                .register(
                    &policy.workspace.id,
                    &policy.profile_version,
                    policy.profile(),
                )
                .await
                .map(drop)
                .map_err(|error| Unprepared {
                    reason: ResultReason::InvalidDefinition,
                    detail: error.to_string(),
                }),
            Governor::Remote(remote) => {
                let adapters: Vec<&str> = plan
                    .aliases
                    .iter()
                    .flat_map(|alias| alias.binding.targets.iter())
                    .map(|target| target.adapter.as_str())
                    .collect();
                remote
                    .check_lanes(&adapters)
                    .await
                    .map_err(|error| Unprepared {
                        reason: error.result_reason(),
                        detail: error.to_string(),
                    })
            }
        }
    }

    /// Asks for a permit for `request` (its `deadline` on [`Governor::clock`]); a queued
    /// request is cancelled as soon as `cancel` fires. The `decision.admit` span ends on
    /// refusal and is owned by the lease on admission.
    pub async fn acquire(
        &self,
        workspace_id: &str,
        request: AdmissionRequest,
        cancel: Option<&CancellationToken>,
        span: Option<AdmitSpan>,
    ) -> Result<GovernedLease, AdmissionError> {
        match self {
            Governor::Local(driver) => driver
                .acquire_traced(workspace_id, request, cancel, span)
                .await
                .map(GovernedLease::Local),
            Governor::Remote(remote) => {
                let now = Clock::system().now_ms();
                let wait_ms = request.deadline.map(|d: Millis| d.saturating_sub(now));
                remote
                    .acquire(&request, wait_ms, cancel, span)
                    .await
                    .map(GovernedLease::Remote)
            }
        }
    }

    /// Forgets the invocation's budgets; answers whether it had spent anything (`false` when
    /// the service could not be reached).
    pub async fn release_budget(&self, workspace_id: &str, budget_id: &str) -> bool {
        match self {
            Governor::Local(driver) => driver.release_budget(workspace_id, budget_id).await,
            Governor::Remote(remote) => remote.release_budget(budget_id).await,
        }
    }
}

/// A granted permit of either kind.
#[derive(Debug)]
pub enum GovernedLease {
    /// Granted by the in-process driver.
    Local(AdmissionLease),
    /// Granted by a running service (heartbeated in the background).
    Remote(crate::remote::RemoteLease),
}

impl GovernedLease {
    /// The admission's evidence.
    pub fn evidence(&self) -> &Evidence {
        match self {
            GovernedLease::Local(lease) => lease.evidence(),
            GovernedLease::Remote(lease) => lease.evidence(),
        }
    }

    /// Releases with the call's outcome and usage; answers the breaker transitions the outcome
    /// caused (none when the release could not be made: the lease then ends with its TTL).
    pub async fn release(self, outcome: Outcome, usage: ActualUsage) -> Vec<BreakerTransition> {
        match self {
            GovernedLease::Local(lease) => lease.release(outcome, usage).await.unwrap_or_default(),
            GovernedLease::Remote(lease) => lease.release(outcome, usage).await,
        }
    }
}
