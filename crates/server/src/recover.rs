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
//!
//! # Lane state ([`restore_lane_state`], before the leases)
//!
//! What else the previous process enforced comes back in the same step, so a crash under load
//! does not burst over what the provider allows:
//!
//! - **Pauses**: each lane's last journaled pause (`turnstile-provider-pause/v1` in the audit
//!   log) that ends after the restart pauses the lane again until its end plus
//!   [`JOURNAL_EXTENSION_MS`] (extensions smaller than that are not journaled one by one, so
//!   the real end can be up to that much later).
//! - **Breakers**: each lane's last journaled transition; open or half-open restarts open
//!   (`Registry::restore_breaker`: from the transition, or from the restart for half-open).
//! - **Rate buckets**: every bucket restarts as if empty at the lease log's last grant and
//!   refilled since (`Registry::drain_buckets_since`), then the reinstated leases are debited
//!   as before.
//!
//! Audit records are history written by the store thread, also by other replicas' mirrors: a
//! record that does not parse or names a lane this process does not know is skipped (counted),
//! never a reason to refuse the start. Only counts are reported, never IDs.

use serde::Deserialize;
use turnstile_admission::{BreakerTransition, Charge, LeaseCharge, Millis, Registry};
use turnstile_shell::pause::JOURNAL_EXTENSION_MS;
use turnstile_shell::{Driver, HeldLease, LeaseToken, ReinstateFailure};
use turnstile_store::service::{
    AuditKind, ServiceStore, ServiceStoreError, StoredLease, StoredSpend,
};

/// A journaled lease or spend line that cannot be put back.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// A spend line names a lane its workspace's profiles never named.
    #[error("stored budget spend #{index} cannot be restored: {reason}")]
    Spend { index: usize, reason: String },
    /// A held lease cannot be reinstated.
    #[error("stored lease #{index} cannot be reinstated: {reason}")]
    Lease { index: usize, reason: String },
    /// The audit log cannot be read for the pauses and breakers to restore.
    #[error("the journaled pauses and breakers cannot be read: {0}")]
    Audit(#[from] ServiceStoreError),
}

/// What [`restore_lane_state`] put back (counts only: never a workspace or principal ID).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LaneStateRestored {
    /// Lanes paused again (their pause ends after the restart).
    pub pauses: usize,
    /// Breakers open again.
    pub breakers: usize,
    /// Rate buckets lowered (drained since the last grant).
    pub buckets: usize,
    /// Audit records skipped: unparseable, or naming a workspace or provider not known here.
    pub skipped: usize,
}

/// The fields of a pause record a restart needs.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JournaledPause {
    provider_id: String,
    until_epoch_ms: Millis,
}

/// Puts back the pauses, open breakers and drained rate buckets of the previous process (see
/// the module docs), before the leases are reinstated. `last_grant_at` is the lease log's
/// latest grant; `max_retry_after_ms` bounds how far back a pause that still holds can have
/// been journaled.
pub fn restore_lane_state(
    store: &dyn ServiceStore,
    last_grant_at: Option<Millis>,
    max_retry_after_ms: Millis,
    registry: &mut Registry,
    now: Millis,
) -> Result<LaneStateRestored, RecoverError> {
    let mut restored = LaneStateRestored::default();
    let since = now.saturating_sub(max_retry_after_ms.saturating_add(JOURNAL_EXTENSION_MS));
    for record in store.latest_audit_by_provider(AuditKind::ProviderPause, since)? {
        let Ok(pause) = serde_json::from_str::<JournaledPause>(&record.record_json) else {
            restored.skipped += 1;
            continue;
        };
        let until = pause.until_epoch_ms.saturating_add(JOURNAL_EXTENSION_MS);
        match registry.restore_pause(&record.workspace_id, &pause.provider_id, until, now) {
            Ok(paused) => restored.pauses += usize::from(paused),
            Err(_) => restored.skipped += 1,
        }
    }
    for record in store.latest_audit_by_provider(AuditKind::BreakerTransition, 0)? {
        let Ok(last) = serde_json::from_str::<BreakerTransition>(&record.record_json) else {
            restored.skipped += 1;
            continue;
        };
        match registry.restore_breaker(&record.workspace_id, &last, now) {
            Ok(open) => restored.breakers += usize::from(open),
            Err(_) => restored.skipped += 1,
        }
    }
    if let Some(since) = last_grant_at {
        restored.buckets = registry.drain_buckets_since(since, now);
    }
    Ok(restored)
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

#[cfg(test)]
mod tests {
    use super::*;
    use turnstile_admission::{
        AdmissionRequest, BreakerState, CircuitBreakerConfig, Limits, Profile, Reason,
    };
    use turnstile_store::service::{AuditRecord, MemoryServiceStore};

    fn registry() -> Registry {
        let mut provider = Limits::with_concurrency(8);
        provider.requests_per_minute = Some(60);
        provider.circuit_breaker = Some(CircuitBreakerConfig {
            failure_threshold: 1,
            open_ms: Some(10_000),
            half_open_max_calls: Some(1),
        });
        let profile = Profile {
            workspace: Limits::with_concurrency(8),
            providers: [
                ("paused".to_owned(), Limits::with_concurrency(8)),
                ("broken".to_owned(), provider),
            ]
            .into_iter()
            .collect(),
            principals: [("p".to_owned(), Limits::with_concurrency(8))]
                .into_iter()
                .collect(),
        };
        let mut registry = Registry::new();
        registry.register("w", "v1", profile, 0).unwrap();
        registry
    }

    fn record(workspace: &str, kind: AuditKind, json: String) -> AuditRecord {
        AuditRecord {
            workspace_id: workspace.into(),
            kind,
            record_json: json,
            at_epoch_ms: 50_000,
            actor_key_id: None,
        }
    }

    fn refusal(registry: &mut Registry, provider: &str, now: Millis) -> Option<Reason> {
        let request = AdmissionRequest::new("p", provider, "b");
        registry
            .try_acquire("w", request, now)
            .unwrap()
            .err()
            .map(|r| r.reason)
    }

    #[test]
    fn lane_state_is_restored_from_the_last_records_and_unknown_or_bad_ones_are_skipped() {
        let mut store = MemoryServiceStore::new();
        let pause = |provider: &str, until: u64| {
            format!(
                r#"{{"providerId":"{provider}","retryAfterMs":1,"untilEpochMs":{until},"atEpochMs":50000,"cause":"retry-after-call","schema":"turnstile-provider-pause/v1"}}"#
            )
        };
        let open = BreakerTransition {
            provider_id: "broken".into(),
            from: BreakerState::Closed,
            to: BreakerState::Open,
            at_epoch_ms: 55_000,
            failures: 1,
        };
        store
            .append_audit(&[
                record("w", AuditKind::ProviderPause, pause("paused", 70_000)),
                record("w", AuditKind::ProviderPause, pause("nowhere", 70_000)),
                record("other", AuditKind::ProviderPause, pause("paused", 70_000)),
                record(
                    "w",
                    AuditKind::ProviderPause,
                    "{\"providerId\":\"paused\"}".into(),
                ),
                record("w", AuditKind::ProviderPause, pause("paused", 70_000)),
                record(
                    "w",
                    AuditKind::BreakerTransition,
                    serde_json::to_string(&open).unwrap(),
                ),
            ])
            .unwrap();
        let mut registry = registry();
        let restored =
            restore_lane_state(&store, Some(59_000), 3_600_000, &mut registry, 60_000).unwrap();
        assert_eq!(
            restored,
            LaneStateRestored {
                pauses: 1,
                breakers: 1,
                buckets: 1,
                skipped: 2,
            }
        );
        // Open since 55 s for 10 s (the core's time only moves forward: earliest first).
        assert_eq!(
            refusal(&mut registry, "broken", 64_999),
            Some(Reason::CircuitOpen)
        );
        assert_eq!(refusal(&mut registry, "broken", 65_000), None, "a probe");
        // Paused until the journaled end plus a second.
        assert_eq!(
            refusal(&mut registry, "paused", 70_999),
            Some(Reason::RetryAfter)
        );
        assert_eq!(refusal(&mut registry, "paused", 71_000), None);
    }

    #[test]
    fn a_fresh_data_directory_restores_nothing() {
        let store = MemoryServiceStore::new();
        let mut registry = registry();
        let restored = restore_lane_state(&store, None, 3_600_000, &mut registry, 60_000).unwrap();
        assert_eq!(restored, LaneStateRestored::default());
        assert_eq!(refusal(&mut registry, "broken", 60_000), None);
    }
}
