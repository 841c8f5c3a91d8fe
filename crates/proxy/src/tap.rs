//! [`TappedStream`]: the streamed answer on its way to the client. It owns the call's
//! [`Settlement`] and the upstream body.
//!
//! - Each upstream frame is forwarded as soon as it arrives (through [`SseTap`], which passes
//!   whole-event frames without a copy and strips only the injected usage chunk); nothing is
//!   buffered beyond one unfinished event.
//! - End of the upstream body: the lease is released with outcome `success` and the reported
//!   usage (or the estimate, counted, when the stream carried none).
//! - An upstream error or a stall longer than `proxy.idle_timeout_ms`: released as `failure`
//!   with the usage seen and logged (`failure_log.rs`: the upstream, the lane and
//!   `stream-broken` / `stream-stalled`); the client's stream ends with an error (its
//!   connection is cut, so it can tell the answer is incomplete).
//! - The client goes away: hyper drops this body, which drops the upstream body (closing that
//!   upstream connection at once) and the settlement (released as `none` with the usage seen).
//! - While the stream lives the lease is heartbeated every third of its TTL.
//! - One timer serves both the idle bound and the heartbeats: it is set to whichever comes
//!   first, and a frame only moves the idle deadline (a timer that fires early re-arms itself),
//!   so a frame costs no timer operation.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use turnstile_admission::Outcome;

use crate::failure_log::{FailureKind, FailureSite};
use crate::metrics::CallClass;
use crate::pool::PooledBody;
use crate::settle::{Charge, Settlement};
use crate::sse::SseTap;

/// When the one timer must fire: the idle deadline or the next heartbeat, whichever is first.
fn next_wake(idle_deadline: Instant, heartbeat: Option<(Duration, Instant)>) -> Instant {
    heartbeat.map_or(idle_deadline, |(_, at)| at.min(idle_deadline))
}

/// An error ending the client's stream.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The client's side of a streamed answer.
pub struct TappedStream {
    upstream: PooledBody,
    tap: SseTap,
    settlement: Settlement,
    idle: Duration,
    /// The upstream has been silent too long once this passes.
    idle_deadline: Instant,
    /// The heartbeat period and when the next heartbeat is due.
    heartbeat: Option<(Duration, Instant)>,
    /// Set to the earlier of `idle_deadline` and the next heartbeat (or earlier).
    timer: Pin<Box<Sleep>>,
    /// Bytes to send after the upstream ended (an unfinished last event), then the end.
    tail: Option<Bytes>,
    done: bool,
    /// Where the call was sent, for the log line of a stream that breaks off.
    site: Option<FailureSite>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct StreamCut(&'static str);

impl TappedStream {
    pub fn new(
        upstream: PooledBody,
        tap: SseTap,
        settlement: Settlement,
        idle: Duration,
        heartbeat_every: Option<Duration>,
        site: Option<FailureSite>,
    ) -> Self {
        let now = Instant::now();
        let idle_deadline = now + idle;
        let heartbeat = heartbeat_every.map(|every| (every, now + every));
        TappedStream {
            upstream,
            tap,
            settlement,
            idle,
            idle_deadline,
            heartbeat,
            timer: Box::pin(tokio::time::sleep_until(next_wake(
                idle_deadline,
                heartbeat,
            ))),
            tail: None,
            done: false,
            site,
        }
    }

    /// Handles the timer: sends a heartbeat that is due and re-arms; answers whether the idle
    /// deadline has passed (the timer is then left fired until a frame moves the deadline).
    fn on_timer(&mut self, cx: &mut Context<'_>) -> bool {
        while self.timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            if let Some((every, at)) = &mut self.heartbeat {
                if now >= *at {
                    self.settlement.heartbeat();
                    *at = now + *every;
                }
            }
            if now >= self.idle_deadline {
                return true;
            }
            let wake = next_wake(self.idle_deadline, self.heartbeat);
            self.timer.as_mut().reset(wake);
        }
        false
    }

    fn fail(
        &mut self,
        kind: FailureKind,
        why: &'static str,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.done = true;
        if let Some(site) = &self.site {
            site.failed(kind);
        }
        self.settlement.seen = self.tap.usage;
        let charge = Charge::seen(self.tap.usage);
        self.settlement
            .settle(CallClass::UpstreamError, Outcome::Failure, charge);
        Poll::Ready(Some(Err(Box::new(StreamCut(why)))))
    }
}

impl Body for TappedStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(this.tail.take().map(|b| Ok(Frame::data(b))));
        }
        // Heartbeats are due whatever the upstream does.
        let mut idle_passed = this.on_timer(cx);
        let mut rearmed = false;
        loop {
            match Pin::new(&mut this.upstream).poll_frame(cx) {
                Poll::Pending => {
                    // A timer re-armed after a frame must be polled to wake this task.
                    if idle_passed || (rearmed && this.on_timer(cx)) {
                        return this.fail(
                            FailureKind::StreamStalled,
                            "the upstream stream stalled (proxy.idle_timeout_ms)",
                        );
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(frame))) => {
                    this.idle_deadline = Instant::now() + this.idle;
                    idle_passed = false;
                    if this.timer.is_elapsed() {
                        let wake = next_wake(this.idle_deadline, this.heartbeat);
                        this.timer.as_mut().reset(wake);
                        rearmed = true;
                    }
                    match frame.into_data() {
                        Ok(data) => {
                            let out = this.tap.feed(data);
                            this.settlement.seen = this.tap.usage;
                            if out.is_empty() {
                                continue;
                            }
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                        // Trailers are not forwarded (HTTP/1 clients rarely accept them).
                        Err(_) => continue,
                    }
                }
                Poll::Ready(Some(Err(_))) => {
                    return this.fail(FailureKind::StreamBroken, "the upstream stream broke");
                }
                Poll::Ready(None) => {
                    this.done = true;
                    let tail = this.tap.finish();
                    let usage = this.tap.usage;
                    this.settlement.seen = usage;
                    this.settlement.settle(
                        CallClass::Upstream2xx,
                        Outcome::Success,
                        Charge::seen(usage),
                    );
                    if tail.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(tail))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.tail.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
