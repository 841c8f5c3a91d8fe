//! HTTP handlers, one file per resource. Each handler authenticates, parses and validates,
//! sends one command to the driver (or the store) and maps the answer to a status.

pub(crate) mod admissions;
pub(crate) mod approval;
pub(crate) mod coordination;
pub(crate) mod events;
pub(crate) mod fairness;
pub(crate) mod keys;
pub(crate) mod leases;
pub(crate) mod ops;
pub(crate) mod profiles;
pub(crate) mod revisions;
pub(crate) mod rollout_record;
pub(crate) mod rollouts;
pub(crate) mod validate;
pub(crate) mod workspaces;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use turnstile_shell::{Clock, DriverHandle, Feed, Telemetry};

use crate::config::Config;
use crate::durability::persist::StoreHandle;
use crate::http::slots::Slots;
use crate::keys::KeyRing;
use crate::metrics::Metrics;

/// A principal: (workspace, principal).
pub type PrincipalKey = (Arc<str>, Arc<str>);

/// What every handler can reach: one `Arc`, so the clone axum makes for every handler and
/// middleware layer of every request is one reference count, not one per part (measured: the
/// per-part clones and drops were about 3 % of the service's CPU at saturation).
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

impl AppState {
    pub fn new(parts: AppParts) -> Self {
        AppState(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// The parts of [`AppState`].
pub struct AppParts {
    pub driver: DriverHandle,
    pub store: StoreHandle,
    pub keys: Arc<KeyRing>,
    pub metrics: Arc<Metrics>,
    /// The one clock (the driver's): key bookkeeping stamps read it too.
    pub clock: Clock,
    pub config: Arc<Config>,
    /// False before start-up completes and once shutdown begins.
    pub ready: Arc<AtomicBool>,
    /// `decision.admit` spans, breaker events and the OpenTelemetry counters.
    pub telemetry: Telemetry,
    /// Requests in flight per API key (by key hash).
    pub key_slots: Arc<Slots<[u8; 32]>>,
    /// Admission requests waiting for an answer, per principal.
    pub pending: Arc<Slots<PrincipalKey>>,
    /// The driver's event feed (the console's live view, `GET …/events`).
    pub feed: Feed,
    /// Proxy mode (`/openai/v1/...`, `/anthropic/v1/...`).
    pub proxy: Arc<turnstile_proxy::Proxy>,
    /// Replicas: the shared limits the admission step tries after the local core (`None` on a
    /// single process).
    pub shared: turnstile_shell::SharedHook,
    /// The one registry `/metrics` writes (`crate::api::ops::exposition`), built at start-up.
    pub exposition: Arc<turnstile_shell::Exposition>,
    /// Where key and profile writes go (the store here, or the shared feed on replicas).
    pub identity: Arc<dyn crate::replicas::deployment::IdentityStore>,
    /// The shared side of releases, budget releases and pauses (nothing on a single process).
    pub books: Arc<dyn crate::replicas::deployment::SharedBooks>,
    /// The candidate revision of each workspace's latest rollout (canary answers name it).
    pub candidates: Arc<rollouts::CandidateRevisions>,
    /// The lease log's state: `/readyz` says not ready while it refuses writes.
    pub journal: Arc<turnstile_store::LeaseLogStats>,
}
