//! Lane state a restart puts back: Retry-After pauses and breaker transitions.
//!
//! A pause the core applied (a relayed Retry-After, or a lease released with outcome
//! `retry-after`) goes to the feed, and to the journal when it is worth journaling
//! ([`JournaledPauses::should_journal`]); a breaker transition goes to the feed and to the
//! journal, under its own workspace. Both also join the current lease batch (`Paused`,
//! `Breaker`), so the answer that caused them waits until they are durable (`commit.rs`).
//!
//! # Invariants
//!
//! - A lane's journaled pause end is never more than
//!   [`JOURNAL_EXTENSION_MS`](crate::pause::JOURNAL_EXTENSION_MS) before its real one: a pause
//!   is journaled when no journaled pause of its lane is in force, or when it moves the end of
//!   the last *journaled* one by at least that much (so small extensions never add up to more).
//! - Every breaker transition is handed to the journal once, consecutive transitions of one
//!   workspace in one call, right after the operation that made it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use foldhash::HashMap;
use tokio::sync::oneshot;
use turnstile_admission::{BreakerTransition, Millis};

use crate::error::DriverError;
use crate::journal::LeaseEvent;
use crate::pause::{Pause, PauseCause};

use super::Driver;

/// Lanes whose last journaled pause end the driver remembers before it forgets the ended ones
/// (lanes are profile-named providers, so this is rarely reached).
const JOURNALED_PAUSES_KEPT: usize = 4_096;

/// Per (workspace, provider lane): the end of the last pause handed to the journal, so a
/// lane's journaled end is never more than [`JOURNAL_EXTENSION_MS`](crate::pause::JOURNAL_EXTENSION_MS)
/// before its real one (a restart pauses the lane again from the journal).
#[derive(Default)]
pub(super) struct JournaledPauses {
    ends: HashMap<(Arc<str>, String), Millis>,
}

impl JournaledPauses {
    /// Whether `pause` is journaled; if so it becomes the lane's last journaled pause.
    fn should_journal(&mut self, workspace: &str, pause: &Pause, now: Millis) -> bool {
        let key: (Arc<str>, String) = (workspace.into(), pause.provider_id.clone());
        let journaled = match self.ends.get(&key) {
            Some(&end) if end > now => {
                pause.until_epoch_ms >= end.saturating_add(crate::pause::JOURNAL_EXTENSION_MS)
            }
            _ => true,
        };
        if journaled {
            if self.ends.len() >= JOURNALED_PAUSES_KEPT {
                self.ends.retain(|_, end| *end > now);
            }
            self.ends.insert(key, pause.until_epoch_ms);
        }
        journaled
    }
}

impl Driver {
    /// `Command::RetryAfter`: pauses a provider lane; answered once the pause is durable.
    pub(super) fn retry_after(
        &mut self,
        workspace: &str,
        provider: String,
        retry_after_ms: Millis,
        reply: oneshot::Sender<Result<Millis, DriverError>>,
        now: Millis,
    ) {
        let result = self
            .registry
            .coordinate_retry_after(workspace, &provider, retry_after_ms, now)
            .map_err(DriverError::from);
        if let Ok(until) = result {
            let pause = Pause {
                provider_id: provider,
                retry_after_ms,
                until_epoch_ms: until,
                at_epoch_ms: now,
                cause: PauseCause::RetryAfterCall,
            };
            self.paused(workspace, pause, now);
        }
        self.deliver(workspace, now);
        if result.is_ok() {
            // Answered once the pause is durable (a restart pauses the lane again).
            self.commit.hold(Box::new(move |_durable| {
                let _ = reply.send(result);
            }));
        } else {
            let _ = reply.send(result);
        }
    }

    /// A lease released with outcome `retry-after` paused its provider lane until `until` (the
    /// core keeps the later of the two pauses): reports the pause.
    pub(super) fn release_paused(
        &mut self,
        workspace: &str,
        provider_id: String,
        retry_after_ms: Millis,
        until: Millis,
        now: Millis,
    ) {
        let pause = Pause {
            provider_id,
            retry_after_ms,
            until_epoch_ms: until,
            at_epoch_ms: now,
            cause: PauseCause::ReleaseOutcome,
        };
        self.paused(workspace, pause, now);
    }

    /// Reports a pause the core applied to the feed, and to the journal when it is worth
    /// journaling ([`JournaledPauses::should_journal`]).
    fn paused(&mut self, workspace: &str, pause: Pause, now: Millis) {
        if self.journaled_pauses.should_journal(workspace, &pause, now) {
            self.journal.provider_paused(workspace, &pause);
            // In this batch: the answer that caused the pause waits until it is durable.
            self.journal_lease(|| LeaseEvent::Paused {
                workspace: Arc::from(workspace),
                provider: pause.provider_id.clone(),
                until_epoch_ms: pause.until_epoch_ms,
            });
        }
        self.observer.pause(workspace, pause, now);
    }

    /// Hands every breaker transition the core made to the journal, each under its own
    /// workspace, consecutive transitions of one workspace in one call, and adds each to the
    /// current lease batch (`LeaseEvent::Breaker`), so the answer that caused it waits for it.
    pub(super) fn journal_transitions(&mut self) {
        let mut batch: Option<(String, Vec<BreakerTransition>)> = None;
        while let Some((workspace, transition)) = self.registry.poll_transition() {
            self.observer.transition(&workspace, &transition);
            // In this batch: the answer that caused the transition waits until it is durable.
            self.journal_lease(|| LeaseEvent::Breaker {
                workspace: Arc::from(workspace.as_str()),
                transition: transition.clone(),
            });
            match &mut batch {
                Some((current, list)) if *current == workspace => list.push(transition),
                _ => {
                    if let Some((current, list)) = batch.take() {
                        self.journal.breaker_transitions(&current, &list);
                    }
                    batch = Some((workspace, vec![transition]));
                }
            }
        }
        if let Some((current, list)) = batch {
            self.journal.breaker_transitions(&current, &list);
        }
        self.metrics
            .transitions_dropped
            .store(self.registry.transitions_dropped(), Ordering::Relaxed);
        self.metrics
            .budgets_evicted
            .store(self.registry.budgets_evicted(), Ordering::Relaxed);
    }
}
