//! [`Grant`]: a granted lease on its way to (or held by) its holder.
//!
//! A grant is released exactly once. An in-process holder (the evaluator) keeps the grant and
//! calls [`Grant::release`], or drops it: `Drop` sends [`Command::Reclaim`] and the permit comes
//! back with no outcome, so a panic, an early return or a cancelled task never leaks a permit.
//! A remote holder (the service's client) gets the token: the service calls [`Grant::accept`]
//! once the client has it, and from then on the client releases by token (or the lease
//! expires). The lease's span lives in the driver's lease table and ends when the lease leaves
//! it, so the span can never outlive or undercount its lease.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use turnstile_admission::{ActualUsage, BreakerTransition, Evidence, Millis, Outcome};

use crate::command::Command;
use crate::error::DriverError;
use crate::lease_table::LeaseToken;

/// A granted lease. Dropped without [`Grant::accept`] or [`Grant::release`], it gives the
/// permit back.
pub struct Grant {
    /// The lease ID its holder knows.
    pub token: LeaseToken,
    /// When the lease expires without a heartbeat (`None`: it never expires).
    pub expires_at: Option<Millis>,
    /// The lease's time to live, renewed by each heartbeat (`None`: none).
    pub ttl_ms: Option<Millis>,
    /// The core's evidence of the admission.
    pub evidence: Evidence,
    workspace: Arc<str>,
    principal: Arc<str>,
    /// Where `Drop` and `release` send; `None` once accepted or released.
    driver: Option<mpsc::UnboundedSender<Command>>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("expires_at", &self.expires_at)
            .field("evidence", &self.evidence)
            .finish_non_exhaustive()
    }
}

impl Grant {
    pub(crate) fn new(
        token: LeaseToken,
        expires_at: Option<Millis>,
        ttl_ms: Option<Millis>,
        evidence: Evidence,
        owner: (Arc<str>, Arc<str>),
        driver: mpsc::UnboundedSender<Command>,
    ) -> Self {
        Grant {
            token,
            expires_at,
            ttl_ms,
            evidence,
            workspace: owner.0,
            principal: owner.1,
            driver: Some(driver),
        }
    }

    /// The admission evidence of this lease.
    pub fn evidence(&self) -> &Evidence {
        &self.evidence
    }

    /// A remote holder has the token now; dropping the grant no longer releases the lease.
    pub fn accept(&mut self) {
        self.driver = None;
    }

    /// Releases the lease with the attempt's outcome and what the call actually used (which
    /// replaces the estimate in the invocation's budgets). Answers the breaker transitions the
    /// outcome caused.
    pub async fn release(
        mut self,
        outcome: Outcome,
        usage: ActualUsage,
    ) -> Result<Vec<BreakerTransition>, DriverError> {
        let driver = self.driver.take().ok_or(DriverError::UnknownLease)?;
        let (reply, answer) = oneshot::channel();
        driver
            .send(Command::Release {
                token: self.token,
                workspace: self.workspace.clone(),
                principal: self.principal.clone(),
                outcome,
                usage,
                forget_budget: None,
                reply,
            })
            .map_err(|_| DriverError::ShuttingDown)?;
        answer.await.map_err(|_| DriverError::ShuttingDown)?
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if let Some(driver) = self.driver.take() {
            let _ = driver.send(Command::Reclaim { token: self.token });
        }
    }
}
