//! The evaluator governed by a running turnstile service: [`RemoteGovernor`] admits every
//! attempt through the service's admission API with the Rust client (`turnstile-client`).
//!
//! Decides:
//! - Before the first attempt: the client's lane check ([`Client::check_lanes`]) with every
//!   adapter ID of the binding as a lane (the key's workspace has a profile that names the
//!   key's principal, and the adapters are its provider lanes); otherwise the evaluation is
//!   refused naming the adapter (or the key's problem).
//! - Each attempt acquires with `providerId` = the target's adapter, `budgetId` = the
//!   invocation, the attempt's estimate and `deadlineMs` = the attempt's remaining time, which
//!   the client caps at the service's `admission.max_wait_ms`: a long attempt deadline never
//!   fails the attempt.
//! - A refusal maps to the core's [`Rejection`] with the service's evidence; any other failure
//!   (unreachable, 5xx) is [`AdmissionError::Unavailable`].
//!
//! - A provider's Retry-After above the service's `admission.max_retry_after_ms` is released
//!   at that maximum (the client caps it), so the lane pauses and the permit returns instead
//!   of staying held until its TTL.
//!
//! Invariants: the caller's cancellation while queued drops the HTTP request (the service then
//! forgets the waiter) and answers the `cancelled` rejection; a lease is heartbeated while the
//! call runs and released exactly once (explicitly, or with outcome `none` on drop); the key is
//! never printed.

use tokio_util::sync::CancellationToken;
use turnstile_admission::{
    ActualUsage, AdmissionRequest, BreakerTransition, Evidence, Outcome, Reason, Rejection,
};
use turnstile_client::{AcquireRequest, Client, ClientError, LaneCheckError, Lease};

use crate::error::AdmissionError;
use crate::reason::ResultReason;
use crate::telemetry::AdmitSpan;

/// A running service as the evaluator's governor. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RemoteGovernor {
    client: Client,
}

/// Why the service cannot govern this evaluation: the client's lane check
/// ([`Client::check_lanes`]) with the binding's adapters as the lanes.
#[derive(Debug, thiserror::Error)]
pub struct RemoteCheckError(#[from] pub LaneCheckError);

impl std::fmt::Display for RemoteCheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            LaneCheckError::UnknownLane { .. } => write!(f, "the binding's adapter {}", self.0),
            other => other.fmt(f),
        }
    }
}

impl RemoteCheckError {
    /// The result reason of an evaluation this refuses.
    pub fn result_reason(&self) -> ResultReason {
        match self.0 {
            LaneCheckError::NoProfile | LaneCheckError::UnknownLane { .. } => {
                ResultReason::InvalidDefinition
            }
            LaneCheckError::NotAPrincipal(_) | LaneCheckError::Service(_) => {
                ResultReason::EvaluationFailed
            }
        }
    }
}

impl RemoteGovernor {
    /// Governs with the service and key of `client`.
    pub fn new(client: Client) -> Self {
        RemoteGovernor { client }
    }

    /// The client (its service and key).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Checks the key can admit calls on every adapter of the binding (see
    /// [`Client::check_lanes`]).
    pub async fn check_lanes(&self, adapters: &[&str]) -> Result<(), RemoteCheckError> {
        self.client.check_lanes(adapters).await?;
        Ok(())
    }

    /// Acquires for `request` (its provider, budget and estimate), waiting at most `wait_ms`
    /// (capped at the service's maximum); cancelled by `cancel`.
    pub(crate) async fn acquire(
        &self,
        request: &AdmissionRequest,
        wait_ms: Option<u64>,
        cancel: Option<&CancellationToken>,
        span: Option<AdmitSpan>,
    ) -> Result<RemoteLease, AdmissionError> {
        // A deadline above the service's maximum waits that long (the client caps it).
        let asked = self.client.acquire(AcquireRequest {
            provider_id: request.provider_id.clone(),
            budget_id: request.budget_id.clone(),
            estimate: request.estimate.clone(),
            deadline_ms: wait_ms,
        });
        let answer = match cancel {
            None => asked.await,
            Some(token) => tokio::select! {
                biased;
                // Dropping `asked` drops the HTTP request: the service forgets the waiter.
                () = token.cancelled() => Err(ClientError::Rejected {
                    reason: Reason::Cancelled,
                    retryable: false,
                    retry_after_ms: None,
                    evidence: Box::new(Rejection::refusal(Reason::Cancelled, 0).evidence),
                }),
                answer = asked => answer,
            },
        };
        match answer {
            Ok(lease) => {
                let mut span = span;
                if let Some(span) = span.as_mut() {
                    span.admitted(lease.evidence());
                }
                Ok(RemoteLease {
                    lease: Box::new(lease),
                    span,
                })
            }
            Err(ClientError::Rejected {
                reason,
                retryable,
                evidence,
                ..
            }) => {
                let rejection = Rejection {
                    reason,
                    retryable,
                    evidence: *evidence,
                };
                if let Some(span) = span {
                    span.rejected(&rejection.evidence);
                }
                Err(AdmissionError::Rejected(rejection))
            }
            Err(_) => {
                if let Some(span) = span {
                    span.failed();
                }
                Err(AdmissionError::Unavailable)
            }
        }
    }

    /// Forgets the invocation's budgets on the service; `false` when it could not be reached.
    pub async fn release_budget(&self, budget_id: &str) -> bool {
        self.client.release_budget(budget_id).await.unwrap_or(false)
    }
}

/// A lease granted by the service, with the attempt's `decision.admit` span.
pub struct RemoteLease {
    /// Boxed: the client's lease carries its evidence inline.
    lease: Box<Lease>,
    span: Option<AdmitSpan>,
}

impl std::fmt::Debug for RemoteLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteLease")
            .field("lease", &self.lease)
            .field("traced", &self.span.is_some())
            .finish()
    }
}

impl RemoteLease {
    /// The admission's evidence.
    pub fn evidence(&self) -> &Evidence {
        self.lease.evidence()
    }

    /// Releases with the outcome and usage; the transitions it caused (none if the service
    /// could not be reached: the lease is then released with outcome `none` as it drops, or
    /// ends with its TTL). A provider's Retry-After above the service's
    /// `admission.max_retry_after_ms` is released at that maximum (the lane still pauses).
    pub async fn release(self, outcome: Outcome, usage: ActualUsage) -> Vec<BreakerTransition> {
        let RemoteLease { lease, span } = self;
        let transitions = lease.release(outcome, usage).await.unwrap_or_default();
        if let Some(span) = span {
            span.released(&transitions);
        }
        transitions
    }
}
