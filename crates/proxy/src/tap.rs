//! [`TappedStream`]: the streamed answer on its way to the client. It owns the call's
//! [`Settlement`] and the upstream body.
//!
//! - Each upstream frame is forwarded as soon as it arrives (through [`SseTap`], which passes
//!   whole-event frames without a copy and strips only the injected usage chunk); nothing is
//!   buffered beyond one unfinished event.
//! - End of the upstream body: the lease is released with outcome `success` and the reported
//!   usage (or the estimate, counted, when the stream carried none).
//! - An upstream error or a stall longer than `proxy.idle_timeout_ms`: released as `failure`
//!   with the usage seen; the client's stream ends with an error (its connection is cut, so it
//!   can tell the answer is incomplete).
//! - The client goes away: hyper drops this body, which drops the upstream body (closing that
//!   upstream connection at once) and the settlement (released as `none` with the usage seen).
//! - While the stream lives the lease is heartbeated every third of its TTL.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};
use turnstile_admission::Outcome;

use crate::metrics::CallClass;
use crate::settle::{Charge, Settlement};
use crate::sse::SseTap;

/// An error ending the client's stream.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The client's side of a streamed answer.
pub struct TappedStream {
    upstream: Incoming,
    tap: SseTap,
    settlement: Settlement,
    idle: Duration,
    idle_timer: Pin<Box<Sleep>>,
    heartbeat: Option<(Duration, Pin<Box<Sleep>>)>,
    /// Bytes to send after the upstream ended (an unfinished last event), then the end.
    tail: Option<Bytes>,
    done: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct StreamCut(&'static str);

impl TappedStream {
    pub fn new(
        upstream: Incoming,
        tap: SseTap,
        settlement: Settlement,
        idle: Duration,
        heartbeat_every: Option<Duration>,
    ) -> Self {
        TappedStream {
            upstream,
            tap,
            settlement,
            idle,
            idle_timer: Box::pin(tokio::time::sleep(idle)),
            heartbeat: heartbeat_every.map(|d| (d, Box::pin(tokio::time::sleep(d)))),
            tail: None,
            done: false,
        }
    }

    fn fail(&mut self, why: &'static str) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.done = true;
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
        if let Some((every, timer)) = &mut this.heartbeat {
            if timer.as_mut().poll(cx).is_ready() {
                this.settlement.heartbeat();
                timer.as_mut().reset(Instant::now() + *every);
                let _ = timer.as_mut().poll(cx);
            }
        }
        loop {
            match Pin::new(&mut this.upstream).poll_frame(cx) {
                Poll::Pending => {
                    if this.idle_timer.as_mut().poll(cx).is_ready() {
                        return this.fail("the upstream stream stalled (proxy.idle_timeout_ms)");
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(frame))) => {
                    this.idle_timer.as_mut().reset(Instant::now() + this.idle);
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
                    return this.fail("the upstream stream broke");
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
