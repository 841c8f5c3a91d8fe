//! The breaker on Redis: whether this replica coordinates through Redis or enforces its
//! declared share alone.
//!
//! `Healthy` → `Degraded` on the first failed or timed-out call (a call never waits longer
//! than the command timeout, 100 ms by default, and an idle replica probes every 100 ms, so a
//! hung Redis is noticed within about 200 ms). `Degraded` → `Reconciling` when a probe answers;
//! `Reconciling` → `Healthy` once the replica's live leases are registered again and its local
//! pauses merged (the next probe tick), or back to `Degraded` if that fails.
//!
//! Apart from that state, the cell keeps until when the **books** of a workspace this replica
//! met are being rebuilt (Redis lost them: a new books epoch, `docs/replicas.md`, "Redis loses
//! the books"): meanwhile a healthy replica reports `reconciling` ([`HealthCell::reported`]),
//! though it still coordinates through Redis (whose acquires answer `reconciling` until then).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Instant;

/// The coordination state of this replica (a closed vocabulary: the `/metrics` gauge's label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Every admission goes through Redis.
    Healthy,
    /// Redis is unreachable or hung: the declared per-replica share applies.
    Degraded,
    /// Redis answers again; leases and pauses are being merged (still the local share).
    Reconciling,
}

impl Health {
    /// Every state (the gauge writes one line per state).
    pub const ALL: [Health; 3] = [Health::Healthy, Health::Degraded, Health::Reconciling];

    /// The state's label.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Degraded => "degraded",
            Health::Reconciling => "reconciling",
        }
    }

    fn from_u8(value: u8) -> Self {
        match value {
            0 => Health::Healthy,
            2 => Health::Reconciling,
            _ => Health::Degraded,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            Health::Healthy => 0,
            Health::Degraded => 1,
            Health::Reconciling => 2,
        }
    }
}

/// The shared, lock-free health cell.
#[derive(Debug)]
pub struct HealthCell {
    state: AtomicU8,
    /// The instant the books' deadlines are counted from.
    base: Instant,
    /// Until when (ms after `base`) some workspace's books are being rebuilt.
    books_until: AtomicU64,
}

impl HealthCell {
    /// Starts degraded: nothing is shared until a probe has answered and leases are registered.
    pub fn new() -> Self {
        HealthCell {
            state: AtomicU8::new(Health::Degraded.to_u8()),
            base: Instant::now(),
            books_until: AtomicU64::new(0),
        }
    }

    /// The state the admission path follows.
    pub fn get(&self) -> Health {
        Health::from_u8(self.state.load(Ordering::Acquire))
    }

    /// The state reported (`/readyz`, the `/metrics` gauge): [`get`](Self::get), except that
    /// a healthy replica is `Reconciling` while books it met are being rebuilt.
    pub fn reported(&self) -> Health {
        match self.get() {
            Health::Healthy if self.books_reconciling() => Health::Reconciling,
            other => other,
        }
    }

    /// Whether books this replica met are being rebuilt now.
    pub fn books_reconciling(&self) -> bool {
        self.books_until.load(Ordering::Acquire) > self.elapsed_ms()
    }

    /// Books are being rebuilt for `for_ms` more (extends, never shortens).
    pub fn books_reconcile_for(&self, for_ms: u64) {
        let until = self.elapsed_ms().saturating_add(for_ms);
        self.books_until.fetch_max(until, Ordering::AcqRel);
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Sets `to`; answers the previous state. A change is logged (`turnstile::coordination`):
    /// degraded mode entered at `warn`, left at `info`.
    pub fn set(&self, to: Health) -> Health {
        let from = Health::from_u8(self.state.swap(to.to_u8(), Ordering::AcqRel));
        if from != to {
            log_change(from, to);
        }
        from
    }

    /// Moves `from` → `to` only if the state is still `from` (logged like [`HealthCell::set`]).
    pub fn transition(&self, from: Health, to: Health) -> bool {
        let moved = self
            .state
            .compare_exchange(
                from.to_u8(),
                to.to_u8(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if moved && from != to {
            log_change(from, to);
        }
        moved
    }
}

/// One log line per change of the coordination state (no Redis text, no tenant).
fn log_change(from: Health, to: Health) {
    match to {
        Health::Degraded => tracing::warn!(
            target: "turnstile::coordination",
            from = from.as_str(),
            to = to.as_str(),
            "degraded mode entered: this replica enforces its declared share alone"
        ),
        _ => tracing::info!(
            target: "turnstile::coordination",
            from = from.as_str(),
            to = to.as_str(),
            "coordination state changed"
        ),
    }
}

impl Default for HealthCell {
    fn default() -> Self {
        Self::new()
    }
}
