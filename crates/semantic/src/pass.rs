//! The pass loop: reads pending generations one model call at a time until nothing more can be
//! done or a stop is requested.
//!
//! Each step, at `now` from the injected [`TimeSource`]:
//!
//! 1. stop requested → end the pass; everything not yet read stays pending;
//! 2. prune receipts outside the active hour; select among matured, not-held pending items
//!    ([`crate::selection`]); nothing selected → end;
//! 3. the generation's stored evidence no longer carries the entry's digest → drop the entry;
//! 4. no reader → write an `unavailable` record (`no_reader`) and drop the entry;
//! 5. a cached accepted record for the full (evidence, configuration) tuple → write it, drop the
//!    entry, no call;
//! 6. rate cap exhausted → write a `deferred` record `{reasonCode: rate_cap, eligibleAfter}`
//!    (replacing any older meaning), hold the generation, continue;
//! 7. within the generation's interval (or retry cool-down) → hold it, continue;
//! 8. a [`ReadGate`] is configured → ask it; a refusal writes nothing (no receipt, no record:
//!    a read not made is not a failed read), leaves the entry pending and ends the pass
//!    ([`PassReport::not_admitted`]);
//! 9. otherwise commit the call receipt durably, invoke the reader once, settle the admission
//!    (if any) with the outcome, complete the receipt, write the record, and remember the
//!    generation as the band-1 cursor if it was band 1. An accepted read is cached and drops the
//!    entry; an invalid or unavailable read leaves it pending, to be retried after the 5-minute
//!    cool-down.
//!
//! Invariants: a receipt exists before every reader invocation, so the rolling cap counts calls
//! that crash; at most one reader invocation per step; a refused admission leaves the store
//! untouched; a held generation is not reconsidered within the same pass, so a pass ends after at
//! most `2·pending` non-call steps plus one step per call.

use std::collections::HashSet;

use turnstile_store::meta_keys;
use turnstile_store::RosterStore;

use crate::eligibility::call_eligible;
use crate::estimate::read_estimate;
use crate::gate::{GateDecision, GateRefusal, ReadGate};
use crate::history::{active_history, prune_cutoff};
use crate::pass_due::matured;
use crate::rate_cap::rate_cap;
use crate::selection::select_pending;
use crate::{
    Band, CallLimit, CallOutcome, PendingItem, Policy, ReadOutcome, ReadRequest, Reader,
    ReasonCode, RecordKind, SemanticError, SemanticRecord, StopSignal, TimeSource,
};

/// The knobs of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassSettings {
    /// The scheduling constants.
    pub policy: Policy,
    /// The effective calls-per-hour limit.
    pub limit: CallLimit,
    /// How long an item must be pending before it is read.
    pub debounce_ms: u64,
}

impl Default for PassSettings {
    fn default() -> Self {
        PassSettings {
            policy: Policy::ADR_0119,
            limit: CallLimit::hard(&Policy::ADR_0119),
            debounce_ms: 5_000,
        }
    }
}

/// What one step of a pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassStep {
    /// The reader was invoked.
    Called {
        /// The generation read.
        generation_id: String,
        /// Its band.
        band: Band,
        /// When the call started.
        started_at: u64,
        /// How it ended.
        outcome: CallOutcome,
    },
    /// A cached record was written without a call.
    CacheHit {
        /// The generation.
        generation_id: String,
    },
    /// A deferred record was written at the rate cap.
    Deferred {
        /// The generation.
        generation_id: String,
        /// When capacity returns.
        eligible_after: u64,
    },
    /// The generation is within its interval; held for this pass.
    Held {
        /// The generation.
        generation_id: String,
    },
    /// The entry's evidence digest no longer matched; the entry was dropped.
    Dropped {
        /// The generation.
        generation_id: String,
    },
    /// No reader was available; an unavailable record was written.
    NoReader {
        /// The generation.
        generation_id: String,
    },
}

/// The result of a pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Every step, in order.
    pub steps: Vec<PassStep>,
    /// Whether the pass ended because a stop was requested.
    pub stopped: bool,
    /// The gate refused a read and the pass ended there: the generation and why.
    pub not_admitted: Option<(String, GateRefusal)>,
    /// Admitted reads whose settlement failed (short, non-secret descriptions); the governor
    /// reclaims what they held on its own.
    pub settle_errors: Vec<String>,
}

impl PassReport {
    /// Number of reader invocations.
    pub fn calls(&self) -> usize {
        self.steps
            .iter()
            .filter(|step| matches!(step, PassStep::Called { .. }))
            .count()
    }
}

fn base_record(item: &PendingItem, kind: RecordKind, written_at: u64) -> SemanticRecord {
    SemanticRecord {
        generation_id: item.generation_id.clone(),
        kind,
        evidence_digest: item.evidence_digest.clone(),
        configuration_digest: None,
        band: item.band,
        written_at,
        headline: None,
        detail: None,
        reason_code: None,
        eligible_after: None,
        from_cache: false,
        usage: None,
    }
}

/// Runs one pass without a gate. See the module docs for the steps.
pub fn run_pass<S: RosterStore + ?Sized>(
    store: &mut S,
    reader: Option<&mut dyn Reader>,
    clock: &dyn TimeSource,
    stop: &dyn StopSignal,
    settings: &PassSettings,
) -> Result<PassReport, SemanticError> {
    run_gated_pass(store, reader, None, clock, stop, settings)
}

/// Runs one pass, every read admitted by `gate` first when there is one. See the module docs
/// for the steps.
pub fn run_gated_pass<S: RosterStore + ?Sized>(
    store: &mut S,
    mut reader: Option<&mut dyn Reader>,
    mut gate: Option<&mut dyn ReadGate>,
    clock: &dyn TimeSource,
    stop: &dyn StopSignal,
    settings: &PassSettings,
) -> Result<PassReport, SemanticError> {
    let policy = &settings.policy;
    let mut report = PassReport::default();
    let mut held: HashSet<String> = HashSet::new();
    let mut last_band1 = store.meta(meta_keys::LAST_BAND1_GENERATION)?;

    loop {
        if stop.stop_requested() {
            report.stopped = true;
            break;
        }
        let now = clock.now_ms();
        if let Some(cutoff) = prune_cutoff(now) {
            store.prune_history(cutoff)?;
        }
        let history = active_history(&store.history()?, now);
        let candidates: Vec<PendingItem> = store
            .pending()?
            .into_iter()
            .filter(|item| !held.contains(&item.generation_id))
            .filter(|item| matured(item, now, settings.debounce_ms))
            .collect();
        let Some(item) = select_pending(
            &candidates,
            last_band1.as_deref(),
            &history,
            policy.coverage_first,
        )
        .cloned() else {
            break;
        };
        let generation_id = item.generation_id.clone();

        let evidence = store
            .evidence(&generation_id)?
            .filter(|evidence| evidence.evidence_digest == item.evidence_digest);
        let Some(evidence) = evidence else {
            store.remove_pending(&generation_id, &item.evidence_digest)?;
            report.steps.push(PassStep::Dropped { generation_id });
            continue;
        };

        let Some(reader) = reader.as_deref_mut() else {
            let mut record = base_record(&item, RecordKind::Unavailable, now);
            record.reason_code = Some(ReasonCode::NoReader);
            record.detail = Some("no reader is configured".to_owned());
            store.put_record(&record)?;
            store.remove_pending(&generation_id, &item.evidence_digest)?;
            report.steps.push(PassStep::NoReader { generation_id });
            continue;
        };
        let configuration_digest = reader.configuration().digest();

        if let Some(cached) = store.cached(&item.evidence_digest, &configuration_digest)? {
            let record = SemanticRecord {
                written_at: now,
                band: item.band,
                from_cache: true,
                ..cached
            };
            store.put_record(&record)?;
            store.remove_pending(&generation_id, &item.evidence_digest)?;
            report.steps.push(PassStep::CacheHit { generation_id });
            continue;
        }

        if let Some(eligible_after) = rate_cap(&history, settings.limit).eligible_after() {
            let mut record = base_record(&item, RecordKind::Deferred, now);
            record.configuration_digest = Some(configuration_digest);
            record.reason_code = Some(ReasonCode::RateCap);
            record.eligible_after = Some(eligible_after);
            store.put_record(&record)?;
            held.insert(generation_id.clone());
            report.steps.push(PassStep::Deferred {
                generation_id,
                eligible_after,
            });
            continue;
        }

        if !call_eligible(&generation_id, item.band, &history, now, policy) {
            held.insert(generation_id.clone());
            report.steps.push(PassStep::Held { generation_id });
            continue;
        }

        let request = ReadRequest {
            generation_id: &generation_id,
            band: item.band,
            evidence_digest: &item.evidence_digest,
            evidence_json: &evidence.canonical_json,
        };
        let admitted = match gate.as_deref_mut() {
            None => None,
            Some(gate) => match gate.admit(&request, &read_estimate(&*reader, &request)) {
                GateDecision::Admitted(admitted) => Some(admitted),
                GateDecision::Refused(refusal) => {
                    report.not_admitted = Some((generation_id, refusal));
                    break;
                }
            },
        };

        // The receipt is durable before the model is invoked: a crash can never hand capacity
        // back.
        // After a wait for the gate the call starts later than the step did.
        let now = if admitted.is_some() {
            clock.now_ms()
        } else {
            now
        };
        let call_id = store.begin_call(&generation_id, now)?;
        let outcome = reader.read(&request);
        if let Some(admitted) = admitted {
            if let Err(error) = admitted.settle(&outcome) {
                report.settle_errors.push(error);
            }
        }
        let finished = clock.now_ms();
        let duration_ms = finished.saturating_sub(now);

        let mut record = base_record(&item, RecordKind::Accepted, finished);
        record.configuration_digest = Some(configuration_digest);
        let call_outcome = match outcome {
            ReadOutcome::Accepted { reading, usage } => {
                record.headline = Some(reading.headline);
                record.detail = reading.detail;
                record.usage = usage;
                CallOutcome::Accepted
            }
            ReadOutcome::Invalid { reason, usage } => {
                record.kind = RecordKind::Invalid;
                record.reason_code = Some(ReasonCode::InvalidAnswer);
                record.detail = Some(reason);
                record.usage = usage;
                CallOutcome::Invalid
            }
            ReadOutcome::Unavailable { reason } | ReadOutcome::RateLimited { reason, .. } => {
                record.kind = RecordKind::Unavailable;
                record.reason_code = Some(ReasonCode::ReaderUnavailable);
                record.detail = Some(reason);
                CallOutcome::Unavailable
            }
        };
        store.finish_call(call_id, call_outcome, record.usage, duration_ms)?;
        store.put_record(&record)?;
        if call_outcome == CallOutcome::Accepted {
            store.put_cached(&record)?;
            store.remove_pending(&generation_id, &item.evidence_digest)?;
        }
        if item.band == Band::Priority {
            store.set_meta(meta_keys::LAST_BAND1_GENERATION, &generation_id)?;
            last_band1 = Some(generation_id.clone());
        }
        report.steps.push(PassStep::Called {
            generation_id,
            band: item.band,
            started_at: now,
            outcome: call_outcome,
        });
    }
    Ok(report)
}
