//! Admission delivery: from a caller's `Acquire` to the one answer it gets.
//!
//! An acquire is translated into the core's request ([`Wait`] → deadline); the core admits,
//! refuses or queues it. A queued caller waits in [`Waiters`] until the core resolves its
//! waiter (delivered by [`Driver::deliver`] after every operation that can free capacity), the
//! caller goes away (`Cancel`), or the driver drains. Every one of those ends goes through
//! [`Driver::conclude`], which is the only place that observes a decision (the span's final
//! call, the feed's tally and the fairness window, `observe.rs`) and answers the caller.
//!
//! # Invariants
//!
//! - Every admission the core decided is concluded exactly once: observed once, answered once.
//!   A queued admission is counted once more, as `defer`, by its span when it is queued.
//! - [`Waiters`] keeps the waiters by workspace and by ticket together: a waiter is in both
//!   maps or in neither.
//! - A grant the core resolved for a waiter nobody waits for any more goes back to the core at
//!   once (`Outcome::None`).

use std::sync::Arc;

use foldhash::HashMap;
use tokio::sync::oneshot;
use turnstile_admission::{
    Acquired, AdmissionRequest, Lease, Millis, Outcome, Reason, Rejection, WaiterId,
};

use crate::command::{Acquire, AcquireCommand, AcquireReply, Wait};
use crate::telemetry::AdmitSpan;

use super::Driver;

/// A caller waiting for an answer.
pub(super) struct Pending {
    ticket: u64,
    principal: Arc<str>,
    /// The provider lane (for the event feed's counts).
    provider: Arc<str>,
    span: Option<AdmitSpan>,
    reply: oneshot::Sender<AcquireReply>,
}

/// How an admission ends for its caller.
enum Conclusion {
    /// The core granted it (at once, or from the queue).
    Admitted(Lease),
    /// The core refused it (at once, or from the queue).
    Rejected(Rejection),
    /// The core could not take the request: no decision exists, the span ends as failed.
    Failed(Failure),
    /// The caller cancelled its queued wait: the core's refusal of the waiter (when it still
    /// queued one) ends the span and goes to a caller that may still listen.
    Cancelled(Option<Rejection>),
    /// The driver drains: the caller is told so; the core's refusal of the waiter ends the span.
    Drained(Option<Rejection>),
}

/// Why a request got no decision.
#[derive(Clone, Copy)]
enum Failure {
    /// The workspace has no profile.
    NoProfile,
    /// The driver drains and takes no new request.
    ShuttingDown,
}

/// The queued callers: by workspace and waiter (what the core resolves), and by ticket (what a
/// caller cancels). Both maps always hold the same waiters.
#[derive(Default)]
pub(super) struct Waiters {
    by_workspace: HashMap<Arc<str>, HashMap<WaiterId, Pending>>,
    tickets: HashMap<u64, (Arc<str>, WaiterId)>,
}

impl Waiters {
    fn queue(&mut self, workspace: &Arc<str>, waiter: WaiterId, pending: Pending) {
        self.tickets
            .insert(pending.ticket, (workspace.clone(), waiter));
        self.by_workspace
            .entry(workspace.clone())
            .or_default()
            .insert(waiter, pending);
    }

    /// Takes the waiter of `ticket`: its workspace, its waiter and its caller.
    fn take_ticket(&mut self, ticket: u64) -> Option<(Arc<str>, WaiterId, Option<Pending>)> {
        let (workspace, waiter) = self.tickets.remove(&ticket)?;
        let pending = self
            .by_workspace
            .get_mut(&workspace)
            .and_then(|m| m.remove(&waiter));
        Some((workspace, waiter, pending))
    }

    /// Takes the caller of a waiter the core resolved, with its workspace.
    fn take_waiter(&mut self, workspace: &str, waiter: WaiterId) -> Option<(Arc<str>, Pending)> {
        let pending = self
            .by_workspace
            .get_mut(workspace)
            .and_then(|m| m.remove(&waiter))?;
        let workspace = match self.tickets.remove(&pending.ticket) {
            Some((workspace, _)) => workspace,
            None => Arc::from(workspace),
        };
        Some((workspace, pending))
    }

    /// Forgets the workspace's map once its last waiter left.
    fn forget_if_empty(&mut self, workspace: &str) {
        if self
            .by_workspace
            .get(workspace)
            .is_some_and(HashMap::is_empty)
        {
            self.by_workspace.remove(workspace);
        }
    }

    fn tickets(&self) -> Vec<u64> {
        self.tickets.keys().copied().collect()
    }

    pub(super) fn len(&self) -> usize {
        self.tickets.len()
    }

    pub(super) fn count_in(&self, workspace: &str) -> usize {
        self.by_workspace.get(workspace).map_or(0, HashMap::len)
    }
}

impl Driver {
    /// `Command::Acquire`: asks the core; concludes at once, or queues the caller.
    pub(super) fn acquire(&mut self, command: AcquireCommand, now: Millis) {
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
        let mut pending = Pending {
            ticket,
            principal,
            provider: Arc::from(provider_id.as_str()),
            span,
            reply,
        };
        if self.draining {
            let failure = Conclusion::Failed(Failure::ShuttingDown);
            return self.conclude(&workspace, pending, failure, now);
        }
        let request = AdmissionRequest::new(&*pending.principal, provider_id, budget_id)
            .with_estimate(estimate);
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
        let conclusion = match acquired {
            Err(_) => Conclusion::Failed(Failure::NoProfile),
            Ok(Acquired::Admitted(lease)) => Conclusion::Admitted(lease),
            Ok(Acquired::Rejected(rejection)) => Conclusion::Rejected(rejection),
            Ok(Acquired::Queued { waiter, evidence }) => {
                if let Some(span) = pending.span.as_mut() {
                    span.queued(&evidence);
                }
                self.waiters.queue(&workspace, waiter, pending);
                self.deliver(&workspace, now);
                return;
            }
        };
        self.conclude(&workspace, pending, conclusion, now);
        self.deliver(&workspace, now);
    }

    /// Delivers every resolution of `workspace`.
    pub(super) fn deliver(&mut self, workspace: &str, now: Millis) {
        self.observer.touch(workspace, now);
        while let Some(resolution) = self.registry.poll_resolution(workspace) {
            match (
                self.waiters.take_waiter(workspace, resolution.waiter),
                resolution.outcome,
            ) {
                (Some((workspace, pending)), Ok(lease)) => {
                    self.conclude(&workspace, pending, Conclusion::Admitted(lease), now);
                }
                (Some((workspace, pending)), Err(rejection)) => {
                    self.conclude(&workspace, pending, Conclusion::Rejected(rejection), now);
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
        self.waiters.forget_if_empty(workspace);
    }

    /// `Command::Cancel`: the caller of a queued admission went away.
    pub(super) fn cancel(&mut self, ticket: u64, now: Millis) {
        let Some((workspace, waiter, pending)) = self.waiters.take_ticket(ticket) else {
            return;
        };
        self.metrics
            .waiters_disconnected
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rejection = self.registry.cancel(&workspace, waiter, now).ok().flatten();
        if let Some(pending) = pending {
            self.conclude(&workspace, pending, Conclusion::Cancelled(rejection), now);
        }
        self.deliver(&workspace, now);
    }

    /// Stops taking admissions; every queued caller is told the driver shuts down.
    pub(super) fn drain(&mut self, now: Millis) {
        self.draining = true;
        for ticket in self.waiters.tickets() {
            let Some((workspace, waiter, pending)) = self.waiters.take_ticket(ticket) else {
                continue;
            };
            let rejection = self.registry.cancel(&workspace, waiter, now).ok().flatten();
            if let Some(pending) = pending {
                self.conclude(&workspace, pending, Conclusion::Drained(rejection), now);
            }
            self.deliver(&workspace, now);
        }
    }

    /// The one end of every admission: observes the decision (span, feed tally, fairness
    /// window) once and answers the caller once; an admission goes on into the lease table.
    fn conclude(
        &mut self,
        workspace: &Arc<str>,
        pending: Pending,
        conclusion: Conclusion,
        now: Millis,
    ) {
        let Pending {
            principal,
            provider,
            span,
            reply,
            ..
        } = pending;
        match conclusion {
            Conclusion::Admitted(lease) => {
                let evidence = &lease.evidence;
                let served = self.observer.decision(
                    (workspace, &provider, &principal),
                    Reason::Admitted,
                    (evidence.queue_delay_ms, evidence.estimated_tokens),
                    now,
                );
                // The span records the admission as the lease enters the table.
                self.grant((workspace, &principal), (lease, served), span, reply, now);
            }
            Conclusion::Rejected(rejection) => {
                let reason = rejection.reason;
                let who = (&**workspace, &*provider, &principal);
                self.observer.decision(who, reason, (0, None), now);
                if let Some(span) = span {
                    span.rejected(&rejection.evidence);
                }
                let _ = reply.send(AcquireReply::Rejected(rejection));
            }
            Conclusion::Failed(failure) => {
                if let Some(span) = span {
                    span.failed();
                }
                let _ = reply.send(match failure {
                    Failure::NoProfile => AcquireReply::NoProfile,
                    Failure::ShuttingDown => AcquireReply::ShuttingDown,
                });
            }
            Conclusion::Cancelled(rejection) => {
                // No refusal: the span ends unclosed (dropped) and nobody is answered.
                let Some(rejection) = rejection else { return };
                if let Some(span) = span {
                    span.rejected(&rejection.evidence);
                }
                // An in-process caller that cancelled is still listening for this.
                let _ = reply.send(AcquireReply::Rejected(rejection));
            }
            Conclusion::Drained(rejection) => {
                if let (Some(span), Some(rejection)) = (span, &rejection) {
                    span.rejected(&rejection.evidence);
                }
                let _ = reply.send(AcquireReply::ShuttingDown);
            }
        }
    }
}
