//! Connection deadlines: every phase of a connection is bounded in time.
//!
//! | phase | bound | enforced by |
//! |---|---|---|
//! | request head | `http.header_read_timeout_ms` | hyper's header timer (needs the `TokioTimer`) |
//! | first byte, while every connection slot is taken | `http.full_pool_first_byte_ms` | [`DeadlineIo`], told by [`crate::http::fresh`] |
//! | request body | `http.body_read_timeout_ms` total, `http.body_min_bytes_per_sec` rate | [`crate::http::body::RawBody`] (408, connection closed) |
//! | response write | `http.response_write_timeout_ms` without progress | [`DeadlineIo`] |
//! | keep-alive idle | `http.keep_alive_idle_ms` (and hyper's header timer, which also runs while idle) | [`DeadlineIo`] |
//!
//! [`DeadlineIo`] wraps the socket. A write that stays pending past the write timeout fails with
//! `TimedOut`, so a client that never reads its answers loses its connection instead of
//! pinning it. After a response was written and until the next byte arrives the connection is
//! idle; a read that stays pending past the idle timeout fails the same way. Each cut is counted
//! once on `/metrics` (`turnstile_http_cuts_total{kind}`).
//!
//! Invariant: no connection stays open longer than its current phase's bound without making
//! progress (a handler waiting on a queued admission is bounded by `admission.max_wait_ms`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::http::fresh::Arrival;
use crate::metrics::{Cut, Metrics};

/// Whether the connection is between requests (a response went out, nothing came in since).
#[derive(Debug, Default)]
pub struct ConnState {
    idle: AtomicBool,
}

impl ConnState {
    /// The cut a header timeout stands for: an idle keep-alive connection, or a slow head.
    pub fn header_cut(&self) -> Cut {
        if self.idle.load(Ordering::Relaxed) {
            Cut::IdleTimeout
        } else {
            Cut::HeaderTimeout
        }
    }
}

/// One deadline of a connection, armed and disarmed once per request.
///
/// The timer is allocated once per connection and moved with `reset`: a deadline that only
/// ever moves later (the next request's idle phase starts after the last one's) costs tokio
/// no timer-wheel lock, where a new timer per request cost a lock to insert and one to remove.
/// A disarmed timer may still fire once; that only polls the connection again.
#[derive(Default)]
struct Deadline {
    sleep: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl Deadline {
    /// Polls the deadline, arming it `after` from now first; `true` once it has passed.
    fn expired(&mut self, after: Duration, cx: &mut Context<'_>) -> bool {
        if !self.armed {
            let at = Instant::now() + after;
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(at),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
            }
            self.armed = true;
        }
        self.sleep
            .as_mut()
            .is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready())
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

/// A socket whose writes and idle reads have deadlines.
pub struct DeadlineIo<T> {
    inner: T,
    write_timeout: Duration,
    idle_timeout: Duration,
    write_deadline: Deadline,
    idle_deadline: Deadline,
    state: Arc<ConnState>,
    metrics: Arc<Metrics>,
    /// Until the first byte: the connection's place among the fresh ones, which may be taken
    /// when every slot is.
    arrival: Option<Arc<Arrival>>,
}

impl<T> DeadlineIo<T> {
    pub fn new(
        inner: T,
        write_timeout: Duration,
        idle_timeout: Duration,
        metrics: Arc<Metrics>,
        arrival: Option<Arc<Arrival>>,
    ) -> (Self, Arc<ConnState>) {
        let state = Arc::new(ConnState::default());
        (
            DeadlineIo {
                inner,
                write_timeout,
                idle_timeout,
                write_deadline: Deadline::default(),
                idle_deadline: Deadline::default(),
                state: state.clone(),
                metrics,
                arrival,
            },
            state,
        )
    }

    fn is_idle(&self) -> bool {
        self.state.idle.load(Ordering::Relaxed)
    }

    fn set_idle(&mut self, idle: bool) {
        self.state.idle.store(idle, Ordering::Relaxed);
        self.idle_deadline.disarm();
    }

    fn write_result<R>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<R>>,
        wrote: bool,
    ) -> Poll<io::Result<R>> {
        match poll {
            Poll::Pending => {
                if self.write_deadline.expired(self.write_timeout, cx) {
                    self.write_deadline.disarm();
                    self.metrics.cut(Cut::WriteTimeout);
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "response write timed out",
                    )));
                }
                Poll::Pending
            }
            ready => {
                self.write_deadline.disarm();
                if wrote {
                    self.set_idle(true);
                }
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for DeadlineIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    if let Some(arrival) = this.arrival.take() {
                        arrival.started();
                    }
                    this.set_idle(false);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.arrival.is_some() => {
                // Nothing sent yet: close if the slot is wanted by a waiting connection.
                let evicted = this
                    .arrival
                    .as_ref()
                    .is_some_and(|arrival| arrival.poll_evicted(cx).is_ready());
                if evicted {
                    this.arrival = None;
                    this.metrics.cut(Cut::FirstByteTimeout);
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no first byte while every connection slot is taken",
                    )));
                }
                Poll::Pending
            }
            Poll::Pending if this.is_idle() => {
                if this.idle_deadline.expired(this.idle_timeout, cx) {
                    this.idle_deadline.disarm();
                    this.metrics.cut(Cut::IdleTimeout);
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "keep-alive connection idle",
                    )));
                }
                Poll::Pending
            }
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for DeadlineIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        let wrote = matches!(poll, Poll::Ready(Ok(n)) if n > 0);
        this.write_result(cx, poll, wrote)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        let wrote = matches!(poll, Poll::Ready(Ok(n)) if n > 0);
        this.write_result(cx, poll, wrote)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.write_result(cx, poll, false)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
