//! The decision evaluator (EVALUATOR.md): validate, schedule, execute, compose.
//!
//! # Flow
//!
//! [`evaluate`] runs these steps, each a function of this module: `prepare` (1, 2),
//! `begin_receipt` (the receipt of step 2), `schedule` (3, 4), `conclude` (5, or the
//! interruption that ended the run, as a [`Conclusion`](crate::Conclusion)) and
//! `finish_receipt`.
//!
//! 1. [`plan`](crate::plan::plan) validates everything before any call, and
//!    [`verify_subagents`] checks every target's `subagent` pin against the worker its adapter
//!    reports (`digest-mismatch`, no call, no admission).
//! 2. With `scheduler.enabled`, the policy is registered with the shared admission registry
//!    (a conflicting revision is `invalid-definition`, no call).
//! 3. Aliases run in ruleset order through [`run_bounded_fair`]: concurrency 1, or with the
//!    scheduler enabled the minimum positive ceiling of binding, caller, graph, principal,
//!    workspace and every provider. Lanes are keyed by (first target's adapter, workspace,
//!    principal) (`LaneName`); the lane key never leaves the scheduler.
//! 4. Each alias runs its targets ([`crate::execution`]).
//! 5. Results are composed in canonical ruleset order.
//!
//! # Interruption
//!
//! One caller signal (a `CancellationToken`) and one total deadline (`now + totalTimeoutMs`)
//! govern the invocation. A fired signal makes the result `cancelled`; a passed total deadline
//! makes it `error` / `timeout`. A per-target timeout only ends its attempt.
//!
//! # Receipts
//!
//! With `receipts` (the spec's `receiptStore`), step 2 acquires the invocation's durable
//! `decision-receipt/v2` ([`crate::receipt`]): a non-owner gets its replay answer without any
//! call; the owner runs serially (concurrency 1, permit kept through backoff), writes the
//! pending slot before every dispatch, each evaluation as it finishes, and finally `composed`
//! → `completed` with the result. An uncertain dispatch ends the run (and the receipt) as
//! `execution-uncertain`. Without a store, scheduled runs give their permit back during backoff.
//!
//! # Admission evidence (`scheduler.onEvidence`)
//!
//! With the scheduler enabled and an [`EvidenceFn`], the host receives every admission decision
//! of every attempt as an [`AdmissionEvidence`]: once per admission request, at the instant the
//! decision is known — an admission before the adapter is called, a rejection before the attempt
//! is recorded — with exactly the evidence the attempt record carries in `admission`. Attempts
//! that never ask for admission (failed capability checks, interrupted runs, replays, runs without
//! the scheduler) produce nothing. The callback is write-only: it cannot change a result, and a
//! panic inside it is caught and ignored. It receives no principal or workspace ID.
//!
//! # Telemetry
//!
//! With `telemetry`, every admission request records a `decision.admit` span and the admission
//! counters ([`crate::telemetry`]). Telemetry is write-only: it never changes a result.

use turnstile_admission::Millis;
use turnstile_store::ReceiptError;

use crate::artifact::Pin;
use crate::compose::compose;
use crate::conclusion::{Conclusion, UNCERTAIN_DETAIL};
use crate::execution::{run_alias, unstarted, Context};
use crate::lane::LaneName;
use crate::plan::{plan, verify_subagents, Plan};
use crate::reason::ResultReason;
use crate::receipt::{begin, fingerprint, Begin, ReceiptWriter, Replay};
use crate::request::{EvaluationRequest, SchedulerRun};
use crate::result::{Evaluations, RulesetResult, RulesetResultSpec};
use crate::scheduler::{run_bounded_fair, FairOptions, Scheduled, WorkItem};
use crate::stop::Stop;
use crate::Clock;

/// Evaluates a ruleset. Never fails: every failure is a typed result.
pub async fn evaluate(request: EvaluationRequest) -> RulesetResult {
    let prepared = match prepare(&request).await {
        Ok(prepared) => prepared,
        Err(refused) => return refused,
    };
    let writer = match begin_receipt(&prepared).await {
        Ok(writer) => writer,
        Err(answered) => return answered,
    };
    let context = prepared.context(writer.as_deref());
    let evaluations = schedule(&context).await;
    release_budget(prepared.scheduler, &request.invocation_id).await;
    let stopped = match context.stopped() {
        Some(stop @ (Stop::Uncertain | Stop::ReceiptFailed)) => Some(stop),
        _ if context.signal.is_cancelled() => Some(Stop::Cancelled),
        other => other,
    };
    let conclusion = conclude(stopped, &prepared.plan, &request.input, &evaluations);
    let result = prepared.header.result(conclusion, evaluations);
    if let Some(writer) = &writer {
        finish_receipt(writer, stopped, &result);
    }
    result
}

/// What every result of a planned invocation names: its request's ids and its pins.
struct Header<'r> {
    request: &'r EvaluationRequest,
    ruleset_pin: Pin,
    binding_pin: Pin,
}

impl Header<'_> {
    /// A result with this header.
    fn result(&self, conclusion: Conclusion, evaluations: Evaluations) -> RulesetResult {
        ruleset_result(
            self.request,
            Some(self.ruleset_pin.clone()),
            Some(self.binding_pin.clone()),
            conclusion,
            evaluations,
        )
    }

    /// An error result without evaluations.
    fn refuse(&self, reason: ResultReason, detail: String) -> RulesetResult {
        self.result(
            Conclusion::error(reason, Some(detail)),
            Evaluations::default(),
        )
    }
}

/// An invocation that passed validation: its plan, its admission, its time.
struct Prepared<'r> {
    header: Header<'r>,
    plan: Plan,
    /// The scheduler, when enabled (its governor prepared).
    scheduler: Option<&'r SchedulerRun>,
    clock: Clock,
    /// `now + totalTimeoutMs`, fixed before the receipt is begun.
    total_deadline: Millis,
}

/// Steps 1 and 2: plans and pins the artifacts, checks the subagent pins, prepares the
/// scheduler's governor (registers the policy in process, or checks a service's profile has a
/// lane for every adapter), and fixes the clock and the total deadline. A refusal is the result.
async fn prepare(request: &EvaluationRequest) -> Result<Prepared<'_>, RulesetResult> {
    let plan = plan(
        &request.ruleset,
        &request.binding,
        &request.definitions,
        &request.input,
    )
    .map_err(|refused| {
        ruleset_result(
            request,
            refused.ruleset,
            refused.binding,
            Conclusion::error(refused.error.reason(), Some(refused.error.detail())),
            Evaluations::default(),
        )
    })?;
    let header = Header {
        request,
        ruleset_pin: plan.ruleset.pin(),
        binding_pin: plan.binding.pin(),
    };
    if let Err(error) = verify_subagents(&plan, &request.adapters) {
        return Err(header.refuse(error.reason(), error.detail()));
    }
    let scheduler = request.scheduler.as_ref().filter(|s| s.policy.enabled);
    if let Some(run) = scheduler {
        if let Err(refused) = run.driver.prepare(&run.policy, &plan).await {
            return Err(header.refuse(refused.reason, refused.detail));
        }
    }
    let clock = scheduler
        .map(|s| s.driver.clock())
        .or(request.clock)
        .unwrap_or_else(|| Clock::starting_at(0));
    let total_deadline = clock
        .now_ms()
        .saturating_add(plan.binding.spec().total_timeout_ms);
    Ok(Prepared {
        header,
        plan,
        scheduler,
        clock,
        total_deadline,
    })
}

impl Prepared<'_> {
    /// What every alias run of this invocation shares.
    fn context<'a>(&'a self, receipt: Option<&'a ReceiptWriter>) -> Context<'a> {
        let request = self.header.request;
        Context {
            plan: &self.plan,
            ruleset_pin: self.header.ruleset_pin.clone(),
            binding_pin: self.header.binding_pin.clone(),
            run_id: &request.run_id,
            invocation_id: &request.invocation_id,
            adapters: &request.adapters,
            signal: request.signal.clone().unwrap_or_default(),
            clock: self.clock,
            total_deadline: self.total_deadline,
            max_attempts: self.plan.binding.spec().max_attempts,
            used_attempts: std::sync::atomic::AtomicU64::new(0),
            random: request.random_source(),
            scheduler: self.scheduler,
            suspend_backoff: self.scheduler.is_some() && receipt.is_none(),
            stopped: std::sync::Mutex::new(None),
            receipt,
            telemetry: request.telemetry.as_ref(),
            naming: &request.naming,
        }
    }
}

/// The result artifact of `request` with `conclusion`.
fn ruleset_result(
    request: &EvaluationRequest,
    ruleset: Option<Pin>,
    binding: Option<Pin>,
    conclusion: Conclusion,
    evaluations: Evaluations,
) -> RulesetResult {
    request.naming.ruleset_result(RulesetResultSpec {
        ruleset,
        binding,
        run_id: request.run_id.clone(),
        invocation_id: request.invocation_id.clone(),
        status: conclusion.status,
        reason: conclusion.reason,
        outcome: conclusion.outcome,
        matched_rules: conclusion.matched_rules,
        evaluations,
        detail: conclusion.detail,
    })
}

/// Step 2's receipt: the owner's writer (`None` without a store), or, for a non-owner or a
/// store that fails, the result to answer with at once.
async fn begin_receipt(
    prepared: &Prepared<'_>,
) -> Result<Option<Box<ReceiptWriter>>, RulesetResult> {
    let request = prepared.header.request;
    let Some(run) = &request.receipts else {
        return Ok(None);
    };
    let fingerprint = fingerprint(
        &request.invocation_id,
        &request.input,
        &prepared.header.ruleset_pin,
        &prepared.header.binding_pin,
        &definition_pins(&prepared.plan),
    );
    let begun = match fingerprint {
        Ok(fingerprint) => {
            begin(
                run,
                &request.invocation_id,
                &fingerprint,
                prepared.clock,
                prepared.plan.binding.spec().total_timeout_ms,
            )
            .await
        }
        Err(error) => Err(ReceiptError::Canonical(error)),
    };
    match begun {
        Ok(Begin::Owner(writer)) => Ok(Some(writer)),
        Ok(Begin::Replay(replay)) => {
            release_budget(prepared.scheduler, &request.invocation_id).await;
            Err(replayed(replay, prepared))
        }
        Err(error) => Err(prepared
            .header
            .refuse(ResultReason::ReceiptUnavailable, error.to_string())),
    }
}

/// Steps 3 and 4: every alias through the bounded fair scheduler, one lane per [`LaneName`];
/// an alias the run never started gets the result of the interruption.
async fn schedule(context: &Context<'_>) -> Evaluations {
    let plan = context.plan;
    let concurrency = match context.scheduler {
        Some(run) if context.receipt.is_none() => {
            run.policy.ceiling(plan.binding.spec().concurrency)
        }
        _ => 1,
    };
    let work: Vec<WorkItem<usize>> = plan
        .aliases
        .iter()
        .enumerate()
        .map(|(index, alias)| WorkItem::new(index, LaneName::of(alias, context.scheduler).key()))
        .collect();
    let options = FairOptions {
        cancel: Some(context.signal.clone()),
        deadline: Some(context.clock.instant_at(context.total_deadline)),
    };
    let scheduled = run_bounded_fair(
        work,
        concurrency,
        |index, slot| run_alias(context, index, slot),
        options,
    )
    .await;
    let evaluations = scheduled
        .into_iter()
        .map(|item| {
            let spec = match item {
                Scheduled::Completed(spec) => spec,
                Scheduled::Unstarted { value, cause } => {
                    let stop = Stop::from(cause);
                    context.note_stop(stop);
                    unstarted(context, value, stop)
                }
            };
            (spec.alias.clone(), context.naming.decision_result(spec))
        })
        .collect();
    Evaluations(evaluations)
}

/// Step 5: an interruption decides the end, else the composition of the evaluations.
fn conclude(
    stopped: Option<Stop>,
    plan: &Plan,
    input: &serde_json::Value,
    evaluations: &Evaluations,
) -> Conclusion {
    match stopped {
        Some(stop) => Conclusion::of_stop(stop),
        None => compose(plan.ruleset.spec(), &plan.output_schema, input, evaluations),
    }
}

/// The owner's last receipt write: the result, unless the run already ended the receipt as
/// uncertain or failed (a result that cannot be written fails the receipt).
fn finish_receipt(writer: &ReceiptWriter, stopped: Option<Stop>, result: &RulesetResult) {
    match stopped {
        // Already terminal (or written as far as the store allowed).
        Some(Stop::Uncertain) => {
            let _ = writer.uncertain();
        }
        Some(Stop::ReceiptFailed) => {
            let _ = writer.fail();
        }
        _ => {
            if writer.finish(result).is_err() {
                let _ = writer.fail();
            }
        }
    }
}

/// Gives the invocation's admission budget back (scheduled runs).
async fn release_budget(scheduler: Option<&SchedulerRun>, invocation_id: &str) {
    if let Some(run) = scheduler {
        run.driver
            .release_budget(&run.policy.workspace.id, invocation_id)
            .await;
    }
}

/// The definition pins in ruleset order (part of the fingerprint).
fn definition_pins(plan: &Plan) -> Vec<Pin> {
    plan.aliases.iter().map(|a| a.definition.pin()).collect()
}

/// The result a non-owner gets.
fn replayed(replay: Replay, prepared: &Prepared<'_>) -> RulesetResult {
    match replay {
        Replay::Mismatch => prepared.header.refuse(
            ResultReason::ReplayMismatch,
            "the invocation id was used with a different input or different pins".to_owned(),
        ),
        Replay::Uncertain => prepared.header.refuse(
            ResultReason::ExecutionUncertain,
            UNCERTAIN_DETAIL.to_owned(),
        ),
        Replay::Stored(value) => match serde_json::from_value::<RulesetResult>(value) {
            Ok(mut result) => {
                result
                    .spec
                    .evaluations
                    .reorder(prepared.plan.aliases.iter().map(|a| a.alias.as_str()));
                result
            }
            Err(_) => prepared.header.refuse(
                ResultReason::ReceiptUnavailable,
                "the stored result could not be read".to_owned(),
            ),
        },
    }
}
