//! Leases: the life of a lease in the [`LeaseTable`], from the grant to the one release.
//!
//! A granted admission gets an unguessable token, an optional expiry (the TTL), and its span;
//! its `Granted` event joins the batch and its caller's reply is held until the batch is durable
//! (`commit.rs`). It leaves the table exactly once: released by its holder (with an outcome and
//! what the call used), given back unaccepted (`Reclaim`), or expired; each way is journaled
//! `Released` and ends its span. Budget releases and the reinstatement of journaled leases after
//! a restart live here too.
//!
//! # Invariants
//!
//! - Every lease in the table is held in the core, and is released in the core exactly once,
//!   when it leaves the table.
//! - Only its holder (same workspace and principal) releases or heartbeats a lease; anyone
//!   else gets [`DriverError::UnknownLease`], as for a token that does not exist.
//! - A reinstated lease expires no earlier than a full TTL from the restart, and is not
//!   journaled again (its `Granted` event is already durable).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::oneshot;
use turnstile_admission::{ActualUsage, BreakerTransition, Lease, Millis, Outcome, ReinstateError};

use crate::command::AcquireReply;
use crate::error::DriverError;
use crate::fairness::TokensServed;
use crate::grant::Grant;
use crate::journal::{HeldLease, LeaseEvent};
use crate::lease_table::{LeaseEntry, LeaseToken};
use crate::telemetry::AdmitSpan;

use super::Driver;

/// Why a journaled lease could not be reinstated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReinstateFailure {
    /// The core refused it (its workspace, provider or principal is unknown).
    #[error(transparent)]
    Core(#[from] ReinstateError),
    /// Another reinstated lease already has this token.
    #[error("a lease with this token is already held")]
    DuplicateToken,
}

/// What a release answers: the breaker transitions its outcome caused.
type ReleaseReply = oneshot::Sender<Result<Vec<BreakerTransition>, DriverError>>;

impl Driver {
    /// Puts a lease the core granted into the table and answers its caller once the grant is
    /// durable (a caller who is gone, or a grant that could not be made durable, gives it back).
    pub(super) fn grant(
        &mut self,
        (workspace, principal): (&Arc<str>, &Arc<str>),
        (lease, served): (Lease, Option<TokensServed>),
        mut span: Option<AdmitSpan>,
        reply: oneshot::Sender<AcquireReply>,
        now: Millis,
    ) {
        let Lease {
            id: lease,
            evidence,
        } = lease;
        if let Some(span) = span.as_mut() {
            span.admitted(&evidence);
        }
        let ttl_ms = self.config.lease_ttl_ms;
        let expires_at = ttl_ms.map(|ttl| now.saturating_add(ttl));
        let entry = LeaseEntry {
            workspace: workspace.clone(),
            principal: principal.clone(),
            lease,
            expires_at,
            span,
            served,
        };
        let Some(driver) = self.tx.upgrade() else {
            // Every handle is gone: nobody can hold this lease.
            let _ = self.registry.release(workspace, lease, Outcome::None, now);
            let _ = reply.send(AcquireReply::ShuttingDown);
            return;
        };
        match self.leases.insert(entry) {
            Ok(token) => {
                self.metrics.leases_granted.fetch_add(1, Ordering::Relaxed);
                self.journal_evicted_budgets();
                if self.commit.keeps_leases() {
                    if let Some(lease) = self.registry.lease_charge(workspace, lease) {
                        self.commit.record(|| {
                            LeaseEvent::Granted(HeldLease {
                                token,
                                workspace: workspace.clone(),
                                principal: principal.clone(),
                                lease,
                                expires_at,
                            })
                        });
                    }
                }
                let grant = Grant::new(
                    token,
                    expires_at,
                    ttl_ms,
                    evidence,
                    (workspace.clone(), principal.clone()),
                    driver,
                );
                // A closed receiver hands the grant back; dropping it queues its reclaim. A
                // grant that could not be made durable is given back the same way.
                self.commit.hold(Box::new(move |durable| {
                    if durable {
                        let _ = reply.send(AcquireReply::Admitted(grant));
                    } else {
                        drop(grant);
                        let _ = reply.send(AcquireReply::Internal);
                    }
                }));
            }
            Err(_) => {
                // Only when the OS random source fails on the first lease; the entry (and its
                // span) was dropped with the error.
                let _ = self.registry.release(workspace, lease, Outcome::None, now);
                let _ = reply.send(AcquireReply::Internal);
            }
        }
    }

    pub(super) fn reclaim_expired(&mut self, now: Millis) {
        while let Some((token, entry)) = self.leases.pop_expired(now) {
            self.metrics.leases_expired.fetch_add(1, Ordering::Relaxed);
            self.give_back(token, entry, now);
        }
    }

    /// `Command::Reclaim`: a grant dropped unaccepted comes back.
    pub(super) fn reclaim(&mut self, token: LeaseToken, now: Millis) {
        if let Some(entry) = self.leases.remove(&token) {
            self.metrics
                .leases_undeliverable
                .fetch_add(1, Ordering::Relaxed);
            self.give_back(token, entry, now);
        }
    }

    /// Releases a lease whose holder is gone, with no outcome; ends its span.
    fn give_back(&mut self, token: LeaseToken, entry: LeaseEntry, now: Millis) {
        self.journal_lease(|| LeaseEvent::Released {
            token,
            usage: ActualUsage::none(),
        });
        let _ = self
            .registry
            .release(&entry.workspace, entry.lease, Outcome::None, now);
        if let Some(span) = entry.span {
            span.released(&[]);
        }
        self.deliver(&entry.workspace, now);
    }

    /// `Command::Release`: releases a lease with its outcome and usage (and forgets a budget if
    /// asked); a release that happened is answered once it is durable.
    pub(super) fn release_command(
        &mut self,
        token: LeaseToken,
        (workspace, principal): (&Arc<str>, &Arc<str>),
        (outcome, usage): (Outcome, ActualUsage),
        forget_budget: Option<String>,
        reply: ReleaseReply,
        now: Millis,
    ) {
        let result = self.release(token, workspace, principal, outcome, usage, now);
        // Journaled before the answer: a caller that reads the audit log after the release
        // sees the transitions it caused (the journal's store applies in order).
        self.journal_transitions();
        if let Some(budget) = forget_budget {
            // The answer held below waits for this budget's record too.
            let _ = self.forget_budget(workspace, budget, now);
        }
        if result.is_ok() {
            // Answered once the release is durable (or could not be made so).
            self.commit.hold(Box::new(move |_durable| {
                let _ = reply.send(result);
            }));
        } else {
            let _ = reply.send(result);
        }
    }

    fn release(
        &mut self,
        token: LeaseToken,
        workspace: &str,
        principal: &str,
        outcome: Outcome,
        usage: ActualUsage,
        now: Millis,
    ) -> Result<Vec<BreakerTransition>, DriverError> {
        if !self.owned(&token, workspace, principal) {
            return Err(DriverError::UnknownLease);
        }
        let entry = self
            .leases
            .remove(&token)
            .ok_or(DriverError::UnknownLease)?;
        self.metrics.leases_released.fetch_add(1, Ordering::Relaxed);
        self.journal_lease(|| LeaseEvent::Released { token, usage });
        self.observer
            .released((workspace, principal), entry.served, usage.tokens);
        let released = self
            .registry
            .release_with_usage(workspace, entry.lease, outcome, usage, now)
            .ok()
            .flatten();
        let (transitions, pause) =
            released.map_or_else(Default::default, |r| (r.breaker_transitions, r.pause));
        // The core reports the pause it applied (none for a zero Retry-After with no pause in
        // force).
        if let (Outcome::RetryAfter { retry_after_ms }, Some((provider_id, until))) =
            (outcome, pause)
        {
            self.release_paused(workspace, provider_id, retry_after_ms, until, now);
        }
        if let Some(span) = entry.span {
            span.released(&transitions);
        }
        self.deliver(workspace, now);
        Ok(transitions)
    }

    fn owned(&self, token: &LeaseToken, workspace: &str, principal: &str) -> bool {
        self.leases
            .get(token)
            .is_some_and(|e| &*e.workspace == workspace && &*e.principal == principal)
    }

    pub(super) fn heartbeat(
        &mut self,
        token: LeaseToken,
        workspace: &str,
        principal: &str,
        now: Millis,
    ) -> Result<Millis, DriverError> {
        let ttl = self.config.lease_ttl_ms.ok_or(DriverError::UnknownLease)?;
        let expires_at = now.saturating_add(ttl);
        if self.owned(&token, workspace, principal) && self.leases.extend(&token, expires_at) {
            Ok(expires_at)
        } else {
            Err(DriverError::UnknownLease)
        }
    }

    /// `Command::ReleaseBudget`: forgets a budget; answered once its record is durable.
    pub(super) fn release_budget(
        &mut self,
        workspace: &Arc<str>,
        budget: String,
        reply: oneshot::Sender<Result<bool, DriverError>>,
        now: Millis,
    ) {
        let result = self.forget_budget(workspace, budget, now);
        if result.is_ok() && self.commit.keeps_leases() {
            self.commit.hold(Box::new(move |_durable| {
                let _ = reply.send(result);
            }));
        } else {
            let _ = reply.send(result);
        }
    }

    /// Forgets a budget of `workspace` (`ReleaseBudget`, or a release's `forget_budget`); with
    /// a lease log, its record joins the next flush.
    fn forget_budget(
        &mut self,
        workspace: &Arc<str>,
        budget: String,
        now: Millis,
    ) -> Result<bool, DriverError> {
        let result = self
            .registry
            .release_budget(workspace, &budget, now)
            .map_err(DriverError::from);
        self.deliver(workspace, now);
        self.journal_evicted_budgets();
        if result.is_ok() {
            self.commit.record(|| LeaseEvent::BudgetReleased {
                workspace: workspace.clone(),
                budget,
            });
        }
        result
    }

    /// Puts back a lease a previous process granted and journaled (call before [`Driver::run`],
    /// after the registry replayed its profiles and restored budget spend). The lease keeps its
    /// token; it expires at the later of its journaled expiry and a full TTL from now. It is not
    /// journaled again (its `Granted` event is already durable).
    pub fn reinstate(&mut self, held: HeldLease) -> Result<(), ReinstateFailure> {
        if self.leases.get(&held.token).is_some() {
            return Err(ReinstateFailure::DuplicateToken);
        }
        let now = self.clock.now_ms();
        let lease = self
            .registry
            .reinstate(&held.workspace, &held.principal, &held.lease, now)?;
        let expires_at = match self.config.lease_ttl_ms {
            Some(ttl) => Some(now.saturating_add(ttl).max(held.expires_at.unwrap_or(0))),
            None => held.expires_at,
        };
        let entry = LeaseEntry {
            workspace: held.workspace,
            principal: held.principal,
            lease,
            expires_at,
            span: None,
            // Granted by a previous process: not in this process's fairness window.
            served: None,
        };
        if !self.leases.insert_with_token(held.token, entry) {
            return Err(ReinstateFailure::DuplicateToken);
        }
        self.metrics
            .leases_reinstated
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
