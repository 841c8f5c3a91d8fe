//! Bounded waits without a timer when nothing has to wait, and one timer when something does.
//!
//! A proxied call waits on the client's body, the upstream's head and the upstream's body, each
//! bounded by a deadline, and heartbeats its lease meanwhile. Most of these waits are over
//! before they begin (the bytes are already in the socket buffer). A tokio timer costs a lock
//! of the runtime's timer wheel to register and another to cancel, so:
//!
//! - [`poll_once`]: a future is polled once with the task's own waker before any timer exists;
//!   only a future that is still pending gets one.
//! - [`within`]: a future bounded by a deadline *and* heartbeating a lease runs on one timer,
//!   set to whichever of the two comes first, instead of one timer each.
//!
//! Invariants: a future that is ready is never reported as timed out (the future is always
//! polled before the timer, as `tokio::time::timeout` does); a heartbeat is sent every `every`
//! for as long as the future is pending, the first one `every` after the wait began.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

/// Polls `future` once with the task's waker: `Pending` leaves it to be awaited again.
pub async fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *future).poll(cx))).await
}

/// Runs `future` until `deadline` (`None`: no deadline), calling `heartbeat` every `every`
/// (`None`: never) meanwhile. `None` when the deadline passed first.
pub async fn within<T>(
    future: impl Future<Output = T>,
    deadline: Option<Instant>,
    every: Option<Duration>,
    heartbeat: impl Fn(),
) -> Option<T> {
    tokio::pin!(future);
    if let Poll::Ready(out) = poll_once(&mut future).await {
        return Some(out);
    }
    let mut beat = every.map(|every| Instant::now() + every);
    let next = |beat: Option<Instant>| match (beat, deadline) {
        (Some(beat), Some(deadline)) => Some(beat.min(deadline)),
        (beat, deadline) => beat.or(deadline),
    };
    let Some(first) = next(beat) else {
        return Some(future.await);
    };
    let timer = tokio::time::sleep_until(first);
    tokio::pin!(timer);
    loop {
        tokio::select! {
            biased;
            out = &mut future => return Some(out),
            () = &mut timer => {
                let now = Instant::now();
                if deadline.is_some_and(|deadline| now >= deadline) {
                    return None;
                }
                if let (Some(at), Some(every)) = (beat, every) {
                    if now >= at {
                        heartbeat();
                        beat = Some(now + every);
                    }
                }
                if let Some(at) = next(beat) {
                    timer.as_mut().reset(at);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ready_future_is_answered_without_a_timer() {
        let mut ready = std::future::ready(7);
        assert_eq!(poll_once(&mut ready).await, Poll::Ready(7));
        let mut pending = std::future::pending::<()>();
        assert_eq!(poll_once(&mut pending).await, Poll::Pending);
    }

    #[tokio::test(start_paused = true)]
    async fn one_timer_serves_the_deadline_and_the_heartbeats() {
        let beats = std::cell::Cell::new(0);
        let start = Instant::now();
        let beat = || beats.set(beats.get() + 1);
        let slow = tokio::time::sleep(Duration::from_millis(1000));
        let deadline = Some(start + Duration::from_millis(350));
        let every = Some(Duration::from_millis(100));
        assert_eq!(within(slow, deadline, every, beat).await, None);
        assert_eq!(Instant::now() - start, Duration::from_millis(350));
        assert_eq!(beats.get(), 3);

        let beats = std::cell::Cell::new(0);
        let start = Instant::now();
        let beat = || beats.set(beats.get() + 1);
        let done = async {
            tokio::time::sleep(Duration::from_millis(250)).await;
            5
        };
        assert_eq!(within(done, None, every, beat).await, Some(5));
        assert_eq!(Instant::now() - start, Duration::from_millis(250));
        assert_eq!(beats.get(), 2);
        assert_eq!(
            within(std::future::ready(1), deadline, None, || ()).await,
            Some(1),
            "a ready future wins even past its deadline"
        );
    }
}
