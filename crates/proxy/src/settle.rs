//! [`Settlement`]: the lease of one proxied call, released exactly once with what happened.
//!
//! | upstream result | outcome | charged |
//! |---|---|---|
//! | 2xx with usage | success | the reported usage (tokens, and cost from the price table) |
//! | 2xx without usage | success | the estimate stays (counted: `basis="estimate"`) |
//! | 429 | retry-after (pauses the lane for every principal of the workspace) | nothing (0 tokens, $0) |
//! | other 4xx | none (the request's fault must not trip the breaker) | nothing |
//! | 5xx, timeout, connect error, body broken | failure (breaker) | usage seen, else the estimate |
//! | the client left | none | usage seen, else the estimate |
//!
//! Invariant: a `Settlement` that is dropped without [`Settlement::settle`] (the client went
//! away, the handler was cancelled) releases the lease with outcome `none` and the usage seen so
//! far. Release is a message to the driver (no await), so it works from `Drop` and from a body's
//! `poll_frame`. A per-call budget (no `x-turnstile-budget-id`) is forgotten by the same
//! command, right after the release, so per-call budgets never accumulate in the core.

use std::sync::Arc;

use tokio::sync::oneshot;
use turnstile_admission::{ActualUsage, Outcome, ProviderUsage};
use turnstile_shell::{Command, Grant, LeaseToken};

use crate::estimate::TokenEstimate;
use crate::metrics::{Basis, CallClass};
use crate::Proxy;
use turnstile_admission::Prices;

/// What to charge on release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    /// The provider's reported usage (partial counts allowed).
    Reported(ProviderUsage),
    /// Keep the admission estimate.
    Estimate,
    /// Nothing was processed (429, other 4xx).
    Nothing,
}

impl Charge {
    /// Reported usage when there is some, else the estimate.
    pub fn seen(usage: ProviderUsage) -> Charge {
        if usage.is_reported() {
            Charge::Reported(usage)
        } else {
            Charge::Estimate
        }
    }
}

/// A held lease of one proxied call.
pub struct Settlement {
    token: LeaseToken,
    workspace: Arc<str>,
    principal: Arc<str>,
    /// A per-call budget to forget after release.
    ephemeral_budget: Option<String>,
    /// The driver, the host's shared limits (replicas: released before the local lease) and
    /// the metrics, through one reference.
    proxy: Arc<Proxy>,
    lane: Arc<str>,
    prices: Option<Prices>,
    estimate: TokenEstimate,
    /// Usage seen so far (for a release on drop).
    pub seen: ProviderUsage,
    settled: bool,
    /// Replicas: the shared release running in the background.
    shared_release: Option<tokio::task::JoinHandle<()>>,
}

impl Settlement {
    /// Takes over `grant`: from now on this settlement releases it.
    pub fn new(
        mut grant: Grant,
        owner: (Arc<str>, Arc<str>),
        ephemeral_budget: Option<String>,
        proxy: Arc<Proxy>,
        lane: Arc<str>,
        prices: Option<Prices>,
        estimate: TokenEstimate,
    ) -> Self {
        grant.accept();
        Settlement {
            token: grant.token,
            workspace: owner.0,
            principal: owner.1,
            ephemeral_budget,
            proxy,
            lane,
            prices,
            estimate,
            seen: ProviderUsage::default(),
            settled: false,
            shared_release: None,
        }
    }

    /// Observes the provider's rate-limit headers of the call's answer on its lane
    /// (`quota_headers.rs`).
    pub fn provider_quota(&self, headers: &axum::http::HeaderMap) {
        crate::quota_headers::observe(&self.proxy, &self.workspace, &self.lane, headers);
    }

    /// Extends the lease's TTL (fire and forget).
    pub fn heartbeat(&self) {
        let (reply, _) = oneshot::channel();
        let _ = self.proxy.driver.send(Command::Heartbeat {
            token: self.token,
            workspace: self.workspace.clone(),
            principal: self.principal.clone(),
            reply,
        });
    }

    /// Releases the lease once; later calls do nothing.
    pub fn settle(&mut self, class: CallClass, outcome: Outcome, charge: Charge) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        let lane = self.proxy.metrics.lane(&self.lane);
        lane.call(class);
        let (usage, basis, tokens, cost) = match charge {
            Charge::Reported(usage) => {
                let (input, output) = usage.counts();
                let cost = self.prices.map(|p| p.cost_usd(input, output));
                let mut actual = ActualUsage::none().tokens(input.saturating_add(output));
                if let Some(cost) = cost {
                    actual = actual.with_cost_usd(cost).unwrap_or(actual);
                }
                (actual, Some(Basis::Reported), (input, output), cost)
            }
            Charge::Estimate => {
                let (input, output) = (self.estimate.input, self.estimate.output);
                let cost = self.prices.map(|p| p.cost_usd(input, output));
                (
                    ActualUsage::none(),
                    Some(Basis::Estimate),
                    (input, output),
                    cost,
                )
            }
            Charge::Nothing => {
                let mut actual = ActualUsage::none().tokens(0);
                if self.prices.is_some() {
                    actual = actual.with_cost_usd(0.0).unwrap_or(actual);
                }
                (actual, None, (0, 0), None)
            }
        };
        if let Some(basis) = basis {
            lane.settled(basis, tokens.0, tokens.1, cost);
        }
        if matches!(outcome, Outcome::RetryAfter { .. }) {
            lane.paused();
        }
        // Replicas: out of the shared books (with the pause and the actual usage) before the
        // local release, whose fallback would release the shared lease without them.
        if let Some(shared) = &self.proxy.shared {
            self.shared_release = shared.release(&self.token.to_string(), outcome, usage);
        }
        let forget_budget = self.ephemeral_budget.take();
        if let (Some(budget), Some(shared)) = (&forget_budget, &self.proxy.shared) {
            shared.forget_budget(&self.workspace, budget);
        }
        let (reply, _) = oneshot::channel();
        let _ = self.proxy.driver.send(Command::Release {
            token: self.token,
            workspace: self.workspace.clone(),
            principal: self.principal.clone(),
            outcome,
            usage,
            forget_budget,
            reply,
        });
    }
}

impl Settlement {
    /// Waits until the shared release (replicas) is done: after it, every replica sees the
    /// lease gone, its usage charged and its pause.
    pub async fn shared_released(&mut self) {
        if let Some(task) = self.shared_release.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Settlement {
    fn drop(&mut self) {
        let charge = Charge::seen(self.seen);
        self.settle(CallClass::ClientGone, Outcome::None, charge);
    }
}
