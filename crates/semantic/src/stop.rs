//! The stop signal of the pass loop: checked before every step, so a stop requested during a
//! call takes effect as soon as that call's record is written, and every item not yet read stays
//! pending.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Asked before each step of a pass.
pub trait StopSignal {
    /// Whether the pass should stop now.
    fn stop_requested(&self) -> bool;
}

/// Never stops: the pass runs until nothing more can be done.
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverStop;

impl StopSignal for NeverStop {
    fn stop_requested(&self) -> bool {
        false
    }
}

/// A shareable flag (for example set from a signal handler or another thread).
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// A flag that is not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests a stop.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl StopSignal for StopFlag {
    fn stop_requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl<F: Fn() -> bool> StopSignal for F {
    fn stop_requested(&self) -> bool {
        self()
    }
}
