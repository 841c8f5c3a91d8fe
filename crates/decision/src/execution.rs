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
//!   adapter is called or the rejection is recorded ([`crate::request`]).
//! - One try (admission, call, release, receipt, validation) is [`crate::one_attempt`].
//! - With telemetry, every admission request has one `decision.admit` span
//!   ([`crate::telemetry`]), closed on rejection or on lease release.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;
use turnstile_admission::Millis;

use crate::adapter::{version_serves, Adapter, AdapterSet};
use crate::artifact::Pin;
use crate::attempt::AttemptRecord;
use crate::backoff::backoff_ms;
use crate::binding::{Acceptance, AliasTarget};
use crate::observation::{Observation, Uncertainty};
use crate::one_attempt::{attempt, Tried};
use crate::plan::{AliasPlan, Plan};
use crate::reason::{AttemptReason, DispatchCertainty, Status, Termination};
use crate::receipt::ReceiptWriter;
use crate::request::{RandomFn, SchedulerRun};
use crate::result::{DecisionResultSpec, ResultNaming};
use crate::scheduler::Slot;
use crate::stop::Stop;
use crate::telemetry::Telemetry;
use crate::Clock;

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

    pub(crate) fn termination_at(&self, deadline: Millis) -> Termination {
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
                let adapter = context.adapters.get(&target.adapter);
                let mut record = AttemptRecord::new(target, ordinal, adapter.map(|a| &**a));
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

/// The capability check before a target: adapter present and of a serving version, answer
/// kind and capabilities supported, acceptance profile supported.
fn capability_check(
    context: &Context<'_>,
    alias: &AliasPlan,
    target: &AliasTarget,
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
