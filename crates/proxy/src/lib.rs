//! turnstile-proxy: OpenAI- and Anthropic-compatible routes in front of the providers. Every
//! call that passes through is admitted by the same core and driver as `POST /v1/admissions`,
//! fairly across principals, and settled with what the provider actually reported.
//!
//! # Surface
//!
//! | method and path | upstream |
//! |---|---|
//! | `POST /openai/v1/chat/completions`, `/responses`, `/embeddings`, `/completions` | OpenAI-format upstream, same path under its base URL |
//! | `GET /openai/v1/models` | the OpenAI-format models of the routing table (no upstream call) |
//! | `POST /anthropic/v1/messages` | Anthropic-format upstream, `/v1/messages` under its base URL |
//!
//! The host (`turnstile-server`) mounts [`router`] on its own listener, behind its own
//! authentication, connection caps and deadlines, and tells the proxy who is calling by
//! inserting an [`Identity`] into the request's extensions.
//!
//! # Invariants
//!
//! - Admission before upstream: no upstream request is made without a granted lease, and an
//!   unknown model is refused (404) before admission.
//! - Every granted lease is released exactly once (`settle.rs`: `Settlement`), with the provider's
//!   reported usage when there is some.
//! - Nothing that may have reached a provider is sent again by the proxy: only a request hyper
//!   hands back unsent (from a pooled connection that closed meanwhile: it never left) goes out
//!   on another connection, and a model with several deployments fails a call over to another
//!   deployment only after a 429 (refused unprocessed) or a request that never left
//!   (`deployments.rs`).
//! - The upstream key never leaves the process except toward its upstream; the client's
//!   turnstile key never goes upstream.
//! - No workspace, principal or budget ID reaches a metric label, span attribute or log line.
//!
//! # Layout
//!
//! Every module is private; the crate's API is what this file re-exports. `format.rs` (the
//! wire formats) depends on nothing; `config.rs` resolves the `[proxy]` section into plain
//! [`Route`]s (a model's [`Deployment`]s: `deployment_config.rs`); `deployments.rs` chooses the
//! deployment a call is admitted on and fails it over; `upstream.rs` turns them into what each call sends (its `Outbound`, built once
//! per upstream by [`Proxy::new`]); `handler.rs` serves one call in the order its module doc
//! gives; `fake.rs` is the scripted upstream of tests and benchmarks ([`FakeUpstream`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod body;
mod caller_headers;
mod config;
mod deployment_config;
mod deployments;
mod error;
mod estimate;
mod failure_log;
mod fake;
mod format;
mod handler;
mod metrics;
mod pool;
mod quota_headers;
mod request;
mod retry_after;
mod route_table;
mod settle;
mod sse;
mod tap;
mod upstream;
mod wait;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::json;
use turnstile_shell::{DriverHandle, Telemetry};

use body::BodyLimits;
use request::Endpoint;
use upstream::Routed;

/// The caller's own `x-ratelimit-*` / `anthropic-ratelimit-*` headers (also written by the
/// admission API's answers).
pub use caller_headers::write_caller_headers;
pub use config::{ModelConfig, ProxyConfig, ProxyConfigError, Route, Upstream, UpstreamConfig};
pub use deployment_config::{Deployment, DeploymentConfig, MAX_DEPLOYMENTS};
pub use deployments::PROVIDER_HEADER;
pub use error::REASON_HEADER;
pub use fake::{Arrival as FakeArrival, FakeUpstream, Stats as FakeStats};
pub use format::ApiFormat;
pub use handler::{BUDGET_HEADER, WAIT_HEADER};
pub use metrics::ProxyMetrics;
pub use pool::ClientError;
/// The provider's rate-limit headers of an answer, read into the core's `ProviderQuota`
/// (public for the parser's benchmark and the tests that script the fake upstream).
pub use quota_headers::{
    format_duration, format_rfc3339, parse_duration_ms, parse_rfc3339_ms,
    read as read_quota_headers, QuotaRead,
};

/// Who is calling, as the host authenticated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A principal key: its calls are admitted as this principal of this workspace.
    Principal {
        /// The workspace the key belongs to.
        workspace: Arc<str>,
        /// The principal the key acts as.
        principal: Arc<str>,
    },
    /// An admin key: it may not make model calls (403).
    Admin,
}

/// The proxy's state, shared by every call. Built once by the host ([`Proxy::new`]); its parts
/// are the crate's own (a host reads the counters through [`Proxy::metrics`]).
pub struct Proxy {
    pub(crate) config: ProxyConfig,
    /// Models by the name clients send, each with its upstream's outbound parts.
    pub(crate) routes: std::collections::HashMap<String, Routed>,
    pub(crate) client: pool::Client,
    pub(crate) driver: DriverHandle,
    pub(crate) telemetry: Telemetry,
    pub(crate) metrics: Arc<ProxyMetrics>,
    pub(crate) body_limits: BodyLimits,
    /// The longest lane pause an upstream 429 may cause.
    pub(crate) max_retry_after_ms: u64,
    /// Replicas: the host's shared limits (`None` on a single process).
    pub(crate) shared: turnstile_shell::SharedHook,
    /// Numbers per-call budgets.
    calls: AtomicU64,
    /// `~proxy-{a per-process random number}-`: per-call budget IDs are this and a counter,
    /// unique to this process (replicas share budget names).
    budget_prefix: String,
}

/// A proxy that could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ProxySetupError {
    /// The `[proxy]` section cannot be resolved.
    #[error(transparent)]
    Config(#[from] ProxyConfigError),
    /// The upstream HTTP client cannot be built.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// How the host's limits apply to the proxy.
#[derive(Debug, Clone, Copy)]
pub struct HostLimits {
    /// A request body must be read within this.
    pub body_read_timeout: Duration,
    /// A request body slower than this (bytes per second) is cut.
    pub body_min_bytes_per_sec: u64,
    /// The longest lane pause an upstream 429 may cause.
    pub max_retry_after_ms: u64,
}

impl Proxy {
    /// Resolves the configuration (upstream keys from the environment) and builds the client.
    pub fn new(
        config: ProxyConfig,
        env: impl Fn(&str) -> Option<String>,
        driver: DriverHandle,
        telemetry: Telemetry,
        host: HostLimits,
    ) -> Result<Self, ProxySetupError> {
        let routes = Routed::all(config.resolve(env)?);
        let metrics = Arc::new(ProxyMetrics::new(
            routes
                .values()
                .flat_map(|routed| routed.route.deployments.iter())
                .map(|deployment| &*deployment.provider),
        ));
        let client = pool::Client::new(Duration::from_millis(config.connect_timeout_ms))?;
        Ok(Proxy {
            body_limits: BodyLimits {
                max_bytes: config.max_request_bytes,
                read_timeout: host.body_read_timeout,
                min_bytes_per_sec: host.body_min_bytes_per_sec,
            },
            max_retry_after_ms: host.max_retry_after_ms,
            config,
            routes,
            client,
            driver,
            telemetry,
            metrics,
            shared: None,
            calls: AtomicU64::new(0),
            budget_prefix: format!(
                "{}proxy-{:016x}-",
                turnstile_admission::CALL_BUDGET_PREFIX,
                process_nonce()
            ),
        })
    }

    /// Admits, settles, releases and pauses every call through the host's shared limits too.
    pub fn with_shared(mut self, shared: Arc<dyn turnstile_shell::SharedLimits>) -> Self {
        self.shared = Some(shared);
        self
    }

    /// The proxy's counters (`turnstile_proxy_*`), which the host's `/metrics` registry joins.
    pub fn metrics(&self) -> &Arc<ProxyMetrics> {
        &self.metrics
    }

    /// A fresh per-call budget ID, in a namespace the admission API cannot name (`~`), unique
    /// across replicas (their shared budget lines live under the same workspace).
    pub(crate) fn call_budget(&self) -> String {
        use std::fmt::Write;
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let mut id = String::with_capacity(self.budget_prefix.len() + 20);
        id.push_str(&self.budget_prefix);
        let _ = write!(id, "{n}");
        id
    }
}

/// A per-process random number (std's randomly seeded hasher: no extra dependency).
fn process_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}

crate::route_table! {
    /// Every proxy route, as (method, path): exactly what [`router`] serves.
    pub const ROUTES;
    /// Adds every route of [`ROUTES`].
    fn serve_routes(Router<Arc<Proxy>>);
    post "/openai/v1/chat/completions" => endpoint(Endpoint::ChatCompletions),
    post "/openai/v1/responses" => endpoint(Endpoint::Responses),
    post "/openai/v1/embeddings" => endpoint(Endpoint::Embeddings),
    post "/openai/v1/completions" => endpoint(Endpoint::Completions),
    get "/openai/v1/models" => models,
    post "/anthropic/v1/messages" => endpoint(Endpoint::Messages),
}

/// The proxy's routes ([`ROUTES`]), for any host state `S`.
pub fn router<S: Clone + Send + Sync + 'static>(proxy: Arc<Proxy>) -> Router<S> {
    serve_routes(Router::new()).with_state(proxy)
}

/// The handler of one proxied endpoint ([`handler::call`], which boxes the call's future once).
fn endpoint(
    endpoint: Endpoint,
) -> impl Fn(State<Arc<Proxy>>, Request) -> handler::CallFuture + Clone + Send + Sync + 'static {
    move |State(proxy): State<Arc<Proxy>>, request: Request| handler::call(proxy, endpoint, request)
}

/// `GET /openai/v1/models`: the OpenAI-format models of the routing table.
async fn models(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    if !matches!(
        request.extensions().get::<Identity>(),
        Some(Identity::Principal { .. })
    ) {
        let error = match request.extensions().get::<Identity>() {
            Some(Identity::Admin) => error::ProxyError::forbidden(
                "an admin key cannot make model calls: use a principal key",
            ),
            _ => error::ProxyError::unauthorized(),
        };
        return error.response(ApiFormat::Openai);
    }
    let mut names: Vec<&str> = proxy
        .routes
        .values()
        .filter(|routed| routed.route.format == ApiFormat::Openai)
        .map(|routed| &*routed.route.model)
        .collect();
    names.sort_unstable();
    let data: Vec<_> = names
        .into_iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "turnstile"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}
