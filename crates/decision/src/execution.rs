//! Running one alias (EVALUATOR.md step 4): targets in order, retries with backoff, fallback,
//! admission before every attempt, deadlines and the caller signal.
//!
//! # Invariants
//!
//! - Every try and every failed capability check draws one unit from the invocation-wide
//!   attempt budget; nothing is attempted once it is spent (`budget-exhausted`).
//! - With the scheduler enabled, no adapter call starts without an admission lease, and the
//!   lease is released exactly once (with the attempt's outcome, or with none when the call was
//!   cut short by the caller).
//! - A queued wait ended by the attempt deadline is a timeout (`target-timeout`, or
//!   `total-deadline` when the attempt deadline is the total deadline) — never a caller
//!   cancellation. Only the caller's signal yields `cancelled` / `caller-cancelled`.
//! - Ordinals count from 1 per alias, across targets.
//! - With a receipt store ([`crate::receipt`]): the pending slot is written before the adapter
//!   is called (a failed write means no call); a non-success whose dispatch certainty is neither
//!   `terminal-response` nor `not-sent` stops the invocation as `execution-uncertain`.
//! - With `onEvidence`, every admission request reports its decision exactly once, before the
//!   adapter is called or the rejection is recorded ([`crate::evaluator`]).
//! - With telemetry, every admission request has one `decision.admit` span
//!   ([`crate::telemetry`]), closed on rejection or on lease release.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use turnstile_admission::{ActualUsage, AdmissionRequest, Millis, Outcome, Reason};

use crate::adapter::{version_serves, Adapter, AdapterRequest, AdapterSet};
use crate::artifact::Pin;
use crate::attempt::AttemptRecord;
use crate::backoff::backoff_ms;
use crate::binding::{Acceptance, Target};
use crate::clock::Clock;
use crate::error::AdmissionError;
use crate::evaluator::{AdmissionEvidence, RandomFn, SchedulerRun};
use crate::observation::{Observation, Uncertainty, Usage};
use crate::plan::{AliasPlan, Plan};
use crate::reason::{map_admission_reason, AttemptReason, DispatchCertainty, Status, Termination};
use crate::receipt::ReceiptWriter;
use crate::result::{DecisionResultSpec, ResultNaming};
use crate::scheduler::{Interrupt, Slot};
use crate::telemetry::Telemetry;

/// What interrupted the invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Cancelled,
    TotalDeadline,
    /// A dispatched call's outcome is unknown (receipt-backed runs).
    Uncertain,
    /// The receipt could not be written.
    ReceiptFailed,
}

impl From<Interrupt> for Stop {
    fn from(interrupt: Interrupt) -> Self {
        match interrupt {
            Interrupt::Cancelled => Stop::Cancelled,
            Interrupt::Deadline => Stop::TotalDeadline,
        }
    }
}

impl Stop {
    fn status_reason(self) -> (Status, AttemptReason) {
        match self {
            Stop::Cancelled => (Status::Cancelled, AttemptReason::Cancelled),
            Stop::TotalDeadline => (Status::Error, AttemptReason::Timeout),
            Stop::Uncertain => (Status::Error, AttemptReason::ExecutionUncertain),
            Stop::ReceiptFailed => (Status::Error, AttemptReason::ReceiptUnavailable),
        }
    }

    /// Which stop wins when several happened: an uncertain dispatch outranks everything (it is
    /// what a replay must report), then a receipt failure, then the caller, then the deadline.
    fn rank(self) -> u8 {
        match self {
            Stop::Uncertain => 3,
            Stop::ReceiptFailed => 2,
            Stop::Cancelled => 1,
            Stop::TotalDeadline => 0,
        }
    }
}

/// Everything the alias runs of one invocation share.
pub(crate) struct Context<'a> {
    pub plan: &'a Plan,
    pub ruleset_pin: Pin,
    pub binding_pin: Pin,
    pub run_id: &'a str,
    pub invocation_id: &'a str,
    pub adapters: &'a AdapterSet,
    pub signal: CancellationToken,
    pub clock: Clock,
    pub total_deadline: Millis,
    pub max_attempts: u64,
    pub used_attempts: AtomicU64,
    pub random: RandomFn,
    pub scheduler: Option<&'a SchedulerRun>,
    /// Give the scheduler permit back during backoff (scheduled, receipt-less runs).
    pub suspend_backoff: bool,
    pub stopped: Mutex<Option<Stop>>,
    /// The owner's receipt writer (receipt-backed runs).
    pub receipt: Option<&'a ReceiptWriter>,
    pub telemetry: Option<&'a Telemetry>,
    pub naming: &'a ResultNaming,
}

impl Context<'_> {
    fn stop(&self) -> Option<Stop> {
        if let Some(stop @ (Stop::Uncertain | Stop::ReceiptFailed)) = self.stopped() {
            return Some(stop);
        }
        if self.signal.is_cancelled() {
            Some(Stop::Cancelled)
        } else if self.clock.now_ms() >= self.total_deadline {
            Some(Stop::TotalDeadline)
        } else {
            None
        }
    }

    pub(crate) fn note_stop(&self, stop: Stop) {
        let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        if stopped.is_none_or(|current| stop.rank() > current.rank()) {
            *stopped = Some(stop);
        }
    }

    pub(crate) fn stopped(&self) -> Option<Stop> {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn budget_spent(&self) -> bool {
        self.used_attempts.load(Ordering::SeqCst) >= self.max_attempts
    }

    /// Claims one unit of the attempt budget.
    fn claim(&self) -> bool {
        self.used_attempts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                (used < self.max_attempts).then_some(used + 1)
            })
            .is_ok()
    }

    fn termination_at(&self, deadline: Millis) -> Termination {
        if deadline >= self.total_deadline {
            Termination::TotalDeadline
        } else {
            Termination::TargetTimeout
        }
    }

    fn result(
        &self,
        alias: &AliasPlan,
        end: AliasEnd,
        attempts: Vec<AttemptRecord>,
    ) -> DecisionResultSpec {
        DecisionResultSpec {
            decision: alias.definition.pin(),
            ruleset: self.ruleset_pin.clone(),
            binding: self.binding_pin.clone(),
            alias: alias.alias.clone(),
            run_id: self.run_id.to_owned(),
            invocation_id: self.invocation_id.to_owned(),
            status: end.status,
            value: end.value,
            reason: end.reason,
            uncertainty: end.uncertainty,
            attempts,
        }
    }
}

struct AliasEnd {
    status: Status,
    reason: AttemptReason,
    value: Option<serde_json::Value>,
    uncertainty: Option<Uncertainty>,
}

impl AliasEnd {
    fn failed(status: Status, reason: AttemptReason) -> Self {
        AliasEnd {
            status,
            reason,
            value: None,
            uncertainty: None,
        }
    }
}

/// The result of an alias that never started.
pub(crate) fn unstarted(context: &Context<'_>, index: usize, stop: Stop) -> DecisionResultSpec {
    let (status, reason) = stop.status_reason();
    let alias = &context.plan.aliases[index];
    context.result(alias, AliasEnd::failed(status, reason), Vec::new())
}

/// Runs one alias to its result.
pub(crate) async fn run_alias(
    context: &Context<'_>,
    index: usize,
    slot: Slot,
) -> DecisionResultSpec {
    let alias = &context.plan.aliases[index];
    let mut attempts: Vec<AttemptRecord> = Vec::new();
    let mut ordinal = 0u32;
    let mut end = AliasEnd::failed(Status::Error, AttemptReason::ExecutorUnavailable);

    'targets: for (target_index, target) in alias.binding.targets.iter().enumerate() {
        if let Some(stop) = context.stop() {
            context.note_stop(stop);
            let (status, reason) = stop.status_reason();
            end = AliasEnd::failed(status, reason);
            break;
        }
        if context.budget_spent() {
            end = AliasEnd::failed(Status::Error, AttemptReason::BudgetExhausted);
            break;
        }
        let adapter = match capability_check(context, alias, target) {
            Ok(adapter) => adapter,
            Err(reason) => {
                if !context.claim() {
                    end = AliasEnd::failed(Status::Error, AttemptReason::BudgetExhausted);
                    break;
                }
                ordinal += 1;
                let mut record =
                    base_record(target, ordinal, context.adapters.get(&target.adapter));
                record.status = Status::Unsupported;
                record.reason = reason;
                record.dispatch_certainty = Some(DispatchCertainty::NotSent);
                attempts.push(record);
                end = AliasEnd::failed(Status::Unsupported, reason);
                if alias.binding.fallback_on.contains(&reason) {
                    continue;
                }
                break;
            }
        };

        for retry in 0..=target.retry.max_retries {
            if let Some(stop) = context.stop() {
                context.note_stop(stop);
                let (status, reason) = stop.status_reason();
                end = AliasEnd::failed(status, reason);
                break 'targets;
            }
            if !context.claim() {
                end = AliasEnd::failed(Status::Error, AttemptReason::BudgetExhausted);
                break 'targets;
            }
            ordinal += 1;
            let Tried {
                mut record,
                observation,
                uncertain,
            } = attempt(
                context,
                alias,
                (target_index, target),
                adapter.as_ref(),
                ordinal,
                &attempts,
            )
            .await;
            if uncertain {
                attempts.push(record);
                context.note_stop(Stop::Uncertain);
                end = AliasEnd::failed(Status::Error, AttemptReason::ExecutionUncertain);
                break 'targets;
            }
            if record.reason == AttemptReason::ReceiptUnavailable {
                attempts.push(record);
                end = AliasEnd::failed(Status::Error, AttemptReason::ReceiptUnavailable);
                break 'targets;
            }
            if record.status == Status::Success && record.reason == AttemptReason::None {
                let observation =
                    observation.unwrap_or_else(|| Observation::success(serde_json::Value::Null));
                end = AliasEnd {
                    status: Status::Success,
                    reason: AttemptReason::None,
                    value: observation.value,
                    uncertainty: observation.uncertainty,
                };
                attempts.push(record);
                break 'targets;
            }
            end = AliasEnd::failed(record.status, record.reason);
            match record.termination {
                Some(Termination::CallerCancelled) => {
                    attempts.push(record);
                    context.note_stop(Stop::Cancelled);
                    end = AliasEnd::failed(Status::Cancelled, AttemptReason::Cancelled);
                    break 'targets;
                }
                Some(Termination::TotalDeadline) => {
                    attempts.push(record);
                    context.note_stop(Stop::TotalDeadline);
                    break 'targets;
                }
                Some(Termination::TargetTimeout) | None => {}
            }
            if record.reason.is_retryable() && retry < target.retry.max_retries {
                let now = context.clock.now_ms();
                let retry_after = observation.as_ref().and_then(|o| o.retry_after_ms);
                let delay = backoff_ms(
                    &target.retry,
                    retry,
                    retry_after,
                    (context.random)(),
                    context.total_deadline.saturating_sub(now),
                );
                record.retry_delay_ms = Some(delay);
                attempts.push(record);
                let signal = context.signal.clone();
                let clock = context.clock;
                let wait = async move {
                    tokio::select! {
                        _ = clock.sleep_until(now.saturating_add(delay)) => {}
                        _ = signal.cancelled() => {}
                    }
                };
                if context.suspend_backoff {
                    slot.suspend(wait).await;
                } else {
                    wait.await;
                }
                continue;
            }
            attempts.push(record);
            break;
        }
        if !alias.binding.fallback_on.contains(&end.reason) {
            break;
        }
    }
    let spec = context.result(alias, end, attempts);
    if let Some(writer) = context.receipt {
        if !writer.state().is_terminal()
            && writer
                .evaluation(&context.naming.decision_result(spec.clone()))
                .is_err()
        {
            context.note_stop(Stop::ReceiptFailed);
        }
    }
    spec
}

/// What one try produced.
struct Tried {
    record: AttemptRecord,
    observation: Option<Observation>,
    /// Receipt-backed and dispatched with an unknown outcome.
    uncertain: bool,
}

impl Tried {
    fn not_called(record: AttemptRecord) -> Self {
        Tried {
            record,
            observation: None,
            uncertain: false,
        }
    }
}

/// The capability check before a target: adapter present and of a serving version, answer
/// kind and capabilities supported, acceptance profile supported.
fn capability_check(
    context: &Context<'_>,
    alias: &AliasPlan,
    target: &Target,
) -> Result<Arc<dyn Adapter>, AttemptReason> {
    let Some(adapter) = context.adapters.get(&target.adapter) else {
        return Err(AttemptReason::ExecutorUnavailable);
    };
    if !version_serves(adapter.version(), &target.adapter_version) {
        return Err(AttemptReason::ExecutorUnavailable);
    }
    let capabilities = adapter.capabilities();
    let definition = alias.definition.spec();
    if !capabilities
        .answer_kinds
        .contains(&definition.answer.kind())
    {
        return Err(AttemptReason::UnsupportedCapability);
    }
    let required = target
        .required_capabilities
        .iter()
        .chain(definition.required_capabilities.iter());
    for capability in required {
        if !capabilities.capabilities.contains(capability) {
            return Err(AttemptReason::UnsupportedCapability);
        }
    }
    if let Acceptance::ConfidenceThreshold { profile, .. } = &target.acceptance {
        if !capabilities.confidence_profiles.contains(profile) {
            return Err(AttemptReason::ConfidenceProfileMismatch);
        }
    }
    Ok(Arc::clone(adapter))
}

fn base_record(target: &Target, ordinal: u32, adapter: Option<&Arc<dyn Adapter>>) -> AttemptRecord {
    AttemptRecord {
        ordinal,
        adapter: target.adapter.clone(),
        adapter_version: adapter.map_or_else(
            || target.adapter_version.clone(),
            |a| a.version().to_owned(),
        ),
        requested_model: target.model.clone(),
        actual_model: None,
        subagent: target.subagent.clone(),
        status: Status::Error,
        reason: AttemptReason::None,
        duration_ms: 0,
        usage: Usage::default(),
        request_id: None,
        retry_delay_ms: None,
        termination: None,
        dispatch_certainty: None,
        admission: None,
    }
}

/// The lease outcome an observation reports to admission.
fn lease_outcome(observation: &Observation, termination: Option<Termination>) -> Outcome {
    if termination == Some(Termination::CallerCancelled) || observation.status == Status::Cancelled
    {
        return Outcome::None;
    }
    if let Some(retry_after_ms) = observation.retry_after_ms {
        return Outcome::RetryAfter { retry_after_ms };
    }
    if observation.status != Status::Success && observation.reason.is_provider_failure() {
        Outcome::Failure
    } else {
        Outcome::Success
    }
}

/// What a call reported it used, for the invocation's budgets: input + output tokens when
/// either is known, and the cost when it is a valid amount. Unknown (`null`) stays unknown, so
/// the estimate stands for that dimension.
fn actual_usage(usage: &Usage) -> ActualUsage {
    let mut actual = ActualUsage::none();
    if usage.input_tokens.is_some() || usage.output_tokens.is_some() {
        let tokens = usage
            .input_tokens
            .unwrap_or(0)
            .saturating_add(usage.output_tokens.unwrap_or(0));
        actual = actual.tokens(tokens);
    }
    match usage.cost_usd.map(|cost| actual.with_cost_usd(cost)) {
        Some(Ok(with_cost)) => with_cost,
        // An adapter that reports a negative or non-finite cost is not believed.
        Some(Err(_)) | None => actual,
    }
}

/// One try: admission, the call raced against the deadline and the caller, validation and
/// acceptance.
async fn attempt(
    context: &Context<'_>,
    alias: &AliasPlan,
    (target_index, target): (usize, &Target),
    adapter: &dyn Adapter,
    ordinal: u32,
    prior: &[AttemptRecord],
) -> Tried {
    let start = context.clock.now_ms();
    let deadline = context
        .total_deadline
        .min(start.saturating_add(target.timeout_ms));
    let mut record = AttemptRecord {
        adapter_version: adapter.version().to_owned(),
        ..base_record(target, ordinal, None)
    };

    let mut span = None;
    let lease = match context.scheduler {
        None => None,
        Some(run) => {
            span = context
                .telemetry
                .map(|t| t.admission_requested(&target.adapter));
            let estimate = run
                .estimate
                .as_ref()
                .map(|f| f(&alias.alias, target, &alias.projection))
                .unwrap_or_default();
            let request = AdmissionRequest {
                principal_id: run.policy.principal.id.clone(),
                provider_id: target.adapter.clone(),
                budget_id: context.invocation_id.to_owned(),
                estimate,
                deadline: Some(deadline),
            };
            let acquired = run
                .driver
                .acquire_or_cancel(&run.policy.workspace.id, request, &context.signal)
                .await;
            let decided = match &acquired {
                Ok(lease) => Some(lease.evidence()),
                Err(error) => error.rejection().map(|rejection| &rejection.evidence),
            };
            if let Some(evidence) = decided {
                run.report(AdmissionEvidence {
                    alias: &alias.alias,
                    target_index,
                    adapter: &target.adapter,
                    ordinal,
                    evidence,
                });
            }
            match acquired {
                Ok(lease) => {
                    if let Some(span) = span.as_mut() {
                        span.admitted(lease.evidence());
                    }
                    record.admission = Some(lease.evidence().clone());
                    Some(lease)
                }
                Err(error) => {
                    record.dispatch_certainty = Some(DispatchCertainty::NotSent);
                    match error {
                        AdmissionError::Rejected(rejection) => {
                            if let Some(span) = span.take() {
                                span.rejected(&rejection.evidence);
                            }
                            let caller = context.signal.is_cancelled();
                            let (status, reason) = match rejection.reason {
                                Reason::Cancelled if !caller => {
                                    (Status::Error, AttemptReason::Timeout)
                                }
                                other => map_admission_reason(other),
                            };
                            record.status = status;
                            record.reason = reason;
                            record.termination = match rejection.reason {
                                Reason::Cancelled if caller => Some(Termination::CallerCancelled),
                                Reason::Cancelled | Reason::DeadlineExceeded => {
                                    Some(context.termination_at(deadline))
                                }
                                _ => None,
                            };
                            record.admission = Some(rejection.evidence);
                        }
                        AdmissionError::Registry(_) => {
                            if let Some(span) = span.take() {
                                span.failed();
                            }
                            record.status = Status::Error;
                            record.reason = AttemptReason::Overloaded;
                        }
                    }
                    record.duration_ms = context.clock.now_ms().saturating_sub(start);
                    return Tried::not_called(record);
                }
            }
        }
    };

    // The pending slot is durable before anything is sent.
    if let Some(writer) = context.receipt {
        if writer
            .dispatching(&alias.alias, target_index, ordinal, prior)
            .is_err()
        {
            drop(lease);
            if let Some(span) = span.take() {
                span.released(&[]);
            }
            context.note_stop(Stop::ReceiptFailed);
            record.status = Status::Error;
            record.reason = AttemptReason::ReceiptUnavailable;
            record.dispatch_certainty = Some(DispatchCertainty::NotSent);
            record.duration_ms = context.clock.now_ms().saturating_sub(start);
            return Tried::not_called(record);
        }
    }

    let now = context.clock.now_ms();
    let request = AdapterRequest {
        alias: &alias.alias,
        definition: &alias.definition,
        input: &alias.projection,
        target,
        ordinal,
        timeout: Duration::from_millis(deadline.saturating_sub(now)),
    };
    let call = adapter.invoke(request);
    let mut observation = tokio::select! {
        biased;
        _ = context.signal.cancelled() => {
            record.termination = Some(Termination::CallerCancelled);
            Observation::error(AttemptReason::Cancelled, DispatchCertainty::Unknown)
                .with_status(Status::Cancelled)
        }
        observation = call => observation,
        _ = context.clock.sleep_until(deadline) => {
            record.termination = Some(context.termination_at(deadline));
            Observation::error(AttemptReason::Timeout, DispatchCertainty::Unknown)
        }
    };
    if let Some(lease) = lease {
        let outcome = lease_outcome(&observation, record.termination);
        let released = if record.termination == Some(Termination::CallerCancelled) {
            drop(lease);
            None
        } else {
            lease.release_with_usage(outcome, actual_usage(&observation.usage))
        };
        if let Some(span) = span.take() {
            span.released(
                released
                    .as_ref()
                    .map_or(&[][..], |r| &r.breaker_transitions),
            );
        }
    }

    // With a store, a non-answer that may have reached the provider is uncertain.
    let uncertain = context.receipt.is_some()
        && observation.status != Status::Success
        && !matches!(
            observation.dispatch_certainty,
            Some(DispatchCertainty::TerminalResponse | DispatchCertainty::NotSent)
        );
    if let Some(writer) = context.receipt {
        let written = if uncertain {
            writer.uncertain()
        } else {
            writer.observed()
        };
        if written.is_err() && !uncertain {
            context.note_stop(Stop::ReceiptFailed);
        }
    }

    if observation.status == Status::Success {
        let answer = &alias.definition.spec().answer;
        let valid = observation
            .value
            .as_ref()
            .is_some_and(|v| answer.accepts(v));
        if !valid {
            observation.status = Status::Error;
            observation.reason = AttemptReason::InvalidOutput;
        } else if let Some(reason) =
            acceptance_failure(&target.acceptance, observation.uncertainty.as_ref())
        {
            observation.status = Status::Error;
            observation.reason = reason;
        }
    }

    record.status = observation.status;
    record.reason = observation.reason;
    record.actual_model = observation.actual_model.clone();
    record.usage = observation.usage;
    record.request_id = observation.request_id.clone();
    record.dispatch_certainty = observation.dispatch_certainty;
    record.duration_ms = context.clock.now_ms().saturating_sub(start);
    Tried {
        record,
        observation: Some(observation),
        uncertain,
    }
}

/// Why an answer is not accepted, if it is not.
fn acceptance_failure(
    acceptance: &Acceptance,
    uncertainty: Option<&Uncertainty>,
) -> Option<AttemptReason> {
    match acceptance {
        Acceptance::TypedValue => None,
        Acceptance::ConfidenceThreshold {
            profile,
            minimum_bps,
        } => {
            let Some(uncertainty) = uncertainty else {
                return Some(AttemptReason::MissingConfidence);
            };
            if &uncertainty.profile != profile {
                return Some(AttemptReason::ConfidenceProfileMismatch);
            }
            let Some(confidence) = uncertainty.confidence.filter(|c| c.is_finite()) else {
                return Some(AttemptReason::MissingConfidence);
            };
            ((confidence * 10_000.0) < *minimum_bps as f64).then_some(AttemptReason::LowConfidence)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_usage_becomes_actual_usage_and_unknown_stays_unknown() {
        let usage = |input, output, cost| Usage {
            input_tokens: input,
            output_tokens: output,
            cost_usd: cost,
        };
        let both = actual_usage(&usage(Some(700), Some(34), Some(0.0092)));
        assert_eq!(both.tokens, Some(734));
        assert_eq!(both.cost_usd(), Some(0.0092));
        let output_only = actual_usage(&usage(None, Some(12), None));
        assert_eq!(
            (output_only.tokens, output_only.cost_usd()),
            (Some(12), None)
        );
        assert!(actual_usage(&usage(None, None, None)).is_none());
        // A cost an adapter cannot have incurred is not believed; the tokens still count.
        let negative = actual_usage(&usage(Some(5), None, Some(-1.0)));
        assert_eq!((negative.tokens, negative.cost_usd()), (Some(5), None));
        assert!(actual_usage(&usage(None, None, Some(f64::NAN))).is_none());
    }
}
