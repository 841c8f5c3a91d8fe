//! The evaluator governed by a running turnstile service: [`RemoteGovernor`] admits every
//! attempt through the service's admission API with the Rust client (`turnstile-client`).
//!
//! Decides:
//! - Before the first attempt: the key's workspace must have a profile, and every adapter ID
//!   of the binding must be a provider lane of it (the snapshot a principal key may read names
//!   every lane); otherwise the evaluation is refused naming the adapter.
//! - Each attempt acquires with `providerId` = the target's adapter, `budgetId` = the
//!   invocation, the attempt's estimate and `deadlineMs` = the attempt's remaining time, capped
//!   at the service's `admission.max_wait_ms` (learned from the service's 422 the first time a
//!   deadline exceeds it, then remembered): a long attempt deadline never fails the attempt.
//! - A refusal maps to the core's [`Rejection`] with the service's evidence; any other failure
//!   (unreachable, 5xx) is [`AdmissionError::Unavailable`].
//!
//! Invariants: the caller's cancellation while queued drops the HTTP request (the service then
//! forgets the waiter) and answers the `cancelled` rejection; a lease is heartbeated while the
//! call runs and released exactly once (explicitly, or with outcome `none` on drop); the key is
//! never printed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use turnstile_admission::{
    ActualUsage, AdmissionRequest, BreakerTransition, Evidence, Outcome, Reason, Rejection,
};
use turnstile_client::{AcquireRequest, Client, ClientError, Lease};

use crate::error::AdmissionError;
use crate::reason::ResultReason;
use crate::telemetry::AdmitSpan;

/// A running service as the evaluator's governor. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RemoteGovernor {
    client: Client,
    /// The service's `admission.max_wait_ms` once learned; `u64::MAX` until then.
    max_wait_ms: Arc<AtomicU64>,
}

/// Why the service cannot govern this evaluation.
#[derive(Debug, thiserror::Error)]
pub enum RemoteCheckError {
    /// The key's workspace has no profile registered.
    #[error("the service has no admission profile for the key's workspace: register one before evaluating with --service")]
    NoProfile,
    /// An adapter of the binding is not a provider lane of the workspace's profile.
    #[error("adapter {adapter:?} of the binding is not a provider lane of the service's workspace profile (revision {revision}); lanes: {lanes}")]
    UnknownLane {
        adapter: String,
        revision: String,
        lanes: String,
    },
    /// The service could not be asked.
    #[error("the service could not be asked about the key's workspace: {0}")]
    Service(#[from] ClientError),
}

impl RemoteCheckError {
    /// The result reason of an evaluation this refuses.
    pub fn result_reason(&self) -> ResultReason {
        match self {
            RemoteCheckError::NoProfile | RemoteCheckError::UnknownLane { .. } => {
                ResultReason::InvalidDefinition
            }
            RemoteCheckError::Service(_) => ResultReason::EvaluationFailed,
        }
    }
}

impl RemoteGovernor {
    /// Governs with the service and key of `client`.
    pub fn new(client: Client) -> Self {
        RemoteGovernor {
            client,
            max_wait_ms: Arc::new(AtomicU64::new(u64::MAX)),
        }
    }

    /// The client (its service and key).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Checks the key's workspace has a profile whose provider lanes include every adapter.
    pub async fn check_lanes<'a>(
        &self,
        adapters: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), RemoteCheckError> {
        let workspace = self.client.workspace().await?;
        let Some(revision) = workspace.profile_version else {
            return Err(RemoteCheckError::NoProfile);
        };
        let snapshot = match self.client.snapshot(&workspace.workspace_id).await {
            Err(error) if error.not_found_code() == Some("no-profile") => {
                return Err(RemoteCheckError::NoProfile)
            }
            other => other?,
        };
        let lanes = &snapshot.core.providers;
        for adapter in adapters {
            if !lanes.contains_key(adapter) {
                return Err(RemoteCheckError::UnknownLane {
                    adapter: adapter.to_owned(),
                    revision,
                    lanes: lanes.keys().cloned().collect::<Vec<_>>().join(", "),
                });
            }
        }
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
        let asked = self.acquire_capped(request, wait_ms);
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

    /// One acquire; a deadline above the service's maximum is asked again at the maximum
    /// (which is remembered).
    async fn acquire_capped(
        &self,
        request: &AdmissionRequest,
        wait_ms: Option<u64>,
    ) -> Result<Lease, ClientError> {
        let ask = |deadline_ms: Option<u64>| {
            self.client.acquire(AcquireRequest {
                provider_id: request.provider_id.clone(),
                budget_id: request.budget_id.clone(),
                estimate: request.estimate.clone(),
                deadline_ms,
            })
        };
        let cap = self.max_wait_ms.load(Ordering::Relaxed);
        let wait_ms = wait_ms.map(|ms| ms.min(cap));
        match ask(wait_ms).await {
            Err(ClientError::Status {
                status: 422,
                field: Some(field),
                message,
                ..
            }) if field == "deadlineMs" => {
                let max = max_wait_of(&message).ok_or_else(|| ClientError::Status {
                    status: 422,
                    code: "invalid-request".into(),
                    message: message.clone(),
                    field: Some(field),
                })?;
                self.max_wait_ms.store(max, Ordering::Relaxed);
                ask(wait_ms.map(|ms| ms.min(max))).await
            }
            other => other,
        }
    }

    /// Forgets the invocation's budgets on the service; `false` when it could not be reached.
    pub async fn release_budget(&self, budget_id: &str) -> bool {
        self.client.release_budget(budget_id).await.unwrap_or(false)
    }
}

/// The maximum in the service's refusal of a long deadline: "deadlineMs must be at most N
/// (admission.max_wait_ms)".
fn max_wait_of(message: &str) -> Option<u64> {
    let rest = message.split("at most ").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
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
    /// could not be reached: the lease then ends with its TTL).
    pub async fn release(self, outcome: Outcome, usage: ActualUsage) -> Vec<BreakerTransition> {
        let transitions = self.lease.release(outcome, usage).await.unwrap_or_default();
        if let Some(span) = self.span {
            span.released(&transitions);
        }
        transitions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_maximum_is_read_from_the_services_refusal() {
        assert_eq!(
            max_wait_of("deadlineMs must be at most 300000 (admission.max_wait_ms)"),
            Some(300_000)
        );
        assert_eq!(max_wait_of("deadlineMs must be a whole number"), None);
    }
}
