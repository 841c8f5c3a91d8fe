//! The coordinator's background task: every `probe_every` it probes Redis; every
//! `renew_every` it renews this replica's leases in one pipelined call (one batch per
//! workspace); after a failure, once a probe answers, it reconciles (registers every live lease
//! again, merges the pauses and breaker outcomes seen while degraded) before the replica is
//! healthy again.
//!
//! Invariants: a renewal only extends leases that are still in Redis (`ZADD XX`), so a lease
//! released meanwhile never comes back; registration (`RenewMode::Register`) happens only on
//! recovery. What fails to merge is kept for the next recovery; the degraded share's buckets
//! are dropped only once everything merged.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use turnstile_admission::Millis;

use super::Coordinator;
use crate::breaker::{BreakerKeys, SeenOutcomes};
use crate::error::CoordError;
use crate::health::Health;
use crate::keys::WorkspaceKeys;
use crate::protocol::{RenewBatch, RenewMode};

impl Coordinator {
    fn renew_batches(&self) -> Vec<RenewBatch> {
        let inner = self.lock();
        let mut by_workspace: HashMap<&str, RenewBatch> = HashMap::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for held in inner.leases.values() {
            let batch = by_workspace
                .entry(held.lane.workspace().prefix())
                .or_insert_with(|| RenewBatch {
                    keys: Vec::new(),
                    members: Vec::new(),
                });
            for key in held.lease_keys() {
                let i = *index.entry(key).or_insert_with(|| {
                    batch.keys.push(key.to_string());
                    batch.keys.len() - 1
                });
                batch.members.push((i, held.member.to_string()));
            }
        }
        by_workspace.into_values().collect()
    }

    /// Registers every live lease again and merges the pauses seen while degraded.
    async fn reconcile(&self, now: Millis) -> Result<(), CoordError> {
        let batches = self.renew_batches();
        self.store
            .renew(&batches, self.config.liveness_ms, RenewMode::Register)
            .await?;
        let pauses: Vec<(WorkspaceKeys, String, Millis)> =
            self.lock().pauses.drain().map(|(_, v)| v).collect();
        for (keys, pause_key, until) in pauses {
            let remaining = until.saturating_sub(now);
            if remaining == 0 {
                continue;
            }
            if let Err(error) = self.store.pause_key(&keys, &pause_key, remaining).await {
                self.note_pause(&keys, &pause_key, until);
                return Err(error);
            }
        }
        let outcomes: Vec<(BreakerKeys, SeenOutcomes)> =
            self.lock().outcomes.drain().map(|(_, v)| v).collect();
        let mut pending = outcomes.into_iter();
        while let Some((breaker, seen)) = pending.next() {
            if seen.is_empty() {
                continue;
            }
            if let Err(error) = self.store.merge_breaker(&breaker, &seen).await {
                let mut inner = self.lock();
                for (breaker, seen) in std::iter::once((breaker, seen)).chain(pending) {
                    inner.outcomes.insert(breaker.key.clone(), (breaker, seen));
                }
                return Err(error);
            }
        }
        self.lock().buckets.clear();
        self.metrics.reconciliations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// One tick of the background task: probe, and renew or reconcile as due. `renew_due`
    /// says whether this tick renews the leases.
    pub async fn tick(&self, now: Millis, renew_due: bool) {
        match self.store.time().await {
            Err(error) => self.failed(&error),
            Ok((_, library_loaded)) => {
                let health = self.health.get();
                if health != Health::Healthy || library_loaded {
                    self.health.set(Health::Reconciling);
                    match self.reconcile(now).await {
                        Ok(()) => {
                            self.health.transition(Health::Reconciling, Health::Healthy);
                        }
                        Err(error) => self.failed(&error),
                    }
                } else if renew_due {
                    let batches = self.renew_batches();
                    if let Err(error) = self
                        .store
                        .renew(&batches, self.config.liveness_ms, RenewMode::Existing)
                        .await
                    {
                        self.failed(&error);
                    }
                }
            }
        }
    }

    /// The background task: probes every `probe_every`, renews every `renew_every`. `clock`
    /// reads the replica's clock (epoch ms). Ends when the last other reference is gone.
    pub async fn run(self: Arc<Self>, clock: impl Fn() -> Millis + Send + 'static) {
        let mut interval = tokio::time::interval(self.config.probe_every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let per_renew = (self.config.renew_every.as_millis()
            / self.config.probe_every.as_millis().max(1))
        .max(1);
        let mut ticks: u128 = 0;
        loop {
            interval.tick().await;
            if Arc::strong_count(&self) == 1 {
                return;
            }
            ticks += 1;
            self.tick(clock(), ticks.is_multiple_of(per_renew)).await;
        }
    }
}
