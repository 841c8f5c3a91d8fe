//! The arrival generator, bit-compatible with the reference (REFERENCE §7).
//!
//! mulberry32 seeded with `arrivalModel.seed` draws, per arrival and in exactly this order: the
//! exponential gap (rate × `spikeMultiplier` while the current time is inside the spike), the
//! principal by cumulative weight, the provider among sorted IDs, huge or small tokens, the
//! service time, whether the first attempt fails, and whether the arrival cancels. All integer
//! steps are 32-bit wrapping; `atMs` is JavaScript `Math.round` of the float time. The same
//! manifest always yields the same arrivals, on every machine.
//!
//! A principal with `callTokens` (manifests after v2) sends calls of that size: the huge/small
//! draw is still made, so every other field of the stream is the one without it. A principal
//! with `deadlineMs` gives its calls that deadline; with `deadlineShare` too, one more draw
//! (after the cancellation's) decides whether this call carries it. Neither is in v1 or v2, so
//! their streams are the reference's.

use serde::{Deserialize, Serialize};

use crate::manifest::{Manifest, PrincipalClass};

/// The reference PRNG.
#[derive(Debug, Clone)]
pub struct Mulberry32 {
    state: u32,
}

impl Mulberry32 {
    pub fn new(seed: u32) -> Self {
        Mulberry32 { state: seed }
    }

    /// A uniform draw in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x6D2B_79F5);
        let mut t = self.state;
        t = (t ^ (t >> 15)).wrapping_mul(t | 1);
        t ^= t.wrapping_add((t ^ (t >> 7)).wrapping_mul(t | 61));
        f64::from(t ^ (t >> 14)) / 4_294_967_296.0
    }
}

/// One synthetic request. Serialized keys are in the documented order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Arrival {
    pub ordinal: u64,
    pub at_ms: u64,
    pub principal_id: String,
    /// The principal's position in the manifest (an anonymous ordinal for reports; not
    /// written with the arrival).
    #[serde(skip)]
    pub principal_index: usize,
    pub principal_class: PrincipalClass,
    pub provider_id: String,
    pub tokens: u64,
    pub service_ms: u64,
    pub fails_first_attempt: bool,
    pub cancel_at_ms: Option<u64>,
    /// The attempt deadline relative to the attempt, when the principal sets `deadlineMs`
    /// (absent: `2000 + serviceMs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

impl Arrival {
    /// The deadline of an attempt of this arrival made at `now`.
    pub fn attempt_deadline(&self, now: u64) -> u64 {
        now + self
            .deadline_ms
            .unwrap_or(crate::manifest::DEADLINE_SLACK_MS + self.service_ms)
    }
}

/// JavaScript `Math.round` for non-negative times: halves round up.
fn js_round(x: f64) -> u64 {
    (x + 0.5).floor() as u64
}

/// The arrivals of the first `window_seconds` of the manifest's stream.
pub fn generate(manifest: &Manifest, window_seconds: u64) -> Vec<Arrival> {
    ArrivalStream::new(manifest, window_seconds).collect()
}

/// The arrival stream, generated lazily in `atMs` order (so a harness holds only the arrivals
/// in flight, whatever the window).
pub struct ArrivalStream<'a> {
    manifest: &'a Manifest,
    random: Mulberry32,
    base_rate: f64,
    spike_start: f64,
    spike_end: f64,
    window_end: f64,
    providers: Vec<&'a str>,
    cumulative_weights: Vec<f64>,
    time: f64,
    ordinal: u64,
}

impl<'a> ArrivalStream<'a> {
    pub fn new(manifest: &'a Manifest, window_seconds: u64) -> Self {
        let model = &manifest.arrival_model;
        let spike_start = (manifest.duration.load_seconds * 1000) as f64;
        ArrivalStream {
            manifest,
            random: Mulberry32::new(model.seed),
            base_rate: model.average_requests_per_second / 1000.0,
            spike_start,
            spike_end: spike_start + model.spike_duration_seconds * 1000.0,
            window_end: (window_seconds * 1000) as f64,
            providers: manifest.provider_ids(),
            cumulative_weights: manifest
                .principals
                .iter()
                .scan(0.0, |sum, p| {
                    *sum += p.weight;
                    Some(*sum)
                })
                .collect(),
            time: 0.0,
            ordinal: 0,
        }
    }
}

impl Iterator for ArrivalStream<'_> {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        let model = &self.manifest.arrival_model;
        let rate = if self.time >= self.spike_start && self.time < self.spike_end {
            self.base_rate * model.spike_multiplier
        } else {
            self.base_rate
        };
        self.time += -(1.0 - self.random.next_f64()).ln() / rate;
        if self.time >= self.window_end || self.providers.is_empty() {
            // Park the stream at the end: every later call returns None.
            self.time = f64::INFINITY;
            return None;
        }
        let u = self.random.next_f64();
        let principals = &self.manifest.principals;
        let principal_index = self
            .cumulative_weights
            .iter()
            .position(|&cumulative| cumulative > u)
            .unwrap_or(principals.len().saturating_sub(1));
        let principal = principals.get(principal_index)?;
        let provider_index =
            (self.random.next_f64() * self.providers.len() as f64).floor() as usize;
        let provider = self.providers[provider_index.min(self.providers.len() - 1)];
        let drawn = if self.random.next_f64() < model.huge_token_share {
            model.huge_tokens
        } else {
            model.small_tokens
        };
        let tokens = principal.call_tokens.unwrap_or(drawn);
        let span = model.service_time_ms.maximum - model.service_time_ms.minimum + 1;
        let service_ms =
            model.service_time_ms.minimum + (self.random.next_f64() * span as f64).floor() as u64;
        let fails_first_attempt = self.random.next_f64() < model.retryable_failure_rate;
        let at_ms = js_round(self.time);
        let cancel_at_ms = (self.random.next_f64() < model.cancellation_rate)
            .then(|| at_ms + model.cancel_after_ms);
        let deadline_ms = principal.deadline_ms.filter(|_| {
            principal
                .deadline_share
                .is_none_or(|share| self.random.next_f64() < share)
        });
        let arrival = Arrival {
            ordinal: self.ordinal,
            at_ms,
            principal_id: principal.id.clone(),
            principal_index,
            principal_class: principal.class,
            provider_id: provider.to_owned(),
            tokens,
            service_ms,
            fails_first_attempt,
            cancel_at_ms,
            deadline_ms,
        };
        self.ordinal += 1;
        Some(arrival)
    }
}

/// Writes arrivals as JSON Lines: one compact object per line, keys in the documented order.
pub fn write_json_lines(
    arrivals: &[Arrival],
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    for arrival in arrivals {
        serde_json::to_writer(&mut *out, arrival)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::LoadedManifest;

    #[test]
    fn first_arrival_of_v2_is_the_documented_one() {
        let manifest = LoadedManifest::embedded_v2().unwrap().manifest;
        let arrivals = generate(&manifest, 990);
        let mut line = Vec::new();
        write_json_lines(&arrivals[..1], &mut line).unwrap();
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "{\"ordinal\":0,\"atMs\":21,\"principalId\":\"noisy\",\"principalClass\":\"noisy\",\"providerId\":\"llm-subagent\",\"tokens\":200,\"serviceMs\":44,\"failsFirstAttempt\":true,\"cancelAtMs\":null}\n"
        );
    }
}
