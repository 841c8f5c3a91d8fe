//! [`Coordinator`]: what a replica's admission path calls. It owns the Redis client, this
//! replica's shared leases, its health, and the degraded share.
//!
//! # Protocol
//!
//! - `acquire` (after the local core granted): healthy, one acquire operation, sent at once as
//!   `ts_acquire_v5` when nothing is in flight for the workspace, else in its next
//!   `ts_batch_v5` call ([`crate::batcher`]: what arrives while a call is in flight goes in the
//!   next one); degraded, the declared share alone (no Redis call). A
//!   failed or timed-out batch makes the replica degraded at once and each admission in it is
//!   decided by the share, so no admission waits on Redis for longer than the command timeout.
//! - `release` / `forget`: one release operation (alone or in the workspace's next batch, as an
//!   acquire) when healthy;
//!   degraded, nothing (Redis drops the lease when its liveness runs out).
//! - The background task ([`Coordinator::run`]) probes every `probe_every` (an idle replica
//!   notices a hung Redis within probe + timeout), renews this replica's leases every
//!   `renew_every` in one pipelined call (client heartbeats cost no Redis call), and on
//!   recovery registers every live lease again and merges the pauses it saw while degraded.
//!
//! # Invariants
//!
//! - Every lease this replica holds is in `leases` with a member unique to this replica; a
//!   lease leaves it exactly once (`release` or `forget`), and only then is it released in
//!   Redis, so a renewal (`ZADD XX`) never brings a released lease back.
//! - A dead replica's leases expire in Redis `liveness_ms` after its last renewal, whatever the
//!   client-facing lease TTL.
//! - No tenant ID reaches Redis (hashed keys), a log or a metric label.
//! - An acquire and its release send exactly what the reference encoding (`protocol`) makes for
//!   the lane, from the lane's remembered pieces ([`LaneMemo`]: key names, shape; built once
//!   per lane and limits, bounded); a lease's record shares them, it copies no key name.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use turnstile_admission::{Millis, Reason};
use turnstile_admission::{TokenBucket, MINUTE_MS, SECOND_MS};

mod books;
mod config;
mod renewal;

pub use books::{BOOKS_RECONCILE_MS, PROBE_EVERY_MAX_MS};
pub use config::{CoordConfig, DEFAULT_TURN_WINDOW_MS, TURN_NEXT_POLL_MS};

use crate::batcher::{Batcher, MAX_BATCH};
use crate::breaker::{BreakerKeys, Outcome, SeenOutcomes};
use crate::error::CoordError;
use crate::health::{Health, HealthCell};
use crate::keys::WorkspaceKeys;
use crate::lane_keys::{LaneKeys, LaneMemo, ReleaseOf};
use crate::metrics::CoordMetrics;
use crate::protocol::Word;
use crate::protocol::{decode_acquire, decode_release};
use crate::share::DegradedShare;
use crate::spec::LaneSpec;
use crate::store::RedisStore;
use crate::verdict::Verdict;

/// How an admission was coordinated (the evidence's `coordination` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Through the shared limits in Redis.
    Shared,
    /// By this replica's declared share alone (Redis unreachable).
    Degraded,
}

/// The shared limits' answer for one admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Admitted; the lease is held until `release` or `forget`.
    Granted(Mode),
    /// Full now; may change `after_ms` from now (unknown: `None`).
    Wait {
        /// The full limit.
        reason: Reason,
        /// When it may change, from now.
        after_ms: Option<Millis>,
        /// How it was decided.
        mode: Mode,
    },
    /// A contended shared scope has room, but another principal waiting for it holds fewer:
    /// its turn first (fair turns). The caller waits (as for `Wait` with `concurrency`), or
    /// gives its local lease back to its local fair queue meanwhile.
    Turn,
    /// The provider is paused for `remaining_ms`.
    Paused {
        /// How long the pause still lasts.
        remaining_ms: Millis,
    },
    /// Never fits (a shared budget).
    Rejected(Reason),
    /// Degraded and this lane fails closed (`closed` share, or a money or token budget).
    Unavailable,
}

/// A lease this replica holds in the shared limits (opaque to hosts): its lane's key names
/// (shared by every lease of the lane, `LaneKeys`) and what is its own.
pub struct HeldShared {
    member: Word,
    lane: Arc<LaneKeys>,
    /// It holds the shared breaker's half-open probe (its probe zset is one of its lease keys).
    probe: bool,
    /// The invocation's budget key (a lane that charges budgets).
    budget_key: Option<Word>,
    charged_tokens: u64,
    charged_micro: u64,
}

impl HeldShared {
    /// The lease zsets it is in.
    fn lease_keys(&self) -> &[Word] {
        self.lane.lease_keys(self.probe)
    }
}

/// How many lease zsets with no lease of this replica its books may keep counting (at zero).
const IN_FLIGHT_SLACK: usize = 1024;

/// The books' maps: hashed with foldhash (seeded per map), a few times cheaper than SipHash on
/// tokens and key names, which are this replica's own (a client's token only looks up).
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Default)]
struct Inner {
    leases: Map<String, HeldShared>,
    /// This replica's leases per lease zset (what the degraded share counts); a zset whose
    /// leases were all released may stay at zero (at most [`IN_FLIGHT_SLACK`] more entries
    /// than four per held lease).
    in_flight: Map<Word, u64>,
    /// Degraded-mode buckets by bucket key (created full at first use).
    buckets: HashMap<String, TokenBucket>,
    /// Pauses seen while degraded: pause key → (workspace, provider hash key, local until).
    pauses: HashMap<String, (WorkspaceKeys, String, Millis)>,
    /// Breaker outcomes seen while degraded (or whose release failed): breaker key → outcomes.
    outcomes: HashMap<String, (BreakerKeys, SeenOutcomes)>,
    /// The books epoch last seen per workspace this replica holds leases in (key prefix →
    /// epoch): one other than Redis's means Redis lost the books since.
    epochs: HashMap<String, String>,
}

/// A replica's coordination through Redis.
pub struct Coordinator {
    pub(crate) store: RedisStore,
    /// Acquires and releases, batched per workspace.
    batcher: Batcher,
    config: CoordConfig,
    replica: String,
    next: AtomicU64,
    health: Arc<HealthCell>,
    inner: Mutex<Inner>,
    /// The key names and argument pieces of the lanes this replica coordinates (bounded).
    lanes: Mutex<LaneMemo>,
    /// Notified when this replica releases a lease (its waiters try again at once).
    released: Notify,
    /// The kind of the last failed call ([`CoordError::kind`]).
    last_failure: Mutex<Option<&'static str>>,
    /// The counters `/metrics` reads.
    pub metrics: Arc<CoordMetrics>,
}

fn random_replica_id() -> String {
    let mut bytes = [0u8; 8];
    // Without OS randomness, fall back to the process ID and time: uniqueness is what matters.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes = (nanos ^ u64::from(std::process::id())).to_le_bytes();
    }
    hex::encode(bytes)
}

impl Coordinator {
    /// A replica's coordinator for `config` (connects lazily: a Redis down at start makes it
    /// degraded, not unable to start).
    pub fn new(config: CoordConfig) -> Result<Arc<Self>, CoordError> {
        books::check_probe(&config)?;
        let store = RedisStore::new(&config.redis_url, config.topology, config.timeout)?;
        let lanes = LaneMemo::new(config.liveness_ms, config.turn_window_ms);
        // On a cluster each lane's own connection takes the first seed's credentials and asks
        // the slot map for its workspace's primary (then follows `MOVED`).
        let direct = crate::link::first_url(&config.redis_url, config.topology).map(str::to_owned);
        Ok(Arc::new(Coordinator {
            batcher: Batcher::new(store.clone(), MAX_BATCH, direct),
            store,
            config,
            replica: random_replica_id(),
            next: AtomicU64::new(0),
            health: Arc::new(HealthCell::new()),
            inner: Mutex::new(Inner::default()),
            lanes: Mutex::new(lanes),
            released: Notify::new(),
            last_failure: Mutex::new(None),
            metrics: Arc::default(),
        }))
    }

    /// Whether it coordinates through Redis now.
    pub fn health(&self) -> Health {
        self.health.get()
    }

    /// The health cell itself (what the `/metrics` collector reads).
    pub(crate) fn health_cell(&self) -> Arc<HealthCell> {
        Arc::clone(&self.health)
    }

    /// Its configuration.
    pub fn config(&self) -> &CoordConfig {
        &self.config
    }

    /// Leases this replica holds (shared or degraded).
    pub fn held(&self) -> usize {
        self.lock().leases.len()
    }

    /// Waits until this replica releases a lease.
    pub async fn released(&self) {
        self.released.notified().await;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn failed(&self, error: &CoordError) {
        self.note_failure(error);
        self.metrics.errors.fetch_add(1, Ordering::Relaxed);
        self.health.set(Health::Degraded);
        self.batcher.invalidate();
        self.store.rebuild();
    }

    /// A batched operation got no answer: degraded; the failed call is counted once (by its
    /// first operation).
    fn batch_failed(&self, failure: &crate::batcher::Failure) {
        self.note_failure(&failure.error);
        if failure.first {
            self.metrics.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.health.set(Health::Degraded);
        self.batcher.invalidate();
        self.store.rebuild();
    }

    fn note_failure(&self, error: &CoordError) {
        *self
            .last_failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(error.kind());
    }

    /// The kind of the last failed call to Redis ([`CoordError::kind`]: `timeout`, `redis`,
    /// ...), if one failed: why a replica that is not healthy is not.
    pub fn last_failure(&self) -> Option<&'static str> {
        *self
            .last_failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new lease member: `<replica id>-<n>`.
    fn member(&self) -> Word {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut member = String::with_capacity(self.replica.len() + 21);
        member.push_str(&self.replica);
        member.push('-');
        let mut digits = [0u8; 20];
        member.push_str(crate::resp::decimal(&mut digits, n));
        Word::from(member)
    }

    /// The key names and argument pieces of `spec`'s lane (remembered, [`LaneMemo`]).
    fn lane(&self, spec: &LaneSpec) -> Arc<LaneKeys> {
        self.lanes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(spec)
    }

    /// What this replica keeps of a lease of `spec` granted in `lane` (`spec`'s pieces);
    /// `probe`: it holds the shared breaker's half-open probe lease (renewed and released with
    /// the lease's other zsets).
    fn held_for(
        spec: &LaneSpec,
        lane: Arc<LaneKeys>,
        member: Word,
        budget_key: Option<Word>,
        probe: bool,
    ) -> HeldShared {
        HeldShared {
            member,
            lane,
            probe,
            budget_key,
            charged_tokens: spec.tokens.unwrap_or(0),
            charged_micro: spec.micro_usd.unwrap_or(0),
        }
    }

    fn hold(&self, token: &str, held: HeldShared) {
        Self::hold_in(&mut self.lock(), token, held);
    }

    /// [`hold`](Self::hold) under a lock the caller already holds (the degraded share counts
    /// and takes its slot under one lock, so two admissions cannot both take the last one).
    fn hold_in(inner: &mut Inner, token: &str, held: HeldShared) {
        for key in held.lease_keys() {
            match inner.in_flight.get_mut(key) {
                Some(count) => *count += 1,
                None => {
                    inner.in_flight.insert(key.clone(), 1);
                }
            }
        }
        inner.leases.insert(token.to_owned(), held);
    }

    fn unhold(&self, token: &str) -> Option<HeldShared> {
        let mut inner = self.lock();
        let held = inner.leases.remove(token)?;
        for key in held.lease_keys() {
            if let Some(count) = inner.in_flight.get_mut(key) {
                *count = count.saturating_sub(1);
            }
        }
        // A key's count stays at zero until the next lease of its lane (no removal and
        // insertion per pair); zeros are dropped once they outnumber the leases.
        if inner.in_flight.len() > IN_FLIGHT_SLACK + 4 * inner.leases.len() {
            inner.in_flight.retain(|_, count| *count > 0);
        }
        Some(held)
    }

    /// Takes over a lease this replica held before a restart (reinstated by the local core):
    /// it is counted by the degraded share and registered in Redis by the next reconciliation
    /// (a replica starts degraded and reconciles on its first probe), without charging its
    /// budgets again.
    pub fn adopt(&self, token: &str, spec: &LaneSpec) {
        let lane = self.lane(spec);
        let budget_key = lane.budget_key(&spec.budget_id);
        let held = Self::held_for(spec, lane, self.member(), budget_key, false);
        self.hold(token, held);
    }

    /// Admits the lease `token` (already granted by the local core) against the shared
    /// limits; `now` is the replica's clock (used only by the degraded share's buckets).
    pub async fn acquire(&self, spec: &LaneSpec, token: &str, now: Millis) -> Admission {
        if self.health.get() != Health::Healthy {
            return self.acquire_degraded(spec, token, now, None);
        }
        let lane = self.lane(spec);
        let mut waited: Millis = 0;
        let (member, budget_key, verdict) = loop {
            let member = self.member();
            let (op, budget_key) =
                lane.acquire(&member, &spec.budget_id, spec.tokens, spec.micro_usd);
            let verdict = match self.batcher.call(lane.workspace().prefix(), op).await {
                Ok(value) => decode_acquire(value).inspect_err(|error| self.failed(error)),
                Err(failure) => {
                    self.batch_failed(&failure);
                    Err(failure.error)
                }
            };
            // The workspace's books are being rebuilt: wait for them, then ask again.
            if let Ok(Verdict::Reconciling { until, now: server }) = verdict {
                if let Some(answer) = self.wait_for_books(until, server, &mut waited).await {
                    return answer;
                }
                if self.health.get() != Health::Healthy {
                    return self.acquire_degraded(spec, token, now, None);
                }
                continue;
            }
            break (member, budget_key, verdict);
        };
        match verdict {
            Ok(Verdict::Granted { probe, .. }) => {
                self.hold(token, Self::held_for(spec, lane, member, budget_key, probe));
                self.metrics
                    .shared_admissions
                    .fetch_add(1, Ordering::Relaxed);
                Admission::Granted(Mode::Shared)
            }
            Ok(Verdict::Defer {
                reason,
                wake,
                now,
                turn_next,
            }) => Admission::Wait {
                reason,
                after_ms: if turn_next {
                    Some(TURN_NEXT_POLL_MS)
                } else {
                    wake.map(|w| w.saturating_sub(now))
                },
                mode: Mode::Shared,
            },
            Ok(Verdict::Turn { .. }) => {
                self.metrics.turns.fetch_add(1, Ordering::Relaxed);
                Admission::Turn
            }
            Ok(Verdict::Paused { until, now }) => Admission::Paused {
                remaining_ms: until.saturating_sub(now),
            },
            Ok(Verdict::Open { until, now }) => Admission::Wait {
                reason: Reason::CircuitOpen,
                after_ms: Some(until.saturating_sub(now)),
                mode: Mode::Shared,
            },
            Ok(Verdict::Reject { reason, .. }) => Admission::Rejected(reason),
            Ok(Verdict::Reconciling { .. }) => Admission::Wait {
                reason: Reason::Concurrency,
                after_ms: Some(1),
                mode: Mode::Shared,
            },
            Err(_) => {
                // The call may have run (or may still run, after a hang): a lease admitted now
                // keeps its member, so Redis never counts it twice; one that is not admitted
                // expires in Redis after its liveness. (Counted and degraded above.)
                self.acquire_degraded(spec, token, now, Some(member))
            }
        }
    }

    fn acquire_degraded(
        &self,
        spec: &LaneSpec,
        token: &str,
        now: Millis,
        member: Option<Word>,
    ) -> Admission {
        let share = self.config.degraded_share;
        if share == DegradedShare::Closed || spec.scopes.iter().any(|s| s.has_usage_budget()) {
            return Admission::Unavailable;
        }
        // The lane's pieces first: the memo has its own lock, never taken under `inner`'s.
        let lane = self.lane(spec);
        let keys = lane.workspace();
        let mut inner = self.lock();
        for scope in &spec.scopes {
            if let Some(limit) = scope.concurrency {
                let held = inner
                    .in_flight
                    .get(keys.leases(&scope.name).as_str())
                    .copied();
                if held.unwrap_or(0) >= share.of(u64::from(limit)) {
                    return Admission::Wait {
                        reason: Reason::Concurrency,
                        after_ms: None,
                        mode: Mode::Degraded,
                    };
                }
            }
        }
        let tokens = spec.tokens.unwrap_or(0);
        let mut takes = Vec::new();
        for scope in &spec.scopes {
            let buckets = [
                (
                    scope.requests,
                    keys.requests(&scope.name),
                    MINUTE_MS,
                    1,
                    Reason::RequestsPerMinute,
                ),
                (
                    scope.tokens,
                    keys.tokens(&scope.name),
                    SECOND_MS,
                    tokens,
                    Reason::TokensPerSecond,
                ),
            ];
            for (spec_bucket, key, period, units, reason) in buckets {
                let Some(b) = spec_bucket else { continue };
                let bucket = inner.buckets.entry(key.clone()).or_insert_with(|| {
                    TokenBucket::full_with_capacity(
                        share.of(b.rate),
                        share.of(b.capacity),
                        period,
                        now,
                    )
                });
                bucket.refill(now);
                if !bucket.has(units) {
                    return match bucket.wait_for(units) {
                        Some(after) => Admission::Wait {
                            reason,
                            after_ms: Some(after),
                            mode: Mode::Degraded,
                        },
                        None => Admission::Unavailable,
                    };
                }
                takes.push((key, units));
            }
        }
        for (key, units) in takes {
            if let Some(bucket) = inner.buckets.get_mut(&key) {
                bucket.take(units);
            }
        }
        // Counted under the lock that checked the share: checked and taken at once.
        let budget_key = lane.budget_key(&spec.budget_id);
        let member = member.unwrap_or_else(|| self.member());
        let held = Self::held_for(spec, lane, member, budget_key, false);
        Self::hold_in(&mut inner, token, held);
        drop(inner);
        self.metrics
            .degraded_admissions
            .fetch_add(1, Ordering::Relaxed);
        Admission::Granted(Mode::Degraded)
    }

    /// Takes `token`'s shared lease out of this replica's books (no Redis call): from now on
    /// it is neither renewed nor counted by the degraded share. `None` if not held here.
    /// Follow with [`finish`](Self::finish), or [`restore`](Self::restore) if the local release
    /// did not happen.
    pub fn claim(&self, token: &str) -> Option<HeldShared> {
        let held = self.unhold(token)?;
        self.released.notify_waiters();
        Some(held)
    }

    /// Puts back a lease [`claim`](Self::claim)ed for a release that did not happen.
    pub fn restore(&self, token: &str, held: HeldShared) {
        self.hold(token, held);
    }

    /// Releases a claimed lease in Redis with what it used and an optional provider pause
    /// (`retry-after`): one call when healthy; degraded, nothing (its liveness runs out) but the
    /// pause is kept for the merge on recovery.
    pub async fn finish(
        &self,
        held: HeldShared,
        pause_ms: Millis,
        actual_tokens: Option<u64>,
        actual_micro: Option<u64>,
        now: Millis,
    ) {
        self.finish_outcome(
            held,
            pause_ms,
            actual_tokens,
            actual_micro,
            Outcome::None,
            now,
        )
        .await;
    }

    /// [`finish`](Self::finish) that also reports the call's outcome to the lane's shared
    /// breaker (in the same call). Degraded, or if the call fails, the outcome is kept and
    /// merged into the shared breaker on recovery.
    pub async fn finish_outcome(
        &self,
        held: HeldShared,
        pause_ms: Millis,
        actual_tokens: Option<u64>,
        actual_micro: Option<u64>,
        outcome: Outcome,
        now: Millis,
    ) {
        let lane = &held.lane;
        if self.health.get() != Health::Healthy {
            self.note_outcome(lane.breaker(), outcome);
            if pause_ms > 0 {
                self.note_pause(
                    lane.workspace(),
                    lane.pause_key(),
                    now.saturating_add(pause_ms),
                );
            }
            return;
        }
        let op = lane.release(&ReleaseOf {
            member: held.member.clone(),
            probe: held.probe,
            budget_key: held.budget_key.clone(),
            pause_ms,
            charged_tokens: held.charged_tokens,
            actual_tokens,
            charged_micro: held.charged_micro,
            actual_micro,
            outcome,
        });
        let released = match self.batcher.call(lane.workspace().prefix(), op).await {
            Ok(value) => decode_release(value).map_err(|error| self.failed(&error)),
            Err(failure) => {
                self.batch_failed(&failure);
                Err(())
            }
        };
        if released.is_err() {
            self.note_outcome(lane.breaker(), outcome);
            if pause_ms > 0 {
                self.note_pause(
                    lane.workspace(),
                    lane.pause_key(),
                    now.saturating_add(pause_ms),
                );
            }
        }
    }

    /// [`claim`](Self::claim) then [`finish`](Self::finish); answers whether this replica
    /// held the lease.
    pub async fn release(
        &self,
        token: &str,
        pause_ms: Millis,
        actual_tokens: Option<u64>,
        actual_micro: Option<u64>,
        now: Millis,
    ) -> bool {
        let Some(held) = self.claim(token) else {
            return false;
        };
        self.finish(held, pause_ms, actual_tokens, actual_micro, now)
            .await;
        true
    }

    /// A provider pause (`POST …/retry-after`): shared when healthy, kept for the merge when
    /// degraded. Answers the pause's remaining ms as Redis sees it (healthy) or as given.
    pub async fn pause(
        &self,
        workspace: &str,
        provider: &str,
        pause_ms: Millis,
        now: Millis,
    ) -> Millis {
        let keys = WorkspaceKeys::new(workspace);
        if self.health.get() == Health::Healthy {
            match self.store.pause(workspace, provider, pause_ms).await {
                Ok((until, server_now)) => return until.saturating_sub(server_now),
                Err(error) => self.failed(&error),
            }
        }
        let pause_key = keys.pause(provider);
        self.note_pause(&keys, &pause_key, now.saturating_add(pause_ms));
        pause_ms
    }

    fn note_outcome(&self, breaker: Option<&BreakerKeys>, outcome: Outcome) {
        let Some(breaker) = breaker else { return };
        if outcome == Outcome::None {
            return;
        }
        self.lock()
            .outcomes
            .entry(breaker.key.clone())
            .or_insert_with(|| (breaker.clone(), SeenOutcomes::default()))
            .1
            .record(outcome);
    }

    fn note_pause(&self, keys: &WorkspaceKeys, pause_key: &str, until: Millis) {
        let mut inner = self.lock();
        let entry = inner
            .pauses
            .entry(pause_key.to_owned())
            .or_insert_with(|| (keys.clone(), pause_key.to_owned(), until));
        entry.2 = entry.2.max(until);
    }

    /// Deletes an invocation's shared budget lines (best effort: degraded, they expire).
    pub async fn release_budget(&self, workspace: &str, budget_id: &str) {
        if self.health.get() == Health::Healthy {
            if let Err(error) = self.store.release_budget(workspace, budget_id).await {
                self.failed(&error);
            }
        }
    }
}
