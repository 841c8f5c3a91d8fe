//! Which deployment of a model a call is admitted on, and on which it fails over.
//!
//! A model has one or more deployments (`deployment_config.rs`): upstream + provider lane pairs.
//! Each lane is admitted by the core on its own (its fairness, limits, pauses and breaker), so
//! choosing a deployment is choosing the lane a call waits on:
//!
//! 1. **Free now, by weight.** Every untried deployment is asked with a zero wait
//!    ([`Wait::NoWait`]: admitted only if a permit is free now), in the order of a smooth
//!    weighted round robin ([`Rotation`]: deterministic, no randomness); the first that admits
//!    takes the call, and the rotation charges it.
//! 2. **Else the soonest.** When none is free now, the call queues, with the caller's remaining
//!    wait, on the deployment whose refusal named the soonest `retryAfterMs` (a pause or an
//!    open breaker ending, a permit expected back); with no such hint, on the first retryable
//!    one in rotation order. A call whose every refusal is final (a budget, a lane the profile
//!    does not have) gets the first of them.
//! 3. **Failover** ([`Attempts::can_fail_over`]): a call that got an upstream 429, or whose
//!    request never left (connection refused, a connection closed before the request was
//!    written: `pool::SendError::NotSent`), is admitted again as in 1-2 on the deployments it
//!    has not tried, within what is left of its wait. Nothing that may have reached a provider
//!    is sent again, except after a 429 (the provider refused it unprocessed).
//!
//! A model with one deployment takes none of these steps: its call is one admission with the
//! caller's whole wait, exactly as before deployments existed.
//!
//! Invariants: each deployment is tried at most once per call (so a call makes at most as many
//! upstream requests as its model has deployments); the rotation's counters sum to zero after
//! every call's choice ([`Rotation::chose`], [`Rotation::none`]), so weights hold over any run
//! of calls; no workspace, principal or budget ID leaves this module except in the admission
//! request itself.

use std::sync::{Arc, Mutex, PoisonError};

use axum::http::HeaderValue;
use tokio::time::{Duration, Instant};
use turnstile_admission::{Estimate, Rejection};
use turnstile_shell::{Acquire, AcquireReply, Grant, Wait};

use crate::config::Route;
use crate::error::ProxyError;
use crate::metrics::CallClass;
use crate::upstream::Routed;
use crate::Proxy;

/// The response header naming the provider lane of the deployment that answered.
pub const PROVIDER_HEADER: &str = "x-turnstile-provider";

/// A model's choice among its deployments: the smooth weighted round robin's counters, and each
/// deployment's [`PROVIDER_HEADER`] value (built once).
#[derive(Debug)]
pub struct Rotation {
    weights: Vec<i64>,
    current: Mutex<Vec<i64>>,
    lanes: Vec<Option<HeaderValue>>,
}

impl Rotation {
    /// The rotation of `route`'s deployments, all counters at zero.
    pub fn new(route: &Route) -> Self {
        Rotation {
            weights: route
                .deployments
                .iter()
                .map(|d| i64::from(d.weight))
                .collect(),
            current: Mutex::new(vec![0; route.deployments.len()]),
            lanes: route
                .deployments
                .iter()
                .map(|d| HeaderValue::from_str(&d.provider).ok())
                .collect(),
        }
    }

    /// The [`PROVIDER_HEADER`] value of deployment `at`.
    pub fn lane_header(&self, at: usize) -> Option<&HeaderValue> {
        self.lanes.get(at)?.as_ref()
    }

    /// One step of the rotation over the deployments in `allowed` (a bit per index): each gains
    /// its weight, and they come back by counter, highest first (ties: configured order).
    /// The step ends with [`Rotation::chose`] or [`Rotation::none`].
    pub fn order(&self, allowed: u32) -> Vec<usize> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let mut order: Vec<usize> = (0..self.weights.len())
            .filter(|i| allowed & (1 << i) != 0)
            .collect();
        for &i in &order {
            current[i] += self.weights[i];
        }
        order.sort_by_key(|&i| std::cmp::Reverse(current[i]));
        order
    }

    /// Ends the step of [`Rotation::order`]: deployment `at` took the call, and is charged
    /// the step's total weight.
    pub fn chose(&self, at: usize, allowed: u32) {
        let total = self.total(allowed);
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current[at] -= total;
    }

    /// Ends the step of [`Rotation::order`] without a choice: the step is undone.
    pub fn none(&self, allowed: u32) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, weight) in self.weights.iter().enumerate() {
            if allowed & (1 << i) != 0 {
                current[i] -= weight;
            }
        }
    }

    fn total(&self, allowed: u32) -> i64 {
        (0..self.weights.len())
            .filter(|i| allowed & (1 << i) != 0)
            .map(|i| self.weights[i])
            .sum()
    }
}

/// Who a call is admitted for, and with what estimate.
pub struct Caller<'a> {
    /// The caller's workspace.
    pub workspace: &'a Arc<str>,
    /// The calling principal.
    pub principal: &'a Arc<str>,
    /// The invocation budget the call is charged to.
    pub budget_id: &'a str,
    /// Whether that budget is the call's own (forgotten after the call).
    pub ephemeral: bool,
    /// The admission estimate.
    pub estimate: &'a Estimate,
}

/// One call's attempts across its model's deployments: the caller's deadline and the
/// What [`Attempts::admit`] ends with.
pub enum Admitted {
    /// A grant on the deployment at this index of the route.
    Granted(usize, Grant),
    /// A refusal, answered in the route's format.
    Answered(axum::response::Response),
}

/// deployments already tried.
pub struct Attempts {
    wait_ms: u64,
    deadline: Instant,
    tried: u32,
}

impl Attempts {
    /// A call that may wait `wait_ms` for a permit, from now.
    pub fn new(wait_ms: u64) -> Self {
        Attempts {
            wait_ms,
            deadline: Instant::now() + Duration::from_millis(wait_ms),
            tried: 0,
        }
    }

    /// Whether a deployment of `routed` is left to fail over to.
    pub fn can_fail_over(&self, routed: &Routed) -> bool {
        (self.tried.count_ones() as usize) < routed.route.deployments.len()
    }

    /// The caller's wait left (the whole wait before the first attempt).
    fn remaining_ms(&self) -> u64 {
        if self.tried == 0 {
            return self.wait_ms;
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
    }

    /// Admits the call on a deployment of `routed` it has not tried: its index and grant, or
    /// the refusal's answer (with the caller's own rate-limit figures; counted on the lane that
    /// refused).
    pub async fn admit(
        &mut self,
        proxy: &Proxy,
        routed: &Routed,
        caller: &Caller<'_>,
    ) -> Result<Admitted, ProxyError> {
        let (at, reply, coordinated) = if routed.route.deployments.len() == 1 {
            self.tried = 1;
            let wait = Wait::For(self.wait_ms);
            let reply = acquire(proxy, routed, 0, caller, wait).await?;
            (0, reply, false)
        } else {
            // Boxed: only calls of a model with several deployments carry its state.
            Box::pin(self.choose(proxy, routed, caller)).await?
        };
        let lane = proxy.metrics.lane(&routed.route.deployments[at].provider);
        match reply {
            AcquireReply::Admitted(grant) => Ok(Admitted::Granted(at, grant)),
            AcquireReply::Rejected(rejection) => {
                lane.call(CallClass::Refused);
                if caller.ephemeral {
                    let _ = proxy
                        .driver
                        .release_budget(caller.workspace, caller.budget_id)
                        .await;
                    // Refused by the shared limits (the evidence says how they answered): the
                    // per-call budget's shared lines go too.
                    if let (Some(shared), true) = (
                        &proxy.shared,
                        coordinated || rejection.evidence.coordination.is_some(),
                    ) {
                        shared.forget_budget(caller.workspace, caller.budget_id);
                    }
                }
                let mut answer = crate::caller_headers::refused(&rejection, routed.route.format);
                // The lane that refused, as on every answer of an upstream.
                if let Some(lane) = routed.rotation.lane_header(at) {
                    answer.headers_mut().insert(PROVIDER_HEADER, lane.clone());
                }
                Ok(Admitted::Answered(answer))
            }
            AcquireReply::NoProfile => {
                lane.call(CallClass::Refused);
                Err(ProxyError::forbidden(
                    "the key's workspace has no admission profile",
                ))
            }
            AcquireReply::ShuttingDown | AcquireReply::Internal => Err(ProxyError::shutting_down()),
        }
    }

    /// Steps 1-2 of the module doc over the untried deployments: the deployment, its reply, and
    /// whether an earlier zero-wait refusal came from the shared limits.
    async fn choose(
        &mut self,
        proxy: &Proxy,
        routed: &Routed,
        caller: &Caller<'_>,
    ) -> Result<(usize, AcquireReply, bool), ProxyError> {
        let all = (1u32 << routed.route.deployments.len()) - 1;
        let untried = all & !self.tried;
        let rotation = &routed.rotation;
        let order = rotation.order(untried);
        let mut refused: Vec<(usize, Rejection)> = Vec::new();
        for &at in &order {
            match acquire(proxy, routed, at, caller, Wait::NoWait).await {
                Ok(AcquireReply::Admitted(grant)) => {
                    rotation.chose(at, untried);
                    self.tried |= 1 << at;
                    return Ok((at, AcquireReply::Admitted(grant), false));
                }
                Ok(AcquireReply::Rejected(rejection)) => refused.push((at, rejection)),
                other => {
                    rotation.none(untried);
                    return other.map(|reply| (at, reply, false));
                }
            }
        }
        let coordinated = refused
            .iter()
            .any(|(_, r)| r.evidence.coordination.is_some());
        // The soonest retry hint among retryable refusals, else the first retryable one.
        let soonest = refused
            .iter()
            .enumerate()
            .filter(|(_, (_, r))| r.retryable)
            .min_by_key(|(rank, (_, r))| (r.evidence.retry_after_ms.unwrap_or(u64::MAX), *rank))
            .map(|(rank, _)| rank);
        let remaining = self.remaining_ms();
        let pick = soonest.unwrap_or(0);
        if pick >= refused.len() {
            // No untried deployment was asked (callers check `can_fail_over` first).
            rotation.none(untried);
            return Err(ProxyError::upstream(
                axum::http::StatusCode::BAD_GATEWAY,
                "no-deployment",
                "no deployment of this model is left to try",
                false,
            ));
        }
        let (at, rejection) = refused.swap_remove(pick);
        if soonest.is_none() || remaining == 0 {
            rotation.none(untried);
            return Ok((at, AcquireReply::Rejected(rejection), coordinated));
        }
        let reply = acquire(proxy, routed, at, caller, Wait::For(remaining)).await;
        match &reply {
            Ok(AcquireReply::Admitted(_)) => {
                rotation.chose(at, untried);
                self.tried |= 1 << at;
            }
            _ => rotation.none(untried),
        }
        reply.map(|reply| (at, reply, coordinated))
    }
}

/// One admission of the call on deployment `at` of `routed`: locally, then (replicas) against
/// the shared limits, the shell's one admission step (the same as `POST /v1/admissions`). A
/// refusal drops the grant, which gives the local lease back.
async fn acquire(
    proxy: &Proxy,
    routed: &Routed,
    at: usize,
    caller: &Caller<'_>,
    wait: Wait,
) -> Result<AcquireReply, ProxyError> {
    let provider = &routed.route.deployments[at].provider;
    proxy
        .driver
        .acquire_shared(
            Acquire {
                workspace: caller.workspace.clone(),
                principal: caller.principal.clone(),
                provider_id: provider.to_string(),
                budget_id: caller.budget_id.to_owned(),
                estimate: caller.estimate.clone(),
                wait,
                span: Some(proxy.telemetry.admission_requested(provider)),
            },
            proxy.shared.as_deref(),
        )
        .await
        .map_err(|_| ProxyError::shutting_down())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProxyConfig;

    fn rotation(weights: &[u32]) -> Rotation {
        let deployments: Vec<_> = weights
            .iter()
            .enumerate()
            .map(|(i, w)| serde_json::json!({"upstream": "u", "provider": format!("p{i}"), "weight": w}))
            .collect();
        let config: ProxyConfig = serde_json::from_value(serde_json::json!({
            "upstreams": {"u": {"format": "openai", "base_url": "http://127.0.0.1:1/v1"}},
            "models": {"m": {"deployments": deployments}},
        }))
        .unwrap();
        Rotation::new(&config.resolve(|_| None).unwrap()["m"])
    }

    /// The deployment chosen when the ones in `free` admit at once.
    fn pick(rotation: &Rotation, all: u32, free: u32) -> Option<usize> {
        let order = rotation.order(all);
        match order.into_iter().find(|&i| free & (1 << i) != 0) {
            Some(at) => {
                rotation.chose(at, all);
                Some(at)
            }
            None => {
                rotation.none(all);
                None
            }
        }
    }

    #[test]
    fn free_deployments_share_calls_by_weight_deterministically() {
        let r = rotation(&[2, 1]);
        let picks: Vec<_> = (0..6).map(|_| pick(&r, 0b11, 0b11).unwrap()).collect();
        assert_eq!(
            picks,
            [0, 1, 0, 0, 1, 0],
            "smooth: never three of one in a row"
        );
        let r = rotation(&[5, 1, 1]);
        let mut counts = [0; 3];
        for _ in 0..700 {
            counts[pick(&r, 0b111, 0b111).unwrap()] += 1;
        }
        assert_eq!(counts, [500, 100, 100]);
        assert_eq!(r.current.lock().unwrap().iter().sum::<i64>(), 0);
    }

    #[test]
    fn a_busy_deployment_is_skipped_and_keeps_its_turn() {
        let r = rotation(&[1, 1]);
        // The first is busy for two calls: the second takes both.
        assert_eq!(pick(&r, 0b11, 0b10), Some(1));
        assert_eq!(pick(&r, 0b11, 0b10), Some(1));
        // Free again, it catches up before the rotation alternates.
        assert_eq!(pick(&r, 0b11, 0b11), Some(0));
        assert_eq!(pick(&r, 0b11, 0b11), Some(0));
        // None free: the step is undone, nothing drifts.
        let before = r.current.lock().unwrap().clone();
        assert_eq!(pick(&r, 0b11, 0), None);
        assert_eq!(*r.current.lock().unwrap(), before);
        // A failover step over the one untried deployment leaves the counters as they were.
        assert_eq!(pick(&r, 0b01, 0b01), Some(0));
        assert_eq!(*r.current.lock().unwrap(), before);
        assert_eq!(r.lane_header(1).unwrap(), "p1");
    }
}
