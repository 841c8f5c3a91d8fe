//! turnstile-admission: the sans-IO admission core.
//!
//! Decides, before every provider call, whether it may go now, must wait, or is refused —
//! fairly across principals, with evidence that never names a tenant. No tokio, no I/O, no
//! clock reads: `now` (integer milliseconds) is a parameter of every call, and
//! [`Controller::poll_timeout`] tells the host when to call again.
//!
//! Start at [`Registry`] (one controller per workspace, profiles, audit) or [`Controller`]
//! (one workspace's state machine). `docs/admission.md` explains the flow of a request.
//!
//! The modules are private; the crate's API is what this file re-exports. One namespace stays
//! public: [`digest`] (canonical JSON and sha256 digests, shared by the receipt store, the
//! evaluator and the qualification records).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod binding;
mod breaker;
mod bucket;
mod budget;
mod budget_cold;
mod controller;
mod deadline;
pub mod digest;
mod estimate;
mod evidence;
mod fair_order;
mod lane;
mod limits;
mod prices;
mod profile;
mod provider_quota;
mod provider_retry_after;
mod provider_usage;
mod queue;
mod reason;
mod registry;
mod ring;
mod rollout;
mod scope;
mod scopes;
mod service_rate;
mod time;

/// Which limit holds a queued lane back (`LaneView::bindings`).
pub use binding::Binding;
pub use breaker::BreakerTransition;
pub use bucket::{TokenBucket, MINUTE_MS, SECOND_MS};
pub use budget::{
    is_call_budget, ActualUsage, BudgetBounds, BudgetCap, InvalidActualCost, CALL_BUDGET_PREFIX,
};
/// The caller's own rate limits at a decision (`Evidence::caller`), for the
/// `x-ratelimit-*` headers of its answers.
pub use controller::caller_quota::{CallerLimit, CallerQuota};
pub use controller::{
    Acquired, AdmissionRequest, BindingCount, BucketLevel, BucketLevels, Charge, Controller,
    Counts, LaneView, LeaseCharge, ProviderSnapshot, ReinstateError, Released, Resolution,
    ScopeLevels, Snapshot, UnknownProvider, BREAKER_HISTORY_LIMIT, IDLE_LANES_KEPT,
    IDLE_PRINCIPALS_KEPT, TRANSITION_OUTBOX_LIMIT,
};
pub use deadline::block_outlasts_deadline;
pub use estimate::{CheckedEstimate, Estimate, InvalidEstimate};
pub use evidence::{Coordination, Evidence, Lease, LeaseId, Outcome, Rejection, WaiterId};
pub use limits::{
    CircuitBreakerConfig, Fairness, Limits, LimitsError, MinShare, Priority, ScopeKind,
    DEFAULT_BATCH_MIN_SHARE, DEFAULT_BREAKER_HALF_OPEN_MAX_CALLS, DEFAULT_BREAKER_OPEN_MS,
    DEFAULT_STANDARD_MIN_SHARE, MAX_SAFE_INTEGER, MAX_WEIGHT, MIN_WEIGHT,
};
/// A model's price table (USD per million input and output tokens), shared by the proxy's
/// routes and the evaluator's adapters files.
pub use prices::{InvalidPrices, Prices, MAX_USD_PER_MTOK};
pub use profile::{Profile, ProfileError};
/// What a provider answer announced of the account's quota (requests and tokens left, and when
/// they reset), observed on a provider lane with [`Controller::observe_provider_quota`].
pub use provider_quota::{ProviderQuota, QuotaWindow};
/// What a provider reported it used (OpenAI and Anthropic, whole answers and streams), and the
/// one reader of it that the proxy, the evaluator and the roster share.
pub use provider_retry_after::{days_from_civil, http_date_secs, provider_retry_after_ms};
pub use provider_usage::ProviderUsage;
pub use reason::{BreakerState, Decision, Reason};
pub use registry::{
    ProfileChangeKind, ProfileChangeRecord, Registry, RegistryError, EVICTED_BUDGETS_OUTBOX_LIMIT,
    PROFILE_CHANGE_SCHEMA, PROFILE_HISTORY_LIMIT, TRACKED_PRINCIPALS_LIMIT,
    TRACKED_REVISIONS_LIMIT,
};
/// Rollouts (issue 33): a candidate revision tried in shadow or on a canary slice before it
/// binds; started, read, promoted and aborted through [`Registry`].
pub use rollout::{
    CandidateOnly, Comparison, FinishedRollout, RolloutDecision, RolloutError, RolloutMode,
    RolloutOutcome, RolloutView, ROLLOUT_HISTORY_LIMIT,
};
pub use time::Millis;
