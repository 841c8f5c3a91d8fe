//! Time sources for the pass loop. The rules never read a clock; the pass loop asks its
//! [`TimeSource`] for `now` before each step, so tests and simulations drive it on virtual time
//! with [`ManualClock`], and the CLI runs it on the shell's one
//! [`Clock`](turnstile_shell::Clock), the only place that reads the wall clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A source of `now` in epoch milliseconds.
pub trait TimeSource {
    /// The current time in epoch ms.
    fn now_ms(&self) -> u64;
}

/// The shell's one clock (tokio time, so it follows `tokio::time::pause()`): what the CLI's
/// pass loop runs on.
impl TimeSource for turnstile_shell::Clock {
    fn now_ms(&self) -> u64 {
        turnstile_shell::Clock::now_ms(self)
    }
}

/// A virtual clock; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock showing `now`.
    pub fn new(now: u64) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(now)),
        }
    }

    /// Sets the time.
    pub fn set(&self, now: u64) {
        self.now.store(now, Ordering::SeqCst);
    }

    /// Moves the time forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl TimeSource for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}
