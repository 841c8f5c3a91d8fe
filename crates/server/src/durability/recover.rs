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
//! - **Pauses**: each lane's latest pause in the lease log (a `paused` record, written in the
//!   batch of the answer that caused it, so before that answer) that ends after the restart
//!   pauses the lane again until its end plus [`JOURNAL_EXTENSION_MS`] (extensions smaller
//!   than that are not journaled one by one, so the real end can be up to that much later).
//! - **Breakers**: each lane's latest transition in the lease log (a `breaker` record, also
//!   written before its answer); open or half-open restarts open (`Registry::restore_breaker`:
//!   from the transition, or from the restart for half-open). A closed breaker leaves no
//!   record.
//! - **Rate buckets**, by one of three rules ([`BucketRule`]):
//!   - after a **clean stop** (a bucket checkpoint, `crate::durability::checkpoint`, and no grant in the
//!     lease log after the one it names): every bucket it names holds exactly its level,
//!     refilled since it was read (`Registry::restore_bucket_levels`); a bucket it does not
//!     name starts full. The reinstated leases are **not** debited again: the levels were read
//!     after their grants and already hold them.
//!   - after a **crash** (no checkpoint, or a stale or unreadable one: warned and counted, no
//!     IDs): every bucket restarts as if empty at the lease log's last grant and refilled since
//!     (`Registry::drain_buckets_since`), then the reinstated leases are debited as before (a
//!     drained level knows nothing of them).
//!   - a lease log that never granted anything: every bucket starts full.
//!
//! The audit log's pause and breaker records stay history for the console (written after
//! the answer); a restart does not read them. A lease log record that names a lane this
//! process does not know (a profile changed since) or a breaker state it cannot read is
//! skipped (counted), never a reason to refuse the start. Only counts are reported, never IDs.

use serde::de::IntoDeserializer;
use serde::Deserialize;
use turnstile_admission::{BreakerState, BreakerTransition, Charge, LeaseCharge, Millis, Registry};

use crate::durability::checkpoint::{BucketCheckpoint, CheckpointError};
use turnstile_shell::JOURNAL_EXTENSION_MS;
use turnstile_shell::{Driver, HeldLease, LeaseToken, ReinstateFailure};
use turnstile_store::{Recovered, StoredBreaker, StoredLease, StoredSpend};

/// A journaled lease or spend line that cannot be put back.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// A spend line names a lane its workspace's profiles never named.
    #[error("stored budget spend #{index} cannot be restored: {reason}")]
    Spend {
        /// Its position among the journaled spend lines.
        index: usize,
        /// Why it cannot be restored.
        reason: String,
    },
    /// A held lease cannot be reinstated.
    #[error("stored lease #{index} cannot be reinstated: {reason}")]
    Lease {
        /// Its position among the journaled leases.
        index: usize,
        /// Why it cannot be reinstated.
        reason: String,
    },
}

/// What the restore of the lane state (`restore_lane_state`) put back (counts only: never a workspace or principal ID).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LaneStateRestored {
    /// Lanes paused again (their pause ends after the restart).
    pub pauses: usize,
    /// Breakers open again.
    pub breakers: usize,
    /// Rate buckets lowered (drained since the last grant) or set from the checkpoint, as
    /// `bucket_rule` says.
    pub buckets: usize,
    /// Which rule the rate buckets restarted under.
    pub bucket_rule: BucketRule,
    /// A bucket checkpoint that was found but not used.
    pub checkpoint_ignored: Option<CheckpointIgnored>,
    /// Lease log records skipped: a breaker state not known here, or a workspace or provider
    /// not known here.
    pub skipped: usize,
}

/// How the rate buckets restarted (see the module docs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum BucketRule {
    /// The lease log never granted anything: every bucket full.
    #[default]
    Full,
    /// A clean stop's checkpoint: exact levels, refilled since they were read.
    Checkpoint,
    /// A crash: as if empty at the lease log's last grant.
    Drained,
}

/// Why a bucket checkpoint was not used (the conservative drain applied instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointIgnored {
    /// The lease log holds a grant later than the checkpoint's last grant.
    Stale,
    /// The file cannot be read or parsed, or has another format.
    Unreadable,
}

/// Puts back the pauses, open breakers and rate bucket levels of the previous process (see
/// the module docs), before the leases are reinstated: the lanes' latest pauses and breaker
/// transitions and the latest grant come from the lease log (`recovered`); `checkpoint` is
/// what the data directory holds of a clean stop's bucket checkpoint.
pub fn restore_lane_state(
    recovered: &Recovered,
    checkpoint: Result<Option<BucketCheckpoint>, CheckpointError>,
    registry: &mut Registry,
    now: Millis,
) -> LaneStateRestored {
    let mut restored = LaneStateRestored::default();
    let last_grant_at = recovered.last_grant_at_ms;
    for pause in &recovered.pauses {
        let until = pause.until_epoch_ms.saturating_add(JOURNAL_EXTENSION_MS);
        match registry.restore_pause(&pause.workspace_id, &pause.provider_id, until, now) {
            Ok(paused) => restored.pauses += usize::from(paused),
            Err(_) => restored.skipped += 1,
        }
    }
    for stored in &recovered.breakers {
        let Some(last) = breaker_transition(stored) else {
            restored.skipped += 1;
            continue;
        };
        match registry.restore_breaker(&stored.workspace_id, &last, now) {
            Ok(open) => restored.breakers += usize::from(open),
            Err(_) => restored.skipped += 1,
        }
    }
    match checkpoint {
        // `None` (a log that never granted) is not later than anything.
        Ok(Some(checkpoint)) if last_grant_at <= checkpoint.last_grant_at_ms => {
            restored.buckets = registry.restore_bucket_levels(&checkpoint.workspaces, now);
            restored.bucket_rule = BucketRule::Checkpoint;
            return restored;
        }
        Ok(Some(_)) => restored.checkpoint_ignored = Some(CheckpointIgnored::Stale),
        Err(_) => restored.checkpoint_ignored = Some(CheckpointIgnored::Unreadable),
        Ok(None) => {}
    }
    if let Some(since) = last_grant_at {
        restored.buckets = registry.drain_buckets_since(since, now);
        restored.bucket_rule = BucketRule::Drained;
    }
    restored
}

/// The core's form of a stored breaker transition; `None` for a state the core does not know.
fn breaker_transition(stored: &StoredBreaker) -> Option<BreakerTransition> {
    Some(BreakerTransition {
        provider_id: stored.provider_id.clone(),
        from: breaker_state(&stored.from)?,
        to: breaker_state(&stored.to)?,
        at_epoch_ms: stored.at_epoch_ms,
        failures: stored.failures,
    })
}

/// A breaker state from its spec spelling (`closed`, `open`, `half-open`).
fn breaker_state(name: &str) -> Option<BreakerState> {
    let name: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
        name.into_deserializer();
    BreakerState::deserialize(name).ok()
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
    use turnstile_admission::{AdmissionRequest, CircuitBreakerConfig, Limits, Profile, Reason};
    use turnstile_store::StoredPause;

    fn registry() -> Registry {
        let mut provider = Limits::with_concurrency(1_000);
        provider.requests_per_minute = Some(60);
        provider.circuit_breaker = Some(CircuitBreakerConfig {
            failure_threshold: 1,
            open_ms: Some(10_000),
            half_open_max_calls: Some(1),
        });
        let profile = Profile {
            workspace: Limits::with_concurrency(1_000),
            providers: [
                ("paused".to_owned(), Limits::with_concurrency(1_000)),
                ("broken".to_owned(), provider),
            ]
            .into_iter()
            .collect(),
            principals: [("p".to_owned(), Limits::with_concurrency(1_000))]
                .into_iter()
                .collect(),
        };
        let mut registry = Registry::new();
        registry.register("w", "v1", profile, 0).unwrap();
        registry
    }

    /// The lease log of a process that last granted at `last_grant`.
    fn log(last_grant: Option<Millis>) -> Recovered {
        Recovered {
            last_grant_at_ms: last_grant,
            ..Recovered::default()
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
    fn lane_state_is_restored_from_the_lease_log_and_unknown_lanes_are_skipped() {
        let pause = |workspace: &str, provider: &str, until: u64| StoredPause {
            workspace_id: workspace.into(),
            provider_id: provider.into(),
            until_epoch_ms: until,
        };
        let breaker = |provider: &str, to: &str| StoredBreaker {
            workspace_id: "w".into(),
            provider_id: provider.into(),
            from: "closed".into(),
            to: to.into(),
            at_epoch_ms: 55_000,
            failures: 1,
        };
        let recovered = Recovered {
            pauses: vec![
                pause("w", "paused", 70_000),
                pause("w", "nowhere", 70_000),
                pause("other", "paused", 70_000),
            ],
            breakers: vec![breaker("broken", "open"), breaker("broken", "ajar")],
            ..log(Some(59_000))
        };
        let mut registry = registry();
        let restored = restore_lane_state(&recovered, Ok(None), &mut registry, 60_000);
        assert_eq!(
            restored,
            LaneStateRestored {
                pauses: 1,
                breakers: 1,
                buckets: 1,
                bucket_rule: BucketRule::Drained,
                checkpoint_ignored: None,
                skipped: 3,
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

    /// The registry of a clean stop at 59 s: 30 of the provider's 60 requests spent at 58 s.
    fn clean_stop() -> BucketCheckpoint {
        let mut before = registry();
        for _ in 0..30 {
            assert_eq!(refusal(&mut before, "broken", 58_000), None);
        }
        BucketCheckpoint::new(Some(58_000), before.bucket_levels(59_000))
    }

    #[test]
    fn a_checkpoint_not_older_than_the_last_grant_restores_the_levels_exactly() {
        let mut registry = registry();
        let restored = restore_lane_state(
            &log(Some(58_000)),
            Ok(Some(clean_stop())),
            &mut registry,
            60_000,
        );
        assert_eq!(restored.bucket_rule, BucketRule::Checkpoint);
        assert_eq!((restored.buckets, restored.checkpoint_ignored), (1, None));
        // 30 left at 58 s, one more each second: exactly 32 (a drain would leave 2).
        for _ in 0..32 {
            assert_eq!(refusal(&mut registry, "broken", 60_000), None);
        }
        assert_eq!(
            refusal(&mut registry, "broken", 60_000),
            Some(Reason::RequestsPerMinute)
        );
    }

    #[test]
    fn a_stale_or_unreadable_checkpoint_is_ignored_and_the_buckets_drained() {
        for (checkpoint, ignored) in [
            (Ok(Some(clean_stop())), CheckpointIgnored::Stale),
            (
                Err(CheckpointError::Encode(
                    serde_json::from_str::<u8>("x").unwrap_err(),
                )),
                CheckpointIgnored::Unreadable,
            ),
        ] {
            let mut registry = registry();
            // A grant at 59.5 s that the checkpoint of 58 s does not hold.
            let restored =
                restore_lane_state(&log(Some(59_500)), checkpoint, &mut registry, 60_000);
            assert_eq!(restored.bucket_rule, BucketRule::Drained);
            assert_eq!(restored.checkpoint_ignored, Some(ignored));
            assert_eq!(
                refusal(&mut registry, "broken", 60_000),
                Some(Reason::RequestsPerMinute),
                "half a request refilled since the last grant"
            );
        }
    }

    #[test]
    fn a_fresh_data_directory_restores_nothing() {
        let mut registry = registry();
        let restored = restore_lane_state(&log(None), Ok(None), &mut registry, 60_000);
        assert_eq!(restored, LaneStateRestored::default());
        assert_eq!(refusal(&mut registry, "broken", 60_000), None);
    }
}
