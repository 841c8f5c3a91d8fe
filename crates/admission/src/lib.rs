//! turnstile-admission: the sans-IO admission core.
//!
//! Decides, before every provider call, whether it may go now, must wait, or is refused —
//! fairly across principals, with evidence that never names a tenant. No tokio, no I/O, no
//! clock reads: `now` (integer milliseconds) is a parameter of every call, and
//! [`Controller::poll_timeout`] tells the host when to call again.
//!
//! Start at [`Registry`] (one controller per workspace, profiles, audit) or [`Controller`]
//! (one workspace's state machine). `docs/admission.md` explains the flow of a request.
#![forbid(unsafe_code)]

pub(crate) mod breaker;
pub mod bucket;
pub(crate) mod budget;
pub mod controller;
pub mod digest;
pub mod estimate;
pub mod evidence;
pub(crate) mod lane;
pub mod limits;
pub mod profile;
mod provider_usage;
pub(crate) mod queue;
pub mod reason;
pub mod registry;
pub(crate) mod ring;
pub(crate) mod scope;
pub(crate) mod scopes;
pub mod time;

pub use breaker::BreakerTransition;
pub use budget::{ActualUsage, BudgetBounds, InvalidActualCost};
pub use controller::{
    Acquired, AdmissionRequest, BucketLevel, BucketLevels, Charge, Controller, Counts, LaneView,
    LeaseCharge, ProviderSnapshot, ReinstateError, Released, Resolution, ScopeLevels, Snapshot,
    UnknownProvider,
};
pub use estimate::{CheckedEstimate, Estimate, InvalidEstimate};
pub use evidence::{Coordination, Evidence, Lease, LeaseId, Outcome, Rejection, WaiterId};
pub use limits::{CircuitBreakerConfig, Limits, LimitsError, ScopeKind};
pub use profile::{Profile, ProfileError};
/// What a provider reported it used (OpenAI and Anthropic, whole answers and streams), and the
/// one reader of it that the proxy, the evaluator and the roster share.
pub use provider_usage::ProviderUsage;
pub use reason::{BreakerState, Decision, Reason};
pub use registry::{ProfileChangeKind, ProfileChangeRecord, Registry, RegistryError};
pub use time::Millis;
