//! [`DriverHandle`]: how hosts talk to the driver task, and [`CancelGuard`], which takes a
//! queued admission out of the core's queue when the caller goes away.
//!
//! Invariant: an admission request whose caller is dropped while it waits is cancelled (the
//! guard sends [`Command::Cancel`]); one whose grant arrives after the caller left is reclaimed
//! (the [`Grant`](crate::Grant)'s `Drop`). Nothing a caller abandons stays held.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use turnstile_admission::{
    BucketLevels, LaneView, Millis, Profile, ProfileChangeRecord, ProviderQuota,
};

use crate::command::{
    Acquire, AcquireCommand, AcquireReply, Command, LaneLimits, Standing, WorkspaceSnapshot,
};
use crate::error::DriverError;

/// Cancels a queued admission when the code waiting on it is dropped.
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

/// An admission request the driver has (from [`DriverHandle::submit`]); resolves to its
/// answer. Dropped before that, it cancels the request.
pub struct Submitted {
    guard: CancelGuard,
    answer: oneshot::Receiver<AcquireReply>,
}

impl Future for Submitted {
    type Output = Result<AcquireReply, DriverError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        let answer = std::task::ready!(std::pin::Pin::new(&mut this.answer).poll(cx));
        this.guard.disarm();
        std::task::Poll::Ready(answer.map_err(|_| DriverError::ShuttingDown))
    }
}

/// The hosts' side of the driver; cheap to clone.
#[derive(Clone)]
pub struct DriverHandle {
    tx: mpsc::UnboundedSender<Command>,
    tickets: Arc<AtomicU64>,
}

impl std::fmt::Debug for DriverHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverHandle").finish_non_exhaustive()
    }
}

impl DriverHandle {
    pub(crate) fn new(tx: mpsc::UnboundedSender<Command>) -> Self {
        DriverHandle {
            tx,
            tickets: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Sends a command built around a fresh oneshot and awaits its answer.
    pub async fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, DriverError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(command(reply))
            .map_err(|_| DriverError::ShuttingDown)?;
        rx.await.map_err(|_| DriverError::ShuttingDown)
    }

    /// Sends without waiting for an answer.
    pub fn send(&self, command: Command) -> Result<(), DriverError> {
        self.tx.send(command).map_err(|_| DriverError::ShuttingDown)
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

    /// Asks for a permit and waits for the answer. Dropping the future while the request is
    /// queued cancels it; a grant that arrives after that is given back.
    pub async fn acquire(&self, request: Acquire) -> Result<AcquireReply, DriverError> {
        self.submit(request)?.await
    }

    /// Hands `request` to the driver now and returns the wait for its answer: a future of
    /// three words, where [`acquire`](Self::acquire)'s holds the whole request until it is
    /// first polled (callers that keep the wait inside a large future of their own, such as a
    /// proxied call's, stay smaller and move less). Dropping the [`Submitted`] before the
    /// answer cancels the request; a grant that arrives after that is given back.
    pub fn submit(&self, request: Acquire) -> Result<Submitted, DriverError> {
        let (ticket, guard) = self.ticket();
        let (reply, answer) = oneshot::channel();
        self.send(Command::Acquire(Box::new(AcquireCommand {
            ticket,
            request,
            reply,
        })))?;
        Ok(Submitted { guard, answer })
    }

    /// Like [`acquire`](Self::acquire), but a queued request is cancelled as soon as `cancel`
    /// completes, and the answer is then the core's `cancelled` rejection (with its evidence),
    /// or the grant if the permit came first.
    pub async fn acquire_until(
        &self,
        request: Acquire,
        cancel: impl Future<Output = ()>,
    ) -> Result<AcquireReply, DriverError> {
        let (ticket, mut guard) = self.ticket();
        let (reply, mut answer) = oneshot::channel();
        self.send(Command::Acquire(Box::new(AcquireCommand {
            ticket,
            request,
            reply,
        })))?;
        tokio::pin!(cancel);
        let answer = tokio::select! {
            biased;
            answer = &mut answer => answer,
            () = &mut cancel => {
                // The driver answers a cancelled waiter with its rejection; a grant that was
                // already on its way arrives instead.
                let _ = self.send(Command::Cancel { ticket });
                answer.await
            }
        };
        guard.disarm();
        answer.map_err(|_| DriverError::ShuttingDown)
    }

    /// Registers a profile revision; answers once the journal made it durable.
    pub async fn register(
        &self,
        workspace: &str,
        version: &str,
        profile: Profile,
        profile_json: String,
    ) -> Result<Option<ProfileChangeRecord>, DriverError> {
        self.ask(|reply| Command::Register {
            workspace: workspace.to_owned(),
            version: version.to_owned(),
            profile: Box::new(profile),
            profile_json,
            approval: Box::default(),
            at: None,
            reply,
        })
        .await?
    }

    /// Forgets the attempt, cost and token counters of one invocation.
    pub async fn release_budget(&self, workspace: &str, budget: &str) -> Result<bool, DriverError> {
        self.ask(|reply| Command::ReleaseBudget {
            workspace: Arc::from(workspace),
            budget: budget.to_owned(),
            reply,
        })
        .await?
    }

    /// Pauses a provider lane; answers the instant the pause ends.
    pub async fn retry_after(
        &self,
        workspace: &str,
        provider: &str,
        retry_after_ms: Millis,
    ) -> Result<Millis, DriverError> {
        self.ask(|reply| Command::RetryAfter {
            workspace: Arc::from(workspace),
            provider: provider.to_owned(),
            retry_after_ms,
            reply,
        })
        .await?
    }

    /// Hands the driver what a provider answer announced of the account's quota for a provider
    /// lane ([`Command::ProviderQuota`]). Not answered: it is applied in command order, before
    /// anything this caller sends the driver later (such as the call's release).
    pub fn observe_provider_quota(
        &self,
        workspace: &Arc<str>,
        provider: &str,
        quota: ProviderQuota,
    ) -> Result<(), DriverError> {
        self.send(Command::ProviderQuota {
            workspace: workspace.clone(),
            provider: provider.to_owned(),
            quota,
        })
    }

    /// Aggregate state of one workspace (`None` without a profile).
    pub async fn snapshot(
        &self,
        workspace: &str,
    ) -> Result<Option<WorkspaceSnapshot>, DriverError> {
        self.ask(|reply| Command::Snapshot {
            workspace: workspace.to_owned(),
            reply,
        })
        .await
    }

    /// Whether the workspace's current profile names `principal`.
    pub async fn standing(
        &self,
        workspace: &str,
        principal: &str,
    ) -> Result<Standing, DriverError> {
        self.ask(|reply| Command::Standing {
            workspace: Arc::from(workspace),
            principal: Arc::from(principal),
            reply,
        })
        .await
    }

    /// The current limits of the lane (`principal`, `provider`) of `workspace`.
    pub async fn lane_limits(
        &self,
        workspace: Arc<str>,
        principal: Arc<str>,
        provider: &str,
    ) -> Result<Option<LaneLimits>, DriverError> {
        self.ask(|reply| Command::LaneLimits {
            workspace,
            principal,
            provider: provider.to_owned(),
            reply,
        })
        .await
    }

    /// The live view of a workspace's provider lanes and the driver's clock reading (`None`
    /// without a profile).
    pub async fn lanes(
        &self,
        workspace: &str,
    ) -> Result<Option<(Millis, Vec<LaneView>)>, DriverError> {
        self.ask(|reply| Command::Lanes {
            workspace: workspace.to_owned(),
            reply,
        })
        .await
    }

    /// Every workspace with a registered profile and its current revision, by workspace ID.
    pub async fn workspaces(&self) -> Result<Vec<(String, String)>, DriverError> {
        self.ask(|reply| Command::Workspaces { reply }).await
    }

    /// The driver's clock reading and the instant its one timer is armed for.
    pub async fn timer(&self) -> Result<(Millis, Option<Millis>), DriverError> {
        self.ask(|reply| Command::Timer { reply }).await
    }

    /// Refuses new admissions and cancels every queued one.
    pub async fn drain(&self) -> Result<(), DriverError> {
        self.ask(|reply| Command::Drain { reply }).await
    }

    /// Every workspace's bucket levels, read after [`DriverHandle::drain`] (no grant can follow
    /// them: a clean stop's checkpoint); `None` before the driver drains.
    pub async fn bucket_levels(
        &self,
    ) -> Result<Option<BTreeMap<String, BucketLevels>>, DriverError> {
        self.ask(|reply| Command::BucketLevels { reply }).await
    }

    /// Ends the driver task.
    pub fn stop(&self) {
        let _ = self.tx.send(Command::Stop);
    }
}
