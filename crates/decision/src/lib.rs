//! turnstile-decision: the decision evaluator.
//!
//! - [`AdmissionDriver`] is the evaluator's face of the shell's one driver task
//!   ([`turnstile_shell::Driver`]); [`AdmissionLease`] (a shell [`Grant`](turnstile_shell::Grant))
//!   releases on drop. The driver keeps profile and breaker history like the service
//!   ([`AdmissionDriver::profile_history`], [`AdmissionDriver::breaker_history`]).
//! - [`Governor`] is who admits a scheduled evaluation's attempts: the in-process
//!   [`AdmissionDriver`], or a running service ([`RemoteGovernor`], through `turnstile-client`).
//! - [`run_bounded_fair`] is the bounded fair scheduler (lanes round-robin, results in input
//!   order, permits given back during backoff).
//! - [`evaluate`] runs a decision ruleset (EVALUATOR.md): validation, admission before every
//!   attempt, retries, fallback, deadlines, composition.
//! - [`receipt`]: durable `decision-receipt/v2` runs (serial, idempotent, honest about
//!   uncertain dispatches) on any `turnstile_store::ReceiptStore`.
//! - [`telemetry`] (re-exported from the shell): `decision.admit` spans, breaker events, one
//!   metrics family on OpenTelemetry and Prometheus text.
//! - [`Adapter`] is how providers are called: [`ScriptedAdapter`] for tests and demos,
//!   [`ChatCompletionsAdapter`] for OpenAI-compatible endpoints; [`AdaptersFile`] builds them
//!   from JSON, and each attempt's admission estimate from their `maxTokens` and `prices`
//!   ([`costing`]).
//!
//! `docs/evaluator.md` explains the design and the differences from the reference.
#![forbid(unsafe_code)]

pub mod adapter;
pub mod adapter_config;
pub mod artifact;
pub mod attempt;
pub mod backoff;
pub mod binding;
pub mod chat_completions;
pub mod compose;
mod conclusion;
pub mod costing;
pub mod definition;
pub mod driver;
pub mod error;
pub mod evaluator;
mod execution;
mod governor;
mod history;
mod lane;
pub mod observation;
mod one_attempt;
pub mod plan;
pub mod policy;
pub mod predicate;
pub mod reason;
pub mod receipt;
mod remote;
mod request;
pub mod result;
pub mod ruleset;
pub mod scheduler;
pub mod schema;
pub mod scripted;
mod stop;

pub use adapter::{Adapter, AdapterRequest, AdapterSet, Capabilities};
pub use adapter_config::AdaptersFile;
pub use chat_completions::{ChatCompletionsAdapter, ChatCompletionsConfig};
pub use conclusion::Conclusion;
pub use costing::{Costing, PROMPT_BYTES_PER_TOKEN};
pub use driver::AdmissionDriver;
pub use error::AdmissionError;
pub use evaluator::evaluate;
pub use governor::{GovernedLease, Governor};
pub use observation::{Observation, ObservedUsage, Uncertainty};
pub use policy::{SchedulerPolicy, ScopeLimits};
pub use reason::{
    AttemptReason, DispatchCertainty, ResultReason, RulesetStatus, Status, Termination,
};
pub use receipt::ReceiptRun;
pub use remote::{RemoteCheckError, RemoteGovernor, RemoteLease};
pub use request::{
    AdmissionEvidence, EstimateFn, EvaluationRequest, EvidenceFn, EvidenceKind, RandomFn,
    SchedulerRun,
};
pub use result::{DecisionResult, ResultNaming, RulesetResult};
pub use scheduler::{run_bounded_fair, FairOptions, Interrupt, Scheduled, Slot, WorkItem};
pub use scripted::{CallLog, ScriptedAdapter, Step};
/// A granted permit of the evaluator; releases on drop (the shell's [`Grant`](turnstile_shell::Grant)).
pub use turnstile_shell::Grant as AdmissionLease;
pub use turnstile_shell::{telemetry, Clock};
pub use turnstile_shell::{AdmitSpan, LogRecord, LogSink, Telemetry};
