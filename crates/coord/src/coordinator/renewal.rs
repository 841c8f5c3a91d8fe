//! The coordinator's background task: every `probe_every` it probes Redis and checks the books
//! of every workspace it holds leases in; every `renew_every` it renews this replica's leases
//! in one pipelined call (one batch per workspace); after a failure, once a probe answers, it
//! reconciles (registers every live lease again, merges the pauses and breaker outcomes seen
//! while degraded) before the replica is healthy again.
//!
//! Invariants: a renewal only extends leases that are still in Redis (`ZADD XX`), so a lease
//! released meanwhile never comes back; registration (`RenewMode::Register`) happens on
//! recovery and when Redis lost the books: a workspace's books epoch missing or not the one this
//! replica knew (checked every probe, so within one probe of the loss, well inside the
//! library's reconciliation window during which nobody is granted), or leases this replica
//! still holds missing from a renewal (a lease zset evicted or deleted). What fails to merge is
//! kept for the next recovery; the degraded share's buckets are dropped only once everything
//! merged.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use turnstile_admission::Millis;

use super::Coordinator;
use crate::breaker::{BreakerKeys, SeenOutcomes};
use crate::error::CoordError;
use crate::health::Health;
use crate::keys::WorkspaceKeys;
use crate::protocol::{RenewBatch, RenewMode, Renewed};

impl Coordinator {
    /// One renewal batch per workspace this replica holds leases in, with the books epoch it
    /// knows there; `only`: the workspaces (key prefixes) to include (all: `None`). Epochs of
    /// workspaces it holds nothing in are forgotten (a later lease there learns the epoch
    /// anew). With `mode` [`RenewMode::Check`] a batch names one lease zset and no member (the
    /// check of every probe sends no lease).
    fn renew_batches(&self, only: Option<&HashSet<String>>, mode: RenewMode) -> Vec<RenewBatch> {
        let check = mode == RenewMode::Check;
        let mut inner = self.lock();
        let inner = &mut *inner;
        let mut by_workspace: HashMap<&str, RenewBatch> = HashMap::new();
        let mut index: HashMap<(&str, &str), usize> = HashMap::new();
        for held in inner.leases.values() {
            let workspace = held.lane.workspace().prefix();
            if only.is_some_and(|only| !only.contains(workspace)) {
                continue;
            }
            let batch = by_workspace.entry(workspace).or_insert_with(|| RenewBatch {
                workspace: workspace.to_owned(),
                known: inner.epochs.get(workspace).cloned(),
                keys: Vec::new(),
                members: Vec::new(),
            });
            if check {
                if batch.keys.is_empty() {
                    if let Some(key) = held.lease_keys().first() {
                        batch.keys.push(key.to_string());
                    }
                }
                continue;
            }
            for key in held.lease_keys() {
                let i = *index.entry((workspace, key)).or_insert_with(|| {
                    batch.keys.push(key.to_string());
                    batch.keys.len() - 1
                });
                batch.members.push((i, held.member.to_string()));
            }
        }
        if only.is_none() {
            inner
                .epochs
                .retain(|workspace, _| by_workspace.contains_key(workspace.as_str()));
        }
        by_workspace
            .into_values()
            .filter(|batch| !batch.keys.is_empty())
            .collect()
    }

    /// Renews (or checks, or registers) `batches` and takes in what Redis answered: the books
    /// epoch of each workspace, a loss found (counted; the books are then reported
    /// reconciling), and the workspaces whose leases must be registered again: books lost on a
    /// check (which writes nothing), or leases this replica still holds missing from a
    /// renewal.
    async fn renew_and_check(
        &self,
        batches: &[RenewBatch],
        mode: RenewMode,
    ) -> Result<HashSet<String>, CoordError> {
        let answers = self
            .store
            .renew(batches, self.config.liveness_ms, mode)
            .await?;
        let mut again = HashSet::new();
        for (batch, renewed) in batches.iter().zip(answers) {
            let Renewed {
                now,
                epoch,
                lost,
                missing,
            } = renewed;
            if lost {
                self.metrics.books_lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    target: "turnstile::coordination",
                    "Redis lost a workspace's books (flushed, restarted empty or evicted): this replica's leases there are registered again before anyone is granted"
                );
                if mode == RenewMode::Check {
                    again.insert(batch.workspace.clone());
                }
            }
            let settles = epoch.parse::<Millis>().unwrap_or(0);
            if settles > now {
                self.health.books_reconcile_for(settles - now);
            }
            if !missing.is_empty() && self.still_held(&missing) {
                self.metrics.books_lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    target: "turnstile::coordination",
                    "leases of this replica were missing from Redis (evicted or deleted: use maxmemory-policy noeviction): registered again"
                );
                again.insert(batch.workspace.clone());
            }
            self.lock().epochs.insert(batch.workspace.clone(), epoch);
        }
        Ok(again)
    }

    /// Whether any of `members` is a lease this replica still holds (a member released since
    /// its renewal was built is missing for that reason alone).
    fn still_held(&self, members: &[String]) -> bool {
        let members: HashSet<&str> = members.iter().map(String::as_str).collect();
        self.lock()
            .leases
            .values()
            .any(|held| members.contains(&*held.member))
    }

    /// Registers again the leases of the workspaces in `again`.
    async fn register_again(&self, again: &HashSet<String>) -> Result<(), CoordError> {
        if again.is_empty() {
            return Ok(());
        }
        let batches = self.renew_batches(Some(again), RenewMode::Register);
        self.renew_and_check(&batches, RenewMode::Register)
            .await
            .map(|_| ())
    }

    /// Registers every live lease again and merges the pauses seen while degraded.
    async fn reconcile(&self, now: Millis) -> Result<(), CoordError> {
        let batches = self.renew_batches(None, RenewMode::Register);
        self.renew_and_check(&batches, RenewMode::Register).await?;
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

    /// One tick of the background task: probe, check the books, and renew or reconcile as
    /// due. `renew_due` says whether this tick renews the leases.
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
                } else {
                    // Every probe checks the books (one small call per workspace held in, no
                    // member sent); a renewal is due every `renew_every`.
                    let mode = if renew_due {
                        RenewMode::Existing
                    } else {
                        RenewMode::Check
                    };
                    let batches = self.renew_batches(None, mode);
                    let checked = match self.renew_and_check(&batches, mode).await {
                        Ok(again) => self.register_again(&again).await,
                        Err(error) => Err(error),
                    };
                    if let Err(error) = checked {
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
