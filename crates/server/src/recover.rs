//! Start-up, after the registrations were replayed: the budget spend and the held leases a
//! previous process journaled in the lease log are put back before the service answers
//! anything (issue 14).
//!
//! Order matters: spend first ([`restore_spend`] into the registry), then the leases
//! ([`reinstate_leases`] into the driver, before it runs), so a reinstated lease finds its
//! invocation open and a release with actual usage corrects it, while nothing is charged twice
//! (the spend already holds the live leases' estimates).
//!
//! Invariant: the service starts only with every journaled lease counted again; a lease or
//! spend line that cannot be put back (a corrupt row, a lane no profile ever named) stops the
//! start with [`RecoverError`], as a registration that cannot be replayed does, rather than
//! run with fewer leases than were granted.

use turnstile_admission::{Charge, LeaseCharge, Millis, Registry};
use turnstile_shell::{Driver, HeldLease, LeaseToken, ReinstateFailure};
use turnstile_store::service::{StoredLease, StoredSpend};

/// A journaled lease or spend line that cannot be put back.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// A spend line names a lane its workspace's profiles never named.
    #[error("stored budget spend #{index} cannot be restored: {reason}")]
    Spend { index: usize, reason: String },
    /// A held lease cannot be reinstated.
    #[error("stored lease #{index} cannot be reinstated: {reason}")]
    Lease { index: usize, reason: String },
}

/// Puts every stored spend line back into the registry; returns how many there were.
pub fn restore_spend(
    lines: &[StoredSpend],
    registry: &mut Registry,
    now: Millis,
) -> Result<usize, RecoverError> {
    for (index, line) in lines.iter().enumerate() {
        let spent = Charge {
            attempts: line.attempts,
            tokens: Some(line.tokens),
            cost_usd: Some(line.cost_usd),
        };
        registry
            .restore_spend(
                &line.workspace_id,
                &line.budget_id,
                &line.principal_id,
                &line.provider_id,
                spent,
                now,
            )
            .map_err(|e| RecoverError::Spend {
                index,
                reason: e.to_string(),
            })?;
    }
    Ok(lines.len())
}

/// The driver's form of a stored lease; `None` for a token that is not 32 hex digits.
fn held_lease(stored: StoredLease) -> Option<HeldLease> {
    let token = LeaseToken::parse(&stored.token)?;
    Some(HeldLease {
        token,
        workspace: stored.workspace_id.into(),
        principal: stored.principal_id.into(),
        lease: LeaseCharge {
            provider_id: stored.provider_id,
            budget_id: stored.budget_id,
            charge: Charge {
                attempts: stored.attempts,
                tokens: stored.tokens,
                cost_usd: stored.cost_usd,
            },
            admitted_at: stored.admitted_at_ms,
        },
        expires_at: stored.expires_at_ms,
    })
}

/// Reinstates every stored lease (the lease log's held leases, oldest first) in `driver`,
/// before it runs; returns how many.
pub fn reinstate_leases(
    leases: Vec<StoredLease>,
    driver: &mut Driver,
) -> Result<usize, RecoverError> {
    let count = leases.len();
    for (index, stored) in leases.into_iter().enumerate() {
        let failure = |reason: String| RecoverError::Lease { index, reason };
        let held = held_lease(stored).ok_or_else(|| failure("invalid token".into()))?;
        driver
            .reinstate(held)
            .map_err(|e: ReinstateFailure| failure(e.to_string()))?;
    }
    Ok(count)
}
