//! Property tests of the invocation budgets: `maxAttempts`, `maxCostUsd` (with and without
//! `allowUnknownCost`) and `maxTokens`, with actual-usage corrections
//! (`release_with_usage`), budget releases, cancellations and time.
//!
//! # What the spec allows (REFERENCE §2, §4; `crates/admission/src/budget.rs`)
//!
//! Usage is kept per invocation (`budgetId`) and per scope line: the principal's, the
//! workspace's and the provider's. An admitted attempt is charged its estimate on all three
//! lines of its lane (`attempts`, `costUsd` or 0, `tokens` or 0).
//!
//! 1. **Preflight** (permanent, principal → workspace → provider, and within a scope `unknown-cost`
//!    before `unknown-tokens`): a scope with `maxCostUsd` and without `allowUnknownCost: true`
//!    refuses an estimate without a cost (`unknown-cost`); a scope with `maxTokens` refuses an
//!    estimate without tokens (`unknown-tokens`).
//! 2. **Budget check** (permanent; at acquire, and again when a queued head is tried; principal →
//!    workspace → provider, within a scope attempts → cost → tokens): the attempt is refused when
//!    `line + estimate > limit` for a known estimate. An unknown cost that `allowUnknownCost`
//!    lets through is not checked against the money budget.
//! 3. **Actual usage** replaces the charged estimate's tokens and/or cost on the lines it was
//!    charged to (only the dimensions reported; attempts are never corrected), once per lease,
//!    and only while the invocation opening that was charged is still open (a release after
//!    `releaseBudget` changes nothing).
//! 4. `releaseBudget` forgets every line of one invocation.
//!
//! Hence exactly what may exceed a limit, and what may not:
//!
//! - An `attempts` line never exceeds `maxAttempts`.
//! - A `tokens` or `cost` line exceeds its limit only through a usage report above the charged
//!   estimate (the shadow model flags such a line). Once over, the line admits nothing further
//!   that carries a known amount of that dimension (every known amount, even 0, is refused), and
//!   since `maxTokens` requires a token estimate, a tokens line that is over admits nothing at
//!   all. A cost line that is over still admits requests *without* a cost estimate where
//!   `allowUnknownCost` is true: the spec lets unknown cost through, and their later reported
//!   cost raises the line further.
//!
//! # The properties
//!
//! - `budget_lines_never_exceed_what_the_spec_allows` drives one [`Controller`] through random
//!   interleavings and compares every decision with a shadow model of the budget lines:
//!   every rejection at acquire is predicted exactly (reason included) and every non-rejection
//!   is predicted; every admission of a queued waiter fits the shadow lines; every budget
//!   rejection of a queued waiter is the reason the shadow gives at that instant; no lane head is
//!   left waiting with room in all three concurrency ceilings (so a waiter that no longer fits
//!   is refused as soon as it is tried, never held); the lines obey the bullets above after every
//!   step; open invocations match; and after a final drain every budget released admits its full
//!   allowance again (counters back to zero).
//! - `unknown_cost_and_tokens_are_refused_exactly_where_the_rules_say`: a single acquire on a
//!   fresh controller, over every combination of the three scopes' money and token limits.
//! - `an_overrun_line_refuses_what_the_rules_refuse_and_nothing_else`: one admitted attempt
//!   reports usage above, at or below its estimate; the next attempt of the same invocation is
//!   admitted or refused exactly as the corrected lines say.
//! - `a_late_usage_report_never_touches_a_reopened_invocation`: a lease whose invocation was
//!   released and opened again reports usage; the new opening's lines are untouched.
//!
//! Each property was seen to fail against a deliberately broken core (a token check off by one,
//! cost corrections ignored, `releaseBudget` forgetting nothing, unknown cost allowed by default,
//! no epoch check on corrections, no budget check when a queued head is tried).
//!
//! Costs are whole multiples of 1/64 USD, so that sums are exact in `f64` and the model can use
//! integers; decimal amounts (0.06 + 0.06 > 0.1) are the example tests' business (CNC-ADMIT-009).
//! Profiles carry only concurrency, dwell bounds and budgets, so that nothing but a ceiling can
//! defer a request and every other outcome is a budget decision the model can predict.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngSeed;
use turnstile_admission::{
    Acquired, ActualUsage, AdmissionRequest, Controller, Decision, Estimate, Lease, LeaseId,
    Limits, Outcome, Profile, Reason, Rejection, WaiterId,
};

// ----- fixtures ----------------------------------------------------------------------------

const PRINCIPALS: [&str; 2] = ["secret-principal-a-7f3e", "secret-principal-b-91c2"];
const PROVIDERS: [&str; 2] = ["jev", "llm-subagent"];
const BUDGETS: [&str; 3] = [
    "secret-budget-0-c0de",
    "secret-budget-1-beef",
    "secret-budget-2-f00d",
];
const START: u64 = 1_000;
/// Cost amounts are counted in units of 1/64 USD (exact in `f64`).
const UNITS_PER_USD: f64 = 64.0;

fn usd(units: u64) -> f64 {
    units as f64 / UNITS_PER_USD
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x6275_6467_6574_7321),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ----- generators --------------------------------------------------------------------------

/// The budget limits of one scope, cost in units.
#[derive(Debug, Clone, Copy, Default)]
struct Budgets {
    max_attempts: Option<u64>,
    max_cost: Option<u64>,
    allow_unknown_cost: Option<bool>,
    max_tokens: Option<u64>,
}

impl Budgets {
    fn unknown_cost_refused(&self) -> bool {
        self.max_cost.is_some() && self.allow_unknown_cost != Some(true)
    }
}

fn budgets() -> impl Strategy<Value = Budgets> {
    (
        prop::option::weighted(0.45, prop_oneof![1 => Just(0u64), 6 => 1u64..=6]),
        prop::option::weighted(0.4, prop_oneof![1 => Just(0u64), 8 => 1u64..=64]),
        prop::option::of(any::<bool>()),
        prop::option::weighted(0.4, prop_oneof![1 => Just(0u64), 8 => 1u64..=300]),
    )
        .prop_map(
            |(max_attempts, max_cost, allow_unknown_cost, max_tokens)| Budgets {
                max_attempts,
                max_cost,
                allow_unknown_cost,
                max_tokens,
            },
        )
}

/// One scope: concurrency, an optional dwell bound and its budgets.
#[derive(Debug, Clone, Copy)]
struct ScopeSpec {
    concurrency: u32,
    max_queue_wait_ms: Option<u64>,
    budgets: Budgets,
}

impl ScopeSpec {
    fn limits(&self) -> Limits {
        let mut limits = Limits::with_concurrency(self.concurrency);
        limits.max_queue_wait_ms = self.max_queue_wait_ms;
        limits.max_attempts = self.budgets.max_attempts;
        limits.max_cost_usd = self.budgets.max_cost.map(usd);
        limits.allow_unknown_cost = self.budgets.allow_unknown_cost;
        limits.max_tokens = self.budgets.max_tokens;
        limits
    }
}

fn scope_spec(max_concurrency: u32) -> impl Strategy<Value = ScopeSpec> {
    (
        1..=max_concurrency,
        prop::option::weighted(0.4, 1u64..=400),
        budgets(),
    )
        .prop_map(|(concurrency, max_queue_wait_ms, budgets)| ScopeSpec {
            concurrency,
            max_queue_wait_ms,
            budgets,
        })
}

/// The three kinds of scope of a workspace: principals a and b, the workspace, jev and llm.
#[derive(Debug, Clone, Copy)]
struct Scopes {
    principals: [ScopeSpec; 2],
    workspace: ScopeSpec,
    providers: [ScopeSpec; 2],
}

impl Scopes {
    fn profile(&self) -> Profile {
        let mut profile = Profile {
            workspace: self.workspace.limits(),
            ..Profile::default()
        };
        for (id, spec) in PROVIDERS.iter().zip(&self.providers) {
            profile.providers.insert((*id).into(), spec.limits());
        }
        for (id, spec) in PRINCIPALS.iter().zip(&self.principals) {
            profile.principals.insert((*id).into(), spec.limits());
        }
        profile
            .validate()
            .expect("the generator only builds valid profiles");
        profile
    }

    /// The lane's three scopes in check order: principal, workspace, provider.
    fn lane(&self, principal: usize, provider: usize) -> [(Key, &ScopeSpec); 3] {
        [
            (Key::Principal(principal), &self.principals[principal]),
            (Key::Workspace, &self.workspace),
            (Key::Provider(provider), &self.providers[provider]),
        ]
    }
}

fn scopes() -> impl Strategy<Value = Scopes> {
    (
        (scope_spec(2), scope_spec(2)),
        scope_spec(2),
        (scope_spec(2), scope_spec(2)),
    )
        .prop_map(|((a, b), workspace, (jev, llm))| Scopes {
            principals: [a, b],
            workspace,
            providers: [jev, llm],
        })
}

/// An estimate, cost in units. `attempts: None` means the default of 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Est {
    tokens: Option<u64>,
    cost: Option<u64>,
    attempts: Option<u64>,
}

impl Est {
    fn estimate(self) -> Estimate {
        Estimate {
            tokens: self.tokens.map(|t| t as f64),
            cost_usd: self.cost.map(usd),
            attempts: self.attempts.map(|a| a as f64),
            ..Estimate::default()
        }
    }

    fn attempts(self) -> u64 {
        self.attempts.unwrap_or(1)
    }
}

fn est() -> impl Strategy<Value = Est> {
    (
        prop::option::weighted(0.85, prop_oneof![1 => Just(0u64), 6 => 1u64..=120]),
        prop::option::weighted(0.8, prop_oneof![1 => Just(0u64), 6 => 1u64..=24]),
        prop::option::weighted(0.3, 0u64..=2),
    )
        .prop_map(|(tokens, cost, attempts)| Est {
            tokens,
            cost,
            attempts,
        })
}

/// What a call reports for one dimension, relative to its estimate (0 when not estimated).
#[derive(Debug, Clone, Copy)]
enum Report {
    Nothing,
    Less(u64),
    Equal,
    More(u64),
}

impl Report {
    fn actual(self, estimated: Option<u64>) -> Option<u64> {
        let base = estimated.unwrap_or(0);
        match self {
            Report::Nothing => None,
            Report::Less(d) => Some(base.saturating_sub(d)),
            Report::Equal => Some(base),
            Report::More(d) => Some(base + d),
        }
    }
}

fn report(max_delta: u64) -> impl Strategy<Value = Report> {
    prop_oneof![
        2 => Just(Report::Nothing),
        2 => (1..=max_delta).prop_map(Report::Less),
        1 => Just(Report::Equal),
        3 => (1..=max_delta).prop_map(Report::More),
    ]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Success),
        Just(Outcome::Failure),
        Just(Outcome::None)
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        principal: usize,
        provider: usize,
        budget: usize,
        est: Est,
        /// Deadline relative to now (never 0: a zero wait is the try-acquire rule, not ours).
        deadline: Option<u64>,
    },
    /// Release a live lease, or (`false`) any lease seen so far (possibly released already),
    /// reporting usage.
    Release {
        live: bool,
        lease: Index,
        outcome: Outcome,
        tokens: Report,
        cost: Report,
    },
    Cancel(Index),
    /// Advance time, then `handle_timeout`.
    Advance(u64),
    /// Advance exactly to `poll_timeout()`, then `handle_timeout`.
    AdvanceToTimeout,
    ReleaseBudget(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (
            0..PRINCIPALS.len(),
            0..PROVIDERS.len(),
            prop_oneof![3 => Just(0usize), 2 => Just(1usize), 1 => Just(2usize)],
            est(),
            prop::option::weighted(0.3, 1u64..=500),
        )
            .prop_map(|(principal, provider, budget, est, deadline)| Op::Acquire {
                principal,
                provider,
                budget,
                est,
                deadline,
            }),
        5 => (
            prop::bool::weighted(0.9),
            any::<Index>(),
            outcome(),
            report(150),
            report(32),
        )
            .prop_map(|(live, lease, outcome, tokens, cost)| Op::Release {
                live,
                lease,
                outcome,
                tokens,
                cost,
            }),
        1 => any::<Index>().prop_map(Op::Cancel),
        2 => prop_oneof![3 => 0u64..=60, 1 => 0u64..=1_000].prop_map(Op::Advance),
        1 => Just(Op::AdvanceToTimeout),
        2 => (0..BUDGETS.len()).prop_map(Op::ReleaseBudget),
    ]
}

// ----- the shadow model --------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Principal(usize),
    Workspace,
    Provider(usize),
}

/// One invocation's usage in one scope.
#[derive(Debug, Clone, Copy, Default)]
struct Line {
    attempts: u64,
    cost: u64,
    tokens: u64,
    /// The cost / tokens line went over its limit through a usage report (and has not come
    /// back under it since).
    cost_over_by_report: bool,
    tokens_over_by_report: bool,
}

/// The rules 1 and 2 of the module docs: the budget reason a request gets, if any.
fn preflight_reason(
    scopes: &Scopes,
    principal: usize,
    provider: usize,
    est: Est,
) -> Option<Reason> {
    for (_, spec) in scopes.lane(principal, provider) {
        if spec.budgets.unknown_cost_refused() && est.cost.is_none() {
            return Some(Reason::UnknownCost);
        }
        if spec.budgets.max_tokens.is_some() && est.tokens.is_none() {
            return Some(Reason::UnknownTokens);
        }
    }
    None
}

fn budget_reason(
    scopes: &Scopes,
    lines: &HashMap<(usize, Key), Line>,
    (principal, provider, budget): (usize, usize, usize),
    est: Est,
) -> Option<Reason> {
    for (key, spec) in scopes.lane(principal, provider) {
        let line = lines.get(&(budget, key)).copied().unwrap_or_default();
        let b = spec.budgets;
        if b.max_attempts
            .is_some_and(|max| line.attempts + est.attempts() > max)
        {
            return Some(Reason::Attempts);
        }
        if let (Some(max), Some(cost)) = (b.max_cost, est.cost) {
            if line.cost + cost > max {
                return Some(Reason::Cost);
            }
        }
        if let (Some(max), Some(tokens)) = (b.max_tokens, est.tokens) {
            if line.tokens + tokens > max {
                return Some(Reason::Tokens);
            }
        }
    }
    None
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    principal: usize,
    provider: usize,
    budget: usize,
    est: Est,
    deadline: Option<u64>,
    enqueued_at: u64,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    principal: usize,
    provider: usize,
    budget: usize,
    est: Est,
    /// The opening of the invocation that was charged.
    epoch: u64,
}

/// A concrete step (IDs resolved against the model).
#[derive(Debug, Clone)]
enum Step {
    Acquire {
        principal: usize,
        provider: usize,
        budget: usize,
        est: Est,
        deadline: Option<u64>,
    },
    Release {
        lease: LeaseId,
        outcome: Outcome,
        tokens: Option<u64>,
        cost: Option<u64>,
    },
    Cancel(WaiterId),
    AdvanceTo(u64),
    ReleaseBudget(usize),
}

struct Sim {
    scopes: Scopes,
    ctl: Controller,
    now: u64,
    pending: BTreeMap<WaiterId, Pending>,
    leases: BTreeMap<LeaseId, Held>,
    known_leases: Vec<LeaseId>,
    lines: HashMap<(usize, Key), Line>,
    /// The open epoch of each invocation (None: nothing charged since its last release).
    epochs: [Option<u64>; BUDGETS.len()],
    next_epoch: u64,
    trace: Vec<Step>,
}

fn fail(message: String) -> TestCaseError {
    TestCaseError::fail(message)
}

impl Sim {
    fn new(scopes: Scopes) -> Self {
        let ctl = Controller::new(scopes.profile(), START).expect("valid profile");
        Sim {
            scopes,
            ctl,
            now: START,
            pending: BTreeMap::new(),
            leases: BTreeMap::new(),
            known_leases: Vec::new(),
            lines: HashMap::new(),
            epochs: [None; BUDGETS.len()],
            next_epoch: 0,
            trace: Vec::new(),
        }
    }

    fn concretize(&self, op: &Op) -> Option<Step> {
        Some(match op {
            Op::Acquire {
                principal,
                provider,
                budget,
                est,
                deadline,
            } => Step::Acquire {
                principal: *principal,
                provider: *provider,
                budget: *budget,
                est: *est,
                deadline: deadline.map(|d| self.now + d),
            },
            Op::Release {
                live,
                lease,
                outcome,
                tokens,
                cost,
            } => {
                let live_ids: Vec<LeaseId> = self.leases.keys().copied().collect();
                let ids = if *live { &live_ids } else { &self.known_leases };
                if ids.is_empty() {
                    return None;
                }
                let id = *lease.get(ids);
                // A stale lease reports against nothing: any amount will do.
                let charged = self.leases.get(&id).map(|h| h.est);
                Step::Release {
                    lease: id,
                    outcome: *outcome,
                    tokens: tokens.actual(charged.and_then(|e| e.tokens)),
                    cost: cost.actual(charged.and_then(|e| e.cost)),
                }
            }
            Op::Cancel(i) => {
                let ids: Vec<WaiterId> = self.pending.keys().copied().collect();
                if ids.is_empty() {
                    return None;
                }
                Step::Cancel(*i.get(&ids))
            }
            Op::Advance(ms) => Step::AdvanceTo(self.now + ms),
            Op::AdvanceToTimeout => Step::AdvanceTo(self.ctl.poll_timeout()?),
            Op::ReleaseBudget(b) => Step::ReleaseBudget(*b),
        })
    }

    fn run_op(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match self.concretize(op) {
            Some(step) => self.step(step),
            None => Ok(()),
        }
    }

    /// The shadow's verdict for a request at this instant: preflight, then the budget check.
    fn expected_refusal(&self, request: &Pending) -> Option<Reason> {
        preflight_reason(
            &self.scopes,
            request.principal,
            request.provider,
            request.est,
        )
        .or_else(|| {
            budget_reason(
                &self.scopes,
                &self.lines,
                (request.principal, request.provider, request.budget),
                request.est,
            )
        })
    }

    fn step(&mut self, step: Step) -> Result<(), TestCaseError> {
        self.trace.push(step.clone());
        match step {
            Step::Acquire {
                principal,
                provider,
                budget,
                est,
                deadline,
            } => {
                let request = Pending {
                    principal,
                    provider,
                    budget,
                    est,
                    deadline,
                    enqueued_at: self.now,
                };
                let expected = self.expected_refusal(&request);
                let mut admission = AdmissionRequest::new(
                    PRINCIPALS[principal],
                    PROVIDERS[provider],
                    BUDGETS[budget],
                )
                .with_estimate(est.estimate());
                admission.deadline = deadline;
                match (self.ctl.acquire(admission, self.now), expected) {
                    (Acquired::Rejected(rejection), Some(reason)) => {
                        check_refusal(&rejection, reason)?;
                    }
                    (Acquired::Admitted(lease), None) => self.admitted(request, &lease)?,
                    (Acquired::Queued { waiter, evidence }, None) => {
                        prop_assert_eq!(evidence.decision, Decision::Defer);
                        prop_assert_eq!(
                            evidence.reason,
                            Reason::Concurrency,
                            "only a ceiling can defer under these profiles"
                        );
                        self.pending.insert(waiter, request);
                    }
                    (other, expected) => {
                        return Err(fail(format!(
                            "acquire answered {other:?}; the rules say {}",
                            expected.map_or("admit or queue".to_owned(), |r| format!("reject {r}"))
                        )))
                    }
                }
            }
            Step::Release {
                lease,
                outcome,
                tokens,
                cost,
            } => {
                let mut usage = ActualUsage::none();
                if let Some(tokens) = tokens {
                    usage = usage.tokens(tokens);
                }
                if let Some(cost) = cost {
                    usage = usage.with_cost_usd(usd(cost)).expect("a valid cost");
                }
                let released = self.ctl.release_with_usage(lease, outcome, usage, self.now);
                match self.leases.remove(&lease) {
                    Some(held) => {
                        prop_assert!(released.is_some(), "release of a live lease did nothing");
                        self.correct(&held, tokens, cost)?;
                    }
                    None => prop_assert!(released.is_none(), "a second release did something"),
                }
            }
            Step::Cancel(waiter) => {
                let rejection = self.ctl.cancel(waiter, self.now);
                prop_assert!(self.pending.remove(&waiter).is_some());
                prop_assert_eq!(rejection.map(|r| r.reason), Some(Reason::Cancelled));
            }
            Step::AdvanceTo(at) => {
                prop_assert!(at >= self.now);
                self.now = at;
                self.ctl.handle_timeout(at);
            }
            Step::ReleaseBudget(budget) => {
                let known = self.ctl.release_budget(BUDGETS[budget], self.now);
                prop_assert_eq!(
                    known,
                    self.epochs[budget].is_some(),
                    "release_budget's answer"
                );
                self.epochs[budget] = None;
                self.lines.retain(|(b, _), _| *b != budget);
            }
        }

        // Queued waiters resolved by this step, in the order they were decided.
        while let Some(resolution) = self.ctl.poll_resolution() {
            let Some(request) = self.pending.remove(&resolution.waiter) else {
                return Err(fail(format!(
                    "resolution of a waiter not waiting: {resolution:?}"
                )));
            };
            match resolution.outcome {
                Ok(lease) => {
                    if let Some(reason) = self.expected_refusal(&request) {
                        return Err(fail(format!(
                            "queued request admitted although the rules refuse it ({reason}): \
                             {request:?}"
                        )));
                    }
                    self.admitted(request, &lease)?;
                }
                Err(rejection) => match rejection.reason {
                    Reason::DeadlineExceeded => prop_assert!(
                        request.deadline.is_some_and(|d| self.now >= d),
                        "deadline-exceeded before the deadline"
                    ),
                    Reason::QueueTimeout => {
                        let dwell = self
                            .scopes
                            .lane(request.principal, request.provider)
                            .iter()
                            .filter_map(|(_, s)| s.max_queue_wait_ms)
                            .min();
                        prop_assert!(
                            dwell.is_some_and(|d| self.now >= request.enqueued_at + d),
                            "queue-timeout before the dwell bound"
                        );
                    }
                    Reason::Attempts | Reason::Cost | Reason::Tokens => {
                        let Some(reason) = self.expected_refusal(&request) else {
                            return Err(fail(format!(
                                "queued request refused {} although it fits: {request:?}",
                                rejection.reason
                            )));
                        };
                        check_refusal(&rejection, reason)?;
                    }
                    other => return Err(fail(format!("unexpected refusal of a waiter: {other}"))),
                },
            }
        }
        self.check_state()
    }

    /// Charges an admitted attempt's estimate to its three lines.
    fn admitted(&mut self, request: Pending, lease: &Lease) -> Result<(), TestCaseError> {
        prop_assert_eq!(lease.evidence.decision, Decision::Admit);
        prop_assert_eq!(lease.evidence.estimated_tokens, request.est.tokens);
        prop_assert_eq!(lease.evidence.estimated_cost_usd, request.est.cost.map(usd));
        let epoch = match self.epochs[request.budget] {
            Some(epoch) => epoch,
            None => {
                self.next_epoch += 1;
                self.epochs[request.budget] = Some(self.next_epoch);
                self.next_epoch
            }
        };
        for (key, _) in self.scopes.lane(request.principal, request.provider) {
            let line = self.lines.entry((request.budget, key)).or_default();
            line.attempts += request.est.attempts();
            line.cost += request.est.cost.unwrap_or(0);
            line.tokens += request.est.tokens.unwrap_or(0);
        }
        self.leases.insert(
            lease.id,
            Held {
                principal: request.principal,
                provider: request.provider,
                budget: request.budget,
                est: request.est,
                epoch,
            },
        );
        self.known_leases.push(lease.id);
        Ok(())
    }

    /// Rule 3: the reported dimensions replace the charged estimate, if the opening charged is
    /// still the open one.
    fn correct(
        &mut self,
        held: &Held,
        tokens: Option<u64>,
        cost: Option<u64>,
    ) -> Result<(), TestCaseError> {
        if self.epochs[held.budget] != Some(held.epoch) {
            return Ok(());
        }
        for (key, spec) in self.scopes.lane(held.principal, held.provider) {
            let Some(line) = self.lines.get_mut(&(held.budget, key)) else {
                return Err(fail(format!("no line {key:?} for a charged lease")));
            };
            if let Some(tokens) = tokens {
                let rest = line.tokens.checked_sub(held.est.tokens.unwrap_or(0));
                prop_assert!(rest.is_some(), "a line holds less than one of its charges");
                line.tokens = rest.unwrap_or(0) + tokens;
                line.tokens_over_by_report =
                    spec.budgets.max_tokens.is_some_and(|max| line.tokens > max);
            }
            if let Some(cost) = cost {
                let rest = line.cost.checked_sub(held.est.cost.unwrap_or(0));
                prop_assert!(rest.is_some(), "a line holds less than one of its charges");
                line.cost = rest.unwrap_or(0) + cost;
                line.cost_over_by_report = spec.budgets.max_cost.is_some_and(|max| line.cost > max);
            }
        }
        Ok(())
    }

    fn check_state(&self) -> Result<(), TestCaseError> {
        // What may exceed a limit (module docs).
        for ((budget, key), line) in &self.lines {
            let spec = match key {
                Key::Principal(p) => &self.scopes.principals[*p],
                Key::Workspace => &self.scopes.workspace,
                Key::Provider(v) => &self.scopes.providers[*v],
            };
            let b = spec.budgets;
            prop_assert!(
                b.max_attempts.is_none_or(|max| line.attempts <= max),
                "budget {} line {:?}: {} attempts over maxAttempts {:?}",
                budget,
                key,
                line.attempts,
                b.max_attempts
            );
            prop_assert!(
                b.max_tokens.is_none_or(|max| line.tokens <= max) || line.tokens_over_by_report,
                "budget {} line {:?}: {} tokens over maxTokens {:?} without a usage report",
                budget,
                key,
                line.tokens,
                b.max_tokens
            );
            prop_assert!(
                b.max_cost.is_none_or(|max| line.cost <= max) || line.cost_over_by_report,
                "budget {} line {:?}: cost {}/64 over maxCostUsd {:?}/64 without a usage report",
                budget,
                key,
                line.cost,
                b.max_cost
            );
        }

        let snapshot = self.ctl.snapshot();
        prop_assert_eq!(snapshot.active, self.leases.len() as u64, "active");
        prop_assert_eq!(snapshot.queued, self.pending.len() as u64, "queued");
        prop_assert_eq!(
            snapshot.open_budgets,
            self.epochs.iter().filter(|e| e.is_some()).count() as u64,
            "open invocations"
        );

        // A lane head with room under all three ceilings has been tried: admitted or refused.
        let mut heads: BTreeMap<(usize, usize), WaiterId> = BTreeMap::new();
        for (id, waiter) in &self.pending {
            heads
                .entry((waiter.principal, waiter.provider))
                .or_insert(*id);
        }
        for ((p, v), id) in heads {
            let active = |f: &dyn Fn(&Held) -> bool| self.leases.values().filter(|h| f(h)).count();
            let room = active(&|h| h.principal == p)
                < self.scopes.principals[p].concurrency as usize
                && self.leases.len() < self.scopes.workspace.concurrency as usize
                && active(&|h| h.provider == v) < self.scopes.providers[v].concurrency as usize;
            prop_assert!(
                !room,
                "lane head {:?} is left waiting with room under every ceiling",
                id
            );
        }
        for (id, waiter) in &self.pending {
            prop_assert!(
                waiter.deadline.is_none_or(|d| d > self.now),
                "waiter {:?} waits past its deadline",
                id
            );
        }
        Ok(())
    }

    /// Cancels every waiter, releases every lease (without usage) and every budget; then every
    /// released invocation must admit its full allowance again on every lane.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        let waiters: Vec<WaiterId> = self.pending.keys().copied().collect();
        for waiter in waiters {
            self.step(Step::Cancel(waiter))?;
        }
        let leases: Vec<LeaseId> = self.leases.keys().copied().collect();
        for lease in leases {
            self.step(Step::Release {
                lease,
                outcome: Outcome::None,
                tokens: None,
                cost: None,
            })?;
        }
        for budget in 0..BUDGETS.len() {
            self.step(Step::ReleaseBudget(budget))?;
        }
        prop_assert_eq!(self.ctl.snapshot().open_budgets, 0);
        prop_assert!(self.ctl.is_idle());

        for budget in 0..BUDGETS.len() {
            for principal in 0..PRINCIPALS.len() {
                for provider in 0..PROVIDERS.len() {
                    let lane = self.scopes.lane(principal, provider);
                    let min = |f: &dyn Fn(&Budgets) -> Option<u64>| {
                        lane.iter().filter_map(|(_, s)| f(&s.budgets)).min()
                    };
                    let full = Est {
                        attempts: Some(min(&|b| b.max_attempts).unwrap_or(1)),
                        tokens: Some(min(&|b| b.max_tokens).unwrap_or(0)),
                        cost: Some(min(&|b| b.max_cost).unwrap_or(0)),
                    };
                    let before = self.leases.len();
                    self.step(Step::Acquire {
                        principal,
                        provider,
                        budget,
                        est: full,
                        deadline: None,
                    })?;
                    prop_assert_eq!(
                        self.leases.len(),
                        before + 1,
                        "a released invocation does not admit its full allowance"
                    );
                    let lease = *self.leases.keys().next_back().expect("just admitted");
                    self.step(Step::Release {
                        lease,
                        outcome: Outcome::None,
                        tokens: None,
                        cost: None,
                    })?;
                    self.step(Step::ReleaseBudget(budget))?;
                }
            }
        }
        Ok(())
    }
}

fn check_refusal(rejection: &Rejection, expected: Reason) -> Result<(), TestCaseError> {
    prop_assert_eq!(rejection.reason, expected);
    prop_assert!(!rejection.retryable, "budget refusals are permanent");
    prop_assert_eq!(rejection.evidence.decision, Decision::Reject);
    let json = serde_json::to_string(&rejection.evidence).expect("evidence serializes");
    prop_assert!(!json.contains("secret"), "evidence leaks an ID: {}", json);
    Ok(())
}

fn run(scopes: Scopes, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(scopes);
    let result = ops
        .iter()
        .try_for_each(|op| sim.run_op(op))
        .and_then(|()| sim.drain());
    result.map_err(|e| fail(format!("{e}\nconcrete steps:\n{:#?}", sim.trace)))
}

// ----- single decisions ----------------------------------------------------------------------

fn fresh(scopes: &Scopes) -> Controller {
    Controller::new(scopes.profile(), START).expect("valid profile")
}

fn request(principal: usize, provider: usize, est: Est) -> AdmissionRequest {
    AdmissionRequest::new(PRINCIPALS[principal], PROVIDERS[provider], BUDGETS[0])
        .with_estimate(est.estimate())
}

/// The reason a single acquire on a fresh controller gets under the money and token rules,
/// read straight from REFERENCE §2 / §4 (preflight, then the budget of an empty invocation).
fn fresh_verdict(scopes: &Scopes, principal: usize, provider: usize, est: Est) -> Option<Reason> {
    let lane = scopes.lane(principal, provider);
    // Preflight: every scope's unknown-cost / unknown-tokens before any budget amount.
    for (_, s) in lane {
        if s.budgets.max_cost.is_some()
            && !s.budgets.allow_unknown_cost.unwrap_or(false)
            && est.cost.is_none()
        {
            return Some(Reason::UnknownCost);
        }
        if s.budgets.max_tokens.is_some() && est.tokens.is_none() {
            return Some(Reason::UnknownTokens);
        }
    }
    for (_, s) in lane {
        if s.budgets.max_attempts.is_some_and(|m| est.attempts() > m) {
            return Some(Reason::Attempts);
        }
        if s.budgets.max_cost.zip(est.cost).is_some_and(|(m, c)| c > m) {
            return Some(Reason::Cost);
        }
        if s.budgets
            .max_tokens
            .zip(est.tokens)
            .is_some_and(|(m, t)| t > m)
        {
            return Some(Reason::Tokens);
        }
    }
    None
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn budget_lines_never_exceed_what_the_spec_allows(
        scopes in scopes(),
        ops in prop::collection::vec(op(), 1..=80),
    ) {
        run(scopes, &ops)?;
    }

    #[test]
    fn unknown_cost_and_tokens_are_refused_exactly_where_the_rules_say(
        scopes in scopes(),
        principal in 0..PRINCIPALS.len(),
        provider in 0..PROVIDERS.len(),
        est in est(),
    ) {
        let mut ctl = fresh(&scopes);
        let expected = fresh_verdict(&scopes, principal, provider, est);
        match (ctl.acquire(request(principal, provider, est), START), expected) {
            (Acquired::Rejected(rejection), Some(reason)) => check_refusal(&rejection, reason)?,
            (Acquired::Admitted(_), None) => {}
            (other, expected) => {
                return Err(fail(format!("acquire answered {other:?}, the rules say {expected:?}")))
            }
        }
    }

    #[test]
    fn an_overrun_line_refuses_what_the_rules_refuse_and_nothing_else(
        scopes in scopes(),
        first in est(),
        tokens in report(400),
        cost in report(80),
        next in est(),
        same_lane in any::<bool>(),
    ) {
        let mut ctl = fresh(&scopes);
        let Acquired::Admitted(lease) = ctl.acquire(request(0, 0, first), START) else {
            // The first attempt must fit; other cases are the property above's.
            return Ok(());
        };
        let (used_tokens, used_cost) = (tokens.actual(first.tokens), cost.actual(first.cost));
        let mut usage = ActualUsage::none();
        if let Some(t) = used_tokens {
            usage = usage.tokens(t);
        }
        if let Some(c) = used_cost {
            usage = usage.with_cost_usd(usd(c)).expect("a valid cost");
        }
        prop_assert!(ctl.release_with_usage(lease.id, Outcome::Success, usage, START).is_some());
        // The corrected lines of invocation 0 on the first lane.
        let mut lines = HashMap::new();
        for (key, _) in scopes.lane(0, 0) {
            lines.insert(
                (0usize, key),
                Line {
                    attempts: first.attempts(),
                    cost: used_cost.or(first.cost).unwrap_or(0),
                    tokens: used_tokens.or(first.tokens).unwrap_or(0),
                    ..Line::default()
                },
            );
        }
        let (principal, provider) = if same_lane { (0, 0) } else { (1, 1) };
        let expected = preflight_reason(&scopes, principal, provider, next)
            .or_else(|| budget_reason(&scopes, &lines, (principal, provider, 0), next));
        match (ctl.acquire(request(principal, provider, next), START), expected) {
            (Acquired::Rejected(rejection), Some(reason)) => check_refusal(&rejection, reason)?,
            (Acquired::Admitted(_), None) => {}
            (other, expected) => {
                return Err(fail(format!(
                    "after usage {used_tokens:?} tokens / {used_cost:?} units, acquire answered \
                     {other:?}, the rules say {expected:?}"
                )))
            }
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Rule 3's last clause: a lease of an invocation released (`releaseBudget`) and opened again
    /// reports its usage into nothing; the new opening keeps exactly its own charges.
    #[test]
    fn a_late_usage_report_never_touches_a_reopened_invocation(
        scopes in scopes(),
        charged in est(),
        tokens in report(400),
        cost in report(80),
        next in est(),
    ) {
        let mut ctl = fresh(&scopes);
        let Acquired::Admitted(old) = ctl.acquire(request(0, 0, charged), START) else {
            return Ok(());
        };
        prop_assert!(ctl.release_budget(BUDGETS[0], START));
        // Workspace concurrency may be 1: the reopening attempt runs on the old lease's heels
        // only when there is room; otherwise it waits for the old release below.
        let reopened = ctl.acquire(request(0, 0, charged), START);
        let mut usage = ActualUsage::none();
        if let Some(t) = tokens.actual(charged.tokens) {
            usage = usage.tokens(t);
        }
        if let Some(c) = cost.actual(charged.cost) {
            usage = usage.with_cost_usd(usd(c)).expect("a valid cost");
        }
        prop_assert!(ctl.release_with_usage(old.id, Outcome::Success, usage, START).is_some());
        let new = match reopened {
            Acquired::Admitted(lease) => lease,
            Acquired::Queued { waiter, .. } => match ctl.poll_resolution() {
                Some(resolution) if resolution.waiter == waiter => {
                    resolution.outcome.map_err(|r| fail(format!("reopening refused: {r:?}")))?
                }
                other => return Err(fail(format!("reopening not admitted: {other:?}"))),
            },
            Acquired::Rejected(rejection) => {
                return Err(fail(format!("reopening refused: {rejection:?}")))
            }
        };
        let mut lines = HashMap::new();
        for (key, _) in scopes.lane(0, 0) {
            lines.insert(
                (0usize, key),
                Line {
                    attempts: charged.attempts(),
                    cost: charged.cost.unwrap_or(0),
                    tokens: charged.tokens.unwrap_or(0),
                    ..Line::default()
                },
            );
        }
        prop_assert!(ctl.release(new.id, Outcome::None, START).is_some());
        let expected = preflight_reason(&scopes, 0, 0, next)
            .or_else(|| budget_reason(&scopes, &lines, (0, 0, 0), next));
        match (ctl.acquire(request(0, 0, next), START), expected) {
            (Acquired::Rejected(rejection), Some(reason)) => check_refusal(&rejection, reason)?,
            (Acquired::Admitted(_), None) => {}
            (other, expected) => {
                return Err(fail(format!("acquire answered {other:?}, the rules say {expected:?}")))
            }
        }
    }
}
