//! turnstile-decision: the async shell around the admission core, and the decision evaluator.
//!
//! - [`AdmissionDriver`] runs the sans-IO admission [`Registry`](turnstile_admission::Registry)
//!   on tokio time with exactly one timer; [`AdmissionLease`] releases on drop.
//! - [`run_bounded_fair`] is the bounded fair scheduler (lanes round-robin, results in input
//!   order, permits given back during backoff).
//! - [`evaluate`] runs a decision ruleset (EVALUATOR.md): validation, admission before every
//!   attempt, retries, fallback, deadlines, composition.
//! - [`receipt`]: durable `decision-receipt/v2` runs (serial, idempotent, honest about
//!   uncertain dispatches) on any `turnstile_store::receipt::ReceiptStore`.
//! - [`telemetry`]: `decision.admit` spans, breaker events and admission counters on
//!   OpenTelemetry, plus a Prometheus text exposition.
//! - [`Adapter`] is how providers are called: [`ScriptedAdapter`] for tests and demos,
//!   [`ChatCompletionsAdapter`] for OpenAI-compatible endpoints.
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
pub mod clock;
pub mod compose;
pub mod definition;
pub mod driver;
pub mod error;
pub mod evaluator;
mod execution;
pub mod lease;
pub mod observation;
pub mod plan;
pub mod policy;
pub mod predicate;
pub mod reason;
pub mod receipt;
pub mod result;
pub mod ruleset;
pub mod scheduler;
pub mod schema;
pub mod scripted;
pub mod telemetry;

pub use adapter::{Adapter, AdapterRequest, AdapterSet, Capabilities};
pub use adapter_config::AdaptersFile;
pub use chat_completions::{ChatCompletionsAdapter, ChatCompletionsConfig};
pub use clock::Clock;
pub use driver::AdmissionDriver;
pub use error::AdmissionError;
pub use evaluator::{
    evaluate, AdmissionEvidence, EstimateFn, EvaluationRequest, EvidenceFn, RandomFn, SchedulerRun,
};
pub use lease::AdmissionLease;
pub use observation::{Observation, Uncertainty, Usage};
pub use policy::{SchedulerPolicy, ScopeLimits};
pub use reason::{
    AttemptReason, DispatchCertainty, ResultReason, RulesetStatus, Status, Termination,
};
pub use receipt::ReceiptRun;
pub use result::{DecisionResult, ResultNaming, RulesetResult};
pub use scheduler::{run_bounded_fair, FairOptions, Interrupt, Scheduled, Slot, WorkItem};
pub use scripted::{CallLog, ScriptedAdapter, Step};
pub use telemetry::{AdmitSpan, LogRecord, LogSink, Telemetry};
