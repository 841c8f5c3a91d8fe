//! One try of one target: [`admit`](Attempt::admit) → [`write_pending`](Attempt::write_pending)
//! → [`call`](Attempt::call) → [`release`](Attempt::release) →
//! [`record_receipt`](Attempt::record_receipt) → [`judge`] → [`finish`](Attempt::finish).
//!
//! # Invariants
//!
//! - With the scheduler enabled, the adapter is called only under a granted lease, and the
//!   lease is released exactly once: with the outcome and the usage the call reported, or
//!   dropped (outcome `none`) when the caller cut the call short or the receipt could not be
//!   written.
//! - A queued wait ended by the attempt deadline is a timeout, never a caller cancellation.
//! - Every admission request reports its decision to `onEvidence` exactly once, before the
//!   adapter is called or the rejection is recorded.
//! - With a receipt store, the pending slot is durable before anything is sent, and a
//!   non-success whose dispatch certainty is neither `terminal-response` nor `not-sent` is
//!   uncertain.

use std::time::Duration;

use turnstile_admission::{ActualUsage, AdmissionRequest, Millis, Outcome, Reason};

use crate::adapter::{Adapter, AdapterRequest};
use crate::attempt::AttemptRecord;
use crate::binding::{Acceptance, AliasTarget};
use crate::error::AdmissionError;
use crate::execution::Context;
use crate::governor::GovernedLease;
use crate::observation::{Observation, ObservedUsage, Uncertainty};
use crate::plan::AliasPlan;
use crate::reason::{map_admission_reason, AttemptReason, DispatchCertainty, Status, Termination};
use crate::request::AdmissionEvidence;
use crate::stop::Stop;

/// What one try produced.
pub(crate) struct Tried {
    pub record: AttemptRecord,
    pub observation: Option<Observation>,
    /// Receipt-backed and dispatched with an unknown outcome.
    pub uncertain: bool,
}

/// One try in progress: where it runs, when it started and must end, and its record so far.
struct Attempt<'c, 'a> {
    context: &'c Context<'a>,
    alias: &'c AliasPlan,
    target_index: usize,
    target: &'c AliasTarget,
    ordinal: u32,
    start: Millis,
    /// The earlier of the total deadline and `start + target.timeoutMs`.
    deadline: Millis,
    record: AttemptRecord,
}

/// One try: admission, the call raced against the deadline and the caller, validation and
/// acceptance.
pub(crate) async fn attempt(
    context: &Context<'_>,
    alias: &AliasPlan,
    (target_index, target): (usize, &AliasTarget),
    adapter: &dyn Adapter,
    ordinal: u32,
    prior: &[AttemptRecord],
) -> Tried {
    let start = context.clock.now_ms();
    let mut attempt = Attempt {
        context,
        alias,
        target_index,
        target,
        ordinal,
        start,
        deadline: context
            .total_deadline
            .min(start.saturating_add(target.timeout_ms)),
        record: AttemptRecord::new(target, ordinal, Some(adapter)),
    };
    let Ok(lease) = attempt.admit().await else {
        return attempt.not_called();
    };
    if !attempt.write_pending(prior) {
        drop(lease);
        return attempt.receipt_failed();
    }
    let mut observation = attempt.call(adapter).await;
    attempt.release(lease, &observation).await;
    let uncertain = attempt.record_receipt(&observation);
    judge(alias, target, &mut observation);
    attempt.finish(observation, uncertain)
}

impl Attempt<'_, '_> {
    /// Asks admission for a lease (scheduled runs; `Ok(None)` otherwise) and reports the
    /// decision. A refusal is recorded (`not-sent`) and is `Err`.
    async fn admit(&mut self) -> Result<Option<GovernedLease>, ()> {
        let (context, target) = (self.context, self.target);
        let Some(run) = context.scheduler else {
            return Ok(None);
        };
        // The driver ends the span on refusal; the lease owns it on admission.
        let span = context
            .telemetry
            .map(|t| t.admission_requested(&target.adapter));
        let estimate = run
            .estimate
            .as_ref()
            .map(|f| f(&self.alias.alias, target, &self.alias.projection))
            .unwrap_or_default();
        let request = AdmissionRequest {
            principal_id: run.policy.principal.id.clone(),
            provider_id: target.adapter.clone(),
            budget_id: context.invocation_id.to_owned(),
            estimate,
            deadline: Some(self.deadline),
        };
        let acquired = run
            .driver
            .acquire(
                &run.policy.workspace.id,
                request,
                Some(&context.signal),
                span,
            )
            .await;
        let decided = match &acquired {
            Ok(lease) => Some(lease.evidence()),
            Err(error) => error.rejection().map(|rejection| &rejection.evidence),
        };
        if let Some(evidence) = decided {
            run.report(AdmissionEvidence {
                alias: &self.alias.alias,
                target_index: self.target_index,
                adapter: &target.adapter,
                ordinal: self.ordinal,
                evidence,
            });
        }
        match acquired {
            Ok(lease) => {
                self.record.admission = Some(lease.evidence().clone());
                Ok(Some(lease))
            }
            Err(error) => {
                self.refused(error);
                Err(())
            }
        }
    }

    /// Records an admission that was not granted.
    fn refused(&mut self, error: AdmissionError) {
        let record = &mut self.record;
        record.dispatch_certainty = Some(DispatchCertainty::NotSent);
        match error {
            AdmissionError::Rejected(rejection) => {
                let caller = self.context.signal.is_cancelled();
                let (status, reason) = match rejection.reason {
                    Reason::Cancelled if !caller => (Status::Error, AttemptReason::Timeout),
                    other => map_admission_reason(other),
                };
                record.status = status;
                record.reason = reason;
                record.termination = match rejection.reason {
                    Reason::Cancelled if caller => Some(Termination::CallerCancelled),
                    Reason::Cancelled | Reason::DeadlineExceeded => {
                        Some(self.context.termination_at(self.deadline))
                    }
                    _ => None,
                };
                record.admission = Some(rejection.evidence);
            }
            AdmissionError::Registry(_) | AdmissionError::Unavailable => {
                record.status = Status::Error;
                record.reason = AttemptReason::Overloaded;
            }
        }
    }

    /// Makes the pending slot durable (receipt-backed runs); `false` when it could not be.
    fn write_pending(&self, prior: &[AttemptRecord]) -> bool {
        self.context.receipt.is_none_or(|writer| {
            writer
                .dispatching(&self.alias.alias, self.target_index, self.ordinal, prior)
                .is_ok()
        })
    }

    /// The pending slot could not be written: the invocation stops, nothing was sent.
    fn receipt_failed(mut self) -> Tried {
        self.context.note_stop(Stop::ReceiptFailed);
        self.record.status = Status::Error;
        self.record.reason = AttemptReason::ReceiptUnavailable;
        self.record.dispatch_certainty = Some(DispatchCertainty::NotSent);
        self.not_called()
    }

    /// Calls the adapter, raced against the caller's signal and the attempt deadline.
    async fn call(&mut self, adapter: &dyn Adapter) -> Observation {
        let context = self.context;
        let now = context.clock.now_ms();
        let request = AdapterRequest {
            alias: &self.alias.alias,
            definition: &self.alias.definition,
            input: &self.alias.projection,
            target: self.target,
            ordinal: self.ordinal,
            timeout: Duration::from_millis(self.deadline.saturating_sub(now)),
        };
        let call = adapter.invoke(request);
        tokio::select! {
            biased;
            _ = context.signal.cancelled() => {
                self.record.termination = Some(Termination::CallerCancelled);
                Observation::error(AttemptReason::Cancelled, DispatchCertainty::Unknown)
                    .with_status(Status::Cancelled)
            }
            observation = call => observation,
            _ = context.clock.sleep_until(self.deadline) => {
                self.record.termination = Some(context.termination_at(self.deadline));
                Observation::error(AttemptReason::Timeout, DispatchCertainty::Unknown)
            }
        }
    }

    /// Releases the lease with the call's outcome and usage; a call the caller cut short
    /// drops it (outcome `none`).
    async fn release(&self, lease: Option<GovernedLease>, observation: &Observation) {
        let Some(lease) = lease else {
            return;
        };
        let outcome = lease_outcome(observation, self.record.termination);
        if self.record.termination == Some(Termination::CallerCancelled) {
            drop(lease);
        } else {
            // The driver ends the lease's span with the transitions the outcome caused.
            let _ = lease
                .release(outcome, actual_usage(&observation.usage))
                .await;
        }
    }

    /// Writes what the call came to into the receipt; answers whether it is uncertain.
    fn record_receipt(&self, observation: &Observation) -> bool {
        let Some(writer) = self.context.receipt else {
            return false;
        };
        // With a store, a non-answer that may have reached the provider is uncertain.
        let uncertain = observation.status != Status::Success
            && !matches!(
                observation.dispatch_certainty,
                Some(DispatchCertainty::TerminalResponse | DispatchCertainty::NotSent)
            );
        let written = if uncertain {
            writer.uncertain()
        } else {
            writer.observed()
        };
        if written.is_err() && !uncertain {
            self.context.note_stop(Stop::ReceiptFailed);
        }
        uncertain
    }

    /// The record of a try that called nothing.
    fn not_called(mut self) -> Tried {
        self.record.duration_ms = self.context.clock.now_ms().saturating_sub(self.start);
        Tried {
            record: self.record,
            observation: None,
            uncertain: false,
        }
    }

    /// The record of a try that called the adapter.
    fn finish(mut self, observation: Observation, uncertain: bool) -> Tried {
        let record = &mut self.record;
        record.status = observation.status;
        record.reason = observation.reason;
        record.actual_model = observation.actual_model.clone();
        record.usage = observation.usage;
        record.request_id = observation.request_id.clone();
        record.dispatch_certainty = observation.dispatch_certainty;
        record.duration_ms = self.context.clock.now_ms().saturating_sub(self.start);
        Tried {
            record: self.record,
            observation: Some(observation),
            uncertain,
        }
    }
}

/// Validation and acceptance: a success whose value is not of the answer's kind is
/// `invalid-output`; one that the target's acceptance refuses gets that reason.
fn judge(alias: &AliasPlan, target: &AliasTarget, observation: &mut Observation) {
    if observation.status != Status::Success {
        return;
    }
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
fn actual_usage(usage: &ObservedUsage) -> ActualUsage {
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
        let usage = |input, output, cost| ObservedUsage {
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
