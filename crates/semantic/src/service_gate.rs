//! [`ServiceGate`]: the [`ReadGate`] of a running `turnstile serve`, through
//! `turnstile-client`. Every read is one admission on one provider lane of the key's workspace:
//!
//! - **acquire** `{providerId: lane, budgetId, estimate: {tokens, costUsd?}, deadlineMs}` with
//!   the read's estimate ([`crate::estimate`]) and its deadline (the reader's timeout);
//! - **heartbeat** in the background while the read runs (the client's lease beats every third
//!   of its TTL on this gate's runtime thread);
//! - **release** once, with the outcome and the reported usage (input + output tokens):
//!   accepted or invalid → `success` (the provider answered), unavailable → `failure`, a 429 →
//!   `retry-after` with the provider's wait (else [`FALLBACK_RETRY_AFTER_MS`], the proxy's
//!   default), which pauses the lane for everyone in the workspace.
//!
//! Before any read, [`ServiceGate::check`] runs the client's lane check: an unreachable
//! service, an unknown key, a workspace without a profile, a key that is not a principal the
//! profile names or a lane the profile lacks stops `roster run` at once, naming the problem
//! (and the profile's lanes).
//!
//! A refusal maps to a [`GateRefusal`]: the service's reason code, its `retryable` (a wait that
//! ran out, `queue-timeout` or `deadline-exceeded`, counts as retryable: the next pass may get
//! in) and Retry-After; an unreachable service or a 5xx is retryable; an unknown key, a workspace
//! without a profile or any other 4xx is not. The budget (one `budgetId` per gate, i.e. per
//! `roster run`) is released by [`ServiceGate::finish`].
//!
//! Invariants: the key is held only by the client (never in an error, refusal or `Debug`); a
//! lease is released exactly once (settled, or with outcome `none` when dropped unsettled).

use std::sync::Arc;

use tokio::runtime::Runtime;
use turnstile_admission::{ActualUsage, Estimate, Outcome, Prices, Reason};
use turnstile_client::{AcquireRequest, Client, ClientError, LaneCheckError, Lease};

use crate::gate::{AdmittedRead, GateDecision, GateRefusal, ReadEstimate, ReadGate};
use crate::{ReadOutcome, ReadRequest};

/// The lane pause a 429 without a usable Retry-After asks for (the proxy's default).
pub const FALLBACK_RETRY_AFTER_MS: u64 = 1_000;

/// Why a [`ServiceGate`] could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServiceGateError {
    /// The service URL or the key is unusable.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The gate's runtime thread could not start.
    #[error("the admission client's runtime could not start: {0}")]
    Runtime(#[from] std::io::Error),
    /// The provider lane is empty.
    #[error("the provider lane (--provider) must not be empty")]
    EmptyProvider,
    /// The key cannot admit reads on the lane (the client's lane check).
    #[error("{}", describe_check(.0))]
    Check(#[from] LaneCheckError),
}

/// A lane check's error as `roster run` names it: the lane is its `--provider`.
fn describe_check(error: &LaneCheckError) -> String {
    match error {
        LaneCheckError::UnknownLane { .. } => format!("--provider {error}"),
        other => other.to_string(),
    }
}

/// Where and how reads are admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceGateSettings {
    /// The service's base URL, e.g. `http://127.0.0.1:8686`.
    pub service_url: String,
    /// The provider lane of the key's workspace profile the reads are admitted on.
    pub provider_id: String,
    /// The budget all reads of this gate are charged to.
    pub budget_id: String,
    /// How long one admission may wait (`deadlineMs`; above the service's
    /// `admission.max_wait_ms`, the client waits that long).
    pub deadline_ms: u64,
}

/// Admits reads through a running service.
pub struct ServiceGate {
    runtime: Arc<Runtime>,
    client: Client,
    settings: ServiceGateSettings,
}

impl std::fmt::Debug for ServiceGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceGate")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ServiceGate {
    /// A gate acting with `key` (never printed).
    pub fn new(settings: ServiceGateSettings, key: &str) -> Result<Self, ServiceGateError> {
        if settings.provider_id.trim().is_empty() {
            return Err(ServiceGateError::EmptyProvider);
        }
        let client = Client::new(&settings.service_url, key)?;
        // One worker: it runs the heartbeats while the reader blocks the calling thread.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("turnstile-roster-admission")
            .enable_all()
            .build()?;
        Ok(ServiceGate {
            runtime: Arc::new(runtime),
            client,
            settings,
        })
    }

    /// Checks, before any read, that the key can admit reads on the lane
    /// ([`Client::check_lanes`]).
    pub fn check(&self) -> Result<(), ServiceGateError> {
        let lane = self.settings.provider_id.as_str();
        self.runtime.block_on(self.client.check_lanes(&[lane]))?;
        Ok(())
    }

    /// Releases this gate's budget on the service (the end of a `roster run`).
    pub fn finish(&self) -> Result<(), ClientError> {
        self.runtime
            .block_on(self.client.release_budget(&self.settings.budget_id))
            .map(|_| ())
    }
}

impl ReadGate for ServiceGate {
    fn admit(&mut self, _request: &ReadRequest<'_>, estimate: &ReadEstimate) -> GateDecision {
        let request = AcquireRequest {
            provider_id: self.settings.provider_id.clone(),
            budget_id: self.settings.budget_id.clone(),
            estimate: Estimate {
                tokens: Some(estimate.tokens as f64),
                cost_usd: estimate.cost_usd,
                ..Estimate::default()
            },
            deadline_ms: Some(self.settings.deadline_ms),
        };
        match self.runtime.block_on(self.client.acquire(request)) {
            Ok(lease) => GateDecision::Admitted(Box::new(HeldRead {
                runtime: Arc::clone(&self.runtime),
                lease: Some(lease),
                prices: estimate.prices,
            })),
            Err(error) => GateDecision::Refused(refusal(&error)),
        }
    }
}

/// The refusal an acquire's error means.
fn refusal(error: &ClientError) -> GateRefusal {
    match error {
        ClientError::Rejected {
            reason,
            retryable,
            retry_after_ms,
            ..
        } => GateRefusal {
            reason: reason.as_str().to_owned(),
            // A wait that ran out says nothing about the next pass (`deadline-exceeded` is
            // answered `retryable: false` for the request itself).
            retryable: *retryable
                || matches!(reason, Reason::DeadlineExceeded | Reason::QueueTimeout),
            retry_after_ms: *retry_after_ms,
        },
        ClientError::Transport(_) => GateRefusal {
            reason: error.to_string(),
            retryable: true,
            retry_after_ms: None,
        },
        ClientError::Status { status, .. } => GateRefusal {
            reason: error.to_string(),
            retryable: *status >= 500 || *status == 429,
            retry_after_ms: None,
        },
        _ => GateRefusal {
            reason: error.to_string(),
            retryable: false,
            retry_after_ms: None,
        },
    }
}

/// The release an outcome means: the tokens the provider reported and, with the reader's
/// prices, their cost (a cost the prices cannot give stays unknown: the estimate stands).
fn release_of(outcome: &ReadOutcome, prices: Option<Prices>) -> (Outcome, ActualUsage) {
    let usage = |usage: &Option<crate::CallUsage>| {
        usage.map_or(ActualUsage::none(), |usage| {
            let tokens =
                ActualUsage::none().tokens(usage.input_tokens.saturating_add(usage.output_tokens));
            match prices.map(|p| p.cost_usd(usage.input_tokens, usage.output_tokens)) {
                Some(cost) => tokens.with_cost_usd(cost).unwrap_or(tokens),
                None => tokens,
            }
        })
    };
    match outcome {
        ReadOutcome::Accepted { usage: used, .. } | ReadOutcome::Invalid { usage: used, .. } => {
            (Outcome::Success, usage(used))
        }
        ReadOutcome::Unavailable { .. } => (Outcome::Failure, ActualUsage::none()),
        ReadOutcome::RateLimited { retry_after_ms, .. } => (
            Outcome::RetryAfter {
                retry_after_ms: retry_after_ms.unwrap_or(FALLBACK_RETRY_AFTER_MS),
            },
            ActualUsage::none(),
        ),
    }
}

/// An admitted read: its lease, heartbeated until settled.
struct HeldRead {
    runtime: Arc<Runtime>,
    lease: Option<Lease>,
    /// The prices of the read's estimate, for the actual cost.
    prices: Option<Prices>,
}

impl AdmittedRead for HeldRead {
    fn settle(mut self: Box<Self>, outcome: &ReadOutcome) -> Result<(), String> {
        let Some(lease) = self.lease.take() else {
            return Ok(());
        };
        let (outcome, usage) = release_of(outcome, self.prices);
        self.runtime
            .block_on(lease.release(outcome, usage))
            .map(|_| ())
            .map_err(|error| format!("releasing the read's lease failed: {error}"))
    }
}

impl Drop for HeldRead {
    fn drop(&mut self) {
        // Unsettled (the store failed between admission and the call): released as `none` on
        // the runtime, where the lease's own drop spawns the release.
        if let Some(lease) = self.lease.take() {
            let _entered = self.runtime.enter();
            drop(lease);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CallUsage, Reading};

    #[test]
    fn outcomes_map_to_releases() {
        let used = Some(CallUsage {
            input_tokens: 10,
            cached_input_tokens: 4,
            output_tokens: 5,
            reasoning_tokens: 2,
        });
        let accepted = ReadOutcome::Accepted {
            reading: Reading {
                headline: "h".to_owned(),
                detail: None,
            },
            usage: used,
        };
        assert_eq!(
            release_of(&accepted, None),
            (Outcome::Success, ActualUsage::none().tokens(15))
        );
        let invalid = ReadOutcome::Invalid {
            reason: "r".to_owned(),
            usage: None,
        };
        // With prices, the reported tokens are priced: 10 in at $3, 5 out at $15 per million.
        let prices = Prices::new(3.0, 15.0).unwrap();
        let priced = release_of(&accepted, Some(prices)).1;
        assert_eq!(priced.tokens, Some(15));
        assert_eq!(
            priced.cost_usd(),
            Some((10.0 * 3.0 + 5.0 * 15.0) / 1_000_000.0)
        );
        assert_eq!(
            release_of(&invalid, None),
            (Outcome::Success, ActualUsage::none())
        );
        let down = ReadOutcome::Unavailable {
            reason: "r".to_owned(),
        };
        assert_eq!(release_of(&down, None).0, Outcome::Failure);
        for (asked, paused) in [(Some(7_000), 7_000), (None, FALLBACK_RETRY_AFTER_MS)] {
            let limited = ReadOutcome::RateLimited {
                reason: "r".to_owned(),
                retry_after_ms: asked,
            };
            assert_eq!(
                release_of(&limited, None).0,
                Outcome::RetryAfter {
                    retry_after_ms: paused
                }
            );
        }
    }
}
