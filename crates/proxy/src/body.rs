//! Reading the client's request body under the proxy's cap and the service's body deadlines.
//!
//! - Over `proxy.max_request_bytes` → 413 (a `Content-Length` above it is refused before
//!   reading; a chunked body is cut while reading, never buffered past the cap).
//! - The body must arrive whole within `http.body_read_timeout_ms` and, after a one-second
//!   grace, at `http.body_min_bytes_per_sec` on average (408 otherwise), as on the admission API.
//!
//! Invariant: no body makes the proxy answer 5xx. A body that arrives in one frame is kept as
//! that frame (no copy); a frame already received is taken without arming the deadline timer.

use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::CONTENT_LENGTH;
use axum::http::HeaderMap;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::time::Instant;

use crate::error::ProxyError;
use crate::wait::poll_once;

/// The service's body deadlines, as the proxy applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub read_timeout: Duration,
    pub min_bytes_per_sec: u64,
}

/// Grace before the minimum rate applies.
const RATE_GRACE: Duration = Duration::from_secs(1);

/// Reads the whole body or answers the typed error that ended the read.
pub async fn read(
    headers: &HeaderMap,
    body: Body,
    limits: BodyLimits,
) -> Result<Bytes, ProxyError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_bytes as u64) {
        return Err(ProxyError::too_large(limits.max_bytes));
    }
    let start = Instant::now();
    let mut body = body;
    // The common case is one frame: kept without a copy.
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    loop {
        // A frame already there needs no timer.
        let mut next = body.frame();
        let frame = match poll_once(&mut next).await {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                let held = first.as_ref().map_or(0, Bytes::len) + buf.len();
                let by_rate = RATE_GRACE
                    + Duration::from_millis(
                        (held as u64 + 1).saturating_mul(1000) / limits.min_bytes_per_sec.max(1),
                    );
                let deadline = start + by_rate.min(limits.read_timeout);
                match tokio::time::timeout_at(deadline, next).await {
                    Ok(frame) => frame,
                    Err(_) => return Err(ProxyError::body_timeout()),
                }
            }
        };
        let Some(frame) = frame else { break };
        let frame =
            frame.map_err(|_| ProxyError::invalid(None, "the request body could not be read"))?;
        if let Ok(data) = frame.into_data() {
            let held = first.as_ref().map_or(0, Bytes::len) + buf.len();
            if held + data.len() > limits.max_bytes {
                return Err(ProxyError::too_large(limits.max_bytes));
            }
            match first.take() {
                None if buf.is_empty() => first = Some(data),
                Some(earlier) => {
                    buf.reserve(declared.map_or(0, |n| n as usize).max(held + data.len()));
                    buf.extend_from_slice(&earlier);
                    buf.extend_from_slice(&data);
                }
                None => buf.extend_from_slice(&data),
            }
        }
    }
    Ok(match first {
        Some(first) if buf.is_empty() => first,
        _ => buf.freeze(),
    })
}
