//! Rollouts through the driver (issue 33; the semantics are the core's, `turnstile_admission`'s
//! `rollout.rs`): the commands ([`RolloutCommand`]) and the [`DriverHandle`] calls that send
//! them. The driver carries them out in `driver/rollouts.rs`.
//!
//! # What it decides
//!
//! Only the wire between a host and the driver task: each call is one command and one answer,
//! so a rollout starts, is read, promoted or aborted between two admissions, never during one.
//! A promote is journaled exactly as a registration of the candidate revision (so a restart
//! replays it as current); a start and an abort are not journaled by the driver (the candidate
//! was never current; a host that audits them records them itself).

use tokio::sync::oneshot;
use turnstile_admission::{
    Evidence, FinishedRollout, Profile, ProfileChangeRecord, RolloutMode, RolloutView,
};

use crate::command::Command;
use crate::error::DriverError;
use crate::handle::DriverHandle;
use crate::journal::Approval;

/// A promoted rollout: its record, and the profile-change record of the revision it made
/// current.
pub type Promoted = (FinishedRollout, Option<ProfileChangeRecord>);

/// A rollout command for the driver (boxed in [`Command::Rollout`]).
pub enum RolloutCommand {
    /// Start a rollout of a candidate revision.
    Start {
        /// The workspace.
        workspace: String,
        /// The candidate revision.
        revision: String,
        /// The candidate's parsed profile.
        profile: Box<Profile>,
        /// The candidate's profile as the caller sent it (journaled if it is promoted).
        profile_json: String,
        /// Shadow or canary.
        mode: RolloutMode,
        /// Answered with the rollout as started.
        reply: oneshot::Sender<Result<RolloutView, DriverError>>,
    },
    /// Read the running rollout.
    Current {
        /// The workspace.
        workspace: String,
        /// Answered with the rollout, if one runs.
        reply: oneshot::Sender<Option<RolloutView>>,
    },
    /// Make the candidate current and end the rollout.
    Promote {
        /// The workspace.
        workspace: String,
        /// Who promotes and the approval on record (journaled with the registration, as for
        /// [`DriverHandle::register`]); never a principal or workspace ID.
        approval: Approval,
        /// Answered once the registration is durable.
        reply: oneshot::Sender<Result<Promoted, DriverError>>,
    },
    /// End the rollout; the active revision stays.
    Abort {
        /// The workspace.
        workspace: String,
        /// Answered with the finished rollout.
        reply: oneshot::Sender<Result<FinishedRollout, DriverError>>,
    },
    /// The revision that made a decision, from its evidence (see the core's
    /// `Registry::revision_of`): a canary candidate's, or the current revision.
    RevisionOf {
        /// The workspace.
        workspace: String,
        /// The decision's `Evidence::candidate`.
        candidate: bool,
        /// Answered with the revision (none without a profile).
        reply: oneshot::Sender<Option<String>>,
    },
    /// The finished rollouts kept.
    History {
        /// The workspace.
        workspace: String,
        /// Answered oldest first.
        reply: oneshot::Sender<Vec<FinishedRollout>>,
    },
}

impl DriverHandle {
    /// Starts a rollout of `revision` in `workspace` (see the core's `Registry::start_rollout`).
    pub async fn start_rollout(
        &self,
        workspace: &str,
        revision: &str,
        (profile, profile_json): (Profile, String),
        mode: RolloutMode,
    ) -> Result<RolloutView, DriverError> {
        self.ask(|reply| {
            Command::Rollout(Box::new(RolloutCommand::Start {
                workspace: workspace.to_owned(),
                revision: revision.to_owned(),
                profile: Box::new(profile),
                profile_json,
                mode,
                reply,
            }))
        })
        .await?
    }

    /// The running rollout of `workspace` with its decision comparison, if one runs.
    pub async fn rollout(&self, workspace: &str) -> Result<Option<RolloutView>, DriverError> {
        self.ask(|reply| {
            Command::Rollout(Box::new(RolloutCommand::Current {
                workspace: workspace.to_owned(),
                reply,
            }))
        })
        .await
    }

    /// Promotes the running rollout's candidate; answers once the registration is durable.
    pub async fn promote_rollout(
        &self,
        workspace: &str,
        approval: Approval,
    ) -> Result<Promoted, DriverError> {
        self.ask(|reply| {
            Command::Rollout(Box::new(RolloutCommand::Promote {
                workspace: workspace.to_owned(),
                approval,
                reply,
            }))
        })
        .await?
    }

    /// Aborts the running rollout.
    pub async fn abort_rollout(&self, workspace: &str) -> Result<FinishedRollout, DriverError> {
        self.ask(|reply| {
            Command::Rollout(Box::new(RolloutCommand::Abort {
                workspace: workspace.to_owned(),
                reply,
            }))
        })
        .await?
    }

    /// The revision that decided an answer of `workspace` whose evidence is `evidence`: the
    /// canary candidate's when it decided (`profileRevision` of the answer), else the current
    /// revision. Hosts ask only for a candidate's decision; the current revision they know.
    pub async fn revision_of(
        &self,
        workspace: &str,
        evidence: &Evidence,
    ) -> Result<Option<String>, DriverError> {
        let candidate = evidence.candidate;
        self.ask(|reply| {
            Command::Rollout(Box::new(RolloutCommand::RevisionOf {
                workspace: workspace.to_owned(),
                candidate,
                reply,
            }))
        })
        .await
    }

    /// The finished rollouts of `workspace`, oldest first.
    pub async fn rollouts(&self, workspace: &str) -> Result<Vec<FinishedRollout>, DriverError> {
        self.ask(|reply| {
            Command::Rollout(Box::new(RolloutCommand::History {
                workspace: workspace.to_owned(),
                reply,
            }))
        })
        .await
    }
}
