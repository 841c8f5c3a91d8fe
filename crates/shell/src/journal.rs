//! The journal: where the driver hands what must outlive the process (profile registrations,
//! breaker transitions, grants and releases of leases, budget releases), in the order the
//! registry applied them.
//!
//! The driver calls the journal synchronously from its task, so the journal sees changes in
//! registry order; a journal must not block for long (the server sends registrations to its
//! store thread, and appends lease events to its lease log with one `write(2)` per batch). A
//! registration is acknowledged to its caller only when the journal calls `done`.
//!
//! # Leases (group commit)
//!
//! Lease events are handed over once per driver batch ([`Journal::lease_events`]), as one
//! batch, in the order the driver applied them. The driver holds back the replies that depend
//! on them (a grant, a release, a budget release) until the journal calls `done`: a caller is
//! told "granted" only once the grant is durable, so a crash of the process after the reply
//! never loses a lease someone holds. On `Err` a held-back grant is given back and its caller
//! answered [`AcquireReply::Internal`](crate::AcquireReply::Internal); a release or budget
//! release is answered as done (it happened; a crash before it is durable would reinstate the
//! lease until its TTL, or keep the budget charged: the safe side). Heartbeats are not
//! journaled: a reinstated lease gets a fresh TTL from the restart, which is never earlier than
//! any expiry a heartbeat promised before the crash.
//!
//! Invariants: every transition reaches [`Journal::breaker_transitions`] exactly once, under the
//! workspace whose controller made it; every Retry-After pause the core applied reaches
//! [`Journal::provider_paused`] once, right after the command that caused it; when [`Journal::keeps_leases`], every lease the driver
//! grants reaches [`Journal::lease_events`] as `Granted` before its holder learns its token, and
//! as `Released` exactly once when it leaves the lease table (release, reclaim, expiry); every
//! pause that reaches [`Journal::provider_paused`] and every breaker transition also reaches
//! [`Journal::lease_events`] (`Paused`, `Breaker`) in the batch of the command that caused it,
//! so its answer (a release with outcome `retry-after`, a relayed Retry-After, a grant that
//! moved a breaker) waits until the lane state a restart needs is durable.
//!
//! # Lane state
//!
//! [`Journal::breaker_transitions`] and [`Journal::provider_paused`] are history (the server's
//! audit log, written after the answer); what a restart puts back comes from the `Paused` and
//! `Breaker` lease events, which are durable before it.

use std::sync::Arc;

use turnstile_admission::{
    ActualUsage, BreakerTransition, LeaseCharge, Millis, ProfileChangeRecord,
};

use crate::lease_table::LeaseToken;
use crate::pause::Pause;

/// A profile revision the registry accepted.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The workspace.
    pub workspace: String,
    /// The revision's version.
    pub profile_version: String,
    /// The profile as the caller sent it (replayed on restart).
    pub profile_json: String,
    /// The profile-change record, when the current revision changed.
    pub change: Option<ProfileChangeRecord>,
    /// When it was registered (the driver's clock).
    pub at: Millis,
    /// Who registered it and the approval on record (`Command::Register`).
    pub approval: Approval,
}

/// Who made a revision change and the approval on record for it, journaled with the change
/// (the host's audit log). Never a principal or workspace ID: `actor` is the host's name for
/// the acting credential (such as an admin key ID); `note` and `approved_by` are the operator's
/// free text. All `None` for a change the host made itself (a first start's demo profile).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approval {
    /// The acting credential, as the host names it.
    pub actor: Option<String>,
    /// The operator's note on the change.
    pub note: Option<String>,
    /// Who approved the change.
    pub approved_by: Option<String>,
}

/// Called once a registration is durable (`Ok`) or could not be made durable (`Err`).
pub type Done = Box<dyn FnOnce(Result<(), String>) + Send>;

/// A lease the driver granted, as it must outlive the process; also what a host hands back to
/// [`Driver::reinstate`](crate::Driver::reinstate) after a restart.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldLease {
    /// The lease ID its holder knows.
    pub token: LeaseToken,
    /// The lease's workspace.
    pub workspace: Arc<str>,
    /// The lease's principal.
    pub principal: Arc<str>,
    /// Its lane and what it charged (from the core).
    pub lease: LeaseCharge,
    /// When it expires without a heartbeat, as granted (`None`: never).
    pub expires_at: Option<Millis>,
}

/// One change to the held leases, a budget, or the state of a provider lane that a restart
/// puts back (its pause, its breaker).
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseEvent {
    /// A lease was granted.
    Granted(HeldLease),
    /// The lease left the table: released by its holder (with what the call used), reclaimed
    /// or expired (no usage).
    Released {
        /// The lease.
        token: LeaseToken,
        /// What the call used (none when reclaimed or expired).
        usage: ActualUsage,
    },
    /// An invocation's budget was released (forgotten whole).
    BudgetReleased {
        /// The workspace.
        workspace: Arc<str>,
        /// The budget.
        budget: String,
    },
    /// A provider lane was paused, or its pause moved, until `until_epoch_ms` (only the pauses
    /// [`Journal::provider_paused`] gets: extensions under
    /// [`JOURNAL_EXTENSION_MS`](crate::pause::JOURNAL_EXTENSION_MS) are not recorded).
    Paused {
        /// The workspace.
        workspace: Arc<str>,
        /// The provider lane.
        provider: String,
        /// When the pause ends.
        until_epoch_ms: Millis,
    },
    /// A provider lane's breaker changed state.
    Breaker {
        /// The workspace.
        workspace: Arc<str>,
        /// The transition.
        transition: BreakerTransition,
    },
}

/// Durable side effects of the driver.
pub trait Journal: Send + 'static {
    /// Records an accepted registration; calls `done` when it is durable.
    fn profile_registered(&mut self, registration: Registration, done: Done);
    /// Records breaker transitions of one workspace, oldest first.
    fn breaker_transitions(&mut self, workspace: &str, transitions: &[BreakerTransition]);
    /// Records a Retry-After pause of one of the workspace's provider lanes. A host that keeps
    /// them pauses the lane again after a restart until the pause's `until_epoch_ms` plus
    /// [`JOURNAL_EXTENSION_MS`](crate::pause::JOURNAL_EXTENSION_MS) (the server does, from the
    /// `Paused` lease event of the same pause). Journals that keep no history ignore it.
    fn provider_paused(&mut self, _workspace: &str, _pause: &Pause) {}
    /// Whether this journal keeps leases; when `false` the driver builds no lease events and
    /// holds back no reply.
    fn keeps_leases(&self) -> bool {
        true
    }
    /// Records one driver batch of lease events, in order; calls `done` when they are durable
    /// (all of them, or none: `Err`).
    fn lease_events(&mut self, events: Vec<LeaseEvent>, done: Done);
}

/// A journal that keeps nothing (in-process hosts such as the evaluator).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoJournal;

impl Journal for NoJournal {
    fn profile_registered(&mut self, _registration: Registration, done: Done) {
        done(Ok(()));
    }

    fn breaker_transitions(&mut self, _workspace: &str, _transitions: &[BreakerTransition]) {}

    fn keeps_leases(&self) -> bool {
        false
    }

    fn lease_events(&mut self, _events: Vec<LeaseEvent>, done: Done) {
        done(Ok(()));
    }
}
