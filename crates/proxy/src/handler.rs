//! One proxied call, start to end: identify, read, route, estimate, admit, forward, answer,
//! settle.
//!
//! Order matters and is fixed: nothing reaches admission before the body is read, parsed and
//! routed (an unknown model is a 404 with no admission and no upstream call), and nothing
//! reaches the upstream before admission granted a lease. After the grant the call's
//! [`Settlement`] owns the lease, so every path out (answer, error, client gone) releases it
//! exactly once. Nothing that may have reached a provider is sent again: after a 5xx, a timeout
//! or a connection broken mid-call a second call could be billed twice. The one exception is
//! failover (`deployments.rs`): after an upstream 429 (refused unprocessed; that lane pauses)
//! or a request that never left, a model with several deployments admits the call again on one
//! it has not tried, within the caller's wait; the client sees the last attempt's answer only.
//! With one deployment, a 429 pauses the lane and the client is told how long.

use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use turnstile_admission::Outcome;

use crate::caller_headers::CallerHeaders;
use crate::deployments::{Admitted, Attempts, Caller, PROVIDER_HEADER};
use crate::error::{retry_headers, ProxyError};
use crate::estimate;
use crate::failure_log::{FailureKind, FailureSite};
use crate::metrics::{CallClass, FailoverCause};
use crate::pool::PooledBody;
use crate::request::{self, Endpoint};
use crate::retry_after;
use crate::settle::{Charge, Settlement};
use crate::sse::SseTap;
use crate::tap::TappedStream;
use crate::upstream;
use crate::wait;
use crate::{Identity, Proxy};

/// The header naming how long a call may wait for a permit, in milliseconds.
pub const WAIT_HEADER: &str = "x-turnstile-wait-ms";
/// The header naming the invocation budget the call is charged to.
pub const BUDGET_HEADER: &str = "x-turnstile-budget-id";

/// One proxied call's answer, boxed once ([`call`]).
pub type CallFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>>;

/// Serves one proxied call in the endpoint's wire format.
///
/// Not an `async fn`: the request is taken apart here, so the future keeps only the caller,
/// the headers and the body, not the whole request for its whole life. The future (a few KiB:
/// the upstream call's state) is boxed here, once: axum's handler glue and the router's layers
/// each move the future they are given into a future (and a box) of their own, so what they
/// move per call is this box, not the whole state.
pub fn call(proxy: Arc<Proxy>, endpoint: Endpoint, request: Request) -> CallFuture {
    let format = endpoint.format();
    let (parts, body) = request.into_parts();
    let caller = match parts.extensions.get::<Identity>() {
        Some(Identity::Principal {
            workspace,
            principal,
        }) => Ok((workspace.clone(), principal.clone())),
        Some(Identity::Admin) => Err(ProxyError::forbidden(
            "an admin key cannot make model calls: use a principal key",
        )),
        None => Err(ProxyError::unauthorized()),
    };
    let headers = parts.headers;
    Box::pin(async move {
        let served = match caller {
            Ok(caller) => serve(&proxy, endpoint, caller, headers, body).await,
            Err(error) => Err(error),
        };
        match served {
            Ok(response) => response,
            Err(error) => error.response(format),
        }
    })
}

/// [`WAIT_HEADER`] and [`BUDGET_HEADER`] as names (looked up without parsing them per call).
static WAIT_NAME: HeaderName = HeaderName::from_static(WAIT_HEADER);
static BUDGET_NAME: HeaderName = HeaderName::from_static(BUDGET_HEADER);
static PROVIDER_NAME: HeaderName = HeaderName::from_static(PROVIDER_HEADER);

fn header_text<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'a str>, ProxyError> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(|v| Some(v.trim()))
            .map_err(|_| ProxyError::invalid(None, format!("header {name} is not ASCII"))),
    }
}

/// A budget ID as the admission API accepts it: 1–256 of `[A-Za-z0-9._:-]`, not starting with `.`.
fn valid_budget(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 256
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

async fn serve(
    proxy: &Arc<Proxy>,
    endpoint: Endpoint,
    (workspace, principal): (Arc<str>, Arc<str>),
    mut headers: HeaderMap,
    body: Body,
) -> Result<Response, ProxyError> {
    let format = endpoint.format();
    let wait_ms = match header_text(&headers, &WAIT_NAME)? {
        None => proxy.config.default_wait_ms,
        Some(text) => match text.parse::<u64>() {
            Ok(ms) if ms <= proxy.config.max_wait_ms => ms,
            _ => {
                return Err(ProxyError::invalid(
                    None,
                    format!(
                        "{WAIT_HEADER} must be an integer from 0 to {} (proxy.max_wait_ms)",
                        proxy.config.max_wait_ms
                    ),
                ))
            }
        },
    };
    let budget = match header_text(&headers, &BUDGET_NAME)? {
        Some(id) if valid_budget(id) => Some(id.to_owned()),
        Some(_) => {
            return Err(ProxyError::invalid(
                None,
                format!("{BUDGET_HEADER} must be 1-256 characters of [A-Za-z0-9._:-]"),
            ))
        }
        None => None,
    };
    let body = crate::body::read(&headers, body, proxy.body_limits).await?;
    let parsed = request::parse(endpoint, &body)
        .map_err(|error| ProxyError::invalid(error.param(), error.to_string()))?;
    let routed = match proxy.routes.get(parsed.model.as_str()) {
        Some(routed) if routed.route.format == format => routed,
        _ => return Err(ProxyError::unknown_model(&parsed.model)),
    };
    let route = &routed.route;
    let tokens = estimate::tokens(
        endpoint,
        &parsed,
        route,
        proxy.config.prompt_bytes_per_token,
    );
    let admission_estimate = estimate::estimate(tokens, route, parsed.body_bytes);
    let upstream_body =
        request::upstream_body(endpoint, &parsed, body, route.upstream_model.as_deref())
            .map_err(|error| ProxyError::invalid(error.param(), error.to_string()))?;

    // Admission.
    let (budget_id, ephemeral) = match budget {
        Some(id) => (id, false),
        // A per-call budget, in a namespace the admission API cannot name (`~`).
        None => (proxy.call_budget(), true),
    };
    // On the deployment that can admit soonest; again on another after a 429 or a request
    // that never left (`deployments.rs`). A model with one deployment is admitted once.
    let mut attempts = Attempts::new(wait_ms);
    let (at, response, mut settlement, heartbeat_every, caller_headers) = loop {
        let caller = Caller {
            workspace: &workspace,
            principal: &principal,
            budget_id: &budget_id,
            ephemeral,
            estimate: &admission_estimate,
        };
        let (at, grant) = match attempts.admit(proxy, routed, &caller).await? {
            Admitted::Granted(at, grant) => (at, grant),
            // A refusal, answered with the caller's own figures.
            Admitted::Answered(response) => return Ok(response),
        };
        let (lane, outbound) = (&route.deployments[at].provider, &routed.outbounds[at]);
        let caller_headers = CallerHeaders::at_grant(&grant.evidence);
        let heartbeat_every = grant
            .ttl_ms
            .map(|ttl| Duration::from_millis((ttl / 3).max(1)));
        let mut settlement = Settlement::new(
            grant,
            (workspace.clone(), principal.clone()),
            ephemeral.then(|| budget_id.clone()),
            proxy.clone(),
            lane.clone(),
            route.prices,
            tokens,
        );

        // Forward.
        let Some((origin, path)) = outbound.target(endpoint) else {
            settlement.settle(CallClass::UpstreamError, Outcome::None, Charge::Nothing);
            return Err(ProxyError::upstream(
                StatusCode::BAD_GATEWAY,
                "upstream-error",
                "the upstream URL is not valid",
                false,
            ));
        };
        // A copy only while another deployment may still need the headers.
        let mut sent = match attempts.can_fail_over(routed) {
            true => headers.clone(),
            false => std::mem::take(&mut headers),
        };
        upstream::request_headers(&mut sent, outbound);
        let first_byte_deadline =
            tokio::time::Instant::now() + Duration::from_millis(proxy.config.first_byte_timeout_ms);
        // Built inside the call: a request held in a local of its own would take its room in
        // this future a second time, beside the copy the send future holds.
        let head = wait::within(
            proxy.client.send(
                origin,
                &outbound.idle,
                upstream_request(sent, path, upstream_body.clone()),
            ),
            Some(first_byte_deadline),
            heartbeat_every,
            || settlement.heartbeat(),
        )
        .await;
        match head {
            // Refused unprocessed by this deployment: its lane pauses, another one may serve.
            Some(Ok(response))
                if response.status() == StatusCode::TOO_MANY_REQUESTS
                    && attempts.can_fail_over(routed) =>
            {
                let ms = upstream_pause(proxy, response.headers());
                settlement.provider_quota(response.headers());
                settlement.settle(
                    CallClass::Upstream429,
                    Outcome::RetryAfter { retry_after_ms: ms },
                    Charge::Nothing,
                );
                proxy
                    .metrics
                    .lane(lane)
                    .failed_over(FailoverCause::RateLimited);
            }
            Some(Ok(response)) => {
                break (at, response, settlement, heartbeat_every, caller_headers)
            }
            // Never sent: a breaker failure of this deployment, and nothing to charge.
            Some(Err(error)) if error.never_sent() && attempts.can_fail_over(routed) => {
                upstream_failure(route, at, FailureKind::Unreachable);
                settlement.settle(CallClass::UpstreamError, Outcome::Failure, Charge::Nothing);
                proxy
                    .metrics
                    .lane(lane)
                    .failed_over(FailoverCause::Unreachable);
            }
            Some(Err(error)) => {
                settlement.settle(CallClass::UpstreamError, Outcome::Failure, Charge::Estimate);
                // A request that never left (no connection): sending it again cannot bill twice.
                let never_sent = error.never_sent();
                upstream_failure(
                    route,
                    at,
                    if never_sent {
                        FailureKind::Unreachable
                    } else {
                        FailureKind::ConnectionLost
                    },
                );
                return Err(ProxyError::upstream(
                    StatusCode::BAD_GATEWAY,
                    "upstream-unreachable",
                    "the upstream could not be reached or closed the connection",
                    never_sent,
                ));
            }
            None => {
                upstream_failure(route, at, FailureKind::FirstByteTimeout);
                settlement.settle(CallClass::UpstreamError, Outcome::Failure, Charge::Estimate);
                return Err(ProxyError::upstream(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream-timeout",
                    "the upstream sent no answer within proxy.first_byte_timeout_ms",
                    false,
                ));
            }
        }
    };
    let (head, upstream_body) = response.into_parts();
    // The provider's announced quota, read from the head before any byte is relayed.
    settlement.provider_quota(&head.headers);
    let status = head.status;
    if status.is_server_error() {
        upstream_failure(route, at, FailureKind::ServerError);
    }
    let is_stream = parsed.stream
        && status.is_success()
        && head
            .headers
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
    // An upstream 429's pause, read before its retry headers are dropped below.
    let retry_after_ms =
        (status == StatusCode::TOO_MANY_REQUESTS).then(|| upstream_pause(proxy, &head.headers));
    let mut headers = head.headers;
    upstream::response_headers(&mut headers);
    if let Some(lane) = routed.rotation.lane_header(at) {
        headers.insert(PROVIDER_NAME.clone(), lane.clone());
    }
    caller_headers.write(&mut headers, format);
    if is_stream {
        let strip = endpoint.needs_include_usage() && !parsed.client_wants_usage;
        let body = TappedStream::new(
            upstream_body,
            SseTap::new(strip),
            settlement,
            Duration::from_millis(proxy.config.idle_timeout_ms),
            heartbeat_every,
            route.deployments.get(at).map(FailureSite::of),
        );
        let mut response = Response::new(Body::new(body));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        return Ok(response);
    }

    // A whole answer: read it (bounded), settle, forward.
    let read = wait::within(
        read_bounded(
            upstream_body,
            proxy.config.max_response_bytes,
            Duration::from_millis(proxy.config.idle_timeout_ms),
        ),
        None,
        heartbeat_every,
        || settlement.heartbeat(),
    )
    .await
    .flatten();
    let Some(bytes) = read else {
        upstream_failure(route, at, FailureKind::BodyBroken);
        settlement.settle(CallClass::UpstreamError, Outcome::Failure, Charge::Estimate);
        return Err(ProxyError::upstream(
            StatusCode::BAD_GATEWAY,
            "upstream-error",
            "the upstream answer broke off, stalled or exceeded proxy.max_response_bytes",
            false,
        ));
    };
    let code = status.as_u16();
    if let Some(ms) = retry_after_ms {
        settlement.settle(
            CallClass::Upstream429,
            Outcome::RetryAfter { retry_after_ms: ms },
            Charge::Nothing,
        );
        retry_headers(&mut headers, ms);
    } else if status.is_success() {
        let usage = turnstile_admission::ProviderUsage::from_body(&bytes);
        settlement.settle(
            CallClass::Upstream2xx,
            Outcome::Success,
            Charge::seen(usage),
        );
    } else if status.is_server_error() {
        settlement.settle(CallClass::Upstream5xx, Outcome::Failure, Charge::Estimate);
        // The request reached the provider: an SDK resend could be billed twice.
        if !headers.contains_key("x-should-retry") {
            headers.insert("x-should-retry", HeaderValue::from_static("false"));
        }
    } else {
        settlement.settle(CallClass::of_status(code), Outcome::None, Charge::Nothing);
    }
    settlement.shared_released().await;
    headers.insert(
        axum::http::header::CONTENT_LENGTH,
        HeaderValue::from(bytes.len()),
    );
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}

/// The lane pause an upstream 429 with these headers causes.
fn upstream_pause(proxy: &Proxy, headers: &HeaderMap) -> u64 {
    retry_after::parse(headers, SystemTime::now(), proxy.max_retry_after_ms)
        .unwrap_or(proxy.config.fallback_retry_after_ms)
        .max(1)
}

/// One log line for an upstream failure of the call sent to deployment `at` of `route`
/// (`failure_log.rs`).
fn upstream_failure(route: &crate::config::Route, at: usize, kind: FailureKind) {
    if let Some(deployment) = route.deployments.get(at) {
        FailureSite::of(deployment).failed(kind);
    }
}

/// The upstream request: `POST` to `path` with `headers` and `body`.
fn upstream_request(headers: HeaderMap, path: Uri, body: Bytes) -> hyper::Request<Full<Bytes>> {
    let mut request = hyper::Request::new(Full::new(body));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = path;
    *request.headers_mut() = headers;
    request
}

/// The whole upstream body, or `None` when it broke, stalled for `idle`, or passed `max`.
async fn read_bounded(mut body: PooledBody, max: usize, idle: Duration) -> Option<Bytes> {
    // The common case is one frame: kept without a copy.
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    loop {
        // A frame already there needs no idle timer.
        let mut next = body.frame();
        let frame = match wait::poll_once(&mut next).await {
            Poll::Ready(frame) => frame,
            Poll::Pending => tokio::time::timeout(idle, next).await.ok()?,
        };
        let Some(frame) = frame else {
            return Some(match first {
                Some(first) if buf.is_empty() => first,
                _ => buf.freeze(),
            });
        };
        if let Ok(data) = frame.ok()?.into_data() {
            let held = first.as_ref().map_or(0, Bytes::len) + buf.len();
            if held + data.len() > max {
                return None;
            }
            match first.take() {
                None if buf.is_empty() => first = Some(data),
                Some(earlier) => {
                    buf.extend_from_slice(&earlier);
                    buf.extend_from_slice(&data);
                }
                None => buf.extend_from_slice(&data),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output_size<A, B, C, D, E, R>(_: impl Fn(A, B, C, D, E) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    #[test]
    fn the_call_future_stays_small() {
        // It is boxed once per call (`call`); every byte of it is copied into that box. Was
        // 4.5 KiB before `within` became a plain future and the request was taken apart first.
        let serve_size = output_size(serve);
        assert!(serve_size <= 3300, "{serve_size} bytes");
    }
}
