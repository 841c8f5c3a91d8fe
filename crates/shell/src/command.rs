//! The driver's protocol: the commands a host sends and the answers it gets back.
//!
//! Every command that expects an answer carries a oneshot sender; the driver answers each
//! exactly once (a dropped sender means the driver has stopped).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::oneshot;
use turnstile_admission::{
    ActualUsage, BreakerTransition, BucketLevels, Estimate, LaneView, Limits, Millis, Outcome,
    Profile, ProfileChangeRecord, ProviderQuota, Rejection, Snapshot,
};

use crate::error::DriverError;
use crate::fairness::FairnessView;
use crate::grant::Grant;
use crate::journal::Approval;
use crate::lease_table::LeaseToken;
use crate::telemetry::AdmitSpan;

/// How long an admission request may wait for a permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Admit only if a permit is free now; otherwise refuse at once with the real reason.
    NoWait,
    /// Up to this many milliseconds from the moment the driver sees the request (`For(0)` is
    /// `NoWait`).
    For(Millis),
    /// Until this instant on the driver's clock.
    Until(Millis),
    /// Until a permit is free or the request is cancelled (dwell bounds of the profile still
    /// apply).
    Unbounded,
}

/// One admission request, as a host states it (already authenticated and validated).
pub struct Acquire {
    /// The caller's workspace.
    pub workspace: Arc<str>,
    /// The calling principal (never observed in spans, metrics or logs).
    pub principal: Arc<str>,
    /// The provider lane the call goes to.
    pub provider_id: String,
    /// The invocation budget the call is charged to.
    pub budget_id: String,
    /// What the call is expected to use.
    pub estimate: Estimate,
    /// How long it may wait for a permit.
    pub wait: Wait,
    /// The request's `decision.admit` span: ended on refusal, owned by the lease on admission.
    pub span: Option<AdmitSpan>,
}

/// An [`Acquire`] on its way to the driver.
pub struct AcquireCommand {
    /// From [`DriverHandle::ticket`](crate::DriverHandle::ticket); names the request for
    /// cancellation.
    pub ticket: u64,
    /// The request.
    pub request: Acquire,
    /// Where the answer goes.
    pub reply: oneshot::Sender<AcquireReply>,
}

/// Everything the driver can be asked.
///
/// Every command is moved through the driver's channel (written into its slot, read out, and
/// moved into the driver's `match`), so each variant is kept to a few words: the large ones
/// ([`AcquireCommand`], a profile) are boxed. `commands_stay_small` holds the size.
pub enum Command {
    /// Admit a request (its answer goes to its `reply`).
    Acquire(Box<AcquireCommand>),
    /// The caller of a queued admission is gone.
    Cancel {
        /// The ticket of the request.
        ticket: u64,
    },
    /// A granted lease whose holder is gone (an undelivered grant, a dropped lease): release
    /// it with no outcome.
    Reclaim {
        /// The lease.
        token: LeaseToken,
    },
    /// A holder releases its lease with the call's outcome.
    Release {
        /// The lease.
        token: LeaseToken,
        /// The lease's workspace (checked against the lease).
        workspace: Arc<str>,
        /// The lease's principal (checked against the lease).
        principal: Arc<str>,
        /// How the call ended.
        outcome: Outcome,
        /// What the call actually used (corrects the invocation's budgets).
        usage: ActualUsage,
        /// A budget of the workspace to forget right after the release, exactly as a
        /// [`Command::ReleaseBudget`] sent next would (a caller's per-call budget): one
        /// command and one wake-up instead of two. Forgotten whether or not the release found
        /// the lease.
        forget_budget: Option<String>,
        /// Answered with the breaker transitions the release caused.
        reply: oneshot::Sender<Result<Vec<BreakerTransition>, DriverError>>,
    },
    /// A holder keeps its lease alive (answered with its new expiry).
    Heartbeat {
        /// The lease.
        token: LeaseToken,
        /// The lease's workspace (checked against the lease).
        workspace: Arc<str>,
        /// The lease's principal (checked against the lease).
        principal: Arc<str>,
        /// Answered with the instant the lease now expires.
        reply: oneshot::Sender<Result<Millis, DriverError>>,
    },
    /// Register a workspace's profile revision.
    Register {
        /// The workspace.
        workspace: String,
        /// The revision's version.
        version: String,
        /// The parsed profile.
        profile: Box<Profile>,
        /// The profile as the caller sent it (journaled, replayed on restart).
        profile_json: String,
        /// Who registers it and the approval on record (the host's name for the acting
        /// credential, such as an admin key ID, the note, the approver), journaled with the
        /// registration; never a principal or workspace ID.
        approval: Box<Approval>,
        /// When the registration was made, if not now: a replica applying a registration
        /// another replica made (the shared feed, `docs/replicas.md`) passes the original
        /// instant, so its profile-change record is the original's. The controller's clock
        /// never goes back (it takes the later of this and its last instant).
        at: Option<Millis>,
        /// Answered with the profile-change record, when the current revision changed.
        reply: oneshot::Sender<Result<Option<ProfileChangeRecord>, DriverError>>,
    },
    /// Forget one invocation budget of a workspace (answered with whether it existed).
    ReleaseBudget {
        /// The workspace.
        workspace: Arc<str>,
        /// The budget.
        budget: String,
        /// Answered with whether the budget existed.
        reply: oneshot::Sender<Result<bool, DriverError>>,
    },
    /// Pause a provider lane for a provider's Retry-After.
    RetryAfter {
        /// The workspace.
        workspace: Arc<str>,
        /// The provider lane.
        provider: String,
        /// How long the provider asked to wait.
        retry_after_ms: Millis,
        /// Answered with the instant the pause ends.
        reply: oneshot::Sender<Result<Millis, DriverError>>,
    },
    /// What a provider answer announced of the account's quota for a provider lane (its
    /// rate-limit headers): the lane holds its callers to it (`Registry::observe_provider_quota`).
    /// Not answered: applied in command order, so before any later release of the same call; an
    /// unknown workspace or provider changes nothing.
    ProviderQuota {
        /// The workspace.
        workspace: Arc<str>,
        /// The provider lane.
        provider: String,
        /// What the answer announced.
        quota: ProviderQuota,
    },
    /// The aggregate state of a workspace (`None` without a profile).
    Snapshot {
        /// The workspace.
        workspace: String,
        /// Where the snapshot goes.
        reply: oneshot::Sender<Option<WorkspaceSnapshot>>,
    },
    /// Whether the workspace's current profile names this principal (hosts gate a principal's
    /// powers on it: a principal the profile no longer names keeps none).
    Standing {
        /// The workspace.
        workspace: Arc<str>,
        /// The principal.
        principal: Arc<str>,
        /// Where the standing goes.
        reply: oneshot::Sender<Standing>,
    },
    /// The current limits of one lane's three scopes (`None` without a profile, or when the
    /// profile names neither the principal nor the provider): what a replica shares.
    LaneLimits {
        /// The workspace.
        workspace: Arc<str>,
        /// The principal.
        principal: Arc<str>,
        /// The provider lane.
        provider: String,
        /// Where the limits go.
        reply: oneshot::Sender<Option<LaneLimits>>,
    },
    /// The live view of a workspace's provider lanes, with the driver's clock reading (`None`
    /// without a profile).
    Lanes {
        /// The workspace.
        workspace: String,
        /// Where the lanes go.
        reply: oneshot::Sender<Option<(Millis, Vec<LaneView>)>>,
    },
    /// Every workspace with a registered profile and its current revision, by workspace ID.
    Workspaces {
        /// Where the list goes.
        reply: oneshot::Sender<Vec<(String, String)>>,
    },
    /// The workspace's fairness window (grants and queue delay per principal over the last
    /// minutes, `crate::fairness`); `None` without a profile.
    Fairness {
        /// The workspace.
        workspace: String,
        /// Where the window goes.
        reply: oneshot::Sender<Option<FairnessView>>,
    },
    /// The driver's clock reading and the instant its one timer is armed for.
    Timer {
        /// Where the reading goes.
        reply: oneshot::Sender<(Millis, Option<Millis>)>,
    },
    /// Shutdown: refuse new admissions, cancel every queued one.
    Drain {
        /// Answered once draining.
        reply: oneshot::Sender<()>,
    },
    /// Every workspace's bucket levels, read now; answered only once draining (no grant can
    /// follow the reading), `None` before.
    BucketLevels {
        /// Answered with the levels once draining.
        reply: oneshot::Sender<Option<BTreeMap<String, BucketLevels>>>,
    },
    /// Start, read, promote or abort a rollout, or list past ones (`rollout.rs`).
    Rollout(Box<crate::rollout::RolloutCommand>),
    /// Ends the driver task.
    Stop,
}

/// The limits of a lane's principal, workspace and provider scopes under the current profile.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneLimits {
    /// The principal scope's limits.
    pub principal: Limits,
    /// The workspace scope's limits.
    pub workspace: Limits,
    /// The provider scope's limits.
    pub provider: Limits,
}

/// A principal's standing under its workspace's current profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The workspace has no registered profile.
    NoProfile,
    /// The current profile names the principal.
    Named,
    /// The current profile does not name the principal (its admissions are `disabled`).
    NotNamed,
}

/// The answer to an admission request.
pub enum AcquireReply {
    /// Admitted: the grant holds the permit until released or dropped.
    Admitted(Grant),
    /// Refused, with the core's reason and evidence.
    Rejected(Rejection),
    /// The workspace has no registered profile.
    NoProfile,
    /// The driver is shutting down.
    ShuttingDown,
    /// The lease could not be recorded (the token generator could not be seeded).
    Internal,
}

/// Aggregate state of one workspace (admin view); never a principal ID.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSnapshot {
    #[serde(flatten)]
    /// The core's aggregate view of the workspace.
    pub core: Snapshot,
    /// Leases the driver holds for callers in this workspace.
    pub leases: usize,
    /// Admission requests of this workspace waiting for an answer.
    pub waiters: usize,
}

#[cfg(test)]
mod tests {
    #[test]
    fn commands_stay_small() {
        // Every command is copied into the driver's channel and out again: the large ones are
        // boxed, so a move is a few words (was 440 bytes with the profile and acquire inline).
        assert!(
            std::mem::size_of::<super::Command>() <= 160,
            "{} bytes",
            std::mem::size_of::<super::Command>()
        );
    }
}
