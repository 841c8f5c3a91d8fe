//! The semantic roster scheduler of ADR 0119: coverage first under a rolling-hour hard ceiling.
//!
//! A model "reads" each *generation* (an item on a dashboard) and writes a short semantic record.
//! Reads cost model calls, so this crate decides which generation to read next:
//!
//! - the **rules** ([`band`], [`enqueue`], [`history`], [`rate_cap`], [`eligibility`],
//!   [`selection`], [`pass_due`]) are pure functions of their inputs; `now` (epoch ms) is always a
//!   parameter and nothing here reads a clock;
//! - the **pass loop** ([`pass`]) applies them against a [`turnstile_store::RosterStore`], invoking
//!   a [`reader::Reader`] once per read, with the call receipt committed before the call;
//! - the **chat-completions reader** ([`chat_reader`]) is the real reader for OpenAI-compatible
//!   endpoints;
//! - an optional **admission gate** ([`gate`]) admits each read through an outside governor
//!   (a running `turnstile serve`) before its receipt is committed, with the estimate of
//!   [`estimate`]; a refused read is not made and leaves no trace in the store;
//! - the [`roster::Roster`] facade is what the CLI and tests drive.
//!
//! Invariants the crate guarantees (proven by `tests/`): no 60-minute window ever holds more
//! calls than the limit (at most 120, a configured value may only lower it); a generation with no
//! call in the active hour is never passed over for one that has a call; a band-1 generation is
//! never read twice within 2 minutes, nor a band-2 one within 5; a failed read is not retried for
//! 5 minutes.
#![forbid(unsafe_code)]

pub mod answer;
pub mod band;
pub mod chat_reader;
pub mod digest;
pub mod eligibility;
pub mod enqueue;
pub mod error;
pub mod estimate;
pub mod evidence;
pub mod gate;
pub mod history;
pub mod limit;
pub mod pass;
pub mod pass_due;
pub mod policy;
pub mod rate_cap;
pub mod reader;
pub mod roster;
pub mod selection;
pub mod service_gate;
pub mod status;
pub mod stop;
pub mod time;
pub mod time_source;

pub use band::classify;
pub use chat_reader::{ApiKey, ChatCompletionsReader, ChatReaderSettings};
pub use error::SemanticError;
pub use evidence::{EvidenceError, GenerationEvidence, Lifecycle};
pub use gate::{AdmittedRead, GateDecision, GateRefusal, ReadEstimate, ReadGate};
pub use limit::{parse_calls_per_hour, CallLimit, CallsPerHourError};
pub use pass::{PassReport, PassSettings, PassStep};
pub use policy::{Policy, HOUR_MS};
pub use rate_cap::RateCap;
pub use reader::{ReadOutcome, ReadRequest, Reader, ReaderConfiguration, Reading};
pub use roster::Roster;
pub use service_gate::{ServiceGate, ServiceGateError, ServiceGateSettings};
pub use status::{RollingCalls, RosterStatus};
pub use stop::{NeverStop, StopFlag, StopSignal};
pub use time_source::{ManualClock, TimeSource};
pub use turnstile_store::{
    Band, CallOutcome, CallReceipt, CallUsage, PendingItem, ReasonCode, RecordKind, SemanticRecord,
};
