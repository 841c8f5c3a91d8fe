//! The [`Roster`] facade: a store plus pass settings, with the operations the CLI and tests use
//! (enqueue, status, pass due, next wake, pass, reset). Every operation takes `now` explicitly
//! or a [`TimeSource`]; the facade itself never reads the wall clock.

use turnstile_store::RosterStore;
use turnstile_store::StoredEvidence;

use crate::digest::{canonical_json_of, sha256_digest};
use crate::enqueue::next_entry;
use crate::gate::ReadGate;
use crate::history::active_history;
use crate::pass::{run_gated_pass, run_pass, PassReport, PassSettings};
use crate::pass_due::{next_wake, pass_due};
use crate::rate_cap::rate_cap;
use crate::status::{RollingCalls, RosterStatus};
use crate::{
    classify, GenerationEvidence, PendingItem, Reader, SemanticError, StopSignal, TimeSource,
};

/// The roster scheduler over a store.
#[derive(Debug)]
pub struct Roster<S> {
    store: S,
    settings: PassSettings,
}

/// The canonical JSON and `sha256:` digest of an evidence document.
pub fn evidence_digest(evidence: &GenerationEvidence) -> Result<(String, String), SemanticError> {
    let canonical = canonical_json_of(evidence)?;
    let digest = sha256_digest(canonical.as_bytes());
    Ok((canonical, digest))
}

impl<S: RosterStore> Roster<S> {
    /// A roster over `store`.
    pub fn new(store: S, settings: PassSettings) -> Self {
        Roster { store, settings }
    }

    /// The settings.
    pub fn settings(&self) -> &PassSettings {
        &self.settings
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, mutably.
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Gives the store back.
    pub fn into_store(self) -> S {
        self.store
    }

    /// Validates, classifies and enqueues `evidence` at `now`; returns the pending entry.
    pub fn enqueue(
        &mut self,
        evidence: &GenerationEvidence,
        now: u64,
    ) -> Result<PendingItem, SemanticError> {
        evidence.validate()?;
        let (canonical_json, digest) = evidence_digest(evidence)?;
        let existing = self
            .store
            .pending()?
            .into_iter()
            .find(|item| item.generation_id == evidence.generation_id);
        let entry = next_entry(
            existing.as_ref(),
            &evidence.generation_id,
            &digest,
            classify(evidence),
            now,
        );
        self.store.enqueue(
            &StoredEvidence {
                generation_id: evidence.generation_id.clone(),
                evidence_digest: digest,
                canonical_json,
            },
            &entry,
        )?;
        Ok(entry)
    }

    /// Status at `now`.
    pub fn status(&self, now: u64) -> Result<RosterStatus, SemanticError> {
        let history = active_history(&self.store.history()?, now);
        let pending = self.store.pending()?;
        let cap = rate_cap(&history, self.settings.limit);
        let used = u32::try_from(history.len()).unwrap_or(u32::MAX);
        Ok(RosterStatus {
            now,
            rolling_calls: RollingCalls {
                used,
                limit: self.settings.limit.get(),
                available: cap.available(),
                eligible_after: cap.eligible_after(),
            },
            pending: pending.len(),
            next_eligible_at: next_wake(
                &pending,
                &history,
                now,
                self.settings.debounce_ms,
                self.settings.limit,
                &self.settings.policy,
            ),
        })
    }

    /// Whether a pass is due at `now`.
    pub fn pass_due(&self, now: u64) -> Result<bool, SemanticError> {
        let history = active_history(&self.store.history()?, now);
        Ok(pass_due(
            &self.store.pending()?,
            &history,
            now,
            self.settings.debounce_ms,
            self.settings.limit,
            &self.settings.policy,
        ))
    }

    /// The earliest instant at which a pass could make progress (see
    /// [`crate::pass_due::next_wake`]).
    pub fn next_wake(&self, now: u64) -> Result<Option<u64>, SemanticError> {
        Ok(self.status(now)?.next_eligible_at)
    }

    /// Runs one pass.
    pub fn run_pass(
        &mut self,
        reader: Option<&mut dyn Reader>,
        clock: &dyn TimeSource,
        stop: &dyn StopSignal,
    ) -> Result<PassReport, SemanticError> {
        run_pass(&mut self.store, reader, clock, stop, &self.settings)
    }

    /// Runs one pass, every read admitted by `gate` first ([`crate::gate`]).
    pub fn run_gated_pass(
        &mut self,
        reader: Option<&mut dyn Reader>,
        gate: &mut dyn ReadGate,
        clock: &dyn TimeSource,
        stop: &dyn StopSignal,
    ) -> Result<PassReport, SemanticError> {
        run_gated_pass(
            &mut self.store,
            reader,
            Some(gate),
            clock,
            stop,
            &self.settings,
        )
    }

    /// Clears everything but the call history (a ledger or configuration reset).
    pub fn reset(&mut self) -> Result<(), SemanticError> {
        Ok(self.store.reset()?)
    }
}
