//! The shared-limits step of a replica (`[coordination] redis_url`): what `POST /v1/admissions`,
//! the release route and every proxied call (`crates/proxy`, through [`ProxyShared`]) take.
//!
//! The local core admits first, exactly as on a single process (its queue, fairness and
//! limits are this replica's); the granted lease is then admitted against the deployment's
//! shared limits ([`turnstile_coord::Coordinator`]): one Redis call when they have room. When a
//! shared scope is full, the caller keeps its local lease and tries again when this replica
//! releases a lease, when the shared answer says the blockage ends, or every
//! [`SHARED_POLL_MS`] at the latest, until its deadline. A request the shared limits refuse
//! gives its local lease back (dropping the grant). On release, the shared lease leaves this
//! replica's books before the local release, and is released in Redis with the call's actual
//! usage (correcting the shared budgets) and, after a provider 429, the pause (shared by every
//! replica).
//!
//! Fair turns and the shared breaker are decided in the same call: a `turn` (another
//! principal is further behind its share of a contended scope) waits like a full scope; an
//! open shared breaker waits for its end, or is refused at once (`circuit-open`, retryable,
//! with the remaining time) when it outlasts the deadline, as the core does.
//!
//! Invariants: the local lease is accepted (handed to the client, or forwarded upstream) only
//! after the shared limits granted it; the evidence says how (`coordination`: `shared` or
//! `degraded`).

use std::sync::Arc;
use std::time::Duration;

use turnstile_admission::{
    ActualUsage, Coordination, Decision, Millis, Outcome, Reason, Rejection,
};
use turnstile_coord::{Admission, Coordinator, HeldShared, LaneSpec, Mode};
use turnstile_proxy::shared::{SharedAnswer, SharedFuture, SharedLane, SharedLimits};
use turnstile_shell::{Clock, DriverError, DriverHandle, Grant};

use crate::error::ApiError;

/// Longest pause between two tries of a lease waiting for a full shared scope (releases on
/// other replicas are seen by polling; this replica's own releases wake waiters at once).
pub const SHARED_POLL_MS: Millis = 10;

/// The shared limits' answer for one locally granted lease.
pub enum Shared {
    Admitted(Coordination),
    Refused(Rejection),
    /// Another principal's turn (fair turns across replicas), with time left before the
    /// deadline: give the local lease back to this replica's fair queue, wait a poll, and
    /// queue again. A lease waiting for its turn must not keep a local slot that another
    /// principal's request on this replica needs to reach the shared limits at all.
    Yield,
}

/// Why the shared step could not answer.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error("no admission profile is registered for this workspace")]
    NoProfile,
    #[error(transparent)]
    Driver(#[from] DriverError),
}

impl From<SharedError> for ApiError {
    fn from(error: SharedError) -> Self {
        match error {
            SharedError::NoProfile => ApiError::no_profile(),
            SharedError::Driver(error) => ApiError::from(error),
        }
    }
}

fn coordination(mode: Mode) -> Coordination {
    match mode {
        Mode::Shared => Coordination::Shared,
        Mode::Degraded => Coordination::Degraded,
    }
}

fn refusal(
    grant: &Grant,
    reason: Reason,
    retryable: bool,
    hint: Option<Millis>,
    mode: Option<Mode>,
) -> Rejection {
    let mut evidence = grant.evidence.clone();
    evidence.decision = Decision::Reject;
    evidence.reason = reason;
    evidence.retry_after_ms = hint;
    evidence.breaker_transitions.clear();
    evidence.budget_opened = false;
    evidence.coordination = mode.map(coordination);
    Rejection {
        reason,
        retryable,
        evidence,
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

/// One lane of one request, as the handler knows it.
pub struct Lane<'a> {
    pub workspace: Arc<str>,
    pub principal: Arc<str>,
    pub provider: &'a str,
    pub budget_id: &'a str,
    /// When the caller stops waiting (the service's clock, epoch ms).
    pub deadline: Millis,
    /// Whether the caller asked for "only if free now" (`deadlineMs: 0`).
    pub no_wait: bool,
}

/// Admits `grant` (granted by the local core) against the shared limits; `driver` answers the
/// lane's limits, `clock` is the service's.
pub async fn admit(
    driver: &DriverHandle,
    clock: &Clock,
    coord: &Coordinator,
    grant: &Grant,
    lane: Lane<'_>,
) -> Result<Shared, SharedError> {
    let Some(limits) = driver
        .lane_limits(
            lane.workspace.clone(),
            lane.principal.clone(),
            lane.provider,
        )
        .await?
    else {
        return Err(SharedError::NoProfile);
    };
    let spec = match LaneSpec::new(
        (&lane.workspace, lane.provider, &lane.principal),
        lane.budget_id,
        (&limits.principal, &limits.workspace, &limits.provider),
        grant.evidence.estimated_tokens,
        grant.evidence.estimated_cost_usd,
    ) {
        Ok(spec) => spec,
        Err(_) => {
            return Ok(Shared::Refused(refusal(
                grant,
                Reason::CoordinationUnavailable,
                false,
                None,
                None,
            )))
        }
    };
    let token = grant.token.to_string();
    loop {
        let now = clock.now_ms();
        match coord.acquire(&spec, &token, now).await {
            Admission::Granted(mode) => return Ok(Shared::Admitted(coordination(mode))),
            Admission::Rejected(reason) => {
                return Ok(Shared::Refused(refusal(
                    grant,
                    reason,
                    false,
                    None,
                    Some(Mode::Shared),
                )))
            }
            Admission::Unavailable => {
                let hint = u64::try_from(coord.config().probe_every.as_millis()).unwrap_or(100);
                return Ok(Shared::Refused(refusal(
                    grant,
                    Reason::CoordinationUnavailable,
                    true,
                    Some(hint),
                    Some(Mode::Degraded),
                )));
            }
            Admission::Turn if now.saturating_add(SHARED_POLL_MS) < lane.deadline => {
                return Ok(Shared::Yield);
            }
            Admission::Turn => {
                if now >= lane.deadline {
                    let (reason, retryable) = if lane.no_wait {
                        (Reason::Concurrency, true)
                    } else {
                        (Reason::DeadlineExceeded, false)
                    };
                    return Ok(Shared::Refused(refusal(
                        grant,
                        reason,
                        retryable,
                        None,
                        Some(Mode::Shared),
                    )));
                }
                let pause = SHARED_POLL_MS.min(lane.deadline - now);
                tokio::select! {
                    () = coord.released() => {}
                    () = tokio::time::sleep(Duration::from_millis(pause)) => {}
                }
            }
            Admission::Paused { remaining_ms } => {
                if now.saturating_add(remaining_ms) >= lane.deadline {
                    return Ok(Shared::Refused(refusal(
                        grant,
                        Reason::RetryAfter,
                        true,
                        Some(remaining_ms),
                        Some(Mode::Shared),
                    )));
                }
                tokio::time::sleep(Duration::from_millis(remaining_ms)).await;
            }
            // The shared breaker is open (through any replica's failures): as the core does,
            // refuse at once when it outlasts the deadline, otherwise wait for its end.
            Admission::Wait {
                reason: Reason::CircuitOpen,
                after_ms: Some(remaining_ms),
                mode,
            } if remaining_ms > SHARED_POLL_MS => {
                if now.saturating_add(remaining_ms) >= lane.deadline {
                    return Ok(Shared::Refused(refusal(
                        grant,
                        Reason::CircuitOpen,
                        true,
                        Some(remaining_ms),
                        Some(mode),
                    )));
                }
                tokio::time::sleep(Duration::from_millis(remaining_ms)).await;
            }
            Admission::Wait {
                reason,
                after_ms,
                mode,
            } => {
                if now >= lane.deadline {
                    let (reason, retryable) = if lane.no_wait {
                        (reason, true)
                    } else {
                        (Reason::DeadlineExceeded, false)
                    };
                    return Ok(Shared::Refused(refusal(
                        grant,
                        reason,
                        retryable,
                        after_ms,
                        Some(mode),
                    )));
                }
                let pause = after_ms
                    .unwrap_or(SHARED_POLL_MS)
                    .clamp(1, SHARED_POLL_MS)
                    .min(lane.deadline - now);
                tokio::select! {
                    () = coord.released() => {}
                    () = tokio::time::sleep(Duration::from_millis(pause)) => {}
                }
            }
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

/// The shared step as the proxy calls it (installed with `Proxy::with_shared`): proxied calls
/// are admitted, settled, released and paused exactly like `POST /v1/admissions` leases.
pub struct ProxyShared {
    pub driver: DriverHandle,
    pub clock: Clock,
    pub coord: Arc<Coordinator>,
}

impl SharedLimits for ProxyShared {
    fn admit<'a>(&'a self, grant: &'a Grant, lane: &'a SharedLane) -> SharedFuture<'a> {
        Box::pin(async move {
            let remaining = lane.remaining_ms();
            let shared_lane = Lane {
                workspace: lane.workspace.clone(),
                principal: lane.principal.clone(),
                provider: &lane.provider,
                budget_id: &lane.budget_id,
                deadline: self.clock.now_ms().saturating_add(remaining),
                no_wait: lane.no_wait(),
            };
            match admit(&self.driver, &self.clock, &self.coord, grant, shared_lane).await {
                Ok(Shared::Admitted(mode)) => SharedAnswer::Admitted(mode),
                Ok(Shared::Refused(rejection)) => SharedAnswer::Refused(rejection),
                Ok(Shared::Yield) => SharedAnswer::Yield,
                Err(SharedError::NoProfile) => SharedAnswer::NoProfile,
                Err(SharedError::Driver(_)) => SharedAnswer::Unavailable,
            }
        })
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
}
