//! The proxy's `/metrics` series, per provider lane, written by its [`Collector`].
//!
//! Labels are the lane (a provider ID from the routing table: a bounded set fixed at start, not a
//! tenant), the upstream status class, the usage kind and the settlement basis. Never a
//! workspace, principal, budget or model ID. Counters saturate, never wrap.
//!
//! | series | labels |
//! |---|---|
//! | `turnstile_proxy_calls_total` | `lane`, `class` ([`CallClass`]) |
//! | `turnstile_proxy_usage_tokens_total` | `lane`, `kind` (`input` / `output`), as settled |
//! | `turnstile_proxy_settled_cost_micro_usd_total` | `lane` |
//! | `turnstile_proxy_settlements_total` | `lane`, `basis` (`reported` / `estimate`) |
//! | `turnstile_proxy_upstream_pauses_total` | `lane` (upstream 429s turned into lane pauses) |
//! | `turnstile_proxy_failovers_total` | `lane` (the deployment left), `cause` ([`FailoverCause`]) |
//! | `turnstile_proxy_quota_observations_total` | `lane` (answers whose rate-limit headers were observed) |
//! | `turnstile_proxy_quota_headers_malformed_total` | `lane` (rate-limit header values ignored as unusable) |
//!
//! A model's deployments each have their own lane (`deployment_config.rs`), so every series is
//! also per deployment.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use turnstile_shell::{metric_family, Collector, DescriptorEncoder, MetricKind};

/// How a proxied call ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallClass {
    /// Refused by admission: no upstream call.
    Refused,
    Upstream2xx,
    Upstream429,
    /// Another 4xx of the upstream.
    Upstream4xx,
    Upstream5xx,
    /// Connect error, timeout or a body broken mid-way.
    UpstreamError,
    /// The client left before the answer was complete.
    ClientGone,
}

impl CallClass {
    pub const ALL: [CallClass; 7] = [
        CallClass::Refused,
        CallClass::Upstream2xx,
        CallClass::Upstream429,
        CallClass::Upstream4xx,
        CallClass::Upstream5xx,
        CallClass::UpstreamError,
        CallClass::ClientGone,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CallClass::Refused => "refused",
            CallClass::Upstream2xx => "2xx",
            CallClass::Upstream429 => "429",
            CallClass::Upstream4xx => "4xx",
            CallClass::Upstream5xx => "5xx",
            CallClass::UpstreamError => "error",
            CallClass::ClientGone => "client-gone",
        }
    }

    /// The class of an upstream status.
    pub fn of_status(status: u16) -> CallClass {
        match status {
            429 => CallClass::Upstream429,
            200..=399 => CallClass::Upstream2xx,
            400..=499 => CallClass::Upstream4xx,
            _ => CallClass::Upstream5xx,
        }
    }
}

/// What a settlement was based on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The provider reported usage.
    Reported,
    /// No usage was reported: the estimate stays charged.
    Estimate,
}

/// Why a call left a deployment for another one (`deployments.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailoverCause {
    /// The upstream answered 429.
    RateLimited,
    /// The request never left (connection refused, or closed before it was written).
    Unreachable,
}

impl FailoverCause {
    const ALL: [FailoverCause; 2] = [FailoverCause::RateLimited, FailoverCause::Unreachable];

    fn as_str(self) -> &'static str {
        match self {
            FailoverCause::RateLimited => "429",
            FailoverCause::Unreachable => "unreachable",
        }
    }
}

/// One lane's counters.
#[derive(Debug, Default)]
pub struct LaneCounters {
    failovers: [AtomicU64; 2],
    calls: [AtomicU64; 7],
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
    cost_micro_usd: AtomicU64,
    reported: AtomicU64,
    estimated: AtomicU64,
    pauses: AtomicU64,
    quota_observed: AtomicU64,
    quota_malformed: AtomicU64,
}

fn add(counter: &AtomicU64, value: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_add(value))
    });
}

impl LaneCounters {
    pub fn call(&self, class: CallClass) {
        let index = CallClass::ALL.iter().position(|c| *c == class).unwrap_or(0);
        add(&self.calls[index], 1);
    }

    pub fn settled(&self, basis: Basis, input: u64, output: u64, cost_usd: Option<f64>) {
        add(&self.input_tokens, input);
        add(&self.output_tokens, output);
        if let Some(cost) = cost_usd {
            let micro = (cost * 1_000_000.0).round().clamp(0.0, u64::MAX as f64) as u64;
            add(&self.cost_micro_usd, micro);
        }
        match basis {
            Basis::Reported => add(&self.reported, 1),
            Basis::Estimate => add(&self.estimated, 1),
        }
    }

    pub fn paused(&self) {
        add(&self.pauses, 1);
    }

    /// A call left this lane's deployment for another one.
    pub fn failed_over(&self, cause: FailoverCause) {
        add(&self.failovers[cause as usize], 1);
    }

    /// One answer's rate-limit headers were read: `malformed` values ignored, and whether a
    /// quota was observed.
    pub fn quota_read(&self, malformed: u32, observed: bool) {
        if malformed > 0 {
            add(&self.quota_malformed, u64::from(malformed));
        }
        if observed {
            add(&self.quota_observed, 1);
        }
    }
}

/// Every lane's counters (lanes fixed when the proxy starts).
#[derive(Debug, Default)]
pub struct ProxyMetrics {
    lanes: BTreeMap<String, LaneCounters>,
    /// Calls whose lane is not known (an unknown model never reaches a lane; kept for safety).
    other: LaneCounters,
}

impl ProxyMetrics {
    pub(crate) fn new<'a>(lanes: impl IntoIterator<Item = &'a str>) -> Self {
        ProxyMetrics {
            lanes: lanes
                .into_iter()
                .map(|l| (l.to_owned(), LaneCounters::default()))
                .collect(),
            other: LaneCounters::default(),
        }
    }

    pub(crate) fn lane(&self, lane: &str) -> &LaneCounters {
        self.lanes.get(lane).unwrap_or(&self.other)
    }
}

/// Every family has its HELP and TYPE lines even before a lane is known; series per lane, in
/// lane order.
impl Collector for ProxyMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut series = metric_family(
            &mut encoder,
            "turnstile_proxy_calls",
            "Proxied calls by provider lane and how they ended (upstream status class).",
            MetricKind::Counter,
        )?;
        for (lane, c) in &self.lanes {
            for (i, class) in CallClass::ALL.iter().enumerate() {
                series.labelled(
                    &[("lane", lane.as_str()), ("class", class.as_str())],
                    get(&c.calls[i]),
                )?;
            }
        }
        let mut series = metric_family(
            &mut encoder,
            "turnstile_proxy_usage_tokens",
            "Tokens settled on proxied calls (provider-reported, or the estimate when none was).",
            MetricKind::Counter,
        )?;
        for (lane, c) in &self.lanes {
            series.labelled(
                &[("lane", lane.as_str()), ("kind", "input")],
                get(&c.input_tokens),
            )?;
            series.labelled(
                &[("lane", lane.as_str()), ("kind", "output")],
                get(&c.output_tokens),
            )?;
        }
        let mut series = metric_family(
            &mut encoder,
            "turnstile_proxy_settled_cost_micro_usd",
            "Cost settled on proxied calls, in micro-USD.",
            MetricKind::Counter,
        )?;
        for (lane, c) in &self.lanes {
            series.labelled(&[("lane", lane.as_str())], get(&c.cost_micro_usd))?;
        }
        let mut series = metric_family(
            &mut encoder,
            "turnstile_proxy_settlements",
            "Leases settled after an upstream answer, by basis (estimate: no usage reported).",
            MetricKind::Counter,
        )?;
        for (lane, c) in &self.lanes {
            series.labelled(
                &[("lane", lane.as_str()), ("basis", "reported")],
                get(&c.reported),
            )?;
            series.labelled(
                &[("lane", lane.as_str()), ("basis", "estimate")],
                get(&c.estimated),
            )?;
        }
        let mut series = metric_family(
            &mut encoder,
            "turnstile_proxy_upstream_pauses",
            "Upstream 429s that paused the provider lane.",
            MetricKind::Counter,
        )?;
        for (lane, c) in &self.lanes {
            series.labelled(&[("lane", lane.as_str())], get(&c.pauses))?;
        }
        let mut series = metric_family(
            &mut encoder,
            "turnstile_proxy_failovers",
            "Calls that left this lane's deployment for another deployment of their model.",
            MetricKind::Counter,
        )?;
        for (lane, c) in &self.lanes {
            for cause in FailoverCause::ALL {
                series.labelled(
                    &[("lane", lane.as_str()), ("cause", cause.as_str())],
                    get(&c.failovers[cause as usize]),
                )?;
            }
        }
        let mut series = metric_family(
            &mut encoder,
            "turnstile_proxy_quota_observations",
            "Upstream answers whose rate-limit headers were observed on the provider lane.",
            MetricKind::Counter,
        )?;
        for (lane, c) in &self.lanes {
            series.labelled(&[("lane", lane.as_str())], get(&c.quota_observed))?;
        }
        let mut series = metric_family(
            &mut encoder,
            "turnstile_proxy_quota_headers_malformed",
            "Upstream rate-limit header values ignored because they did not parse.",
            MetricKind::Counter,
        )?;
        for (lane, c) in &self.lanes {
            series.labelled(&[("lane", lane.as_str())], get(&c.quota_malformed))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_per_lane_and_carry_no_tenant() {
        let metrics = std::sync::Arc::new(ProxyMetrics::new(["openai"]));
        let lane = metrics.lane("openai");
        lane.call(CallClass::Upstream2xx);
        lane.settled(Basis::Reported, 10, 5, Some(0.0123));
        let text = turnstile_shell::Exposition::new()
            .with(metrics.clone())
            .text();
        assert!(text.contains("turnstile_proxy_calls_total{lane=\"openai\",class=\"2xx\"} 1"));
        assert!(
            text.contains("turnstile_proxy_settled_cost_micro_usd_total{lane=\"openai\"} 12300")
        );
        assert!(text.contains("basis=\"reported\"} 1"));
    }
}
