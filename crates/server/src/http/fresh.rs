//! Connections that have sent nothing yet, and which of them gives its place up when every
//! connection slot is taken.
//!
//! A connection is *fresh* from its accept until the first byte of its first request is read.
//! While both the general pool (`http.max_connections`) and the operators' slice
//! (`http.reserved_connections`) are full, the accept loop asks [`Fresh::evict_when_due`] for
//! a place: the oldest fresh connection, once it has been open `http.full_pool_first_byte_ms`,
//! is closed, and its slot goes to the next connection waiting in the listen backlog (a
//! `/healthz` probe among them). So idle connections (connected, nothing sent) cannot hold the
//! service for the whole header timeout: under a flood of them, a waiting connection is
//! accepted within about `full_pool_first_byte_ms` (at once once the flood has been open that
//! long). Each eviction is counted as `turnstile_http_cuts_total{kind="first-byte-timeout"}`.
//!
//! Invariants: only a connection that has sent nothing is ever evicted (one whose first byte
//! arrives while it is being evicted keeps its place: the byte wins); at most one eviction is
//! under way at a time, so the loop closes no more connections than slots it needs; the map
//! holds only fresh connections now (bounded by the open connections).
//!
//! Complexity: one mutex-guarded `BTreeMap` insert at accept and one removal at the first byte
//! or the close, per connection (never per request).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The fresh connections of one listener, oldest first.
#[derive(Debug)]
pub struct Fresh {
    /// How long a fresh connection keeps its place once every slot is taken.
    grace: Duration,
    inner: Mutex<Inner>,
    /// A connection registered, or an eviction ended.
    changed: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// Fresh connections by accept order.
    waiting: BTreeMap<u64, Arc<Arrival>>,
    /// The connection being evicted, until it closed or its first byte arrived.
    evicting: Option<u64>,
}

/// One connection's place in [`Fresh`], shared by its socket ([`crate::http::conn`]) and its
/// task; dropping the task's [`FreshGuard`] forgets it.
#[derive(Debug)]
pub struct Arrival {
    id: u64,
    at: Instant,
    evicted: AtomicBool,
    waker: AtomicWaker,
    fresh: Arc<Fresh>,
}

impl Fresh {
    pub fn new(grace: Duration) -> Arc<Self> {
        Arc::new(Fresh {
            grace,
            inner: Mutex::new(Inner::default()),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a connection accepted now; the guard forgets it when the connection ends.
    pub fn arrive(self: &Arc<Self>) -> (Arc<Arrival>, FreshGuard) {
        let mut inner = self.lock();
        let id = inner.next;
        inner.next += 1;
        let arrival = Arc::new(Arrival {
            id,
            at: Instant::now(),
            evicted: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            fresh: self.clone(),
        });
        inner.waiting.insert(id, arrival.clone());
        drop(inner);
        self.changed.notify_one();
        (arrival.clone(), FreshGuard(arrival))
    }

    /// Waits until a fresh connection is due (open `grace` and no eviction under way), tells it
    /// to close and returns. Cancel-safe: dropped before it returns, it evicted nothing.
    pub async fn evict_when_due(&self) {
        loop {
            let due = {
                let mut inner = self.lock();
                match (inner.evicting, inner.waiting.first_key_value()) {
                    (None, Some((&id, arrival))) => {
                        let due = arrival.at + self.grace;
                        if due <= Instant::now() {
                            let arrival = arrival.clone();
                            inner.evicting = Some(id);
                            drop(inner);
                            arrival.evicted.store(true, Ordering::Release);
                            arrival.waker.wake();
                            return;
                        }
                        Some(due)
                    }
                    _ => None,
                }
            };
            match due {
                Some(due) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(due) => {}
                        _ = self.changed.notified() => {}
                    }
                }
                None => self.changed.notified().await,
            }
        }
    }

    /// Fresh connections now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Forgets connection `id` (it sent its first byte, or it ended).
    fn forget(&self, id: u64) {
        let mut inner = self.lock();
        inner.waiting.remove(&id);
        let ended_eviction = inner.evicting == Some(id);
        if ended_eviction {
            inner.evicting = None;
        }
        drop(inner);
        if ended_eviction {
            self.changed.notify_one();
        }
    }
}

impl Arrival {
    /// The first byte arrived: the connection is no longer fresh (called once per connection).
    pub fn started(&self) {
        self.fresh.forget(self.id);
    }

    /// Whether the connection was told to close; registers `cx` to be woken when it is.
    pub fn poll_evicted(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.evicted.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        if self.evicted.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Held by a connection's task, dropped after its connection slot: forgets the connection, so
/// an eviction under way ends only once its slot is free again.
#[derive(Debug)]
pub struct FreshGuard(Arc<Arrival>);

impl Drop for FreshGuard {
    fn drop(&mut self) {
        self.0.fresh.forget(self.0.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use futures_util::FutureExt;

    #[tokio::test]
    async fn the_oldest_fresh_connection_is_evicted_once_due_and_one_at_a_time() {
        let fresh = Fresh::new(Duration::from_millis(200));
        let (a, guard_a) = fresh.arrive();
        let (b, _guard_b) = fresh.arrive();
        let (c, _guard_c) = fresh.arrive();
        // Not due yet: nothing is evicted before `a` has been open 200 ms.
        assert!(fresh.evict_when_due().now_or_never().is_none());
        assert!(!a.evicted.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(200)).await;
        fresh.evict_when_due().await;
        assert!(a.evicted.load(Ordering::Relaxed));
        // One eviction at a time: `b` is due too, but `a` has not closed yet.
        assert!(fresh.evict_when_due().now_or_never().is_none());
        drop(guard_a);
        // `b` sent a byte meanwhile: it is never evicted; `c` is next.
        b.started();
        fresh.evict_when_due().await;
        assert!(!b.evicted.load(Ordering::Relaxed));
        assert!(c.evicted.load(Ordering::Relaxed));
        // `c`'s first byte won the race: the eviction ends, and nobody is fresh any more.
        c.started();
        assert_eq!(fresh.len(), 0);
        assert!(fresh.evict_when_due().now_or_never().is_none());
    }
}
