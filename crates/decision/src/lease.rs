//! RAII admission leases.
//!
//! An [`AdmissionLease`] is the permit to call a provider. It is released exactly once: with an
//! outcome through [`AdmissionLease::release`], or with `Outcome::None` (counts given back,
//! breaker untouched) when it is dropped — so a panic, an early return or a cancelled task can
//! never leak a permit.

use turnstile_admission::{ActualUsage, Evidence, Lease, LeaseId, Outcome, Released};

use crate::driver::AdmissionDriver;

/// A granted permit; releases on drop.
#[derive(Debug)]
pub struct AdmissionLease {
    driver: AdmissionDriver,
    workspace_id: String,
    lease: Option<Lease>,
    evidence: Evidence,
}

impl AdmissionLease {
    pub(crate) fn new(driver: AdmissionDriver, workspace_id: &str, lease: Lease) -> Self {
        let evidence = lease.evidence.clone();
        AdmissionLease {
            driver,
            workspace_id: workspace_id.to_owned(),
            lease: Some(lease),
            evidence,
        }
    }

    /// The admission evidence of this lease.
    pub fn evidence(&self) -> &Evidence {
        &self.evidence
    }

    /// The lease's ID within its controller.
    pub fn id(&self) -> Option<LeaseId> {
        self.lease.as_ref().map(|l| l.id)
    }

    /// Releases the lease with the attempt's outcome.
    pub fn release(self, outcome: Outcome) -> Option<Released> {
        self.release_with_usage(outcome, ActualUsage::none())
    }

    /// Releases the lease with the attempt's outcome and what the call actually used, which
    /// replaces the estimate in the invocation's budgets.
    pub fn release_with_usage(mut self, outcome: Outcome, usage: ActualUsage) -> Option<Released> {
        let lease = self.lease.take()?;
        self.driver
            .release(&self.workspace_id, lease.id, outcome, usage)
    }
}

impl Drop for AdmissionLease {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.driver.release(
                &self.workspace_id,
                lease.id,
                Outcome::None,
                ActualUsage::none(),
            );
        }
    }
}
