//! Reinstating what a previous process granted: leases that are still held and budget spend
//! that is still charged, after a restart of the host (issue 14).
//!
//! # What it decides
//!
//! Nothing: the decisions were made and acknowledged before the restart. A host that journals
//! every grant ([`Controller::lease_charge`] tells it what the lease holds and charged), every
//! release and every budget release can rebuild the controller's accounting after a crash:
//!
//! 1. [`Controller::restore_spend`] puts back what each open invocation had spent, lane by lane
//!    (the journal keeps one running total per invocation and lane, estimates of live leases
//!    and corrected actual usage of released ones included);
//! 2. [`Controller::reinstate`] puts back each lease that was still held: it counts in its
//!    lane's and scopes' `active` again and gets a new [`LeaseId`]. It charges **no** budget
//!    (step 1 already holds its charge, so nothing is charged twice), but it remembers what it
//!    charged and under which opening of its invocation, so a release with actual usage still
//!    corrects the invocation exactly as before the restart.
//!
//! # Invariants
//!
//! - A reinstated lease is indistinguishable from an admitted one for release, counting and
//!   corrections; after every reinstated lease is released, all counters are zero again.
//! - Reinstating never admits, rejects or queues anything, and never refuses for a limit: the
//!   lease was granted. A profile registered since that lowers a ceiling leaves `active` above
//!   it until enough leases are released, exactly as a live profile change does.
//! - Rate buckets are charged one request and the lease's estimated tokens again (saturating at
//!   empty), so a restart does not hand out a fresh burst on top of the calls still running;
//!   except after [`Controller::restore_bucket_levels`] (a clean stop's levels, read after the
//!   last grant, already hold these leases' grants: `levels.rs`).
//! - A lease or spend line naming a provider or principal this controller never interned
//!   (no profile ever named it) is refused with [`ReinstateError`] and changes nothing.
//!
//! # Complexity
//!
//! O(1) per lease and per spend line.

use crate::budget::ActualUsage;
use crate::estimate::CheckedEstimate;
use crate::evidence::LeaseId;
use crate::lane::{LaneKey, LaneSlot};
use crate::time::Millis;

use super::{Controller, LeaseRecord};

/// What an admitted attempt was charged to its invocation's budgets.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Charge {
    /// Attempts charged.
    pub attempts: u64,
    /// Tokens charged, when the estimate named them.
    pub tokens: Option<u64>,
    /// Cost charged in USD, when the estimate named it.
    pub cost_usd: Option<f64>,
}

impl Charge {
    fn from_estimate(estimate: &CheckedEstimate) -> Self {
        Charge {
            attempts: estimate.attempts,
            tokens: estimate.tokens,
            cost_usd: estimate.cost_usd,
        }
    }

    /// The estimate this charge stands for, for the budget ledger (the fields budgets do not
    /// count are left empty).
    fn as_estimate(&self) -> CheckedEstimate {
        CheckedEstimate {
            attempts: self.attempts,
            tokens: self.tokens,
            cost_usd: self.cost_usd,
            ..CheckedEstimate::default()
        }
    }
}

/// What a held lease holds and charged: enough to reinstate it in a fresh controller.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseCharge {
    /// The provider lane the lease holds a permit of.
    pub provider_id: String,
    /// The invocation charged; `None` once that invocation's budget was released (a release
    /// with actual usage then corrects nothing).
    pub budget_id: Option<String>,
    /// What the invocation was charged at admission.
    pub charge: Charge,
    /// When the lease was granted.
    pub admitted_at: Millis,
}

/// Why a lease or a spend line cannot be reinstated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReinstateError {
    /// No profile is registered for the workspace (a registry-level refusal).
    #[error("no admission profile is registered for the workspace of this lease")]
    UnknownWorkspace,
    /// No profile of this controller ever named the provider.
    #[error("no profile of this workspace ever named the provider of this lease")]
    UnknownProvider,
    /// No profile of this controller ever named the principal.
    #[error("no profile of this workspace ever named the principal of this lease")]
    UnknownPrincipal,
}

impl Controller {
    /// What a held lease holds and charged (for a host's journal); `None` for a lease that is
    /// not held.
    pub fn lease_charge(&self, lease: LeaseId) -> Option<LeaseCharge> {
        let record = self.leases.get(&lease)?;
        let (provider, _) = record.lane;
        Some(LeaseCharge {
            provider_id: self.scopes.providers[provider].extra.id.clone(),
            budget_id: Some(record.budget_id.clone()),
            charge: Charge::from_estimate(&record.charged),
            admitted_at: record.admitted_at,
        })
    }

    pub(super) fn lane_of(
        &self,
        principal_id: &str,
        provider_id: &str,
    ) -> Result<LaneKey, ReinstateError> {
        let provider = self
            .scopes
            .providers
            .find(provider_id)
            .ok_or(ReinstateError::UnknownProvider)?;
        let principal = self
            .scopes
            .principals
            .find(principal_id)
            .ok_or(ReinstateError::UnknownPrincipal)?;
        Ok((provider, principal))
    }

    /// Puts back what invocation `budget_id` had spent on the lane (`principal_id`,
    /// `provider_id`), adding to anything already restored; opens the invocation if needed.
    pub fn restore_spend(
        &mut self,
        budget_id: &str,
        principal_id: &str,
        provider_id: &str,
        spent: Charge,
        now: Millis,
    ) -> Result<(), ReinstateError> {
        let lane = self.lane_of(principal_id, provider_id)?;
        let now = self.advance(now);
        let scopes = Self::scope_keys(lane);
        let limited = self.budget_limited(lane);
        // Charged, then settled with no usage: the spend stays, the hold a charge takes ends
        // (the reinstated leases take their own), so an idle invocation can still be evicted.
        let (epoch, _) = self
            .budgets
            .charge(budget_id, scopes, &spent.as_estimate(), limited, now);
        self.budgets.settle(
            budget_id,
            epoch,
            scopes,
            &CheckedEstimate::default(),
            &ActualUsage::none(),
            now,
        );
        Ok(())
    }

    /// Puts back a lease a previous process granted to `principal_id`; returns its new ID.
    /// Charges no budget (see the module docs); call [`Controller::restore_spend`] first so the
    /// lease's corrections reach the invocation it was charged to.
    pub fn reinstate(
        &mut self,
        principal_id: &str,
        lease: &LeaseCharge,
        now: Millis,
    ) -> Result<LeaseId, ReinstateError> {
        let lane = self.lane_of(principal_id, &lease.provider_id)?;
        let now = self.advance(now);
        let charged = lease.charge.as_estimate();
        let lane_slot = self.count_outside_grant(lane, &charged, !self.levels_hold_leases, now);
        // Epoch 0 is never an invocation's (epochs start at 1): a lease whose budget was
        // released corrects nothing.
        let (budget_id, budget_epoch) = match &lease.budget_id {
            Some(id) => {
                // A charge of nothing: opens the invocation if needed and takes the lease's
                // hold on it (its release settles it).
                let (epoch, _) = self.budgets.charge(
                    id,
                    Self::scope_keys(lane),
                    &CheckedEstimate::default(),
                    false,
                    now,
                );
                (id.clone(), epoch)
            }
            None => (String::new(), 0),
        };
        Ok(self.hold_outside_grant(LeaseRecord {
            lane,
            lane_slot,
            probe: false,
            admitted_at: lease.admitted_at,
            budget_id,
            budget_epoch,
            charged,
            // Reinstated grants were charged to the order of the process that granted them.
            service: 0,
        }))
    }

    /// Counts a lease granted outside this controller's pump (reinstated, or forced by a
    /// rollout) in its lane's and scopes' concurrency and, when `debit`, in their buckets (a
    /// bucket taken below empty stays at zero); returns the lane's slot.
    pub(super) fn count_outside_grant(
        &mut self,
        lane: LaneKey,
        charged: &CheckedEstimate,
        debit: bool,
        now: Millis,
    ) -> LaneSlot {
        let tokens = charged.tokens.unwrap_or(0);
        let lane_slot = self.lane_for(lane);
        if let Some(lane) = self.lanes.get_mut(lane_slot) {
            lane.active += 1;
        }
        for scope in self.scopes.of_lane_mut(lane, now) {
            if let Some(bucket) = scope.requests.as_mut().filter(|_| debit) {
                bucket.take(1);
            }
            if let Some(bucket) = scope.tokens.as_mut().filter(|_| debit) {
                bucket.take(tokens);
            }
            scope.active += 1;
        }
        lane_slot
    }

    /// Holds the lease of an outside grant counted with
    /// [`Controller::count_outside_grant`]; returns its new ID.
    pub(super) fn hold_outside_grant(&mut self, record: LeaseRecord) -> LeaseId {
        let id = LeaseId(self.next_id());
        self.leases.insert(id, record);
        self.note_peaks();
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{Acquired, AdmissionRequest};
    use crate::estimate::Estimate;
    use crate::evidence::Outcome;
    use crate::limits::Limits;
    use crate::profile::Profile;
    use crate::reason::Reason;

    fn profile() -> Profile {
        let mut profile = Profile {
            workspace: Limits::with_concurrency(8),
            ..Profile::default()
        };
        let mut provider = Limits::with_concurrency(2);
        provider.max_tokens = Some(100);
        profile.providers.insert("jev".into(), provider);
        profile
            .principals
            .insert("p".into(), Limits::with_concurrency(8));
        profile
    }

    fn request(budget: &str, tokens: u64) -> AdmissionRequest {
        AdmissionRequest::new("p", "jev", budget).with_estimate(Estimate::new().tokens(tokens))
    }

    fn admit(controller: &mut Controller, budget: &str, tokens: u64) -> LeaseId {
        match controller.try_acquire(request(budget, tokens), 0) {
            Ok(lease) => lease.id,
            Err(rejection) => panic!("refused: {:?}", rejection.reason),
        }
    }

    /// What a journal would keep: the held leases' charges and the invocation's spend.
    fn crash(controller: &Controller, leases: &[LeaseId]) -> Vec<LeaseCharge> {
        leases
            .iter()
            .map(|&id| controller.lease_charge(id).expect("held"))
            .collect()
    }

    #[test]
    fn reinstated_leases_count_against_concurrency_until_released() {
        let mut before = Controller::new(profile(), 0).unwrap();
        let a = admit(&mut before, "b", 10);
        let b = admit(&mut before, "b", 20);
        let held = crash(&before, &[a, b]);
        assert_eq!(held[1].charge.tokens, Some(20));
        assert_eq!(held[0].budget_id.as_deref(), Some("b"));

        let mut after = Controller::new(profile(), 100).unwrap();
        after
            .restore_spend(
                "b",
                "p",
                "jev",
                Charge {
                    attempts: 2,
                    tokens: Some(30),
                    cost_usd: None,
                },
                100,
            )
            .unwrap();
        let ids: Vec<LeaseId> = held
            .iter()
            .map(|lease| after.reinstate("p", lease, 100).unwrap())
            .collect();
        assert_eq!(after.totals().active, 2);
        // The provider's concurrency (2) is taken by the reinstated leases.
        let refused = after.try_acquire(request("c", 1), 100).unwrap_err();
        assert_eq!(refused.reason, Reason::Concurrency);

        after.release(ids[0], Outcome::Success, 101).unwrap();
        assert!(after.try_acquire(request("c", 1), 101).is_ok());
        assert!(after.release(ids[0], Outcome::Success, 102).is_none());
    }

    #[test]
    fn restored_spend_stays_charged_and_is_never_charged_twice() {
        let mut after = Controller::new(profile(), 0).unwrap();
        let spent = Charge {
            attempts: 1,
            tokens: Some(90),
            cost_usd: None,
        };
        after.restore_spend("b", "p", "jev", spent, 0).unwrap();
        let lease = LeaseCharge {
            provider_id: "jev".into(),
            budget_id: Some("b".into()),
            charge: spent,
            admitted_at: 0,
        };
        let id = after.reinstate("p", &lease, 0).unwrap();
        // 90 of the provider's 100 tokens are charged (once): 10 fit, 11 never do.
        let refused = after.try_acquire(request("b", 11), 0).unwrap_err();
        assert_eq!(refused.reason, Reason::Tokens);
        // The actual usage of the reinstated lease corrects the restored spend: 90 → 50.
        after
            .release_with_usage(id, Outcome::Success, ActualUsage::none().tokens(50), 1)
            .unwrap();
        assert!(after.try_acquire(request("b", 50), 1).is_ok());
        assert_eq!(
            after.try_acquire(request("b", 1), 1).unwrap_err().reason,
            Reason::Tokens
        );
    }

    #[test]
    fn a_lease_whose_budget_was_released_corrects_nothing() {
        let mut after = Controller::new(profile(), 0).unwrap();
        let lease = LeaseCharge {
            provider_id: "jev".into(),
            budget_id: None,
            charge: Charge {
                attempts: 1,
                tokens: Some(10),
                cost_usd: None,
            },
            admitted_at: 0,
        };
        let id = after.reinstate("p", &lease, 0).unwrap();
        after
            .release_with_usage(id, Outcome::Success, ActualUsage::none().tokens(100), 0)
            .unwrap();
        // Nothing was charged to any invocation: a full budget is free.
        assert!(matches!(
            after.acquire(request("b", 100), 0),
            Acquired::Admitted(_)
        ));
    }

    #[test]
    fn unknown_lanes_are_refused_and_change_nothing() {
        let mut after = Controller::new(profile(), 0).unwrap();
        let mut lease = LeaseCharge {
            provider_id: "other".into(),
            budget_id: None,
            charge: Charge::default(),
            admitted_at: 0,
        };
        assert_eq!(
            after.reinstate("p", &lease, 0),
            Err(ReinstateError::UnknownProvider)
        );
        lease.provider_id = "jev".into();
        assert_eq!(
            after.reinstate("q", &lease, 0),
            Err(ReinstateError::UnknownPrincipal)
        );
        assert_eq!(
            after.restore_spend("b", "q", "jev", Charge::default(), 0),
            Err(ReinstateError::UnknownPrincipal)
        );
        assert_eq!(after.totals().active, 0);
        assert!(after.is_idle());
    }
}
