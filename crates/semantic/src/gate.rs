//! The admission gate: an outside governor (a running `turnstile serve`) that must admit each
//! read before it is made, and hears how it ended.
//!
//! The pass loop asks the [`ReadGate`] after every local rule allowed the call (rate cap,
//! interval, cool-down) and **before** the call receipt is committed. So:
//!
//! - an admitted read is made exactly as without a gate, and its [`AdmittedRead`] is settled
//!   once with the reader's outcome (usage, and a provider's Retry-After) right after the call;
//! - a refused read ([`GateRefusal`]) is a read *not made*: no receipt (it does not count in the
//!   rolling hour), no record (it is not a failed read, so no cool-down), the generation stays
//!   pending, and the pass ends there (the lane that refused this read would refuse the next
//!   one too); the caller decides when to try again from [`GateRefusal::retry_after_ms`], or
//!   stops when the refusal is not retryable.
//!
//! Invariant: an admitted read is settled exactly once ([`AdmittedRead::settle`] takes it by
//! value), also when the reader answered *invalid* or *unavailable*.

use crate::{ReadOutcome, ReadRequest};

/// What one read is expected to cost, for the gate's limits and budgets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadEstimate {
    /// Input plus the most output the read may produce.
    pub tokens: u64,
    /// The cost in US dollars, when the reader knows its prices.
    pub cost_usd: Option<f64>,
    /// The reader's prices behind `cost_usd`: the settlement prices the usage the provider
    /// reported with them, so the actual cost replaces the estimate.
    pub prices: Option<turnstile_admission::Prices>,
}

/// Why the gate did not admit a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateRefusal {
    /// The governor's reason code (e.g. `queue-timeout`, `retry-after`, `circuit-open`), or a
    /// short description of why it could not be asked. Never a key.
    pub reason: String,
    /// Whether asking again later can succeed.
    pub retryable: bool,
    /// How long to wait before asking again, when the governor said.
    pub retry_after_ms: Option<u64>,
}

/// The gate's answer to one read.
pub enum GateDecision {
    /// Make the read, then settle it.
    Admitted(Box<dyn AdmittedRead>),
    /// Do not make the read.
    Refused(GateRefusal),
}

/// An admitted read: held (and kept alive) until it is settled.
pub trait AdmittedRead {
    /// Reports how the read ended: frees what the admission held and corrects the estimate
    /// with the reported usage. An error is a short, non-secret description; the governor
    /// reclaims what it held on its own.
    fn settle(self: Box<Self>, outcome: &ReadOutcome) -> Result<(), String>;
}

/// A governor every read must pass.
pub trait ReadGate {
    /// Admits `request` (blocking until the governor answers) or refuses it.
    fn admit(&mut self, request: &ReadRequest<'_>, estimate: &ReadEstimate) -> GateDecision;
}
