//! The event feed: what the driver tells an operator's console, as it happens.
//!
//! # Design
//!
//! The driver keeps a [`Tally`] of what changed per workspace since the last flush (decisions by
//! provider and reason, grants and queue delay per principal, breaker transitions, pauses,
//! profile changes) and, at most every [`FLUSH_MS`], publishes one [`FeedEvent`] per changed
//! workspace on a bounded `tokio::sync::broadcast` channel, with the live view of its lanes
//! ([`LaneView`], computed once per event, never per decision). The flush instant is one more
//! candidate for the driver's one timer, so an event goes out within [`FLUSH_MS`] of a change
//! even when nothing else happens; nothing polls.
//!
//! # Invariants
//!
//! - **Nothing is kept when nobody listens.** The driver checks for subscribers once per batch
//!   of commands; without one the tally stays empty and costs one branch per decision.
//! - **Bounded.** The channel holds [`FEED_CAPACITY`] events; a subscriber that falls behind
//!   loses the oldest (it sees `Lagged` and resynchronises from the next event, which carries
//!   full lane state). A tally holds at most one entry per (provider, reason) and per principal
//!   the workspace's profile names (the core refuses other IDs before they are counted here as
//!   anything but a refusal), and at most [`EVENTS_PER_FLUSH`] transitions and pauses.
//! - **IDs stay in the feed.** Principal IDs appear only in [`FeedEvent::principals`], for the
//!   authenticated admin view; the feed is never logged and never becomes a metric label.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::broadcast;

pub use crate::pause::Pause;
use turnstile_admission::{
    BreakerTransition, LaneView, Millis, ProfileChangeRecord, Reason, Registry,
};

/// Events the broadcast channel holds for a slow subscriber.
pub const FEED_CAPACITY: usize = 256;

/// The shortest interval between two events of one workspace.
pub const FLUSH_MS: Millis = 250;

/// Transitions and pauses one event carries at most (the rest are counted as dropped).
pub const EVENTS_PER_FLUSH: usize = 64;

/// Admissions or refusals of one provider lane with one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionCount {
    /// The provider lane.
    pub provider_id: String,
    /// The decision's reason.
    pub reason: Reason,
    /// How many.
    pub count: u64,
}

/// Grants of one principal and the queue delay they waited, summed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrincipalTally {
    /// The principal (admin subscribers only).
    pub principal_id: String,
    /// Its grants.
    pub grants: u64,
    /// The queue delay they waited, summed.
    pub queue_delay_ms: u64,
}

/// What changed in one workspace between two flushes, and its lanes at the second.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FeedEvent {
    /// The workspace (a routing key: serialisers decide whether to show it).
    #[serde(skip)]
    pub workspace: Arc<str>,
    /// The driver's clock at the flush.
    pub at_epoch_ms: Millis,
    /// The counts cover `(since, at]`.
    pub since_epoch_ms: Millis,
    /// The workspace's provider lanes at the flush.
    pub lanes: Vec<LaneView>,
    /// Decisions since the last flush, by lane and reason.
    pub decisions: Vec<DecisionCount>,
    /// Per-principal grants; only for admin subscribers (see the module docs).
    #[serde(skip)]
    pub principals: Vec<PrincipalTally>,
    /// Breaker transitions since the last flush.
    pub transitions: Vec<BreakerTransition>,
    /// Lane pauses since the last flush.
    pub pauses: Vec<Pause>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The profile change, when the current revision changed.
    pub profile_change: Option<ProfileChangeRecord>,
    /// Transitions and pauses left out of this event (beyond `EVENTS_PER_FLUSH`, 64).
    pub dropped: u64,
}

/// The sending side of the feed; cloned into hosts that subscribe.
#[derive(Debug, Clone)]
pub struct Feed {
    tx: broadcast::Sender<Arc<FeedEvent>>,
}

impl Default for Feed {
    fn default() -> Self {
        Feed::new()
    }
}

impl Feed {
    /// A feed with no subscriber yet.
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(FEED_CAPACITY);
        Feed { tx }
    }

    /// Every event published from now on (bounded: see the module docs).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<FeedEvent>> {
        self.tx.subscribe()
    }

    pub(crate) fn has_subscribers(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    fn publish(&self, event: FeedEvent) {
        // No subscriber: nobody to tell (not an error).
        let _ = self.tx.send(Arc::new(event));
    }
}

#[derive(Debug, Default)]
struct WorkspaceTally {
    /// Few entries (providers × reasons seen): a linear search finds one without allocating.
    decisions: Vec<DecisionCount>,
    principals: HashMap<Arc<str>, (u64, u64)>,
    transitions: Vec<BreakerTransition>,
    pauses: Vec<Pause>,
    profile_change: Option<ProfileChangeRecord>,
    dropped: u64,
    /// The instant of the first change counted since the last flush.
    first_change_at: Millis,
}

/// The driver's accumulator between flushes; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    enabled: bool,
    workspaces: HashMap<Arc<str>, WorkspaceTally>,
    /// When each workspace was last flushed.
    flushed_at: HashMap<Arc<str>, Millis>,
    last_flush: Millis,
    due: Option<Millis>,
}

impl Tally {
    /// Turns counting on or off (once per batch: whether anybody subscribes).
    pub(crate) fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
        if !enabled {
            self.workspaces.clear();
            self.flushed_at.clear();
            self.due = None;
        }
    }

    /// The instant the next flush is due, if anything changed.
    pub(crate) fn due(&self) -> Option<Millis> {
        self.due
    }

    fn entry(&mut self, workspace: &str, now: Millis) -> Option<&mut WorkspaceTally> {
        if !self.enabled {
            return None;
        }
        if self.due.is_none() {
            self.due = Some(now.max(self.last_flush.saturating_add(FLUSH_MS)));
        }
        if !self.workspaces.contains_key(workspace) {
            self.workspaces.insert(
                Arc::from(workspace),
                WorkspaceTally {
                    first_change_at: now,
                    ..WorkspaceTally::default()
                },
            );
        }
        self.workspaces.get_mut(workspace)
    }

    /// Something changed in the workspace (its lanes are worth sending again).
    pub(crate) fn touch(&mut self, workspace: &str, now: Millis) {
        let _ = self.entry(workspace, now);
    }

    /// A final admission answer: an admission (with its queue delay) or a refusal.
    pub(crate) fn decision(
        &mut self,
        workspace: &str,
        provider: &str,
        principal: &Arc<str>,
        reason: Reason,
        queue_delay_ms: Millis,
        now: Millis,
    ) {
        let Some(tally) = self.entry(workspace, now) else {
            return;
        };
        match tally
            .decisions
            .iter_mut()
            .find(|d| d.reason == reason && d.provider_id == provider)
        {
            Some(count) => count.count += 1,
            None => tally.decisions.push(DecisionCount {
                provider_id: provider.to_owned(),
                reason,
                count: 1,
            }),
        }
        if reason == Reason::Admitted {
            let entry = tally.principals.entry(principal.clone()).or_default();
            entry.0 += 1;
            entry.1 = entry.1.saturating_add(queue_delay_ms);
        }
    }

    pub(crate) fn transition(
        &mut self,
        workspace: &str,
        transition: &BreakerTransition,
        now: Millis,
    ) {
        let Some(tally) = self.entry(workspace, now) else {
            return;
        };
        if tally.transitions.len() < EVENTS_PER_FLUSH {
            tally.transitions.push(transition.clone());
        } else {
            tally.dropped += 1;
        }
    }

    pub(crate) fn pause(&mut self, workspace: &str, pause: Pause, now: Millis) {
        let Some(tally) = self.entry(workspace, now) else {
            return;
        };
        if tally.pauses.len() < EVENTS_PER_FLUSH {
            tally.pauses.push(pause);
        } else {
            tally.dropped += 1;
        }
    }

    pub(crate) fn profile_change(
        &mut self,
        workspace: &str,
        record: &ProfileChangeRecord,
        now: Millis,
    ) {
        if let Some(tally) = self.entry(workspace, now) {
            tally.profile_change = Some(record.clone());
        }
    }

    /// Publishes one event per changed workspace if the flush is due at `now`.
    pub(crate) fn flush(&mut self, registry: &Registry, feed: &Feed, now: Millis) {
        if self.due.is_none_or(|due| due > now) {
            return;
        }
        self.due = None;
        self.last_flush = now;
        for (workspace, tally) in self.workspaces.drain() {
            // The counts cover `(since, at]`: from the last flush, or, for the first one since
            // counting began, from just before the first change counted.
            let since = self
                .flushed_at
                .insert(workspace.clone(), now)
                .unwrap_or(tally.first_change_at.saturating_sub(1));
            // A workspace without a profile has no lanes (and no decisions worth sending).
            let Some(lanes) = registry.lane_views(&workspace, now) else {
                continue;
            };
            let event = FeedEvent {
                workspace,
                at_epoch_ms: now,
                since_epoch_ms: since,
                lanes,
                decisions: tally.decisions,
                principals: tally
                    .principals
                    .into_iter()
                    .map(|(principal_id, (grants, queue_delay_ms))| PrincipalTally {
                        principal_id: principal_id.to_string(),
                        grants,
                        queue_delay_ms,
                    })
                    .collect(),
                transitions: tally.transitions,
                pauses: tally.pauses,
                profile_change: tally.profile_change,
                dropped: tally.dropped,
            };
            feed.publish(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstile_admission::{Limits, Profile};

    fn registry() -> Registry {
        let mut registry = Registry::new();
        let mut profile = Profile {
            workspace: Limits {
                concurrency: 4,
                ..Limits::default()
            },
            ..Profile::default()
        };
        profile.providers.insert(
            "p".into(),
            Limits {
                concurrency: 2,
                ..Limits::default()
            },
        );
        profile.principals.insert(
            "a".into(),
            Limits {
                concurrency: 2,
                ..Limits::default()
            },
        );
        registry.register("w", "v1", profile, 0).unwrap();
        registry
    }

    #[test]
    fn nothing_is_kept_without_subscribers_and_flushes_are_spaced() {
        let registry = registry();
        let feed = Feed::new();
        let mut tally = Tally::default();
        let principal: Arc<str> = Arc::from("a");
        tally.decision("w", "p", &principal, Reason::Admitted, 0, 10);
        assert_eq!(tally.due(), None);

        let mut rx = feed.subscribe();
        tally.set_enabled(feed.has_subscribers());
        tally.decision("w", "p", &principal, Reason::Admitted, 5, 1_000);
        tally.decision("w", "p", &principal, Reason::QueueFull, 0, 1_000);
        assert_eq!(tally.due(), Some(1_000));
        tally.flush(&registry, &feed, 1_000);
        let event = rx.try_recv().unwrap();
        assert_eq!(&*event.workspace, "w");
        // The first flush's range `(since, at]` holds the changes it counts.
        assert_eq!(event.since_epoch_ms, 999);
        assert_eq!(event.at_epoch_ms, 1_000);
        assert_eq!(event.decisions.len(), 2);
        assert_eq!(event.principals[0].grants, 1);
        assert_eq!(event.principals[0].queue_delay_ms, 5);
        assert_eq!(event.lanes[0].provider_id, "p");
        assert_eq!(event.lanes[0].concurrency, Some(2));

        // The next change waits for FLUSH_MS after the last flush.
        tally.touch("w", 1_010);
        assert_eq!(tally.due(), Some(1_000 + FLUSH_MS));
        tally.flush(&registry, &feed, 1_100);
        assert!(rx.try_recv().is_err());
        tally.flush(&registry, &feed, 1_250);
        let event = rx.try_recv().unwrap();
        assert_eq!(event.since_epoch_ms, 1_000);
        assert!(event.decisions.is_empty());
    }
}
