//! Observation: what hosts and operators see of the driver.
//!
//! - The one observation of each decision ([`Observer::decision`]): the console's feed tally,
//!   and, for an admission, the principal's fairness window (grants and estimated tokens; the
//!   release corrects the tokens with the usage it reports, [`Observer::released`]). It is called from one place,
//!   `admit::conclude`, which also ends the request's span (the span counts the decision in the
//!   one metrics family), so each decision is observed exactly once.
//! - The feed's other counts (lane touches, transitions, pauses, profile changes), and its flush
//!   once per batch.
//! - The read-only queries ([`Command::Snapshot`](crate::Command::Snapshot), `Standing`,
//!   `LaneLimits`, `Lanes`, `Fairness`) and the lease gauges.
//!
//! Invariants: nothing here changes the registry; the tally counts only while somebody
//! subscribes to the feed (checked once per batch); workspace and principal IDs go to the
//! feed and the fairness windows only (per-workspace views), never to metrics or logs.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use turnstile_admission::{
    BreakerTransition, LaneView, Millis, ProfileChangeRecord, Reason, Registry,
};

use crate::clock::Clock;
use crate::command::{LaneLimits, Standing, WorkspaceSnapshot};
use crate::fairness::{FairnessView, FairnessWindows, TokensServed};
use crate::feed::{Feed, Tally};
use crate::log::RefusalLog;
use crate::pause::Pause;

use super::Driver;

/// The feed's tally and the fairness windows.
#[derive(Default)]
pub(super) struct Observer {
    /// The console's event feed, when a host asked for one ([`Driver::with_feed`]).
    feed: Option<Feed>,
    tally: Tally,
    /// Grants per principal over the last minutes, always kept (`crate::fairness`).
    fairness: FairnessWindows,
    /// Refusals since the last logged summary (`crate::log`).
    refusals: RefusalLog,
}

impl Observer {
    pub(super) fn set_feed(&mut self, feed: Feed) {
        self.feed = Some(feed);
    }

    /// A batch of commands starts: the tally counts only if somebody subscribes.
    pub(super) fn start_batch(&mut self) {
        self.tally
            .set_enabled(self.feed.as_ref().is_some_and(Feed::has_subscribers));
    }

    /// When the tally wants to be flushed.
    pub(super) fn due(&self) -> Option<Millis> {
        match (self.tally.due(), self.refusals.due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Publishes the tally on the feed if a flush is due.
    /// Also logs the refusal summary when its interval has ended.
    pub(super) fn flush_feed(&mut self, registry: &Registry, clock: &Clock) {
        let now = clock.now_ms();
        if let Some(feed) = &self.feed {
            self.tally.flush(registry, feed, now);
        }
        self.refusals.flush(now);
    }

    /// The final decision of one admission (called only by `admit::conclude`): an admission
    /// (with its queue delay and estimated tokens) enters the principal's fairness window and
    /// returns what its lease keeps for the release's correction; every decision is counted in
    /// the feed's tally.
    pub(super) fn decision(
        &mut self,
        (workspace, provider, principal): (&str, &str, &Arc<str>),
        reason: Reason,
        (queue_delay_ms, estimated_tokens): (Millis, Option<u64>),
        now: Millis,
    ) -> Option<TokensServed> {
        let served = (reason == Reason::Admitted).then(|| {
            self.fairness
                .grant(workspace, principal, queue_delay_ms, estimated_tokens, now)
        });
        if reason != Reason::Admitted {
            self.refusals.refused(provider, reason, now);
        }
        self.tally
            .decision(workspace, provider, principal, reason, queue_delay_ms, now);
        served
    }

    /// A lease released with the tokens its call `used`: they replace its estimate in the
    /// fairness window (called only by the driver's release).
    pub(super) fn released(
        &mut self,
        (workspace, principal): (&str, &str),
        served: Option<TokensServed>,
        used: Option<u64>,
    ) {
        if let (Some(served), Some(used)) = (served, used) {
            self.fairness.correct(workspace, principal, served, used);
        }
    }

    /// Something changed in the workspace (its lanes are worth sending again).
    pub(super) fn touch(&mut self, workspace: &str, now: Millis) {
        self.tally.touch(workspace, now);
    }

    pub(super) fn transition(&mut self, workspace: &str, transition: &BreakerTransition) {
        crate::log::transition(transition);
        self.tally
            .transition(workspace, transition, transition.at_epoch_ms);
    }

    pub(super) fn pause(&mut self, workspace: &str, pause: Pause, now: Millis) {
        crate::log::pause(&pause, now);
        self.tally.pause(workspace, pause, now);
    }

    pub(super) fn profile_change(
        &mut self,
        workspace: &str,
        record: &ProfileChangeRecord,
        now: Millis,
    ) {
        self.tally.profile_change(workspace, record, now);
    }
}

impl Driver {
    pub(super) fn update_gauges(&self) {
        self.metrics
            .leases_active
            .store(self.leases.len() as u64, Ordering::Relaxed);
        self.metrics
            .waiters_queued
            .store(self.waiters.len() as u64, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self, workspace: &str) -> Option<WorkspaceSnapshot> {
        self.registry
            .snapshot(workspace)
            .map(|core| WorkspaceSnapshot {
                core,
                leases: self.leases.count_in(workspace),
                waiters: self.waiters.count_in(workspace),
            })
    }

    pub(super) fn standing(&self, workspace: &str, principal: &str) -> Standing {
        match self.registry.profile(workspace) {
            None => Standing::NoProfile,
            Some(profile) if profile.principals.contains_key(principal) => Standing::Named,
            Some(_) => Standing::NotNamed,
        }
    }

    pub(super) fn lane_limits(
        &self,
        workspace: &str,
        principal: &str,
        provider: &str,
    ) -> Option<LaneLimits> {
        let profile = self.registry.profile(workspace)?;
        Some(LaneLimits {
            principal: profile.principals.get(principal)?.clone(),
            workspace: profile.workspace.clone(),
            provider: profile.providers.get(provider)?.clone(),
        })
    }

    pub(super) fn lanes(&self, workspace: &str, now: Millis) -> Option<(Millis, Vec<LaneView>)> {
        self.registry
            .lane_views(workspace, now)
            .map(|lanes| (now, lanes))
    }

    pub(super) fn fairness(&mut self, workspace: &str, now: Millis) -> Option<FairnessView> {
        let fairness = &mut self.observer.fairness;
        fairness.forget_idle(now);
        self.registry
            .profile(workspace)
            .map(|profile| fairness.view(workspace, profile, now))
    }
}
