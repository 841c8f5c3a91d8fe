//! [`SharedLimits`]: the host's limits shared across replicas (issue 13), as the proxy sees
//! them. The proxy knows nothing of Redis: the host (`turnstile-server`, with
//! `[coordination] redis_url`) implements this trait with the very step `POST /v1/admissions`
//! and the release route take, and installs it with [`crate::Proxy::with_shared`].
//!
//! # Invariants
//!
//! - A locally granted lease is forwarded upstream only after [`SharedLimits::admit`] answered
//!   [`SharedAnswer::Admitted`]; any other answer drops the grant (the local lease goes back).
//! - [`SharedLimits::release`] is called exactly once per admitted lease, synchronously and
//!   *before* the local release is sent to the driver, so the host's fallback (releasing the
//!   shared lease of a lease the driver lets go of, without usage) finds nothing to do and the
//!   shared books get the call's actual usage and pause.
//! - Nothing here blocks: `release` and `forget_budget` do their Redis work in the background;
//!   a whole (non-streamed) answer waits for the release's task before it is sent, so a client
//!   that saw an upstream 429 knows every replica sees the pause.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use turnstile_admission::{ActualUsage, Coordination, Millis, Outcome, Rejection};
use turnstile_shell::Grant;

/// Longest pause before a call whose turn went to another principal queues again (the
/// server's `shared::SHARED_POLL_MS`).
pub const SHARED_POLL_MS: Millis = 10;

/// The lane of one proxied call, as the shared step needs it.
#[derive(Debug, Clone)]
pub struct SharedLane {
    pub workspace: Arc<str>,
    pub principal: Arc<str>,
    pub provider: Arc<str>,
    pub budget_id: String,
    /// How long the call may wait for a permit, counted from `since`.
    pub wait_ms: Millis,
    /// When the wait began (before local admission).
    pub since: Instant,
}

impl SharedLane {
    /// Milliseconds of the wait left now.
    pub fn remaining_ms(&self) -> Millis {
        let spent = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.wait_ms.saturating_sub(spent)
    }

    /// Whether the caller asked for "only if free now" (`x-turnstile-wait-ms: 0`).
    pub fn no_wait(&self) -> bool {
        self.wait_ms == 0
    }
}

/// The shared limits' answer for one locally granted lease.
#[derive(Debug)]
pub enum SharedAnswer {
    /// Admitted: the evidence's `coordination` (`shared` or `degraded`).
    Admitted(Coordination),
    /// Refused, with the same typed rejection `POST /v1/admissions` answers.
    Refused(Rejection),
    /// Another principal's turn (fair turns across replicas): give the local lease back, wait
    /// a poll, and queue locally again within the remaining wait.
    Yield,
    /// The workspace has no profile (any more).
    NoProfile,
    /// The host cannot answer (its driver is gone: shutting down).
    Unavailable,
}

/// A boxed future (the trait is object-safe).
pub type SharedFuture<'a> = Pin<Box<dyn Future<Output = SharedAnswer> + Send + 'a>>;

/// The host's shared step.
pub trait SharedLimits: Send + Sync {
    /// Admits `grant` (granted by the local core) against the shared limits, waiting within
    /// the lane's remaining wait when a shared scope is full or the provider is paused.
    fn admit<'a>(&'a self, grant: &'a Grant, lane: &'a SharedLane) -> SharedFuture<'a>;

    /// Releases the shared lease of `token` with the call's outcome (a `retry-after` outcome
    /// pauses the provider for every replica) and actual usage (which corrects the shared
    /// budgets). Call before the local release. Answers the background task doing the Redis
    /// work (`None`: nothing to do), which a caller may await before answering its client.
    fn release(&self, token: &str, outcome: Outcome, usage: ActualUsage) -> Option<JoinHandle<()>>;

    /// Forgets a per-call budget's shared lines (after its last release).
    fn forget_budget(&self, workspace: &str, budget_id: &str);
}

/// The hook as the proxy holds it.
pub type SharedHook = Option<Arc<dyn SharedLimits>>;
