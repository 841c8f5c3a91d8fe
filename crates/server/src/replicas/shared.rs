//! The limits shared across replicas (`[coordination] redis_url`), as this service installs
//! them: [`CoordLimits`] implements the shell's [`SharedLimits`] over a
//! [`turnstile_coord::Coordinator`]. The one admission step that uses it
//! ([`DriverHandle::acquire_shared`](turnstile_shell::DriverHandle::acquire_shared)) is the
//! shell's: `POST /v1/admissions` and every proxied call take it.
//!
//! One try is one Redis call when the shared limits have room ([`Coordinator::acquire`]); its
//! answer becomes a [`SharedVerdict`] here, and the shell decides to wait, refuse or queue again.
//! On release, the shared lease leaves this replica's books before the local release, and is
//! released in Redis with the call's actual usage (correcting the shared budgets) and, after a
//! provider 429, the pause (shared by every replica).
//!
//! Invariants: the local lease is accepted (handed to the client, or forwarded upstream) only
//! after the shared limits granted it; the evidence says how (`coordination`: `shared` or
//! `degraded`).

use std::sync::Arc;

use turnstile_admission::{ActualUsage, Coordination, Millis, Outcome};
use turnstile_coord::{Admission, Coordinator, HeldShared, LaneSpec, Mode};
use turnstile_shell::{Clock, SharedFuture, SharedLimits, SharedTry, SharedVerdict};

use crate::replicas::deployment::{BoxFuture, Coordinating, ReleaseAnswer, SharedBooks};

fn coordination(mode: Mode) -> Coordination {
    match mode {
        Mode::Shared => Coordination::Shared,
        Mode::Degraded => Coordination::Degraded,
    }
}

/// Hands the leases reinstated after a restart to the coordinator (before its first probe),
/// so they count in the shared limits again. A lease whose lane the profile no longer names,
/// or whose limits cannot be shared exactly, is left local.
pub fn adopt_reinstated(
    coord: &Coordinator,
    registry: &turnstile_admission::Registry,
    leases: &[turnstile_store::StoredLease],
) {
    for lease in leases {
        let Some(profile) = registry.profile(&lease.workspace_id) else {
            continue;
        };
        let (Some(principal), Some(provider)) = (
            profile.principals.get(&lease.principal_id),
            profile.providers.get(&lease.provider_id),
        ) else {
            continue;
        };
        if let Ok(spec) = LaneSpec::new(
            (&lease.workspace_id, &lease.provider_id, &lease.principal_id),
            lease.budget_id.as_deref().unwrap_or(""),
            (principal, &profile.workspace, provider),
            lease.tokens,
            lease.cost_usd,
        ) {
            coord.adopt(&lease.token, &spec);
        }
    }
}

/// Releases a [claimed](Coordinator::claim) shared lease in Redis with the call's `outcome`
/// (`retry-after` pauses the provider for every replica) and actual `usage`.
pub async fn finish(
    coord: &Coordinator,
    held: HeldShared,
    outcome: Outcome,
    usage: &ActualUsage,
    now: Millis,
) {
    let pause_ms = match outcome {
        Outcome::RetryAfter { retry_after_ms } => retry_after_ms,
        _ => 0,
    };
    let micro = usage.cost_usd().map(turnstile_coord::spec::micro_ceil);
    let breaker = match outcome {
        Outcome::Success => turnstile_coord::Outcome::Success,
        Outcome::Failure => turnstile_coord::Outcome::Failure,
        _ => turnstile_coord::Outcome::None,
    };
    coord
        .finish_outcome(held, pause_ms, usage.tokens, micro, breaker, now)
        .await;
}

/// The shared limits of a replica: the coordinator, on the service's clock. Installed once at
/// start-up, for the admission API and the proxy alike.
pub struct CoordLimits {
    pub clock: Clock,
    pub coord: Arc<Coordinator>,
}

impl SharedLimits for CoordLimits {
    fn now_ms(&self) -> Millis {
        self.clock.now_ms()
    }

    fn try_admit<'a>(&'a self, attempt: SharedTry<'a>) -> SharedFuture<'a, SharedVerdict> {
        Box::pin(async move {
            let limits = attempt.limits;
            let Ok(spec) = LaneSpec::new(
                (attempt.workspace, attempt.provider, attempt.principal),
                attempt.budget_id,
                (&limits.principal, &limits.workspace, &limits.provider),
                attempt.grant.evidence.estimated_tokens,
                attempt.grant.evidence.estimated_cost_usd,
            ) else {
                return SharedVerdict::Unshareable;
            };
            let token = attempt.grant.token.to_string();
            match self.coord.acquire(&spec, &token, attempt.now).await {
                Admission::Granted(mode) => SharedVerdict::Granted(coordination(mode)),
                Admission::Rejected(reason) => SharedVerdict::Refused(reason),
                Admission::Unavailable => SharedVerdict::Unreachable {
                    retry_in_ms: u64::try_from(self.coord.config().probe_every.as_millis())
                        .unwrap_or(100),
                },
                Admission::Turn => SharedVerdict::Turn,
                Admission::Paused { remaining_ms } => SharedVerdict::Paused { remaining_ms },
                Admission::Wait {
                    reason,
                    after_ms,
                    mode,
                } => SharedVerdict::Blocked {
                    reason,
                    after_ms,
                    mode: coordination(mode),
                },
            }
        })
    }

    fn released(&self) -> SharedFuture<'_, ()> {
        Box::pin(self.coord.released())
    }

    fn release(
        &self,
        token: &str,
        outcome: Outcome,
        usage: ActualUsage,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let held = self.coord.claim(token)?;
        let coord = self.coord.clone();
        let now = self.clock.now_ms();
        // Settlements release from `Drop` too: outside a runtime, the lease's liveness in Redis
        // runs out instead (it is no longer renewed).
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some(runtime.spawn(async move { finish(&coord, held, outcome, &usage, now).await }))
    }

    fn forget_budget(&self, workspace: &str, budget_id: &str) {
        let coord = self.coord.clone();
        let (workspace, budget_id) = (workspace.to_owned(), budget_id.to_owned());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { coord.release_budget(&workspace, &budget_id).await });
        }
    }

    fn hold(&self, workspace: &str, provider: &str, ms: Millis) {
        let (coord, now) = (self.coord.clone(), self.clock.now_ms());
        let (workspace, provider) = (workspace.to_owned(), provider.to_owned());
        // The same shared pause as a 429's or `POST /v1/providers/{id}/retry-after`'s.
        tokio::spawn(async move {
            coord.pause(&workspace, &provider, ms, now).await;
        });
    }
}

impl SharedBooks for CoordLimits {
    fn coordination(&self) -> Option<Coordinating> {
        let health = self.coord.health();
        let healthy = health == turnstile_coord::Health::Healthy;
        let closed = self.coord.config().degraded_share == turnstile_coord::DegradedShare::Closed;
        Some(Coordinating {
            // `reconciling` too while books Redis lost are rebuilt (grants there wait).
            health: self.coord.reported_health().as_str(),
            serving: healthy || !closed,
            failure: if healthy {
                None
            } else {
                self.coord.last_failure()
            },
        })
    }

    fn release<'a>(
        &'a self,
        lease_id: &'a str,
        outcome: Outcome,
        usage: ActualUsage,
        local: BoxFuture<'a, ReleaseAnswer>,
    ) -> BoxFuture<'a, ReleaseAnswer> {
        Box::pin(async move {
            // Out of the shared books before the local release (so the journal's reclaim path
            // finds nothing to release), back in if the local release is refused.
            let Some(held) = self.coord.claim(lease_id) else {
                return local.await;
            };
            match local.await {
                Ok(transitions) => {
                    finish(&self.coord, held, outcome, &usage, self.clock.now_ms()).await;
                    Ok(transitions)
                }
                Err(error) => {
                    self.coord.restore(lease_id, held);
                    Err(error)
                }
            }
        })
    }

    fn release_budget<'a>(&'a self, workspace: &'a str, budget_id: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(self.coord.release_budget(workspace, budget_id))
    }

    fn pause<'a>(
        &'a self,
        workspace: &'a str,
        provider: &'a str,
        retry_after_ms: Millis,
        now: Millis,
    ) -> BoxFuture<'a, Option<Millis>> {
        Box::pin(async move {
            Some(
                self.coord
                    .pause(workspace, provider, retry_after_ms, now)
                    .await,
            )
        })
    }
}
