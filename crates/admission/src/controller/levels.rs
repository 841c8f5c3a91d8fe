//! Bucket levels across a clean stop of the host (issue 14): what a graceful stop writes down
//! ([`Controller::bucket_levels`]) and the next start puts back
//! ([`Controller::restore_bucket_levels`]), so a deploy does not throttle every lane.
//!
//! # What it decides
//!
//! Nothing about admission: it reads and sets the level of every request and token bucket the
//! controller holds (the workspace's, every provider's, every principal that keeps state), in
//! the bucket's own fixed-point units (units × refill period in ms, see `bucket.rs`), keyed by
//! the scope's ID. A principal whose state was forgotten is not listed: its buckets were full
//! when it was forgotten (`scopes.rs`), so it restarts full, which is exact.
//!
//! # The rule a host must keep
//!
//! Restoring is exact only if **no grant followed the reading**: the host reads the levels
//! after it stopped admitting, and restores them only if the lease log shows no grant after
//! that (`docs/server.md`, "Lane state at restart"). Then every bucket of the stopped process
//! took nothing since `read_at`, and refilling composes, so [`TokenBucket::restore_level`]
//! gives at `now` exactly the level the bucket that never stopped would hold (property test in
//! `bucket.rs`). Otherwise the host drains ([`Controller::drain_buckets_since`]).
//!
//! # Invariants
//!
//! - A bucket the levels do not name (a new principal, a new provider, a bucket a new profile
//!   revision added) keeps its state as created: full, as on a first start. A level above the
//!   bucket's current capacity (a profile lowered since) is clamped to it.
//! - The levels already hold every grant made before `read_at`, held leases included: after
//!   [`Controller::restore_bucket_levels`], [`Controller::reinstate`] debits no bucket (it
//!   would count the lease's request and tokens twice). It still counts the lease's
//!   concurrency and budget hold.
//! - Restoring never admits, rejects, queues or emits anything; reading changes nothing.
//!
//! # Complexity
//!
//! O(scopes that keep state) to read, O(scopes named) to restore; once per stop and start.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::bucket::TokenBucket;
use crate::scope::ScopeState;
use crate::time::Millis;

use super::Controller;

/// The levels of one scope's buckets, in fixed-point units (units × period in ms); a bucket
/// the scope does not have is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScopeLevels {
    /// The request bucket's level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u128>,
    /// The token bucket's level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u128>,
}

impl ScopeLevels {
    fn read(state: &ScopeState, now: Millis) -> Self {
        let level = |bucket: &Option<TokenBucket>| bucket.as_ref().map(|b| b.scaled_level_at(now));
        ScopeLevels {
            requests: level(&state.requests),
            tokens: level(&state.tokens),
        }
    }

    /// Whether no bucket is named.
    pub fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }

    /// Sets the buckets `state` has and `self` names; returns how many.
    fn restore(&self, state: &mut ScopeState, read_at: Millis, now: Millis) -> usize {
        let mut restored = 0;
        for (bucket, level) in [
            (&mut state.requests, self.requests),
            (&mut state.tokens, self.tokens),
        ] {
            if let (Some(bucket), Some(level)) = (bucket, level) {
                bucket.restore_level(level, read_at, now);
                restored += 1;
            }
        }
        restored
    }
}

/// Every bucket level of one workspace's controller at `read_at_ms`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BucketLevels {
    /// The instant the levels were read (the controller's time).
    pub read_at_ms: Millis,
    /// The workspace scope's buckets.
    #[serde(default, skip_serializing_if = "ScopeLevels::is_empty")]
    pub workspace: ScopeLevels,
    /// By provider ID.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, ScopeLevels>,
    /// By principal ID, only those that keep state.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub principals: BTreeMap<String, ScopeLevels>,
}

impl Controller {
    /// The level of every bucket this controller holds, read at `now` (or the controller's
    /// newest instant, if later); changes nothing.
    pub fn bucket_levels(&self, now: Millis) -> BucketLevels {
        let now = self.now.max(now);
        let named = |(id, state): (&str, &ScopeState)| {
            let levels = ScopeLevels::read(state, now);
            (!levels.is_empty()).then(|| (id.to_owned(), levels))
        };
        BucketLevels {
            read_at_ms: now,
            workspace: ScopeLevels::read(&self.scopes.workspace, now),
            providers: self
                .scopes
                .providers
                .kept_states()
                .filter_map(named)
                .collect(),
            principals: self
                .scopes
                .principals
                .kept_states()
                .filter_map(named)
                .collect(),
        }
    }

    /// Sets every bucket `levels` names to its level refilled from `levels.read_at_ms` to `now`
    /// (see the module docs for when this is exact); scopes this controller does not know are
    /// skipped. From now on [`Controller::reinstate`] debits no bucket. Returns how many
    /// buckets were set.
    pub fn restore_bucket_levels(&mut self, levels: &BucketLevels, now: Millis) -> usize {
        let now = self.advance(now);
        let read_at = levels.read_at_ms;
        self.levels_hold_leases = true;
        let mut restored = levels
            .workspace
            .restore(&mut self.scopes.workspace, read_at, now);
        for (id, scope) in &levels.providers {
            if let Some(provider) = self.scopes.providers.find(id) {
                let state = self.scopes.providers.state_mut(provider, now);
                restored += scope.restore(state, read_at, now);
            }
        }
        for (id, scope) in &levels.principals {
            let Some(principal) = self.scopes.principals.find(id) else {
                continue;
            };
            if self.scopes.principals.limits(principal).is_some() {
                let state = self.scopes.principals.state_mut(principal, now);
                restored += scope.restore(state, read_at, now);
            }
        }
        restored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{AdmissionRequest, LeaseCharge};
    use crate::estimate::Estimate;
    use crate::limits::Limits;
    use crate::profile::Profile;
    use crate::reason::Reason;

    fn profile(principals: &[&str]) -> Profile {
        let mut workspace = Limits::with_concurrency(100);
        workspace.tokens_per_second = Some(1_000);
        let mut provider = Limits::with_concurrency(100);
        provider.requests_per_minute = Some(60);
        let mut principal = Limits::with_concurrency(100);
        principal.requests_per_minute = Some(10);
        Profile {
            workspace,
            providers: [("jev".to_owned(), provider)].into_iter().collect(),
            principals: principals
                .iter()
                .map(|p| ((*p).to_owned(), principal.clone()))
                .collect(),
        }
    }

    fn request(principal: &str, tokens: u64) -> AdmissionRequest {
        AdmissionRequest::new(principal, "jev", "b").with_estimate(Estimate::new().tokens(tokens))
    }

    fn reason(c: &mut Controller, principal: &str, tokens: u64, now: Millis) -> Option<Reason> {
        c.try_acquire(request(principal, tokens), now)
            .err()
            .map(|r| r.reason)
    }

    #[test]
    fn levels_round_trip_through_json_and_restore_exactly() {
        let mut c = Controller::new(profile(&["p", "q"]), 0).unwrap();
        for _ in 0..4 {
            assert_eq!(reason(&mut c, "p", 100, 1_000), None);
        }
        let levels = c.bucket_levels(2_000);
        assert_eq!(levels.read_at_ms, 2_000);
        assert_eq!(levels.principals.len(), 1, "q never kept state");
        let json = serde_json::to_string(&levels).unwrap();
        let back: BucketLevels = serde_json::from_str(&json).unwrap();
        assert_eq!(back, levels);

        // The restarted controller, restored at 3 s, against the one that never stopped.
        let mut restarted = Controller::new(profile(&["p", "q"]), 3_000).unwrap();
        assert_eq!(restarted.restore_bucket_levels(&back, 3_000), 3);
        assert_eq!(restarted.bucket_levels(3_000), c.bucket_levels(3_000));
        // p had 6 of 10 requests left (and 2 s gave it a third of one): 6 more pass.
        for _ in 0..6 {
            assert_eq!(reason(&mut restarted, "p", 1, 3_000), None);
        }
        assert_eq!(
            reason(&mut restarted, "p", 1, 3_000),
            Some(Reason::RequestsPerMinute)
        );
        assert_eq!(reason(&mut restarted, "q", 1, 3_000), None, "q is full");
    }

    #[test]
    fn unnamed_buckets_start_full_and_unknown_scopes_are_skipped() {
        let mut c = Controller::new(profile(&["p"]), 0).unwrap();
        for _ in 0..10 {
            assert_eq!(reason(&mut c, "p", 1, 0), None);
        }
        let mut levels = c.bucket_levels(0);
        levels
            .principals
            .insert("gone".into(), ScopeLevels::default());
        levels
            .providers
            .insert("gone".into(), ScopeLevels::default());
        // A new principal in the profile of the restart.
        let mut restarted = Controller::new(profile(&["p", "new"]), 0).unwrap();
        restarted.restore_bucket_levels(&levels, 0);
        assert_eq!(
            reason(&mut restarted, "p", 1, 0),
            Some(Reason::RequestsPerMinute)
        );
        assert_eq!(reason(&mut restarted, "new", 1, 0), None);
    }

    #[test]
    fn reinstated_leases_are_not_debited_twice_after_a_restore() {
        let mut c = Controller::new(profile(&["p"]), 0).unwrap();
        let held: Vec<LeaseCharge> = (0..3)
            .map(|_| {
                let lease = c.try_acquire(request("p", 0), 0).unwrap();
                c.lease_charge(lease.id).unwrap()
            })
            .collect();
        let levels = c.bucket_levels(0);
        let mut restarted = Controller::new(profile(&["p"]), 0).unwrap();
        restarted.restore_bucket_levels(&levels, 0);
        for lease in &held {
            restarted.reinstate("p", lease, 0).unwrap();
        }
        assert_eq!(restarted.bucket_levels(0), levels, "the grants count once");
        for _ in 0..7 {
            assert_eq!(reason(&mut restarted, "p", 0, 0), None);
        }
        assert_eq!(
            reason(&mut restarted, "p", 0, 0),
            Some(Reason::RequestsPerMinute)
        );
        assert_eq!(restarted.snapshot().active, 10);
    }
}
