//! The driver's rollout commands ([`RolloutCommand`], `rollout.rs`): each calls the registry
//! once with the clock's `now`, then delivers whatever the change resolved (a promote's new
//! limits may admit or refuse waiters; a canary's end hands its slice back).
//!
//! # Invariants
//!
//! - A promote is journaled as a registration of the candidate (its profile as sent at the
//!   start, the profile-change record, the approval) and answered only once that is durable, as
//!   [`DriverHandle::register`](crate::DriverHandle::register) is; the feed sees its
//!   profile change once.
//! - The candidate's profile text is kept only while its rollout runs (one per workspace).

use turnstile_admission::{Decision, Evidence, Millis, Reason};

use crate::error::DriverError;
use crate::journal::Registration;
use crate::rollout::RolloutCommand;

use super::Driver;

impl Driver {
    pub(super) fn rollout_command(&mut self, command: RolloutCommand, now: Millis) {
        match command {
            RolloutCommand::Start {
                workspace,
                revision,
                profile,
                profile_json,
                mode,
                reply,
            } => {
                let started = self
                    .registry
                    .start_rollout(&workspace, &revision, *profile, mode, now);
                if started.is_ok() {
                    self.candidates.insert(workspace.clone(), profile_json);
                    self.deliver(&workspace, now);
                }
                let _ = reply.send(started.map_err(DriverError::from));
            }
            RolloutCommand::Current { workspace, reply } => {
                let _ = reply.send(self.registry.rollout(&workspace));
            }
            RolloutCommand::Promote {
                workspace,
                approval,
                reply,
            } => match self.registry.promote_rollout(&workspace, now) {
                Err(error) => {
                    let _ = reply.send(Err(error.into()));
                }
                Ok((finished, change)) => {
                    let profile_json = self.candidates.remove(&workspace).unwrap_or_default();
                    if let Some(record) = &change {
                        self.observer.profile_change(&workspace, record, now);
                    }
                    let answer = (finished.clone(), change.clone());
                    let registration = Registration {
                        workspace: workspace.clone(),
                        profile_version: finished.revision,
                        profile_json,
                        change,
                        at: now,
                        approval,
                    };
                    self.journal_registration(registration, answer, reply);
                    self.deliver(&workspace, now);
                }
            },
            RolloutCommand::Abort { workspace, reply } => {
                let aborted = self.registry.abort_rollout(&workspace, now);
                if aborted.is_ok() {
                    self.candidates.remove(&workspace);
                    self.deliver(&workspace, now);
                }
                let _ = reply.send(aborted.map_err(DriverError::from));
            }
            RolloutCommand::RevisionOf {
                workspace,
                candidate,
                reply,
            } => {
                let mut evidence = Evidence::new(Decision::Admit, Reason::Admitted, 0);
                evidence.candidate = candidate;
                let revision = self.registry.revision_of(&workspace, &evidence);
                let _ = reply.send(revision.map(str::to_owned));
            }
            RolloutCommand::History { workspace, reply } => {
                let _ = reply.send(self.registry.rollouts(&workspace));
            }
        }
    }
}
