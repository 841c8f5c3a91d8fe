//! [`Lease`]: a granted permit, heartbeated in the background and released exactly once.
//!
//! Decides the heartbeat's rhythm: every third of the lease's TTL (as the Python and
//! TypeScript clients do), so two heartbeats may fail before the service reclaims the lease. A
//! heartbeat that fails for the transport is tried again at the next beat; one the service
//! answers 404 (`unknown-lease`) marks the lease [`lost`](Lease::lost) and stops the beat.
//!
//! Invariants:
//! - The heartbeat task stops when the lease is released or dropped (it is aborted, never
//!   left running).
//! - A `retry-after` release above the service's `admission.max_retry_after_ms` is sent at
//!   that maximum (`bounds.rs`).
//! - A lease is released at most once: [`Lease::release`] consumes it, [`Lease::try_release`]
//!   marks it released once the service answered; a lease dropped unreleased is released with
//!   outcome `none` on a spawned task (best effort: without a tokio runtime, or if the service
//!   is unreachable, the service reclaims it after its TTL).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use tokio::task::JoinHandle;
use turnstile_admission::{ActualUsage, BreakerTransition, Evidence, Outcome};

use crate::bounds::capped;
use crate::client::Client;
use crate::error::ClientError;
use crate::wire::{LeaseAnswer, ReleaseBody, Released};

/// A granted permit to call the provider.
pub struct Lease {
    client: Client,
    lease_id: String,
    ttl_ms: u64,
    evidence: Evidence,
    state: Arc<Beat>,
    heartbeat: Option<JoinHandle<()>>,
    released: bool,
}

/// What the heartbeat task and the lease share.
#[derive(Debug)]
struct Beat {
    expires_at_epoch_ms: AtomicU64,
    lost: AtomicBool,
    heartbeats: AtomicU64,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("lease_id", &self.lease_id)
            .field("ttl_ms", &self.ttl_ms)
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// A granted lease; starts its heartbeat when called inside a tokio runtime.
    pub(crate) fn granted(client: Client, answer: LeaseAnswer) -> Lease {
        let state = Arc::new(Beat {
            expires_at_epoch_ms: AtomicU64::new(answer.expires_at_epoch_ms),
            lost: AtomicBool::new(false),
            heartbeats: AtomicU64::new(0),
        });
        let interval = Duration::from_millis((answer.ttl_ms / 3).max(1));
        let heartbeat = tokio::runtime::Handle::try_current().ok().map(|runtime| {
            let (client, lease_id, state) =
                (client.clone(), answer.lease_id.clone(), Arc::clone(&state));
            runtime.spawn(beat(client, lease_id, state, interval))
        });
        Lease {
            client,
            lease_id: answer.lease_id,
            ttl_ms: answer.ttl_ms,
            evidence: answer.evidence,
            state,
            heartbeat,
            released: false,
        }
    }

    /// The lease's ID (as the service names it).
    pub fn lease_id(&self) -> &str {
        &self.lease_id
    }

    /// The lease's time to live without a heartbeat, in ms.
    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    /// When the lease expires unless heartbeated (Unix epoch ms), as last heard.
    pub fn expires_at_epoch_ms(&self) -> u64 {
        self.state.expires_at_epoch_ms.load(Ordering::Relaxed)
    }

    /// The admission's evidence.
    pub fn evidence(&self) -> &Evidence {
        &self.evidence
    }

    /// Heartbeats the service answered so far.
    pub fn heartbeats(&self) -> u64 {
        self.state.heartbeats.load(Ordering::Relaxed)
    }

    /// Whether the service said the lease is gone (reclaimed after its TTL).
    pub fn lost(&self) -> bool {
        self.state.lost.load(Ordering::Relaxed)
    }

    /// Moves the expiry to now + TTL now (the background task does this on its own).
    pub async fn heartbeat(&self) -> Result<u64, ClientError> {
        heartbeat_once(&self.client, &self.lease_id, &self.state).await
    }

    /// Releases the lease with the call's outcome (`RetryAfter` pauses the provider lane) and
    /// what it actually used; answers the breaker transitions the outcome caused. A lease the
    /// service no longer holds is [`ClientError::NotFound`] (`unknown-lease`); after any other
    /// failure the lease is released with outcome `none` as it drops.
    pub async fn release(
        mut self,
        outcome: Outcome,
        usage: ActualUsage,
    ) -> Result<Vec<BreakerTransition>, ClientError> {
        self.try_release(outcome, usage).await
    }

    /// Like [`release`](Self::release), but a release the service refused (a 422 naming a
    /// field, say) or that did not arrive leaves the lease held and heartbeated, so the caller
    /// may try again, e.g. with another outcome. Once released (or unknown to the service),
    /// another call is [`ClientError::NotFound`] (`unknown-lease`) without asking the service.
    pub async fn try_release(
        &mut self,
        outcome: Outcome,
        usage: ActualUsage,
    ) -> Result<Vec<BreakerTransition>, ClientError> {
        if self.released {
            return Err(ClientError::NotFound {
                code: "unknown-lease".into(),
                message: "this lease was already released".into(),
            });
        }
        let answer = release(&self.client, &self.lease_id, outcome, usage).await;
        let settled = match &answer {
            Ok(_) => true,
            Err(error) => error.not_found_code().is_some(),
        };
        if settled {
            self.stop_heartbeat();
            self.released = true;
        }
        answer
    }

    fn stop_heartbeat(&mut self) {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_heartbeat();
        if self.released {
            return;
        }
        self.released = true;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, lease_id) = (self.client.clone(), std::mem::take(&mut self.lease_id));
            runtime.spawn(async move {
                let _ = release(&client, &lease_id, Outcome::None, ActualUsage::none()).await;
            });
        }
    }
}

/// Releases `lease_id`; a `retry-after` outcome above the service's
/// `admission.max_retry_after_ms` is released at that maximum (the lane still pauses).
async fn release(
    client: &Client,
    lease_id: &str,
    outcome: Outcome,
    usage: ActualUsage,
) -> Result<Vec<BreakerTransition>, ClientError> {
    let once = |outcome: Outcome| {
        let call = client
            .call(Method::POST, &["v1", "leases", lease_id, "release"])
            .json(&ReleaseBody::new(outcome, usage));
        client.send::<Released>(call)
    };
    let answer = match outcome {
        Outcome::RetryAfter { retry_after_ms } => {
            capped(&client.bounds().retry_after, retry_after_ms, |ms| {
                once(Outcome::RetryAfter { retry_after_ms: ms })
            })
            .await?
        }
        outcome => once(outcome).await?,
    };
    Ok(answer.breaker_transitions)
}

async fn heartbeat_once(client: &Client, lease_id: &str, state: &Beat) -> Result<u64, ClientError> {
    match client.heartbeat(lease_id).await {
        Ok(expires_at_epoch_ms) => {
            state
                .expires_at_epoch_ms
                .store(expires_at_epoch_ms, Ordering::Relaxed);
            state.heartbeats.fetch_add(1, Ordering::Relaxed);
            Ok(expires_at_epoch_ms)
        }
        Err(error) => {
            if error.not_found_code().is_some() {
                state.lost.store(true, Ordering::Relaxed);
            }
            Err(error)
        }
    }
}

/// The background heartbeat: every `interval` until aborted or the lease is lost.
async fn beat(client: Client, lease_id: String, state: Arc<Beat>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        if heartbeat_once(&client, &lease_id, &state).await.is_err()
            && state.lost.load(Ordering::Relaxed)
        {
            return;
        }
    }
}
