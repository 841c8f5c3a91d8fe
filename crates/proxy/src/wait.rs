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
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

/// Polls `future` once with the task's waker: `Pending` leaves it to be awaited again.
pub async fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *future).poll(cx))).await
}

/// Runs `future` until `deadline` (`None`: no deadline), calling `heartbeat` every `every`
/// (`None`: never) meanwhile. `None` when the deadline passed first.
///
/// A plain future ([`Within`]), not an `async fn`: an `async fn` would keep `future` twice
/// (its argument and the pinned copy it awaits), and a proxied call's handler future, which
/// axum boxes and so copies on every call, holds this one.
pub fn within<F: Future, H: Fn()>(
    future: F,
    deadline: Option<Instant>,
    every: Option<Duration>,
    heartbeat: H,
) -> Within<F, H> {
    Within {
        future,
        timer: None,
        started: false,
        deadline,
        every,
        beat: None,
        heartbeat,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`within`].
    pub struct Within<F, H> {
        #[pin]
        future: F,
        // Armed after the first poll that found `future` pending, when there is a deadline or
        // a heartbeat: one timer for both, set to whichever comes first.
        #[pin]
        timer: Option<tokio::time::Sleep>,
        started: bool,
        deadline: Option<Instant>,
        every: Option<Duration>,
        beat: Option<Instant>,
        heartbeat: H,
    }
}

/// The earlier of the next heartbeat and the deadline.
fn next(beat: Option<Instant>, deadline: Option<Instant>) -> Option<Instant> {
    match (beat, deadline) {
        (Some(beat), Some(deadline)) => Some(beat.min(deadline)),
        (beat, deadline) => beat.or(deadline),
    }
}

impl<F: Future, H: Fn()> Future for Within<F, H> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        // The future first, always: a ready future is never reported as timed out.
        if let Poll::Ready(out) = this.future.poll(cx) {
            return Poll::Ready(Some(out));
        }
        loop {
            match this.timer.as_mut().as_pin_mut() {
                None if *this.started => return Poll::Pending,
                None => {
                    *this.started = true;
                    *this.beat = this.every.map(|every| Instant::now() + every);
                    match next(*this.beat, *this.deadline) {
                        // Nothing bounds the wait: the future's own wake-up is enough.
                        None => return Poll::Pending,
                        Some(first) => this.timer.set(Some(tokio::time::sleep_until(first))),
                    }
                }
                Some(mut timer) => {
                    if timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let now = Instant::now();
                    if this.deadline.is_some_and(|deadline| now >= deadline) {
                        return Poll::Ready(None);
                    }
                    if let (Some(at), Some(every)) = (*this.beat, *this.every) {
                        if now >= at {
                            (this.heartbeat)();
                            *this.beat = Some(now + every);
                        }
                    }
                    match next(*this.beat, *this.deadline) {
                        Some(at) => timer.as_mut().reset(at),
                        None => return Poll::Pending,
                    }
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
