//! Property tests of the admission controller and the profile registry.
//!
//! `controller_invariants` drives one [`Controller`] with random sequences of acquire, cancel,
//! release, time advance (followed by `handle_timeout`), Retry-After coordination, budget
//! release and profile changes, keeps an independent model of what must be live, and checks
//! after every step:
//!
//! - the controller's counters match the model (workspace, provider, principal; active, queued,
//!   open budgets);
//! - no admission happens while a scope is at or over a ceiling of the profile in force
//!   (concurrency, share caps, reservations held for another principal), and none on a paused
//!   provider or through an open breaker;
//! - a waiter only joins a queue when every queue bound (length and queue share) had room, and
//!   `queue-full` is only given when one had none;
//! - budgets (`maxAttempts`) are never exceeded;
//! - no admitted request waited past its dwell bound or was admitted at/after its deadline,
//!   and every expired waiter is resolved by the end of the step;
//! - every waiter is resolved exactly once, a rejected waiter is never admitted later;
//! - malformed estimates are refused in preflight and never copied into evidence;
//! - serialized evidence never contains a principal, budget or workspace ID;
//! - `poll_timeout()` is `None` or strictly in the future after every step (no busy loop);
//! - after a final drain (cancel every waiter, release every lease and budget) every counter is
//!   zero and no lane is left.
//!
//! `registry_invariants` checks profile immutability, rollback digests, history bounds and
//! the secrecy of workspace IDs in evidence obtained through the registry.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngSeed;
use turnstile_admission::{
    Acquired, AdmissionRequest, BreakerState, CircuitBreakerConfig, Controller, Counts, Decision,
    Estimate, Evidence, Lease, LeaseId, Limits, Outcome, Profile, ProfileChangeKind, Reason,
    Registry, RegistryError, Rejection, Snapshot, WaiterId,
};

// ----- fixtures ----------------------------------------------------------------------------

/// Principal IDs look like secrets so that a leak into evidence is easy to spot.
const PRINCIPALS: [&str; 4] = [
    "secret-principal-a-7f3e",
    "secret-principal-b-91c2",
    "secret-principal-r-44d0",
    "secret-principal-x-0bad",
];
const A: usize = 0;
const B: usize = 1;
/// The principal that may hold a reservation.
const R: usize = 2;
/// A principal that no profile knows (always refused as `disabled`).
const X: usize = 3;
const PROVIDERS: [&str; 2] = ["jev", "llm-subagent"];
const BUDGETS: [&str; 3] = [
    "secret-budget-0-c0de",
    "secret-budget-1-beef",
    "secret-budget-2-f00d",
];
const WORKSPACE: &str = "secret-workspace-5d1a";
/// Substrings that must never appear in serialized evidence.
const SECRET_MARKERS: [&str; 9] = [
    "secret", "7f3e", "91c2", "44d0", "0bad", "c0de", "beef", "f00d", "5d1a",
];
const START: u64 = 1_000;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x7475_726e_7374_696c),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ----- generators --------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Common {
    rpm: Option<u64>,
    tps: Option<u64>,
    max_attempts: Option<u64>,
    max_queue_length: Option<u64>,
    max_queue_wait_ms: Option<u64>,
}

fn common() -> impl Strategy<Value = Common> {
    (
        prop::option::weighted(
            0.3,
            prop_oneof![1 => Just(0u64), 12 => 1u64..=40, 6 => 40u64..=2_000],
        ),
        prop::option::weighted(0.3, 20u64..=200),
        prop::option::weighted(0.25, 1u64..=6),
        prop::option::weighted(0.4, prop_oneof![1 => Just(0u64), 6 => 1u64..=6]),
        prop::option::weighted(0.5, prop_oneof![1 => Just(0u64), 10 => 1u64..=400]),
    )
        .prop_map(
            |(rpm, tps, max_attempts, max_queue_length, max_queue_wait_ms)| Common {
                rpm,
                tps,
                max_attempts,
                max_queue_length,
                max_queue_wait_ms,
            },
        )
}

fn limits(concurrency: u32, common: &Common) -> Limits {
    let mut limits = Limits::with_concurrency(concurrency);
    limits.requests_per_minute = common.rpm;
    limits.tokens_per_second = common.tps;
    limits.max_attempts = common.max_attempts;
    limits.max_queue_length = common.max_queue_length;
    limits.max_queue_wait_ms = common.max_queue_wait_ms;
    limits
}

fn share() -> impl Strategy<Value = Option<f64>> {
    prop::option::weighted(0.35, prop::sample::select(vec![0.25, 0.34, 0.5, 0.75, 1.0]))
}

fn breaker() -> impl Strategy<Value = Option<CircuitBreakerConfig>> {
    prop::option::weighted(
        0.4,
        (1u32..=3, 5u64..=300, 1u32..=2).prop_map(|(failure_threshold, open_ms, half_open)| {
            CircuitBreakerConfig {
                failure_threshold,
                open_ms: Some(open_ms),
                half_open_max_calls: Some(half_open),
            }
        }),
    )
}

fn pool_limits(max_concurrency: u32) -> impl Strategy<Value = Limits> {
    (1..=max_concurrency, common(), share(), breaker()).prop_map(
        |(concurrency, common, share, breaker)| {
            let mut limits = limits(concurrency, &common);
            limits.max_principal_share = share;
            limits.circuit_breaker = breaker;
            limits
        },
    )
}

fn principal_limits() -> impl Strategy<Value = Limits> {
    (1u32..=3, common()).prop_map(|(concurrency, common)| limits(concurrency, &common))
}

/// A valid profile: workspace, `jev` (always), `llm-subagent` (usually), principals a, r
/// (always) and b (usually); r may hold a reservation that fits every pool.
fn profile() -> impl Strategy<Value = Profile> {
    (
        (pool_limits(4), pool_limits(3), pool_limits(3)),
        prop::bool::weighted(0.85),
        (principal_limits(), principal_limits(), principal_limits()),
        prop::bool::weighted(0.85),
        0u32..=2,
    )
        .prop_map(
            |((mut workspace, jev, llm), with_llm, (a, b, mut r), with_b, reserved)| {
                // The breaker is only used on providers; keep the workspace's out of the way.
                workspace.circuit_breaker = None;
                let mut profile = Profile {
                    workspace,
                    ..Profile::default()
                };
                profile.providers.insert(PROVIDERS[0].into(), jev);
                if with_llm {
                    profile.providers.insert(PROVIDERS[1].into(), llm);
                }
                let room = profile
                    .providers
                    .values()
                    .map(|l| l.concurrency)
                    .chain([profile.workspace.concurrency, r.concurrency])
                    .min()
                    .unwrap_or(0);
                r.reserved_concurrency = Some(reserved.min(room));
                profile.principals.insert(PRINCIPALS[A].into(), a);
                if with_b {
                    profile.principals.insert(PRINCIPALS[B].into(), b);
                }
                profile.principals.insert(PRINCIPALS[R].into(), r);
                profile
                    .validate()
                    .expect("the generator only builds valid profiles");
                profile
            },
        )
}

/// An estimate count, sometimes malformed.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(u64),
    Negative,
    NaN,
    Fraction,
    Infinite,
    TooLarge,
}

impl Num {
    fn value(self) -> f64 {
        match self {
            Num::Int(v) => v as f64,
            Num::Negative => -1.0,
            Num::NaN => f64::NAN,
            Num::Fraction => 2.5,
            Num::Infinite => f64::INFINITY,
            Num::TooLarge => 2f64.powi(54),
        }
    }

    fn malformed(self) -> bool {
        !matches!(self, Num::Int(_))
    }

    fn count(self) -> Option<u64> {
        match self {
            Num::Int(v) => Some(v),
            _ => None,
        }
    }
}

fn num(valid: impl Strategy<Value = u64> + 'static) -> impl Strategy<Value = Num> {
    prop_oneof![
        30 => valid.prop_map(Num::Int),
        1 => Just(Num::Negative),
        1 => Just(Num::NaN),
        1 => Just(Num::Fraction),
        1 => Just(Num::Infinite),
        1 => Just(Num::TooLarge),
    ]
}

#[derive(Debug, Clone, Copy)]
struct EstimateSpec {
    tokens: Option<Num>,
    attempts: Option<Num>,
    cost_usd: Option<f64>,
}

impl EstimateSpec {
    fn estimate(self) -> Estimate {
        Estimate {
            tokens: self.tokens.map(Num::value),
            attempts: self.attempts.map(Num::value),
            cost_usd: self.cost_usd,
            ..Estimate::default()
        }
    }

    fn malformed(self) -> bool {
        self.tokens.is_some_and(Num::malformed)
            || self.attempts.is_some_and(Num::malformed)
            || self.cost_usd.is_some_and(|c| !(c.is_finite() && c >= 0.0))
    }

    /// Attempts charged to budgets when admitted (absent means 1).
    fn attempts(self) -> u64 {
        self.attempts.and_then(Num::count).unwrap_or(1)
    }
}

fn estimate_spec() -> impl Strategy<Value = EstimateSpec> {
    (
        prop::option::weighted(0.6, num(prop_oneof![4 => 0u64..=40, 1 => 0u64..=250])),
        prop::option::weighted(0.4, num(0u64..=2)),
        prop::option::weighted(
            0.2,
            prop_oneof![
                6 => Just(0.0),
                6 => Just(0.25),
                1 => Just(-0.5),
                1 => Just(f64::NAN),
                1 => Just(f64::INFINITY),
            ],
        ),
    )
        .prop_map(|(tokens, attempts, cost_usd)| EstimateSpec {
            tokens,
            attempts,
            cost_usd,
        })
}

#[derive(Debug, Clone, Copy)]
enum OutcomeSpec {
    Success,
    Failure,
    RetryAfter(u64),
    None,
}

impl OutcomeSpec {
    fn outcome(self) -> Outcome {
        match self {
            OutcomeSpec::Success => Outcome::Success,
            OutcomeSpec::Failure => Outcome::Failure,
            OutcomeSpec::RetryAfter(ms) => Outcome::RetryAfter { retry_after_ms: ms },
            OutcomeSpec::None => Outcome::None,
        }
    }
}

fn outcome_spec() -> impl Strategy<Value = OutcomeSpec> {
    prop_oneof![
        3 => Just(OutcomeSpec::Success),
        3 => Just(OutcomeSpec::Failure),
        1 => (0u64..=300).prop_map(OutcomeSpec::RetryAfter),
        2 => Just(OutcomeSpec::None),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        principal: usize,
        provider: usize,
        budget: usize,
        estimate: EstimateSpec,
        /// Deadline relative to now.
        deadline: Option<u64>,
        /// `try_acquire` (admit now or refuse) instead of `acquire`.
        try_now: bool,
    },
    /// Cancel a live waiter, or (`false`) any waiter seen so far (possibly already resolved).
    Cancel(bool, Index),
    /// Release a live lease, or (`false`) any lease seen so far (possibly already released).
    Release(bool, Index, OutcomeSpec),
    /// Advance time, then `handle_timeout`.
    Advance(u64),
    /// Advance exactly to `poll_timeout()`, then `handle_timeout`.
    AdvanceToTimeout,
    SetProfile(Index),
    ReleaseBudget(usize),
    RetryAfter {
        provider: usize,
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (
            prop_oneof![4 => Just(A), 3 => Just(B), 4 => Just(R), 1 => Just(X)],
            0..PROVIDERS.len(),
            0..BUDGETS.len(),
            estimate_spec(),
            prop::option::weighted(0.5, prop_oneof![1 => Just(0u64), 8 => 1u64..=500]),
            prop::bool::weighted(0.2),
        )
            .prop_map(|(principal, provider, budget, estimate, deadline, try_now)| Op::Acquire {
                principal,
                provider,
                budget,
                estimate,
                deadline,
                try_now,
            }),
        2 => (prop::bool::weighted(0.8), any::<Index>()).prop_map(|(live, i)| Op::Cancel(live, i)),
        6 => (prop::bool::weighted(0.85), any::<Index>(), outcome_spec())
            .prop_map(|(live, i, o)| Op::Release(live, i, o)),
        3 => prop_oneof![4 => 0u64..=50, 3 => 0u64..=400, 1 => 0u64..=20_000].prop_map(Op::Advance),
        2 => Just(Op::AdvanceToTimeout),
        1 => any::<Index>().prop_map(Op::SetProfile),
        1 => (0..BUDGETS.len()).prop_map(Op::ReleaseBudget),
        1 => (0..PROVIDERS.len(), 0u64..=300).prop_map(|(provider, ms)| Op::RetryAfter { provider, ms }),
    ]
}

// ----- the model ---------------------------------------------------------------------------

/// A concrete step (IDs resolved against the model).
#[derive(Debug, Clone)]
enum Step {
    Acquire {
        principal: usize,
        provider: usize,
        budget: usize,
        estimate: EstimateSpec,
        deadline: Option<u64>,
        try_now: bool,
    },
    Cancel(WaiterId),
    Release(LeaseId, OutcomeSpec),
    AdvanceTo(u64),
    SetProfile(usize),
    ReleaseBudget(usize),
    RetryAfter {
        provider: usize,
        ms: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Principal(usize),
    Workspace,
    Provider(usize),
}

/// A `retry-after` / `circuit-open` refusal is only ever made when the pause or open breaker
/// outlasts the request's deadline: retryable, with the real remaining time as its hint, and
/// that time reaches the deadline (waiting could not have helped).
fn check_outlasting_refusal(
    rejection: &Rejection,
    deadline: Option<u64>,
    now: u64,
) -> Result<(), TestCaseError> {
    if !matches!(rejection.reason, Reason::RetryAfter | Reason::CircuitOpen) {
        return Ok(());
    }
    prop_assert!(
        rejection.retryable,
        "{} refusals are retryable",
        rejection.reason
    );
    let Some(hint) = rejection.evidence.retry_after_ms else {
        return Err(TestCaseError::fail(
            "an outlasting refusal without its hint",
        ));
    };
    prop_assert!(
        deadline.is_some_and(|d| now + hint >= d),
        "refused with {} although the condition ends ({} ms) before the deadline {:?} (now {})",
        rejection.reason,
        hint,
        deadline,
        now
    );
    Ok(())
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    principal: usize,
    provider: usize,
    budget: usize,
    attempts: u64,
    deadline: Option<u64>,
    enqueued_at: u64,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    principal: usize,
    provider: usize,
    /// Admitted while the provider's breaker was half-open.
    probe: bool,
}

struct Admission {
    request: Pending,
    lease: Lease,
}

struct Sim<'a> {
    profiles: &'a [Profile],
    current: usize,
    ctl: Controller,
    now: u64,
    pending: BTreeMap<WaiterId, Pending>,
    /// Resolved waiters: true when admitted.
    resolved: HashMap<WaiterId, bool>,
    known_waiters: Vec<WaiterId>,
    leases: BTreeMap<LeaseId, Held>,
    known_leases: Vec<LeaseId>,
    seen_lease_ids: HashSet<LeaseId>,
    usage: HashMap<(usize, Key), u64>,
    open_budgets: BTreeSet<usize>,
    trace: Vec<Step>,
}

fn share_cap(share: f64, pool: u64) -> u64 {
    ((share * pool as f64).floor() as u64).max(1)
}

fn assert_secret_free<T: serde::Serialize>(value: &T, what: &str) -> Result<(), TestCaseError> {
    let json = serde_json::to_string(value).expect("evidence serializes");
    for marker in SECRET_MARKERS {
        prop_assert!(
            !json.contains(marker),
            "{} leaks an identifier ({}): {}",
            what,
            marker,
            json
        );
    }
    Ok(())
}

fn check_evidence(evidence: &Evidence, decision: Decision) -> Result<(), TestCaseError> {
    prop_assert_eq!(evidence.decision, decision);
    assert_secret_free(evidence, "evidence")
}

impl<'a> Sim<'a> {
    fn new(profiles: &'a [Profile]) -> Self {
        let ctl = Controller::new(profiles[0].clone(), START).expect("valid profile");
        Sim {
            profiles,
            current: 0,
            ctl,
            now: START,
            pending: BTreeMap::new(),
            resolved: HashMap::new(),
            known_waiters: Vec::new(),
            leases: BTreeMap::new(),
            known_leases: Vec::new(),
            seen_lease_ids: HashSet::new(),
            usage: HashMap::new(),
            open_budgets: BTreeSet::new(),
            trace: Vec::new(),
        }
    }

    fn profile(&self) -> &'a Profile {
        &self.profiles[self.current]
    }

    fn principal_limits(&self, principal: usize) -> Option<&'a Limits> {
        self.profile().principals.get(PRINCIPALS[principal])
    }

    fn provider_limits(&self, provider: usize) -> Option<&'a Limits> {
        self.profile().providers.get(PROVIDERS[provider])
    }

    /// The effective dwell bound of a lane under the profile in force.
    fn dwell(&self, principal: usize, provider: usize) -> Option<u64> {
        [
            self.principal_limits(principal),
            Some(&self.profile().workspace),
            self.provider_limits(provider),
        ]
        .into_iter()
        .flatten()
        .filter_map(|l| l.max_queue_wait_ms)
        .min()
    }

    fn expiry(&self, waiter: &Pending) -> Option<u64> {
        let dwell = self
            .dwell(waiter.principal, waiter.provider)
            .map(|d| waiter.enqueued_at.saturating_add(d));
        match (waiter.deadline, dwell) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn active_of(&self, f: impl Fn(&Held) -> bool) -> u64 {
        self.leases.values().filter(|h| f(h)).count() as u64
    }

    fn queued_of(&self, f: impl Fn(&Pending) -> bool) -> u64 {
        self.pending.values().filter(|p| f(p)).count() as u64
    }

    /// Resolves a generated operation against the model.
    fn concretize(&self, op: &Op) -> Option<Step> {
        Some(match op {
            Op::Acquire {
                principal,
                provider,
                budget,
                estimate,
                deadline,
                try_now,
            } => Step::Acquire {
                principal: *principal,
                provider: *provider,
                budget: *budget,
                estimate: *estimate,
                deadline: deadline.map(|d| self.now + d),
                try_now: *try_now,
            },
            Op::Cancel(live, i) => {
                let live_ids: Vec<WaiterId> = self.pending.keys().copied().collect();
                let ids = if *live {
                    &live_ids
                } else {
                    &self.known_waiters
                };
                Step::Cancel(if ids.is_empty() {
                    WaiterId(u64::MAX)
                } else {
                    *i.get(ids)
                })
            }
            Op::Release(live, i, outcome) => {
                let live_ids: Vec<LeaseId> = self.leases.keys().copied().collect();
                let ids = if *live { &live_ids } else { &self.known_leases };
                Step::Release(
                    if ids.is_empty() {
                        LeaseId(u64::MAX)
                    } else {
                        *i.get(ids)
                    },
                    *outcome,
                )
            }
            Op::Advance(ms) => Step::AdvanceTo(self.now + ms),
            Op::AdvanceToTimeout => Step::AdvanceTo(self.ctl.poll_timeout()?),
            Op::SetProfile(i) => Step::SetProfile(i.index(self.profiles.len())),
            Op::ReleaseBudget(b) => Step::ReleaseBudget(*b),
            Op::RetryAfter { provider, ms } => Step::RetryAfter {
                provider: *provider,
                ms: *ms,
            },
        })
    }

    /// Whether some queue bound of the lane has no room, judged from the model.
    fn queue_full(&self, principal: usize, provider: usize) -> bool {
        let (Some(pl), Some(vl)) = (
            self.principal_limits(principal),
            self.provider_limits(provider),
        ) else {
            return false;
        };
        let wl = &self.profile().workspace;
        let principal_q = self.queued_of(|p| p.principal == principal);
        let workspace_q = self.pending.len() as u64;
        let provider_q = self.queued_of(|p| p.provider == provider);
        let lane_q = self.queued_of(|p| p.principal == principal && p.provider == provider);
        let full = |l: &Limits, q: u64| l.max_queue_length.is_some_and(|m| q >= m);
        let share_full = |l: &Limits, q: u64| match (l.max_principal_share, l.max_queue_length) {
            (Some(s), Some(m)) => q >= share_cap(s, m),
            _ => false,
        };
        full(pl, principal_q)
            || full(wl, workspace_q)
            || full(vl, provider_q)
            || share_full(wl, principal_q)
            || share_full(vl, lane_q)
    }

    fn run_op(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match self.concretize(op) {
            Some(step) => self.step(step),
            None => Ok(()),
        }
    }

    fn step(&mut self, step: Step) -> Result<(), TestCaseError> {
        self.trace.push(step.clone());
        let mut admissions: Vec<Admission> = Vec::new();
        let mut queued_evidence = None;
        match step {
            Step::Acquire {
                principal,
                provider,
                budget,
                estimate,
                deadline,
                try_now,
            } => {
                let queue_full_before = self.queue_full(principal, provider);
                let mut request = AdmissionRequest::new(
                    PRINCIPALS[principal],
                    PROVIDERS[provider],
                    BUDGETS[budget],
                )
                .with_estimate(estimate.estimate());
                request.deadline = deadline;
                let pending = Pending {
                    principal,
                    provider,
                    budget,
                    attempts: estimate.attempts(),
                    deadline,
                    enqueued_at: self.now,
                };
                let result = if try_now {
                    match self.ctl.try_acquire(request, self.now) {
                        Ok(lease) => Acquired::Admitted(lease),
                        Err(rejection) => {
                            // Never the queue's or the deadline's reasons: it did not wait.
                            prop_assert!(
                                !matches!(
                                    rejection.reason,
                                    Reason::QueueFull | Reason::QueueTimeout | Reason::Cancelled
                                ),
                                "try-now refused with {}",
                                rejection.reason
                            );
                            if rejection.reason == Reason::DeadlineExceeded {
                                prop_assert!(deadline.is_some_and(|d| self.now >= d));
                            }
                            Acquired::Rejected(rejection)
                        }
                    }
                } else {
                    self.ctl.acquire(request, self.now)
                };
                let configured = self.provider_limits(provider).is_some();
                let known = self.principal_limits(principal).is_some();
                let preflight_refusal =
                    !configured || !known || deadline.is_some_and(|d| self.now >= d);
                if estimate.malformed() || preflight_refusal {
                    let Acquired::Rejected(rejection) = &result else {
                        return Err(TestCaseError::fail(format!(
                            "a request failing preflight was not rejected: {result:?}"
                        )));
                    };
                    prop_assert!(!rejection.retryable, "preflight rejections are permanent");
                    let expected = if !configured {
                        Reason::UnconfiguredProvider
                    } else if !known {
                        Reason::Disabled
                    } else if deadline.is_some_and(|d| self.now >= d) {
                        Reason::DeadlineExceeded
                    } else {
                        Reason::InvalidEstimate
                    };
                    prop_assert_eq!(rejection.reason, expected);
                    if estimate.malformed() {
                        prop_assert_eq!(rejection.evidence.estimated_tokens, None);
                        prop_assert_eq!(rejection.evidence.estimated_cost_usd, None);
                    }
                }
                match result {
                    Acquired::Admitted(lease) => {
                        assert_secret_free(&lease, "lease")?;
                        prop_assert_eq!(lease.evidence.queue_delay_ms, 0);
                        // It was its lane's head, so nobody else waits in that lane.
                        prop_assert_eq!(lease.evidence.queued, 0);
                        admissions.push(Admission {
                            request: pending,
                            lease,
                        });
                    }
                    Acquired::Queued { waiter, evidence } => {
                        check_evidence(&evidence, Decision::Defer)?;
                        prop_assert!(
                            !self.known_waiters.contains(&waiter),
                            "waiter ID {:?} reused",
                            waiter
                        );
                        prop_assert!(
                            !queue_full_before,
                            "queued although a queue bound had no room"
                        );
                        prop_assert!(
                            matches!(
                                evidence.reason,
                                Reason::Concurrency
                                    | Reason::RequestsPerMinute
                                    | Reason::TokensPerSecond
                                    | Reason::RetryAfter
                                    | Reason::CircuitOpen
                            ),
                            "deferred with reason {}",
                            evidence.reason
                        );
                        prop_assert!(evidence.retry_after_ms.is_none_or(|ms| ms >= 1));
                        self.known_waiters.push(waiter);
                        self.pending.insert(waiter, pending);
                        queued_evidence = Some((evidence, principal, provider));
                    }
                    Acquired::Rejected(rejection) => {
                        check_evidence(&rejection.evidence, Decision::Reject)?;
                        assert_secret_free(&rejection, "rejection")?;
                        prop_assert!(rejection.reason != Reason::Admitted);
                        if try_now {
                            // What it would have waited for: retryable, with a real hint.
                            prop_assert!(
                                rejection.retryable
                                    || !rejection.reason.is_retryable_rejection()
                                        && rejection.evidence.retry_after_ms.is_none(),
                                "try-now refusal {:?}",
                                rejection
                            );
                            prop_assert!(rejection
                                .evidence
                                .retry_after_ms
                                .is_none_or(|ms| ms >= 1));
                        } else {
                            check_outlasting_refusal(&rejection, deadline, self.now)?;
                        }
                        if rejection.reason == Reason::QueueFull {
                            prop_assert!(
                                queue_full_before,
                                "queue-full although every queue bound had room"
                            );
                            prop_assert!(rejection.retryable);
                        }
                    }
                }
            }
            Step::Cancel(waiter) => {
                let result = self.ctl.cancel(waiter, self.now);
                if self.pending.remove(&waiter).is_some() {
                    let Some(rejection) = result else {
                        return Err(TestCaseError::fail(format!(
                            "cancel of live waiter {waiter:?} returned None"
                        )));
                    };
                    prop_assert_eq!(rejection.reason, Reason::Cancelled);
                    check_evidence(&rejection.evidence, Decision::Reject)?;
                    self.resolved.insert(waiter, false);
                } else {
                    prop_assert!(
                        result.is_none(),
                        "cancel of resolved waiter {:?} returned {:?}",
                        waiter,
                        result
                    );
                }
            }
            Step::Release(lease, outcome) => {
                let result = self.ctl.release(lease, outcome.outcome(), self.now);
                if self.leases.remove(&lease).is_some() {
                    prop_assert!(result.is_some(), "release of live lease returned None");
                } else {
                    prop_assert!(result.is_none(), "second release did something");
                }
            }
            Step::AdvanceTo(at) => {
                prop_assert!(at >= self.now);
                self.now = at;
                self.ctl.handle_timeout(at);
            }
            Step::SetProfile(index) => {
                self.ctl
                    .set_profile(self.profiles[index].clone(), self.now)
                    .expect("valid profile");
                self.current = index;
            }
            Step::ReleaseBudget(budget) => {
                let known = self.ctl.release_budget(BUDGETS[budget], self.now);
                prop_assert_eq!(known, self.open_budgets.remove(&budget));
                self.usage.retain(|(b, _), _| *b != budget);
            }
            Step::RetryAfter { provider, ms } => {
                let paused = self
                    .ctl
                    .coordinate_retry_after(PROVIDERS[provider], ms, self.now);
                // A provider the profile does not configure is a typed error, never paused.
                let configured = self.provider_limits(provider).is_some();
                prop_assert_eq!(
                    paused.is_ok(),
                    configured,
                    "pause of {}",
                    PROVIDERS[provider]
                );
                if let Ok(until) = paused {
                    prop_assert!(
                        until >= self.now + ms,
                        "the pause ends no earlier than asked"
                    );
                }
            }
        }

        // Resolutions of queued waiters.
        while let Some(resolution) = self.ctl.poll_resolution() {
            let waiter = resolution.waiter;
            let Some(pending) = self.pending.remove(&waiter) else {
                return Err(TestCaseError::fail(format!(
                    "resolution for a waiter that is not waiting ({waiter:?}, earlier outcome \
                     admitted={:?}): {resolution:?}",
                    self.resolved.get(&waiter)
                )));
            };
            match resolution.outcome {
                Ok(lease) => {
                    self.resolved.insert(waiter, true);
                    assert_secret_free(&lease, "lease")?;
                    admissions.push(Admission {
                        request: pending,
                        lease,
                    });
                }
                Err(rejection) => {
                    self.resolved.insert(waiter, false);
                    assert_secret_free(&rejection, "rejection")?;
                    check_evidence(&rejection.evidence, Decision::Reject)?;
                    match rejection.reason {
                        Reason::Admitted => {
                            return Err(TestCaseError::fail("rejection with reason admitted"))
                        }
                        Reason::DeadlineExceeded => prop_assert!(
                            pending.deadline.is_some_and(|d| self.now >= d),
                            "deadline-exceeded before the deadline"
                        ),
                        Reason::QueueTimeout => prop_assert!(
                            self.dwell(pending.principal, pending.provider)
                                .is_some_and(|d| self.now >= pending.enqueued_at + d),
                            "queue-timeout before the dwell bound"
                        ),
                        Reason::RetryAfter | Reason::CircuitOpen => {
                            check_outlasting_refusal(&rejection, pending.deadline, self.now)?
                        }
                        _ => {}
                    }
                }
            }
        }

        self.apply_admissions(&admissions)?;
        if let Some((evidence, principal, provider)) = queued_evidence {
            // Other requests waiting in the lane, never the request itself.
            let others = self
                .queued_of(|w| w.principal == principal && w.provider == provider)
                .saturating_sub(1);
            prop_assert_eq!(evidence.queued, others, "queued evidence of a new waiter");
            prop_assert_eq!(
                evidence.active,
                self.active_of(|h| h.principal == principal)
            );
        }
        for admission in &admissions {
            let principal = admission.request.principal;
            prop_assert!(
                admission.lease.evidence.active <= self.active_of(|h| h.principal == principal),
                "evidence counts more active leases than the principal holds"
            );
        }
        self.check_state(&admissions)
    }

    fn apply_admissions(&mut self, admissions: &[Admission]) -> Result<(), TestCaseError> {
        for Admission { request, lease } in admissions {
            let Pending {
                principal,
                provider,
                budget,
                attempts,
                deadline,
                enqueued_at,
            } = *request;
            prop_assert!(
                self.seen_lease_ids.insert(lease.id),
                "lease ID {:?} reused",
                lease.id
            );
            check_evidence(&lease.evidence, Decision::Admit)?;
            prop_assert_eq!(lease.evidence.reason, Reason::Admitted);
            // Only the breaker of the profile in force gates; without a configured breaker the
            // state is not used (see `breaker_state_after_breaker_removed`).
            let breaker = self
                .provider_limits(provider)
                .and_then(|l| l.circuit_breaker.as_ref());
            prop_assert!(
                breaker.is_none() || lease.evidence.breaker_state != BreakerState::Open,
                "admitted through an open breaker"
            );
            prop_assert!(lease.evidence.active >= 1);
            prop_assert!(
                deadline.is_none_or(|d| self.now < d),
                "admitted at {} at/after its deadline {:?}",
                self.now,
                deadline
            );
            prop_assert_eq!(lease.evidence.queue_delay_ms, self.now - enqueued_at);
            if let Some(dwell) = self.dwell(principal, provider) {
                // A head that has waited >= the bound is rejected, so an admitted one waited less
                // (an immediate admission waited 0).
                prop_assert!(
                    lease.evidence.queue_delay_ms < dwell || lease.evidence.queue_delay_ms == 0,
                    "admitted after waiting {} ms, dwell bound {} ms",
                    lease.evidence.queue_delay_ms,
                    dwell
                );
            }
            prop_assert!(
                self.principal_limits(principal).is_some()
                    && self.provider_limits(provider).is_some(),
                "admitted a request of an unknown principal or unconfigured provider"
            );
            let probe = breaker.is_some() && lease.evidence.breaker_state == BreakerState::HalfOpen;
            self.leases.insert(
                lease.id,
                Held {
                    principal,
                    provider,
                    probe,
                },
            );
            if probe {
                // Probes only grow during a pump, so checking after each one is exact.
                let max = breaker.map(|b| b.half_open_max_calls_or_default());
                let probes = self.active_of(|h| h.provider == provider && h.probe);
                prop_assert!(
                    max.is_some_and(|max| probes <= u64::from(max)),
                    "{} half-open probes in flight on provider {}, halfOpenMaxCalls {:?}",
                    probes,
                    provider,
                    max
                );
            }
            self.known_leases.push(lease.id);
            self.open_budgets.insert(budget);
            let scopes = [
                (Key::Principal(principal), self.principal_limits(principal)),
                (Key::Workspace, Some(&self.profile().workspace)),
                (Key::Provider(provider), self.provider_limits(provider)),
            ];
            for (key, limits) in scopes {
                let used = self.usage.entry((budget, key)).or_default();
                *used += attempts;
                if let Some(max) = limits.and_then(|l| l.max_attempts) {
                    prop_assert!(
                        *used <= max,
                        "budget {} spent {} attempts in {:?}, maxAttempts {}",
                        budget,
                        *used,
                        key,
                        max
                    );
                }
            }
        }
        Ok(())
    }

    fn check_state(&self, admissions: &[Admission]) -> Result<(), TestCaseError> {
        let snapshot = self.ctl.snapshot();
        let profile = self.profile();
        let wl = &profile.workspace;

        // Counters agree with the model.
        prop_assert_eq!(
            snapshot.active,
            self.leases.len() as u64,
            "workspace active"
        );
        prop_assert_eq!(
            snapshot.queued,
            self.pending.len() as u64,
            "workspace queued"
        );
        prop_assert_eq!(
            snapshot.open_budgets,
            self.open_budgets.len() as u64,
            "open budgets"
        );
        for (v, id) in PROVIDERS.iter().enumerate() {
            let (active, queued) = snapshot
                .providers
                .get(*id)
                .map_or((0, 0), |p| (p.active, p.queued));
            prop_assert_eq!(
                active,
                self.active_of(|h| h.provider == v),
                "provider {} active",
                id
            );
            prop_assert_eq!(
                queued,
                self.queued_of(|p| p.provider == v),
                "provider {} queued",
                id
            );
        }
        for (p, id) in PRINCIPALS.iter().enumerate() {
            prop_assert_eq!(
                self.ctl.principal_counts(id),
                Counts {
                    active: self.active_of(|h| h.principal == p),
                    queued: self.queued_of(|w| w.principal == p)
                },
                "principal {} counts",
                p
            );
        }

        // Ceilings: an admission in this step means the scope was below its ceiling at that
        // moment. Counts only fall (a release) before the pump and only rise during it, so the
        // count after the step is what the last admission produced.
        let admitted = |f: &dyn Fn(&Pending) -> bool| admissions.iter().any(|a| f(&a.request));
        let ws_active = self.leases.len() as u64;
        if admitted(&|_| true) {
            prop_assert!(
                ws_active <= u64::from(wl.concurrency),
                "workspace active {} > concurrency {}",
                ws_active,
                wl.concurrency
            );
        }
        for p in 0..PRINCIPALS.len() {
            if !admitted(&|a| a.principal == p) {
                continue;
            }
            let active = self.active_of(|h| h.principal == p);
            let pl = self.principal_limits(p).expect("checked at admission");
            prop_assert!(
                active <= u64::from(pl.concurrency),
                "principal {} active {} > concurrency {}",
                p,
                active,
                pl.concurrency
            );
            if let Some(share) = wl.max_principal_share {
                let cap = share_cap(share, u64::from(wl.concurrency));
                prop_assert!(
                    active <= cap,
                    "principal {} active {} > workspace share cap {}",
                    p,
                    active,
                    cap
                );
            }
        }
        for (v, provider_id) in PROVIDERS.iter().enumerate() {
            if !admitted(&|a| a.provider == v) {
                continue;
            }
            let vl = self.provider_limits(v).expect("checked at admission");
            let active = self.active_of(|h| h.provider == v);
            prop_assert!(
                active <= u64::from(vl.concurrency),
                "provider {} active {} > concurrency {}",
                v,
                active,
                vl.concurrency
            );
            prop_assert!(
                snapshot.providers[*provider_id].paused_until.is_none(),
                "admitted on provider {} while it is paused",
                v
            );
            for p in 0..PRINCIPALS.len() {
                if !admitted(&|a| a.provider == v && a.principal == p) {
                    continue;
                }
                if let Some(share) = vl.max_principal_share {
                    let lane = self.active_of(|h| h.provider == v && h.principal == p);
                    let cap = share_cap(share, u64::from(vl.concurrency));
                    prop_assert!(
                        lane <= cap,
                        "principal {} active {} on provider {} > share cap {}",
                        p,
                        lane,
                        v,
                        cap
                    );
                }
            }
        }
        // Reservations: another principal's admission leaves r's unused reservation free.
        if let Some(reserved) = self
            .principal_limits(R)
            .and_then(|l| l.reserved_concurrency)
            .filter(|&r| r > 0)
        {
            if admitted(&|a| a.principal != R) {
                let r_active = self.active_of(|h| h.principal == R);
                let held = u64::from(reserved.min(wl.concurrency)).saturating_sub(r_active);
                prop_assert!(
                    ws_active + held <= u64::from(wl.concurrency),
                    "workspace: active {} + held for r {} > concurrency {}",
                    ws_active,
                    held,
                    wl.concurrency
                );
            }
            for v in 0..PROVIDERS.len() {
                if !admitted(&|a| a.principal != R && a.provider == v) {
                    continue;
                }
                let vl = self.provider_limits(v).expect("checked at admission");
                let active = self.active_of(|h| h.provider == v);
                let r_active = self.active_of(|h| h.provider == v && h.principal == R);
                let held = u64::from(reserved.min(vl.concurrency)).saturating_sub(r_active);
                prop_assert!(
                    active + held <= u64::from(vl.concurrency),
                    "provider {}: active {} + held for r {} > concurrency {}",
                    v,
                    active,
                    held,
                    vl.concurrency
                );
            }
        }

        // Waiting requests are still valid under the profile in force and not yet due.
        for (id, waiter) in &self.pending {
            prop_assert!(
                self.principal_limits(waiter.principal).is_some()
                    && self.provider_limits(waiter.provider).is_some(),
                "waiter {:?} kept after its principal or provider left the profile",
                id
            );
            if let Some(at) = self.expiry(waiter) {
                prop_assert!(
                    at > self.now,
                    "waiter {:?} still waiting at {} past its expiry {}",
                    id,
                    self.now,
                    at
                );
            }
        }

        // Work conservation: after the pump, no lane head that only the ceilings could hold back
        // is left waiting while the ceilings have room.
        let mut heads: BTreeMap<(usize, usize), (WaiterId, &Pending)> = BTreeMap::new();
        for (id, waiter) in &self.pending {
            heads
                .entry((waiter.principal, waiter.provider))
                .or_insert((*id, waiter));
        }
        for (id, waiter) in heads.values() {
            prop_assert!(
                !self.plainly_admissible(waiter, &snapshot),
                "lane head {:?} is left waiting although it could be admitted",
                id
            );
        }

        // No busy loop: the next wake-up is strictly in the future.
        match self.ctl.poll_timeout() {
            Some(at) => prop_assert!(
                at > self.now,
                "poll_timeout {} is not after now {}",
                at,
                self.now
            ),
            // No stall: with no lease out, only a release could not unblock anyone, so a waiter
            // that nothing but time can help must have a wake-up. The one blocker no event
            // lifts is another principal's reservation covering a whole pool.
            None if self.leases.is_empty() => {
                for (id, waiter) in &self.pending {
                    prop_assert!(
                        self.reservation_shuts_out(waiter),
                        "waiter {:?} is stuck: nothing is leased and no wake-up is scheduled",
                        id
                    );
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Whether a lane head could be admitted right now by the ceilings alone, in a state where
    /// nothing else can defer it: no request or token bucket in any of its scopes, its provider
    /// not paused and its breaker closed (or not configured).
    fn plainly_admissible(&self, waiter: &Pending, snapshot: &Snapshot) -> bool {
        let (Some(pl), Some(vl)) = (
            self.principal_limits(waiter.principal),
            self.provider_limits(waiter.provider),
        ) else {
            return false;
        };
        let wl = &self.profile().workspace;
        if [pl, wl, vl]
            .iter()
            .any(|l| l.requests_per_minute.is_some() || l.tokens_per_second.is_some())
        {
            return false;
        }
        let provider = &snapshot.providers[PROVIDERS[waiter.provider]];
        if provider.paused_until.is_some()
            || (vl.circuit_breaker.is_some() && provider.breaker_state != BreakerState::Closed)
        {
            return false;
        }
        let (p, v) = (waiter.principal, waiter.provider);
        let p_active = self.active_of(|h| h.principal == p);
        let ws_active = self.leases.len() as u64;
        let v_active = self.active_of(|h| h.provider == v);
        let lane_active = self.active_of(|h| h.provider == v && h.principal == p);
        let below_share = |l: &Limits, active: u64| {
            l.max_principal_share
                .is_none_or(|share| active < share_cap(share, u64::from(l.concurrency)))
        };
        let reserved = self
            .principal_limits(R)
            .and_then(|l| l.reserved_concurrency)
            .unwrap_or(0);
        let room_left = |cap: u32, active: u64, r_active: u64| {
            let held = if p == R {
                0
            } else {
                u64::from(reserved.min(cap)).saturating_sub(r_active)
            };
            u64::from(cap).saturating_sub(active).saturating_sub(held) >= 1
        };
        p_active < u64::from(pl.concurrency)
            && ws_active < u64::from(wl.concurrency)
            && v_active < u64::from(vl.concurrency)
            && below_share(wl, p_active)
            && below_share(vl, lane_active)
            && room_left(
                wl.concurrency,
                ws_active,
                self.active_of(|h| h.principal == R),
            )
            && room_left(
                vl.concurrency,
                v_active,
                self.active_of(|h| h.principal == R && h.provider == v),
            )
    }

    /// Whether r's reservation alone keeps this waiter's principal out of one of its pools.
    fn reservation_shuts_out(&self, waiter: &Pending) -> bool {
        let reserved = self
            .principal_limits(R)
            .and_then(|l| l.reserved_concurrency)
            .unwrap_or(0);
        waiter.principal != R
            && [
                Some(&self.profile().workspace),
                self.provider_limits(waiter.provider),
            ]
            .into_iter()
            .flatten()
            .any(|l| reserved >= l.concurrency)
    }

    /// Cancels every waiter, releases every lease and budget, then checks every counter is zero.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        let mut rounds = 0;
        while !self.pending.is_empty() || !self.leases.is_empty() {
            rounds += 1;
            prop_assert!(rounds < 1_000, "drain does not terminate");
            let waiters: Vec<WaiterId> = self.pending.keys().copied().collect();
            for waiter in waiters {
                if self.pending.contains_key(&waiter) {
                    self.step(Step::Cancel(waiter))?;
                }
            }
            let leases: Vec<LeaseId> = self.leases.keys().copied().collect();
            for lease in leases {
                self.step(Step::Release(lease, OutcomeSpec::None))?;
            }
        }
        for budget in 0..BUDGETS.len() {
            self.step(Step::ReleaseBudget(budget))?;
        }
        let snapshot = self.ctl.snapshot();
        prop_assert_eq!(snapshot.active, 0);
        prop_assert_eq!(snapshot.queued, 0);
        prop_assert_eq!(snapshot.open_budgets, 0);
        for (id, provider) in &snapshot.providers {
            prop_assert_eq!(
                (provider.active, provider.queued),
                (0, 0),
                "provider {}",
                id
            );
        }
        for id in PRINCIPALS {
            prop_assert_eq!(self.ctl.principal_counts(id), Counts::default());
        }
        prop_assert!(self.ctl.is_idle());
        prop_assert_eq!(self.ctl.lane_count(), 0, "lanes left after the drain");
        // Every waiter was resolved exactly once (duplicates fail in `step`).
        prop_assert_eq!(self.resolved.len(), self.known_waiters.len());
        for waiter in &self.known_waiters {
            prop_assert!(self.resolved.contains_key(waiter));
        }
        Ok(())
    }
}

fn run(profiles: &[Profile], ops: &[Op]) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(profiles);
    let result = ops
        .iter()
        .try_for_each(|op| sim.run_op(op))
        .and_then(|()| sim.drain());
    result.map_err(|e| TestCaseError::fail(format!("{e}\nconcrete steps:\n{:#?}", sim.trace)))
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn controller_invariants(
        profiles in prop::collection::vec(profile(), 1..=3),
        ops in prop::collection::vec(op(), 1..=60),
    ) {
        run(&profiles, &ops)?;
    }

}

fn one_lane_profile() -> Profile {
    let mut profile = Profile {
        workspace: Limits::with_concurrency(1),
        ..Profile::default()
    };
    profile
        .providers
        .insert(PROVIDERS[0].into(), Limits::with_concurrency(1));
    profile
        .principals
        .insert(PRINCIPALS[A].into(), Limits::with_concurrency(1));
    profile
}

/// Minimal reproduction of the lane leak: one admission, one release.
#[test]
fn lane_is_freed_after_release() {
    let mut ctl = Controller::new(one_lane_profile(), START).unwrap();
    let request = AdmissionRequest::new(PRINCIPALS[A], PROVIDERS[0], BUDGETS[0]);
    let Acquired::Admitted(lease) = ctl.acquire(request, START) else {
        panic!("an idle controller admits");
    };
    ctl.release(lease.id, Outcome::Success, START);
    ctl.release_budget(BUDGETS[0], START);
    assert!(ctl.is_idle());
    assert_eq!(ctl.snapshot().active, 0);
    assert_eq!(
        ctl.lane_count(),
        0,
        "lane left after the only lease was released"
    );
}

/// Minimal reproduction of the stale breaker state: a provider's breaker opens, then the
/// profile drops that provider's `circuitBreaker`. Admissions proceed (correctly: without a
/// breaker nothing is gated) but their evidence and the snapshot still say `open`.
#[test]
fn breaker_state_after_breaker_removed() {
    let mut with_breaker = one_lane_profile();
    with_breaker
        .providers
        .get_mut(PROVIDERS[0])
        .unwrap()
        .circuit_breaker = Some(CircuitBreakerConfig {
        failure_threshold: 1,
        open_ms: Some(30_000),
        half_open_max_calls: Some(1),
    });
    let mut ctl = Controller::new(with_breaker, START).unwrap();
    let request = AdmissionRequest::new(PRINCIPALS[A], PROVIDERS[0], BUDGETS[0]);
    let Acquired::Admitted(lease) = ctl.acquire(request.clone(), START) else {
        panic!("an idle controller admits");
    };
    ctl.release(lease.id, Outcome::Failure, START);
    assert_eq!(
        ctl.snapshot().providers[PROVIDERS[0]].breaker_state,
        BreakerState::Open
    );
    ctl.set_profile(one_lane_profile(), START + 1).unwrap();
    let Acquired::Admitted(lease) = ctl.acquire(request, START + 1) else {
        panic!("without a breaker the provider admits");
    };
    assert_ne!(
        lease.evidence.breaker_state,
        BreakerState::Open,
        "admitted with evidence breakerState=open"
    );
}

// ----- registry ----------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum RegistryOp {
    /// Register a version with its usual profile (`None`) or with any profile.
    Register {
        version: usize,
        profile: Option<Index>,
    },
    /// Acquire through the registry and give the permit back at once.
    Probe { principal: usize, provider: usize },
}

const VERSIONS: [&str; 4] = ["v1", "v2", "v3", "v4"];

fn registry_op() -> impl Strategy<Value = RegistryOp> {
    prop_oneof![
        8 => (0..VERSIONS.len(), prop::option::weighted(0.3, any::<Index>()))
            .prop_map(|(version, profile)| RegistryOp::Register { version, profile }),
        1 => (prop_oneof![Just(A), Just(B), Just(R)], 0..PROVIDERS.len())
            .prop_map(|(principal, provider)| RegistryOp::Probe { principal, provider }),
    ]
}

/// Registry profiles name the same principals every time, so that the merged principal table
/// equals the registered one and every registration is valid on its own.
fn registry_profile() -> impl Strategy<Value = Profile> {
    profile().prop_map(|mut profile| {
        if !profile.principals.contains_key(PRINCIPALS[B]) {
            profile
                .principals
                .insert(PRINCIPALS[B].into(), Limits::with_concurrency(1));
        }
        profile
    })
}

fn run_registry(profiles: &[Profile], ops: &[RegistryOp]) -> Result<(), TestCaseError> {
    let mut registry = Registry::new();
    let mut now = START;
    // version -> (first digest, principal limits registered under it)
    let mut first: HashMap<usize, (String, BTreeMap<String, Limits>)> = HashMap::new();
    let mut current: Option<usize> = None;
    let mut records = 0usize;
    for op in ops {
        now += 7;
        match op {
            RegistryOp::Register { version, profile } => {
                let profile = match profile {
                    Some(index) => index.get(profiles).clone(),
                    None => profiles[version % profiles.len()].clone(),
                };
                let digest = profile.digest().expect("digestible");
                let history_before = registry.profile_history(WORKSPACE);
                let result = registry.register(WORKSPACE, VERSIONS[*version], profile.clone(), now);
                let refused = match first.get(version) {
                    Some((known, _)) if *known != digest => {
                        prop_assert!(
                            matches!(result, Err(RegistryError::Conflict { .. })),
                            "same version, different limits: {:?}",
                            result
                        );
                        true
                    }
                    Some((_, principals)) if *principals != profile.principals => {
                        prop_assert!(
                            matches!(result, Err(RegistryError::PrincipalConflict { .. })),
                            "same version, different principal limits: {:?}",
                            result
                        );
                        true
                    }
                    _ => {
                        let record = match result {
                            Ok(record) => record,
                            Err(e) => {
                                return Err(TestCaseError::fail(format!(
                                    "valid registration refused: {e}"
                                )))
                            }
                        };
                        let rollback = first.contains_key(version);
                        first
                            .entry(*version)
                            .or_insert_with(|| (digest.clone(), profile.principals.clone()));
                        match (current, record) {
                            (Some(c), None) if c == *version => {}
                            (Some(c), Some(_)) if c == *version => {
                                return Err(TestCaseError::fail(
                                    "re-registering the current revision emitted a record",
                                ))
                            }
                            (_, None) => {
                                return Err(TestCaseError::fail("a change emitted no record"))
                            }
                            (previous, Some(record)) => {
                                records += 1;
                                let kind = match previous {
                                    None => ProfileChangeKind::Initial,
                                    Some(_) if rollback => ProfileChangeKind::Rollback,
                                    Some(_) => ProfileChangeKind::Change,
                                };
                                prop_assert_eq!(record.kind, kind);
                                prop_assert_eq!(
                                    record.previous_profile_version.as_deref(),
                                    previous.map(|p| VERSIONS[p])
                                );
                                prop_assert_eq!(
                                    record.profile_version.as_str(),
                                    VERSIONS[*version]
                                );
                                // A rollback reproduces the revision's first digest.
                                prop_assert_eq!(&record.digest, &first[version].0);
                                let json = serde_json::to_string(&record).expect("serializes");
                                prop_assert!(
                                    !json.contains("concurrency"),
                                    "record carries limit values: {}",
                                    json
                                );
                            }
                        }
                        current = Some(*version);
                        let in_force = registry.profile(WORKSPACE).expect("registered");
                        prop_assert_eq!(&in_force.workspace, &profile.workspace);
                        prop_assert_eq!(&in_force.providers, &profile.providers);
                        false
                    }
                };
                if refused {
                    // An error changes nothing.
                    prop_assert_eq!(registry.profile_history(WORKSPACE), history_before);
                }
                let history = registry.profile_history(WORKSPACE);
                prop_assert!(history.len() <= 64, "history of {} records", history.len());
                prop_assert_eq!(history.len(), records.min(64));
                prop_assert_eq!(
                    registry.current_profile_version(WORKSPACE),
                    current.map(|c| VERSIONS[c])
                );
                for (v, (digest, _)) in &first {
                    prop_assert_eq!(
                        registry.revision_digest(WORKSPACE, VERSIONS[*v]),
                        Some(digest.as_str())
                    );
                }
            }
            RegistryOp::Probe {
                principal,
                provider,
            } => {
                if current.is_none() {
                    continue;
                }
                let request =
                    AdmissionRequest::new(PRINCIPALS[*principal], PROVIDERS[*provider], BUDGETS[0])
                        .with_estimate(Estimate::new().tokens(1));
                let result = registry
                    .acquire(WORKSPACE, request, now)
                    .expect("workspace registered");
                match result {
                    Acquired::Admitted(lease) => {
                        assert_secret_free(&lease, "lease")?;
                        registry
                            .release(WORKSPACE, lease.id, Outcome::Success, now)
                            .expect("workspace registered");
                    }
                    Acquired::Queued { waiter, evidence } => {
                        assert_secret_free(&evidence, "evidence")?;
                        let cancelled = registry
                            .cancel(WORKSPACE, waiter, now)
                            .expect("workspace registered");
                        if let Some(rejection) = cancelled {
                            assert_secret_free(&rejection, "rejection")?;
                        }
                    }
                    Acquired::Rejected(rejection) => assert_secret_free(&rejection, "rejection")?,
                }
                while let Some(resolution) = registry.poll_resolution(WORKSPACE) {
                    match resolution.outcome {
                        Ok(lease) => {
                            assert_secret_free(&lease, "lease")?;
                            registry
                                .release(WORKSPACE, lease.id, Outcome::None, now)
                                .expect("workspace registered");
                        }
                        Err(rejection) => assert_secret_free::<Rejection>(&rejection, "rejection")?,
                    }
                }
                registry
                    .release_budget(WORKSPACE, BUDGETS[0], now)
                    .expect("workspace registered");
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn registry_invariants(
        profiles in prop::collection::vec(registry_profile(), 1..=3),
        ops in prop::collection::vec(registry_op(), 30..=120),
    ) {
        run_registry(&profiles, &ops)?;
    }
}
