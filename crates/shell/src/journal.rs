//! The journal: where the driver hands what must outlive the process (profile registrations,
//! breaker transitions), in the order the registry applied them.
//!
//! The driver calls the journal synchronously from its task, so the journal sees changes in
//! registry order; a journal must not block (the server's sends to its store thread). A
//! registration is acknowledged to its caller only when the journal calls `done`.
//!
//! Invariant: every transition reaches [`Journal::breaker_transitions`] exactly once, under the
//! workspace whose controller made it.

use turnstile_admission::{BreakerTransition, Millis, ProfileChangeRecord};

/// A profile revision the registry accepted.
#[derive(Debug, Clone)]
pub struct Registration {
    pub workspace: String,
    pub profile_version: String,
    /// The profile as the caller sent it (replayed on restart).
    pub profile_json: String,
    /// The profile-change record, when the current revision changed.
    pub change: Option<ProfileChangeRecord>,
    pub at: Millis,
}

/// Called once a registration is durable (`Ok`) or could not be made durable (`Err`).
pub type Done = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Durable side effects of the driver.
pub trait Journal: Send + 'static {
    /// Records an accepted registration; calls `done` when it is durable.
    fn profile_registered(&mut self, registration: Registration, done: Done);
    /// Records breaker transitions of one workspace, oldest first.
    fn breaker_transitions(&mut self, workspace: &str, transitions: &[BreakerTransition]);
}

/// A journal that keeps nothing (in-process hosts such as the evaluator).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoJournal;

impl Journal for NoJournal {
    fn profile_registered(&mut self, _registration: Registration, done: Done) {
        done(Ok(()));
    }

    fn breaker_transitions(&mut self, _workspace: &str, _transitions: &[BreakerTransition]) {}
}
