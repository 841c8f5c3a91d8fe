//! The fair-share figures of a load run (issue 31): who was served what while they all waited.
//!
//! The harness tells the tally when an attempt starts or stops waiting on a provider lane and
//! when one is granted; the tally keeps, per (provider, principal) lane, how many attempts
//! wait. From that it decides, at each grant, two things **as of the instant before the
//! grant** (the granted waiter still counts as waiting):
//!
//! - **jointly backlogged**: every principal of the granted principal's band has a waiter on
//!   the lane. Only such grants count towards `backloggedTokens` and so towards Jain's index
//!   over weighted token shares `x_i = backloggedTokens_i / weight_i` (the actual tokens, the
//!   scheduling weight `limits.weight`): outside joint backlog a principal that asks for less
//!   rightly gets less, and that is not unfairness.
//! - **contended**, per band: the band has a waiter and so has a higher band. The band's
//!   `contendedGrantShare` (its grants ÷ all grants of such instants) is what its `minShare`
//!   promises.
//!
//! Queue delays (the evidence's `queueDelayMs`, 0 for an immediate admission) are kept per band
//! in an exact histogram (one count per distinct millisecond), for the p99.
//!
//! # Invariants
//!
//! - Deterministic: sums, counts and a histogram of the deterministic run; no clock.
//! - No principal or workspace ID: principals appear by their position in the manifest.
//! - Cost per event is O(bands) (O(principals of the band) for the joint-backlog check), memory
//!   O(lanes + distinct delays), whatever the window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use turnstile_admission::{Fairness, MinShare, Priority};

use crate::manifest::Manifest;
use crate::observations::round6;

/// One principal's figures (by its position in the manifest, never its ID).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrincipalShare {
    /// The principal's position in the manifest.
    pub principal: usize,
    pub band: Priority,
    /// The scheduling weight (`limits.weight`, 1 when absent).
    pub weight: f64,
    /// Grants over the whole run, and the actual tokens they carried.
    pub grants: u64,
    pub tokens: u64,
    /// Grants made while every principal of its band waited on the lane, and their tokens.
    pub backlogged_grants: u64,
    pub backlogged_tokens: u64,
    /// `x_i / mean(x)` over the band's principals, minus 1 (`x_i = backloggedTokens / weight`):
    /// 0 is exactly the weight-proportional share. Absent in a band of one principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weighted_share_error: Option<f64>,
}

/// One band's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BandShare {
    pub band: Priority,
    pub principals: u64,
    pub grants: u64,
    /// The band's grants ÷ all grants.
    pub grant_share: f64,
    /// Grants made while this band and a higher band both waited on the lane (0 for the top
    /// band), the band's part of them, and that part's share.
    pub contended_grants: u64,
    pub contended_own_grants: u64,
    pub contended_grant_share: f64,
    /// The share the workspace's `minShare` promises the band (0 for the top band).
    pub min_share: f64,
    /// p99 of the queue delay of the band's admitted attempts (0 when none).
    pub p99_queue_delay_ms: u64,
    pub maximum_queue_delay_ms: u64,
    /// Jain's index over the weighted token shares of the band's principals while jointly
    /// backlogged; absent with fewer than two principals or no such grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jain_index: Option<f64>,
    /// The largest `|weightedShareError|` of the band's principals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_weighted_share_error: Option<f64>,
}

/// The fair-share block of a record (`observations.fairShare`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FairShareObservations {
    /// Each provider's `fairness`, in sorted provider order.
    pub provider_fairness: Vec<Fairness>,
    pub principals: Vec<PrincipalShare>,
    /// Only the bands some principal of the manifest is in, highest first.
    pub bands: Vec<BandShare>,
}

impl FairShareObservations {
    /// The smallest Jain index over the bands that have one.
    pub fn minimum_jain_index(&self) -> Option<f64> {
        self.bands
            .iter()
            .filter_map(|b| b.jain_index)
            .min_by(f64::total_cmp)
    }

    /// The largest weighted-share error over the bands that have one.
    pub fn maximum_weighted_share_error(&self) -> Option<f64> {
        self.bands
            .iter()
            .filter_map(|b| b.maximum_weighted_share_error)
            .max_by(f64::total_cmp)
    }

    /// The contended grant share of `band`, if the band exists and was ever contended.
    pub fn contended_grant_share(&self, band: Priority) -> Option<f64> {
        self.bands
            .iter()
            .find(|b| b.band == band && b.contended_grants > 0)
            .map(|b| b.contended_grant_share)
    }
}

/// Jain's fairness index `(Σx)² / (n·Σx²)`: 1 when all equal, 1/n when one takes all.
pub fn jain_index(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    (x.len() >= 2 && squares > 0.0).then(|| sum * sum / (x.len() as f64 * squares))
}

/// The p99 (nearest rank) of a histogram of millisecond delays.
fn p99(histogram: &BTreeMap<u64, u64>) -> u64 {
    let total: u64 = histogram.values().sum();
    let rank = (total * 99).div_ceil(100).max(1);
    let mut seen = 0;
    for (&delay, &count) in histogram {
        seen += count;
        if seen >= rank {
            return delay;
        }
    }
    0
}

#[derive(Default)]
struct BandTally {
    grants: u64,
    contended: u64,
    contended_own: u64,
    delays: BTreeMap<u64, u64>,
}

#[derive(Default, Clone, Copy)]
struct PrincipalTally {
    grants: u64,
    tokens: u64,
    backlogged_grants: u64,
    backlogged_tokens: u64,
}

/// The running tally of one run.
pub struct FairShareTally {
    providers: Vec<String>,
    provider_fairness: Vec<Fairness>,
    bands: Vec<Priority>,
    weights: Vec<f64>,
    min_share: MinShare,
    /// Waiting attempts per lane: `[provider][principal]`.
    waiting: Vec<Vec<u32>>,
    /// Waiting attempts per band and provider: `[provider][band rank]`.
    band_waiting: Vec<[u32; 3]>,
    per_principal: Vec<PrincipalTally>,
    per_band: [BandTally; 3],
}

impl FairShareTally {
    pub fn new(manifest: &Manifest) -> Self {
        let providers: Vec<String> = manifest
            .provider_ids()
            .into_iter()
            .map(String::from)
            .collect();
        let principals = manifest.principals.len();
        FairShareTally {
            provider_fairness: manifest
                .providers
                .values()
                .map(|p| p.fairness.unwrap_or_default())
                .collect(),
            bands: manifest
                .principals
                .iter()
                .map(|p| p.limits.priority.unwrap_or_default())
                .collect(),
            weights: manifest
                .principals
                .iter()
                .map(|p| p.limits.weight.unwrap_or(1.0))
                .collect(),
            min_share: manifest.workspace.min_share.unwrap_or_default(),
            waiting: vec![vec![0; principals]; providers.len()],
            band_waiting: vec![[0; 3]; providers.len()],
            per_principal: vec![PrincipalTally::default(); principals],
            per_band: Default::default(),
            providers,
        }
    }

    fn provider(&self, provider_id: &str) -> Option<usize> {
        self.providers
            .binary_search_by(|p| p.as_str().cmp(provider_id))
            .ok()
    }

    /// An attempt of `principal` started waiting on `provider_id`'s lane.
    pub fn enqueued(&mut self, provider_id: &str, principal: usize) {
        let Some(p) = self.provider(provider_id) else {
            return;
        };
        let band = self.bands[principal].rank();
        self.waiting[p][principal] += 1;
        self.band_waiting[p][band] += 1;
    }

    /// An attempt of `principal` stopped waiting (granted, refused, expired or cancelled).
    pub fn dequeued(&mut self, provider_id: &str, principal: usize) {
        let Some(p) = self.provider(provider_id) else {
            return;
        };
        let band = self.bands[principal].rank();
        self.waiting[p][principal] = self.waiting[p][principal].saturating_sub(1);
        self.band_waiting[p][band] = self.band_waiting[p][band].saturating_sub(1);
    }

    /// An attempt of `principal` was granted on `provider_id`'s lane with `tokens` actual
    /// tokens after `queue_delay_ms`. Call before [`dequeued`](Self::dequeued) for a waiter.
    pub fn granted(
        &mut self,
        provider_id: &str,
        principal: usize,
        tokens: u64,
        queue_delay_ms: u64,
    ) {
        let Some(p) = self.provider(provider_id) else {
            return;
        };
        let band = self.bands[principal];
        let jointly = self
            .bands
            .iter()
            .zip(&self.waiting[p])
            .all(|(b, &waiting)| *b != band || waiting > 0);
        let tally = &mut self.per_principal[principal];
        tally.grants += 1;
        tally.tokens += tokens;
        if jointly {
            tally.backlogged_grants += 1;
            tally.backlogged_tokens += tokens;
        }
        let waiting = self.band_waiting[p];
        for rank in 1..3 {
            let higher_waits = waiting[..rank].iter().any(|&n| n > 0);
            if waiting[rank] > 0 && higher_waits {
                self.per_band[rank].contended += 1;
                if rank == band.rank() {
                    self.per_band[rank].contended_own += 1;
                }
            }
        }
        let own = &mut self.per_band[band.rank()];
        own.grants += 1;
        *own.delays.entry(queue_delay_ms).or_default() += 1;
    }

    /// The figures of the run.
    pub fn finish(self) -> FairShareObservations {
        let total_grants: u64 = self.per_band.iter().map(|b| b.grants).sum();
        let mut principals: Vec<PrincipalShare> = self
            .per_principal
            .iter()
            .enumerate()
            .map(|(i, t)| PrincipalShare {
                principal: i,
                band: self.bands[i],
                weight: self.weights[i],
                grants: t.grants,
                tokens: t.tokens,
                backlogged_grants: t.backlogged_grants,
                backlogged_tokens: t.backlogged_tokens,
                weighted_share_error: None,
            })
            .collect();
        let mut bands = Vec::new();
        for band in Priority::ALL {
            let members: Vec<usize> = (0..principals.len())
                .filter(|&i| self.bands[i] == band)
                .collect();
            if members.is_empty() {
                continue;
            }
            let x: Vec<f64> = members
                .iter()
                .map(|&i| principals[i].backlogged_tokens as f64 / principals[i].weight)
                .collect();
            let jain = jain_index(&x);
            let mean = x.iter().sum::<f64>() / x.len() as f64;
            let mut worst = None::<f64>;
            if jain.is_some() && mean > 0.0 {
                for (&i, xi) in members.iter().zip(&x) {
                    let error = round6(xi / mean - 1.0);
                    principals[i].weighted_share_error = Some(error);
                    worst = Some(worst.map_or(error.abs(), |w| w.max(error.abs())));
                }
            }
            let tally = &self.per_band[band.rank()];
            bands.push(BandShare {
                band,
                principals: members.len() as u64,
                grants: tally.grants,
                grant_share: crate::observations::ratio(tally.grants, total_grants),
                contended_grants: tally.contended,
                contended_own_grants: tally.contended_own,
                contended_grant_share: crate::observations::ratio(
                    tally.contended_own,
                    tally.contended,
                ),
                min_share: f64::from(self.min_share.permille(band)) / 1000.0,
                p99_queue_delay_ms: p99(&tally.delays),
                maximum_queue_delay_ms: tally.delays.keys().next_back().copied().unwrap_or(0),
                jain_index: jain.map(round6),
                maximum_weighted_share_error: worst,
            });
        }
        FairShareObservations {
            provider_fairness: self.provider_fairness,
            principals,
            bands,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_a_monopoly() {
        assert_eq!(jain_index(&[5.0, 5.0, 5.0]), Some(1.0));
        assert_eq!(jain_index(&[9.0, 0.0, 0.0]), Some(1.0 / 3.0));
        assert_eq!(jain_index(&[1.0]), None, "one principal has no index");
        assert_eq!(jain_index(&[0.0, 0.0]), None, "nothing served, no index");
        // Requests mode with calls 10× apart: one grant each gives tokens 400 : 4000.
        let j = jain_index(&[400.0, 4000.0]).unwrap();
        assert!((j - 0.5990).abs() < 1e-3, "{j}");
    }

    #[test]
    fn p99_is_the_nearest_rank() {
        let mut h = BTreeMap::new();
        h.insert(0, 98);
        h.insert(10, 1);
        h.insert(500, 1);
        assert_eq!(p99(&h), 10);
        h.insert(500, 2);
        assert_eq!(p99(&h), 500);
        assert_eq!(p99(&BTreeMap::new()), 0);
    }
}
