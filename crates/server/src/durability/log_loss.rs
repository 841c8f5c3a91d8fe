//! A start that accepted a damaged lease log (`turnstile serve --accept-lease-log-loss`,
//! issue 34, item 4): the log lost records, so leases granted before the start may still be
//! running without being counted. Every lane of every workspace is paused for one lease TTL,
//! the longest such a lease can live without a heartbeat; once it ended, the uncounted leases
//! are gone and the lanes grant again.
//!
//! Invariant: no lane grants before `now + ttl` after such a start; the warning names the
//! damaged file and how many lanes wait (never a workspace or principal ID).

use turnstile_admission::Registry;
use turnstile_store::Damage;

/// Pauses every lane of `registry` until `now + ttl_ms`; returns how many lanes it paused.
pub fn pause_every_lane(damage: &Damage, registry: &mut Registry, ttl_ms: u64, now: u64) -> usize {
    let until = now.saturating_add(ttl_ms);
    let lanes: Vec<(String, String)> = registry
        .workspace_ids()
        .filter_map(|workspace| registry.profile(workspace).map(|p| (workspace, p)))
        .flat_map(|(workspace, profile)| {
            profile
                .providers
                .keys()
                .map(move |provider| (workspace.to_owned(), provider.clone()))
        })
        .collect();
    let paused = lanes
        .iter()
        .filter(|(workspace, provider)| {
            matches!(
                registry.restore_pause(workspace, provider, until, now),
                Ok(true)
            )
        })
        .count();
    tracing::warn!(
        target: "turnstile::store",
        damage = %damage,
        lanes = paused,
        pause_ms = ttl_ms,
        "the lease log was damaged and the loss accepted: every lane waits one lease TTL before it grants"
    );
    paused
}
