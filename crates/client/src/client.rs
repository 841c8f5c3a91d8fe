//! [`Client`]: one service, one key; the calls of the admission API that are not about one
//! lease.
//!
//! Decides the URL of every call (the base URL's path, then percent-encoded segments, so an ID
//! can never change the route) and the time each call may take: an acquire may wait up to its
//! `deadlineMs` on the service, so its HTTP timeout is that plus [`ANSWER_MARGIN`]; every other
//! call gets [`CALL_TIMEOUT`]. A `deadlineMs` or `retryAfterMs` above the service's setting is
//! sent at the setting (learned from the service's 422 and remembered, `bounds.rs`).
//!
//! Invariants: the key travels only in the `Authorization` header (marked sensitive) and never
//! appears in `Debug` output or an error; dropping an acquire future drops its HTTP request,
//! and the service then forgets the queued waiter (`docs/server.md`).

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderValue, AUTHORIZATION};
use reqwest::{Method, RequestBuilder, Url};
use serde::Deserialize;
use turnstile_admission::{Estimate, Snapshot};

use crate::bounds::{capped, Bounds};
use crate::error::ClientError;
use crate::lease::Lease;
use crate::wire::{
    self, AdmissionBody, BudgetReleased, HeartbeatAnswer, LeaseAnswer, Paused, RetryAfterBody,
};

/// The time a call other than an acquire may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// What an acquire's HTTP timeout adds to its `deadlineMs` (the answer's own time).
pub const ANSWER_MARGIN: Duration = Duration::from_secs(30);
/// An acquire without a `deadlineMs` waits the service's default; its HTTP timeout.
const UNBOUNDED_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(600);

/// A client of one turnstile service, acting with one key. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    auth: HeaderValue,
    /// The service's bounds as learned, shared by the clones and their leases.
    bounds: Arc<Bounds>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

/// One admission request (`POST /v1/admissions`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AcquireRequest {
    /// The provider lane of the key's workspace profile.
    pub provider_id: String,
    /// The invocation budget the attempt is charged to.
    pub budget_id: String,
    /// What the call is expected to use (`Estimate::default()`: nothing known).
    pub estimate: Estimate,
    /// How long to wait for a permit, at most the service's `admission.max_wait_ms`; `None`:
    /// the service's `admission.default_wait_ms`.
    pub deadline_ms: Option<u64>,
}

/// The workspace a key acts in (`GET /v1/workspaces`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceInfo {
    /// The workspace's ID.
    pub workspace_id: String,
    /// Its current profile revision; `None` while no profile is registered.
    pub profile_version: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WorkspaceList {
    workspaces: Vec<WorkspaceInfo>,
}

/// A workspace's aggregate counts (`GET /v1/workspaces/{id}/snapshot`): the core's view
/// (including every provider lane of the profile) and the service's held leases and waiters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct WorkspaceSnapshot {
    /// The core's aggregate view; `providers` names every provider lane of the profile.
    #[serde(flatten)]
    pub core: Snapshot,
    /// Leases the service holds for callers in this workspace.
    pub leases: u64,
    /// Admission requests of this workspace waiting for an answer.
    pub waiters: u64,
}

impl Client {
    /// A client of the service at `base_url` (`http://host:port`, optionally with a path
    /// prefix) acting with `key`. A URL that is not `http`/`https` with a host is
    /// [`ClientError::InvalidUrl`]; a key that cannot be a header is [`ClientError::InvalidKey`].
    pub fn new(base_url: &str, key: &str) -> Result<Client, ClientError> {
        let invalid = |problem: &str| ClientError::InvalidUrl {
            url: base_url.to_owned(),
            problem: problem.to_owned(),
        };
        let base = Url::parse(base_url).map_err(|e| invalid(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(invalid("the scheme must be http or https"));
        }
        if base.host_str().is_none_or(str::is_empty) || base.cannot_be_a_base() {
            return Err(invalid("the URL needs a host"));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(invalid("the URL may not carry a query or fragment"));
        }
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ClientError::InvalidKey);
        }
        let mut auth =
            HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| ClientError::InvalidKey)?;
        auth.set_sensitive(true);
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(Client {
            http,
            base,
            auth,
            bounds: Arc::default(),
        })
    }

    /// The service's base URL.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    /// The workspace the key acts in and its current profile revision. An admin key sees
    /// every workspace: only a key that sees exactly one gets an answer
    /// ([`ClientError::Decode`] otherwise).
    pub async fn workspace(&self) -> Result<WorkspaceInfo, ClientError> {
        let list: WorkspaceList = self
            .send(self.call(Method::GET, &["v1", "workspaces"]))
            .await?;
        let mut workspaces = list.workspaces;
        match workspaces.len() {
            1 => Ok(workspaces.remove(0)),
            n => Err(ClientError::Decode(format!(
                "the key sees {n} workspaces; a principal key sees exactly its own"
            ))),
        }
    }

    /// The aggregate counts of `workspace_id` (a principal key: its own workspace only).
    pub async fn snapshot(&self, workspace_id: &str) -> Result<WorkspaceSnapshot, ClientError> {
        self.send(self.call(Method::GET, &["v1", "workspaces", workspace_id, "snapshot"]))
            .await
    }

    /// Asks for a permit and waits for the answer (up to `deadline_ms` on the service; a
    /// deadline above the service's `admission.max_wait_ms` waits that long). A refusal is
    /// [`ClientError::Rejected`] with the service's evidence. Dropping the future drops the
    /// request, and the service forgets the waiter. The lease is heartbeated in the
    /// background (inside a tokio runtime) until it is released or dropped.
    pub async fn acquire(&self, request: AcquireRequest) -> Result<Lease, ClientError> {
        match request.deadline_ms {
            None => self.acquire_once(&request, None).await,
            Some(deadline_ms) => {
                capped(&self.bounds.wait, deadline_ms, |ms| {
                    self.acquire_once(&request, Some(ms))
                })
                .await
            }
        }
    }

    /// One `POST /v1/admissions` with `deadline_ms`.
    async fn acquire_once(
        &self,
        request: &AcquireRequest,
        deadline_ms: Option<u64>,
    ) -> Result<Lease, ClientError> {
        let body = AdmissionBody {
            provider_id: &request.provider_id,
            budget_id: &request.budget_id,
            estimate: &request.estimate,
            deadline_ms,
        };
        let timeout = deadline_ms
            .map_or(UNBOUNDED_ACQUIRE_TIMEOUT, Duration::from_millis)
            .saturating_add(ANSWER_MARGIN);
        let call = self
            .call(Method::POST, &["v1", "admissions"])
            .timeout(timeout)
            .json(&body);
        let answer: LeaseAnswer = self.send(call).await?;
        Ok(Lease::granted(self.clone(), answer))
    }

    /// Moves the expiry of the key's lease `lease_id` to now + TTL (`POST
    /// /v1/leases/{id}/heartbeat`); answers the new expiry (Unix epoch ms). A [`Lease`] does this
    /// on its own; this is for a lease ID held elsewhere. A lease the key does not hold is
    /// [`ClientError::NotFound`] (`unknown-lease`); a key that may not hold leases (an admin
    /// key, a principal the profile does not name) is a 403 [`ClientError::Status`].
    pub async fn heartbeat(&self, lease_id: &str) -> Result<u64, ClientError> {
        let call = self.call(Method::POST, &["v1", "leases", lease_id, "heartbeat"]);
        let answer: HeartbeatAnswer = self.send(call).await?;
        Ok(answer.expires_at_epoch_ms)
    }

    /// Forgets the budgets of one invocation (`POST /v1/budgets/{id}/release`); answers
    /// whether it had spent anything.
    pub async fn release_budget(&self, budget_id: &str) -> Result<bool, ClientError> {
        let answer: BudgetReleased = self
            .send(self.call(Method::POST, &["v1", "budgets", budget_id, "release"]))
            .await?;
        Ok(answer.released)
    }

    /// Pauses a provider lane of the key's workspace for `retry_after_ms` (a provider's
    /// Retry-After; above the service's `admission.max_retry_after_ms`, that long); answers
    /// when the pause ends (Unix epoch ms).
    pub async fn retry_after(
        &self,
        provider_id: &str,
        retry_after_ms: u64,
    ) -> Result<u64, ClientError> {
        let answer: Paused = capped(&self.bounds.retry_after, retry_after_ms, |ms| {
            let call = self
                .call(
                    Method::POST,
                    &["v1", "providers", provider_id, "retry-after"],
                )
                .json(&RetryAfterBody { retry_after_ms: ms });
            self.send(call)
        })
        .await?;
        Ok(answer.paused_until_epoch_ms)
    }

    /// The service's bounds as learned so far.
    pub(crate) fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// A request to the base URL's path followed by `segments` (each percent-encoded).
    pub(crate) fn call(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            // `new` refused URLs that cannot be a base, so this branch always runs.
            path.pop_if_empty().extend(segments);
        }
        self.http
            .request(method, url)
            .header(AUTHORIZATION, self.auth.clone())
            .timeout(CALL_TIMEOUT)
    }

    /// Sends and reads the answer (see `wire::read`).
    pub(crate) async fn send<T: serde::de::DeserializeOwned>(
        &self,
        call: RequestBuilder,
    ) -> Result<T, ClientError> {
        wire::read(call.send().await?).await
    }
}
