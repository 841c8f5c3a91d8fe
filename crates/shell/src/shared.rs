//! The one admission step every host takes: admit locally, then against the limits shared
//! across replicas ([`DriverHandle::acquire_shared`]).
//!
//! On a single process there are no shared limits and the step is the local admission alone.
//! With replicas (the host installs a [`SharedLimits`], backed by Redis in `turnstile-coord`),
//! the local core admits first, exactly as on a single process (its queue, fairness and limits
//! are this replica's); the granted lease is then tried against the deployment's shared limits:
//!
//! | the shared limits answer | the step |
//! |---|---|
//! | [`SharedVerdict::Granted`] | the grant goes to the caller, its evidence saying how (`shared` or `degraded`) |
//! | [`SharedVerdict::Refused`], [`SharedVerdict::Unreachable`], [`SharedVerdict::Unshareable`] | refused: the grant is dropped (the local lease goes back) |
//! | [`SharedVerdict::Turn`] | another principal's turn: the grant goes back, and after [`SHARED_POLL_MS`] the request queues locally again with the wait it has left |
//! | [`SharedVerdict::Paused`], or an open shared breaker | refused now when the block outlasts the deadline ([`block_outlasts_deadline`], the core's rule), otherwise waited out |
//! | [`SharedVerdict::Blocked`] (a full shared scope) | tried again when this replica releases a shared lease, when the block ends, or after [`SHARED_POLL_MS`] at the latest, until the deadline |
//!
//! When Redis is unreachable, the [`SharedLimits`] answers from its degraded share (a granted
//! verdict with `degraded` coordination) or [`SharedVerdict::Unreachable`]: that choice is the
//! implementation's, the step only carries it.
//!
//! # Invariants
//!
//! - A lease reaches its caller only after the shared limits granted it; every other outcome
//!   drops the grant, which gives the local lease back.
//! - The request's `decision.admit` span rides the first local pass only; a pass after a
//!   [`SharedVerdict::Turn`] carries none (the span already ended or belongs to the lease).
//! - Deadlines are counted on the [`SharedLimits::now_ms`] clock, from the moment the step
//!   starts; a pass after a turn waits only what is left.
//! - Nothing here decides a limit: the core decides local admission and the refusal rule, the
//!   [`SharedLimits`] decides the shared limits; this step only sequences them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::JoinHandle;
use turnstile_admission::{
    block_outlasts_deadline, ActualUsage, Coordination, Decision, Millis, Outcome, Reason,
    Rejection,
};

use crate::command::{Acquire, AcquireReply, LaneLimits, Wait};
use crate::error::DriverError;
use crate::grant::Grant;
use crate::handle::{DriverHandle, Submitted};

/// Longest pause between two tries of a lease waiting for a full shared scope, and the pause
/// before a request whose turn went to another principal queues again. Releases on other
/// replicas are seen by polling; this replica's own releases wake waiters at once.
pub const SHARED_POLL_MS: Millis = 10;

/// A boxed future (the [`SharedLimits`] trait is object-safe).
pub type SharedFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One try of a locally granted lease against the shared limits.
#[derive(Debug, Clone, Copy)]
pub struct SharedTry<'a> {
    /// The local grant (its token names the shared lease; its evidence has the estimate).
    pub grant: &'a Grant,
    /// The request's workspace.
    pub workspace: &'a str,
    /// The request's principal.
    pub principal: &'a str,
    /// The provider lane.
    pub provider: &'a str,
    /// The request's budget (`""`: none).
    pub budget_id: &'a str,
    /// The lane's current limits, as the local core has them.
    pub limits: &'a LaneLimits,
    /// The [`SharedLimits::now_ms`] reading of this try.
    pub now: Millis,
}

/// The shared limits' answer to one [`SharedTry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedVerdict {
    /// Admitted; `shared` (the shared books hold it) or `degraded` (the replica's share while
    /// the shared store is unreachable).
    Granted(Coordination),
    /// Refused by a shared limit for good (e.g. a shared budget): not retryable.
    Refused(Reason),
    /// The shared store is unreachable and no degraded share admits the lease: refused as
    /// `coordination-unavailable`, retryable after `retry_in_ms`.
    Unreachable {
        /// When trying again makes sense.
        retry_in_ms: Millis,
    },
    /// The lane's limits cannot be shared exactly: refused as `coordination-unavailable`, not
    /// retryable.
    Unshareable,
    /// Another principal is further behind its share of a contended shared scope.
    Turn,
    /// The provider is paused for every replica (a provider's `Retry-After`).
    Paused {
        /// How long the pause still lasts.
        remaining_ms: Millis,
    },
    /// A shared scope is full or the shared breaker is open (`reason`), for `after_ms` if known.
    Blocked {
        /// Why (`concurrency`, `rate`, `circuit-open`, …).
        reason: Reason,
        /// When the block can end, if known.
        after_ms: Option<Millis>,
        /// How the answer was reached.
        mode: Coordination,
    },
}

/// The limits shared across replicas, as the host implements them (with Redis: `turnstile-server`
/// over `turnstile-coord`). Single-node hosts install none.
pub trait SharedLimits: Send + Sync {
    /// The clock deadlines are counted on (the host's, epoch ms).
    fn now_ms(&self) -> Millis;

    /// One try of a locally granted lease against the shared limits.
    fn try_admit<'a>(&'a self, attempt: SharedTry<'a>) -> SharedFuture<'a, SharedVerdict>;

    /// Completes when this replica releases a shared lease (a waiter may fit now).
    fn released(&self) -> SharedFuture<'_, ()>;

    /// Releases the shared lease of `token` with the call's outcome (a `retry-after` outcome
    /// pauses the provider for every replica) and actual usage (which corrects the shared
    /// budgets). Call before the local release. Answers the background task doing the work
    /// (`None`: nothing to do), which a caller may await before answering its client.
    fn release(&self, token: &str, outcome: Outcome, usage: ActualUsage) -> Option<JoinHandle<()>>;

    /// Forgets a per-call budget's shared lines (after its last release).
    fn forget_budget(&self, workspace: &str, budget_id: &str);

    /// Holds `provider` of `workspace` on every replica for `ms` (its provider announced its
    /// quota spent until then): the shared pause, fire and forget. Default: nothing is shared.
    fn hold(&self, _workspace: &str, _provider: &str, _ms: Millis) {}
}

/// What one pass against the shared limits concluded.
enum Pass {
    Admitted(Coordination),
    Refused(Rejection),
    NoProfile,
    /// Give the local lease back and queue again.
    Yield,
}

/// The caller's deadline and whether it asked for "only if free now".
#[derive(Clone, Copy)]
struct Deadline {
    at: Millis,
    no_wait: bool,
}

impl Deadline {
    fn of(wait: &Wait, now: Millis) -> Self {
        match *wait {
            Wait::NoWait | Wait::For(0) => Deadline {
                at: now,
                no_wait: true,
            },
            Wait::For(ms) => Deadline {
                at: now.saturating_add(ms),
                no_wait: false,
            },
            Wait::Until(at) => Deadline { at, no_wait: false },
            Wait::Unbounded => Deadline {
                at: Millis::MAX,
                no_wait: false,
            },
        }
    }

    /// The refusal of a request still blocked at its deadline: the block's own reason (and
    /// retryable) for "only if free now", `deadline-exceeded` otherwise.
    fn expired(self, reason: Reason) -> (Reason, bool) {
        if self.no_wait {
            (reason, true)
        } else {
            (Reason::DeadlineExceeded, false)
        }
    }
}

/// The shared limits' refusal of a locally granted lease, with the grant's evidence.
fn refusal(
    grant: &Grant,
    reason: Reason,
    retryable: bool,
    hint: Option<Millis>,
    mode: Option<Coordination>,
) -> Rejection {
    let mut evidence = grant.evidence.clone();
    evidence.decision = Decision::Reject;
    evidence.reason = reason;
    evidence.retry_after_ms = hint;
    evidence.breaker_transitions.clear();
    evidence.budget_opened = false;
    evidence.coordination = mode;
    Rejection {
        reason,
        retryable,
        evidence,
    }
}

/// Sleeps `ms`, or less when this replica releases a shared lease.
async fn pause_or_release(shared: &dyn SharedLimits, ms: Millis) {
    tokio::select! {
        () = shared.released() => {}
        () = tokio::time::sleep(Duration::from_millis(ms)) => {}
    }
}

impl DriverHandle {
    /// The one admission step: admits `request` locally, then against `shared` (replicas;
    /// `None` on a single process), as the module documentation describes. Answers what
    /// [`acquire`](Self::acquire) answers: a grant the shared limits refused comes back as
    /// [`AcquireReply::Rejected`], one whose profile disappeared as [`AcquireReply::NoProfile`].
    /// Dropping the future cancels the request and gives back any grant.
    ///
    /// On a single process the request is handed to the driver now and the future is the
    /// three-word [`Submitted`] wait (no allocation); with shared limits the step is one boxed
    /// future.
    pub fn acquire_shared<'a>(
        &'a self,
        request: Acquire,
        shared: Option<&'a dyn SharedLimits>,
    ) -> Admitting<'a> {
        Admitting(match shared {
            None => match self.submit(request) {
                Ok(submitted) => Step::Local(submitted),
                Err(error) => Step::Failed(Some(error)),
            },
            Some(shared) => Step::Shared(Box::pin(self.admit_shared(request, shared))),
        })
    }

    async fn admit_shared(
        &self,
        request: Acquire,
        shared: &dyn SharedLimits,
    ) -> Result<AcquireReply, DriverError> {
        let deadline = Deadline::of(&request.wait, shared.now_ms());
        let mut next = request;
        loop {
            // What queuing again after another principal's turn needs (the request itself is
            // handed to the driver).
            let again = Acquire {
                workspace: next.workspace.clone(),
                principal: next.principal.clone(),
                provider_id: next.provider_id.clone(),
                budget_id: next.budget_id.clone(),
                estimate: next.estimate.clone(),
                wait: Wait::NoWait,
                span: None,
            };
            let mut grant = match self.submit(next)?.await? {
                AcquireReply::Admitted(grant) => grant,
                other => return Ok(other),
            };
            match self.shared_pass(&grant, &again, deadline, shared).await? {
                Pass::Admitted(mode) => {
                    grant.evidence.coordination = Some(mode);
                    return Ok(AcquireReply::Admitted(grant));
                }
                Pass::Refused(rejection) => return Ok(AcquireReply::Rejected(rejection)),
                Pass::NoProfile => return Ok(AcquireReply::NoProfile),
                Pass::Yield => {
                    // The local lease goes back (dropped unaccepted); the request queues again
                    // after a poll, with the wait it has left.
                    drop(grant);
                    tokio::time::sleep(Duration::from_millis(SHARED_POLL_MS)).await;
                    let left = deadline.at.saturating_sub(shared.now_ms());
                    next = Acquire {
                        wait: Wait::For(left),
                        ..again
                    };
                }
            }
        }
    }

    /// Tries `grant` against the shared limits until they admit it, refuse it, or give the
    /// turn away.
    async fn shared_pass(
        &self,
        grant: &Grant,
        lane: &Acquire,
        deadline: Deadline,
        shared: &dyn SharedLimits,
    ) -> Result<Pass, DriverError> {
        let Some(limits) = self
            .lane_limits(
                lane.workspace.clone(),
                lane.principal.clone(),
                &lane.provider_id,
            )
            .await?
        else {
            return Ok(Pass::NoProfile);
        };
        loop {
            let now = shared.now_ms();
            let verdict = shared
                .try_admit(SharedTry {
                    grant,
                    workspace: &lane.workspace,
                    principal: &lane.principal,
                    provider: &lane.provider_id,
                    budget_id: &lane.budget_id,
                    limits: &limits,
                    now,
                })
                .await;
            let refuse = |reason, retryable, hint, mode| {
                Ok(Pass::Refused(refusal(grant, reason, retryable, hint, mode)))
            };
            match verdict {
                SharedVerdict::Granted(mode) => return Ok(Pass::Admitted(mode)),
                SharedVerdict::Refused(reason) => {
                    return refuse(reason, false, None, Some(Coordination::Shared))
                }
                SharedVerdict::Unreachable { retry_in_ms } => {
                    return refuse(
                        Reason::CoordinationUnavailable,
                        true,
                        Some(retry_in_ms),
                        Some(Coordination::Degraded),
                    )
                }
                SharedVerdict::Unshareable => {
                    return refuse(Reason::CoordinationUnavailable, false, None, None)
                }
                SharedVerdict::Turn if now.saturating_add(SHARED_POLL_MS) < deadline.at => {
                    return Ok(Pass::Yield)
                }
                SharedVerdict::Turn => {
                    if now >= deadline.at {
                        let (reason, retryable) = deadline.expired(Reason::Concurrency);
                        return refuse(reason, retryable, None, Some(Coordination::Shared));
                    }
                    pause_or_release(shared, SHARED_POLL_MS.min(deadline.at - now)).await;
                }
                SharedVerdict::Paused { remaining_ms } => {
                    if block_outlasts_deadline(now.saturating_add(remaining_ms), deadline.at) {
                        return refuse(
                            Reason::RetryAfter,
                            true,
                            Some(remaining_ms),
                            Some(Coordination::Shared),
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(remaining_ms)).await;
                }
                // The shared breaker is open (through any replica's failures): as the core
                // does, refuse at once when it outlasts the deadline, otherwise wait for its end.
                SharedVerdict::Blocked {
                    reason: Reason::CircuitOpen,
                    after_ms: Some(remaining_ms),
                    mode,
                } if remaining_ms > SHARED_POLL_MS => {
                    if block_outlasts_deadline(now.saturating_add(remaining_ms), deadline.at) {
                        return refuse(Reason::CircuitOpen, true, Some(remaining_ms), Some(mode));
                    }
                    tokio::time::sleep(Duration::from_millis(remaining_ms)).await;
                }
                SharedVerdict::Blocked {
                    reason,
                    after_ms,
                    mode,
                } => {
                    if now >= deadline.at {
                        let (reason, retryable) = deadline.expired(reason);
                        return refuse(reason, retryable, after_ms, Some(mode));
                    }
                    let pause = after_ms
                        .unwrap_or(SHARED_POLL_MS)
                        .clamp(1, SHARED_POLL_MS)
                        .min(deadline.at - now);
                    pause_or_release(shared, pause).await;
                }
            }
        }
    }
}

/// A host's shared limits as the proxy and the admission API hold them (`None`: one process).
pub type SharedHook = Option<Arc<dyn SharedLimits>>;

type StepFuture<'a> = Pin<Box<dyn Future<Output = Result<AcquireReply, DriverError>> + Send + 'a>>;

enum Step<'a> {
    /// The driver could not take the request.
    Failed(Option<DriverError>),
    /// A single process: the local answer is the answer.
    Local(Submitted),
    /// Replicas: the local answer, then the shared limits.
    Shared(StepFuture<'a>),
}

/// The answer of [`DriverHandle::acquire_shared`]. Dropping it before the answer cancels the
/// request; a grant that arrives after that is given back.
pub struct Admitting<'a>(Step<'a>);

impl Future for Admitting<'_> {
    type Output = Result<AcquireReply, DriverError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            Step::Failed(error) => {
                Poll::Ready(Err(error.take().unwrap_or(DriverError::ShuttingDown)))
            }
            Step::Local(submitted) => Pin::new(submitted).poll(cx),
            Step::Shared(future) => future.as_mut().poll(cx),
        }
    }
}
