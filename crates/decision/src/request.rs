//! One evaluation request: what the host hands [`evaluate`](crate::evaluate), and the
//! host's hooks into it (estimate, randomness, `onEvidence`).
//!
//! Decides nothing itself. Invariants: an [`AdmissionEvidence`] names artifacts (alias,
//! adapter), never a principal or workspace ID (REFERENCE §5); a request without its own random
//! source gets a deterministic one seeded from its invocation id, so a replayed invocation draws
//! the same jitter.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use turnstile_admission::{Estimate, Evidence};

use crate::adapter::AdapterSet;
use crate::binding::AliasTarget;
use crate::driver::AdmissionDriver;
use crate::governor::Governor;
use crate::policy::SchedulerPolicy;
use crate::receipt::ReceiptRun;
use crate::result::ResultNaming;
use crate::telemetry::Telemetry;
use crate::Clock;

/// The injected source of randomness: values in [0, 1).
pub type RandomFn = Arc<dyn Fn() -> f64 + Send + Sync>;

/// The host's estimate of one attempt: `(alias, target, projection) → estimate`.
pub type EstimateFn = Arc<dyn Fn(&str, &AliasTarget, &Value) -> Estimate + Send + Sync>;

/// One admission decision of one attempt, as `scheduler.onEvidence` receives it.
///
/// The provider lane (`adapter`) and the alias are artifact names, not tenant identities; the
/// evidence never carries an ID (REFERENCE §5).
#[derive(Debug, Clone, Copy)]
pub struct AdmissionEvidence<'a> {
    /// The alias whose attempt asked for admission.
    pub alias: &'a str,
    /// The target's index within the alias's targets.
    pub target_index: usize,
    /// The provider lane (the target's adapter id).
    pub adapter: &'a str,
    /// The attempt's ordinal within its alias (from 1, across targets).
    pub ordinal: u32,
    /// The decision: `admit` or `reject`, with its reason and counts.
    pub evidence: &'a Evidence,
}

/// The host's `onEvidence` callback.
pub type EvidenceFn = Arc<dyn Fn(AdmissionEvidence<'_>) + Send + Sync>;

/// Admission for an evaluation: the policy and who governs it (the in-process driver it
/// registers with, or a running service whose profile governs).
#[derive(Clone)]
pub struct SchedulerRun {
    pub policy: SchedulerPolicy,
    /// The governor: [`Governor::Local`] (an [`AdmissionDriver`]) or [`Governor::Remote`].
    pub driver: Governor,
    pub estimate: Option<EstimateFn>,
    /// `onEvidence`: every admission decision of every attempt (see the module docs).
    pub on_evidence: Option<EvidenceFn>,
}

impl SchedulerRun {
    /// A run of `policy` on the in-process `driver`, without an estimate or an evidence
    /// callback.
    pub fn new(policy: SchedulerPolicy, driver: AdmissionDriver) -> Self {
        Self::governed(policy, Governor::Local(driver))
    }

    /// A run of `policy` governed by `governor` (a remote governor uses the policy for the
    /// scheduler's ceiling only).
    pub fn governed(policy: SchedulerPolicy, governor: impl Into<Governor>) -> Self {
        SchedulerRun {
            policy,
            driver: governor.into(),
            estimate: None,
            on_evidence: None,
        }
    }

    /// Sets the host's estimate of each attempt (`estimate(alias, target, input)`).
    pub fn with_estimate(mut self, estimate: EstimateFn) -> Self {
        self.estimate = Some(estimate);
        self
    }

    /// Sets the `onEvidence` callback.
    pub fn with_on_evidence(mut self, on_evidence: EvidenceFn) -> Self {
        self.on_evidence = Some(on_evidence);
        self
    }

    /// Hands one decision to `onEvidence`, if any; a panicking callback is ignored.
    pub(crate) fn report(&self, event: AdmissionEvidence<'_>) {
        if let Some(on_evidence) = &self.on_evidence {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_evidence(event)));
        }
    }
}

impl std::fmt::Debug for SchedulerRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerRun")
            .field("enabled", &self.policy.enabled)
            .field("profile_version", &self.policy.profile_version)
            .field("remote", &matches!(self.driver, Governor::Remote(_)))
            .field("estimate", &self.estimate.is_some())
            .field("on_evidence", &self.on_evidence.is_some())
            .finish_non_exhaustive()
    }
}

/// One evaluation request.
#[derive(Clone)]
pub struct EvaluationRequest {
    pub ruleset: Value,
    pub binding: Value,
    pub definitions: Vec<Value>,
    pub input: Value,
    pub run_id: String,
    /// The idempotency key; also the admission budget id.
    pub invocation_id: String,
    pub adapters: AdapterSet,
    pub signal: Option<CancellationToken>,
    pub random: Option<RandomFn>,
    pub scheduler: Option<SchedulerRun>,
    /// The clock for unscheduled runs (scheduled runs use the driver's).
    pub clock: Option<Clock>,
    pub naming: ResultNaming,
    /// The durable receipt store (`receiptStore`); makes the run serial and idempotent.
    pub receipts: Option<ReceiptRun>,
    /// Admission spans and metrics.
    pub telemetry: Option<Telemetry>,
}

impl std::fmt::Debug for EvaluationRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvaluationRequest")
            .field("run_id", &self.run_id)
            .field("invocation_id", &self.invocation_id)
            .field("adapters", &self.adapters)
            .field("scheduler", &self.scheduler)
            .field("receipts", &self.receipts)
            .finish_non_exhaustive()
    }
}

impl EvaluationRequest {
    pub fn new(
        ruleset: Value,
        binding: Value,
        definitions: Vec<Value>,
        input: Value,
        adapters: AdapterSet,
    ) -> Self {
        EvaluationRequest {
            ruleset,
            binding,
            definitions,
            input,
            run_id: "run".into(),
            invocation_id: "invocation".into(),
            adapters,
            signal: None,
            random: None,
            scheduler: None,
            clock: None,
            naming: ResultNaming::default(),
            receipts: None,
            telemetry: None,
        }
    }

    pub fn with_receipts(mut self, receipts: ReceiptRun) -> Self {
        self.receipts = Some(receipts);
        self
    }

    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    pub fn with_ids(mut self, run_id: impl Into<String>, invocation_id: impl Into<String>) -> Self {
        self.run_id = run_id.into();
        self.invocation_id = invocation_id.into();
        self
    }

    pub fn with_signal(mut self, signal: CancellationToken) -> Self {
        self.signal = Some(signal);
        self
    }

    pub fn with_random(mut self, random: RandomFn) -> Self {
        self.random = Some(random);
        self
    }

    pub fn with_scheduler(mut self, scheduler: SchedulerRun) -> Self {
        self.scheduler = Some(scheduler);
        self
    }

    pub fn with_naming(mut self, naming: ResultNaming) -> Self {
        self.naming = naming;
        self
    }

    /// The request's random source, or the default one seeded from its invocation id.
    pub(crate) fn random_source(&self) -> RandomFn {
        self.random
            .clone()
            .unwrap_or_else(|| seeded_random(&self.invocation_id))
    }
}

/// A deterministic default random source (splitmix64), seeded from the invocation id.
fn seeded_random(seed_text: &str) -> RandomFn {
    let seed = seed_text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let state = Mutex::new(seed);
    Arc::new(move || {
        let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    })
}
