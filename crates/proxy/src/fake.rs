//! A scripted fake provider for tests and benchmarks: a real HTTP/1.1 server on loopback that
//! speaks the OpenAI (`/v1/chat/completions`, `/v1/responses`, `/v1/embeddings`,
//! `/v1/completions`) and Anthropic (`/v1/messages`) wire formats, plain and streamed, with
//! usage. Point an OpenAI-format upstream at `http://ADDR/v1` and an Anthropic-format one at
//! `http://ADDR`. Run it alone with `turnstile-bench fake-upstream --port N`.
//!
//! Each request is scripted by its `x-fake-script` header (the proxy forwards client headers),
//! a comma-separated list of `key=value` directives:
//!
//! | directive | effect |
//! |---|---|
//! | `status=N` | answer status N with a provider-format error body (429, 500, 400, …) |
//! | `retry-after=S` / `retry-after-ms=MS` / `retry-after-date=S` | on the error answer: `Retry-After: S`, `retry-after-ms: MS`, or `Retry-After` as the HTTP-date S seconds from now (saturating: any `u64`) |
//! | `retry-after-year=Y` | on the error answer: `Retry-After` as the HTTP-date of 1 January of year Y, any number of digits (far-future dates) |
//! | `once=ID` | the `status` applies only to the first request carrying this ID; later ones answer normally |
//! | `first-byte-ms=MS` | wait before the response head |
//! | `chunks=N`, `gap-ms=MS` | a stream of N content chunks, MS apart (default 3, 0) |
//! | `stall-ms=MS` | after the first chunk, stall MS before the rest |
//! | `cut-after=N` | a stream broken off after N content chunks: the body ends in an error, so the connection is cut without the stream's end |
//! | `usage=IN/OUT` | the usage reported (default 10/20) |
//! | `no-usage` | report no usage at all |
//! | (`POST /_script`, body: directives) | a standing script of this fake, read before each request's own `x-fake-script` (which wins), until the next `/_script` or `/_reset`: two fakes behind one proxy answer differently |
//! | `quota-requests=R/MS`, `quota-tokens=R/MS` | on every answer (whole, streamed, error): the provider's rate-limit headers saying R left, resetting in MS ms (OpenAI `x-ratelimit-{limit,remaining,reset}-*` with a Go duration; Anthropic `anthropic-ratelimit-*-{limit,remaining,reset}` with an RFC 3339 instant) |
//!
//! `x-fake-tag` is recorded with each arrival (for fairness tests). `GET /_stats` answers what
//! it saw: requests, the maximum and current in-flight count, aborted answers (the caller went
//! away before the end), arrivals with their time and tag, and whether any request carried a
//! turnstile key (`tsk_`/`tsa_`). `POST /_reset` clears it (and the standing script).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http_body::Frame;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// One request as the fake saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Arrival {
    /// Milliseconds since the fake started.
    pub at_ms: f64,
    /// The request path.
    pub path: String,
    /// The request's `x-fake-tag` header, if any.
    pub tag: Option<String>,
    /// The body's `model`, if any.
    pub model: Option<String>,
    /// `stream_options.include_usage` as received.
    pub include_usage: Option<bool>,
}

/// What the fake has seen.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Requests received.
    pub requests: u64,
    /// Requests being answered now.
    pub in_flight: u64,
    /// The most requests ever answered at once.
    pub max_in_flight: u64,
    /// Requests whose client went away before the answer ended.
    pub aborted: u64,
    /// Milliseconds since start at which each abort was noticed.
    pub aborted_at_ms: Vec<f64>,
    /// Every request, in arrival order (when recording).
    pub arrivals: Vec<Arrival>,
    /// A request carried a turnstile key (it never should).
    pub saw_turnstile_key: bool,
    /// The `authorization` / `x-api-key` values seen last (the provider key the proxy sent).
    pub last_authorization: Option<String>,
    /// (See `last_authorization`.)
    pub last_api_key: Option<String>,
}

struct Inner {
    start: Instant,
    stats: Mutex<Stats>,
    once: Mutex<HashSet<String>>,
    /// The standing script (`POST /_script`), read before each request's own.
    standing: Mutex<String>,
    /// Record arrivals (off in benchmarks).
    record: bool,
}

/// A running fake upstream.
#[derive(Clone)]
pub struct FakeUpstream {
    /// The loopback address it listens on.
    pub addr: SocketAddr,
    inner: Arc<Inner>,
}

impl FakeUpstream {
    /// Starts on `addr` (port 0 for an ephemeral one). Must run in a tokio runtime.
    pub async fn start(addr: SocketAddr, record: bool) -> std::io::Result<FakeUpstream> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            start: Instant::now(),
            stats: Mutex::new(Stats::default()),
            once: Mutex::new(HashSet::new()),
            standing: Mutex::new(String::new()),
            record,
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(answer))
            .route("/v1/responses", post(answer))
            .route("/v1/embeddings", post(answer))
            .route("/v1/completions", post(answer))
            .route("/v1/messages", post(answer))
            .route("/_stats", get(stats))
            .route("/_reset", post(reset))
            .route("/_script", post(set_script))
            .with_state(inner.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let service = hyper_util::service::TowerToHyperService::new(app.clone());
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(FakeUpstream { addr, inner })
    }

    /// Starts on its own runtime thread (for blocking tests); lives until the process ends.
    pub fn spawn_thread() -> FakeUpstream {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let fake = FakeUpstream::start(SocketAddr::from(([127, 0, 0, 1], 0)), true).await;
                let _ = tx.send(fake);
                std::future::pending::<()>().await;
            });
        });
        match rx.recv() {
            Ok(Ok(fake)) => fake,
            other => panic!("the fake upstream did not start: {:?}", other.err()),
        }
    }

    /// The OpenAI-format base URL.
    pub fn openai_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The Anthropic-format base URL.
    pub fn anthropic_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A copy of what the fake has seen so far.
    pub fn stats(&self) -> Stats {
        lock(&self.inner.stats).clone()
    }

    /// Forgets what the fake has seen (and which `once` scripts have run).
    pub fn reset(&self) {
        *lock(&self.inner.stats) = Stats::default();
        lock(&self.inner.once).clear();
        lock(&self.inner.standing).clear();
    }

    /// Sets the standing script (directives as in `x-fake-script`; empty: none).
    pub fn set_script(&self, script: &str) {
        *lock(&self.inner.standing) = script.to_owned();
    }

    /// Milliseconds since the fake started (the clock of [`Arrival::at_ms`]).
    pub fn now_ms(&self) -> f64 {
        self.inner.start.elapsed().as_secs_f64() * 1000.0
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

async fn stats(State(inner): State<Arc<Inner>>) -> Response {
    axum::Json(lock(&inner.stats).clone()).into_response()
}

async fn reset(State(inner): State<Arc<Inner>>) -> Response {
    *lock(&inner.stats) = Stats::default();
    lock(&inner.once).clear();
    lock(&inner.standing).clear();
    StatusCode::NO_CONTENT.into_response()
}

async fn set_script(State(inner): State<Arc<Inner>>, body: String) -> Response {
    *lock(&inner.standing) = body;
    StatusCode::NO_CONTENT.into_response()
}

/// The parsed `x-fake-script`.
#[derive(Debug, Default)]
struct Script {
    status: Option<u16>,
    retry_after: Option<String>,
    retry_after_ms: Option<String>,
    retry_after_date: Option<u64>,
    /// `retry-after-year=Y`: an HTTP-date on 1 January of year Y (any number of digits).
    retry_after_year: Option<String>,
    once: Option<String>,
    first_byte_ms: u64,
    chunks: usize,
    gap_ms: u64,
    stall_ms: u64,
    /// `cut-after`: content chunks sent before the stream is broken off.
    cut_after: Option<usize>,
    usage: Option<(u64, u64)>,
    /// `quota-requests` / `quota-tokens`: (remaining, reset in ms).
    quota: [Option<(u64, u64)>; 2],
}

impl Script {
    /// The `quota-*` directives as the provider's rate-limit headers, in its wire format.
    fn quota_headers(&self, anthropic: bool, headers: &mut HeaderMap) {
        for ((remaining, reset_ms), kind) in self
            .quota
            .iter()
            .zip(["requests", "tokens"])
            .filter_map(|(q, k)| q.map(|q| (q, k)))
        {
            let reset = if anthropic {
                crate::quota_headers::format_rfc3339(
                    SystemTime::now() + Duration::from_millis(reset_ms),
                )
            } else {
                crate::quota_headers::format_duration(reset_ms)
            };
            let values = [
                ("limit", remaining.max(1).to_string()),
                ("remaining", remaining.to_string()),
                ("reset", reset),
            ];
            for (field, value) in values {
                let name = if anthropic {
                    format!("anthropic-ratelimit-{kind}-{field}")
                } else {
                    format!("x-ratelimit-{field}-{kind}")
                };
                if let (Ok(name), Ok(value)) =
                    (axum::http::HeaderName::try_from(name), value.parse())
                {
                    headers.insert(name, value);
                }
            }
        }
    }
}

fn script(standing: &str, headers: &HeaderMap) -> Script {
    let mut script = Script {
        chunks: 3,
        usage: Some((10, 20)),
        ..Script::default()
    };
    let text = headers
        .get("x-fake-script")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let directives = standing.split(',').chain(text.split(','));
    for directive in directives.map(str::trim).filter(|d| !d.is_empty()) {
        let (key, value) = directive.split_once('=').unwrap_or((directive, ""));
        let number = || value.parse::<u64>().unwrap_or(0);
        match key {
            "status" => script.status = value.parse().ok(),
            "retry-after" => script.retry_after = Some(value.to_owned()),
            "retry-after-ms" => script.retry_after_ms = Some(value.to_owned()),
            "retry-after-date" => script.retry_after_date = Some(number()),
            "retry-after-year" => script.retry_after_year = Some(value.to_owned()),
            "once" => script.once = Some(value.to_owned()),
            "first-byte-ms" => script.first_byte_ms = number(),
            "chunks" => script.chunks = number() as usize,
            "gap-ms" => script.gap_ms = number(),
            "stall-ms" => script.stall_ms = number(),
            "cut-after" => script.cut_after = value.parse().ok(),
            "no-usage" => script.usage = None,
            "quota-requests" | "quota-tokens" => {
                let slot = usize::from(key == "quota-tokens");
                if let Some((r, ms)) = value.split_once('/') {
                    script.quota[slot] = r.parse().ok().zip(ms.parse().ok());
                }
            }
            "usage" => {
                if let Some((i, o)) = value.split_once('/') {
                    script.usage = Some((i.parse().unwrap_or(0), o.parse().unwrap_or(0)));
                }
            }
            _ => {}
        }
    }
    script
}

/// Counts a request in flight until dropped; notes an abort if dropped unfinished.
struct InFlight {
    inner: Arc<Inner>,
    finished: bool,
}

impl InFlight {
    fn new(inner: Arc<Inner>) -> Self {
        {
            let mut stats = lock(&inner.stats);
            stats.in_flight += 1;
            stats.max_in_flight = stats.max_in_flight.max(stats.in_flight);
        }
        InFlight {
            inner,
            finished: false,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let at = self.inner.start.elapsed().as_secs_f64() * 1000.0;
        let mut stats = lock(&self.inner.stats);
        stats.in_flight = stats.in_flight.saturating_sub(1);
        if !self.finished {
            stats.aborted += 1;
            stats.aborted_at_ms.push(at);
        }
    }
}

async fn answer(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let headers = request.headers().clone();
    let body = axum::body::to_bytes(request.into_body(), 64 << 20)
        .await
        .unwrap_or_default();
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = parsed
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let stream = parsed
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let include_usage = parsed
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool);
    {
        let mut stats = lock(&inner.stats);
        stats.requests += 1;
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let key = headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let turnstile = |v: &Option<String>| {
            v.as_deref()
                .is_some_and(|v| v.contains("tsk_") || v.contains("tsa_"))
        };
        stats.saw_turnstile_key |= turnstile(&auth) || turnstile(&key);
        stats.last_authorization = auth;
        stats.last_api_key = key;
        if inner.record {
            stats.arrivals.push(Arrival {
                at_ms: inner.start.elapsed().as_secs_f64() * 1000.0,
                path: path.clone(),
                tag: headers
                    .get("x-fake-tag")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                model: model.clone(),
                include_usage,
            });
        }
    }
    let mut guard = InFlight::new(inner.clone());
    let script = script(&lock(&inner.standing), &headers);
    if script.first_byte_ms > 0 {
        tokio::time::sleep(Duration::from_millis(script.first_byte_ms)).await;
    }
    let failing = match (&script.status, &script.once) {
        (Some(_), Some(id)) => lock(&inner.once).insert(id.clone()),
        (Some(_), None) => true,
        _ => false,
    };
    let model = model.unwrap_or_else(|| "fake".into());
    let anthropic = path == "/v1/messages";
    if let (true, Some(status)) = (failing, script.status) {
        guard.finished = true;
        return error_answer(status, &script, anthropic);
    }
    if stream {
        let wants_usage = anthropic || path == "/v1/responses" || include_usage == Some(true);
        return stream_answer(&path, &model, script, wants_usage, guard);
    }
    guard.finished = true;
    let (input, output) = script.usage.unwrap_or((0, 0));
    let usage = script.usage.is_some();
    let mut body = match path.as_str() {
        "/v1/messages" => json!({
            "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": "hello"}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": output},
        }),
        "/v1/embeddings" => json!({
            "object": "list", "model": model,
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
            "usage": {"prompt_tokens": input, "total_tokens": input},
        }),
        "/v1/completions" => json!({
            "id": "cmpl-fake", "object": "text_completion", "created": 0, "model": model,
            "choices": [{"index": 0, "text": "hello", "finish_reason": "stop", "logprobs": null}],
            "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
        }),
        "/v1/responses" => json!({
            "id": "resp_fake", "object": "response", "created_at": 0, "status": "completed",
            "model": model,
            "output": [{"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": "hello", "annotations": []}]}],
            "usage": {"input_tokens": input, "output_tokens": output, "total_tokens": input + output},
        }),
        _ => json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"},
                         "finish_reason": "stop", "logprobs": null}],
            "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
        }),
    };
    if !usage {
        if let Some(object) = body.as_object_mut() {
            object.remove("usage");
        }
    }
    let mut response = (
        [
            ("x-request-id", "req_fake"),
            ("x-ratelimit-remaining-requests", "4999"),
        ],
        axum::Json(body),
    )
        .into_response();
    script.quota_headers(anthropic, response.headers_mut());
    response
}

fn error_answer(status: u16, script: &Script, anthropic: bool) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = if anthropic {
        json!({"type": "error", "error": {"type": if status.as_u16() == 429 {"rate_limit_error"} else {"api_error"}, "message": "fake upstream error"}})
    } else {
        json!({"error": {"message": "fake upstream error", "type": if status.as_u16() == 429 {"rate_limit_error"} else {"server_error"}, "param": null, "code": null}})
    };
    let mut response = (status, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    script.quota_headers(anthropic, headers);
    if let Some(value) = script.retry_after.as_deref().and_then(|v| v.parse().ok()) {
        headers.insert("retry-after", value);
    }
    if let Some(value) = script
        .retry_after_ms
        .as_deref()
        .and_then(|v| v.parse().ok())
    {
        headers.insert("retry-after-ms", value);
    }
    if let Some(seconds) = script.retry_after_date {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let at = now.as_secs().saturating_add(seconds);
        if let Ok(value) = crate::retry_after::format_http_date_secs(at).parse() {
            headers.insert("retry-after", value);
        }
    }
    if let Some(year) = &script.retry_after_year {
        if let Ok(value) = format!("Mon, 01 Jan {year} 00:00:00 GMT").parse() {
            headers.insert("retry-after", value);
        }
    }
    response
}

/// The scripted end of a stream broken off midway (`cut-after`).
#[derive(Debug, thiserror::Error)]
#[error("the fake upstream broke the stream off (cut-after)")]
struct ScriptedCut;

/// A body fed by a channel; it holds the request's in-flight guard, so a body dropped before
/// its end (the reader left) counts as an abort. A [`ScriptedCut`] ends it in an error.
struct ChannelBody(mpsc::Receiver<Result<Bytes, ScriptedCut>>, InFlight);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = ScriptedCut;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ScriptedCut>>> {
        let polled = self.0.poll_recv(cx);
        if let Poll::Ready(None | Some(Err(_))) = polled {
            self.1.finished = true;
        }
        polled.map(|b| b.map(|b| b.map(Frame::data)))
    }
}

fn sse(event: Option<&str>, data: &Value) -> Bytes {
    match event {
        Some(event) => Bytes::from(format!("event: {event}\ndata: {data}\n\n")),
        None => Bytes::from(format!("data: {data}\n\n")),
    }
}

fn stream_answer(
    path: &str,
    model: &str,
    script: Script,
    wants_usage: bool,
    guard: InFlight,
) -> Response {
    let mut quota = HeaderMap::new();
    script.quota_headers(path == "/v1/messages", &mut quota);
    let (tx, rx) = mpsc::channel::<Result<Bytes, ScriptedCut>>(4);
    let path = path.to_owned();
    let model = model.to_owned();
    tokio::spawn(async move {
        let (input, output) = script.usage.unwrap_or((0, 0));
        let mut events: Vec<Bytes> = Vec::new();
        let chunk = |text: &str| -> Bytes {
            match path.as_str() {
                "/v1/messages" => sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
                ),
                "/v1/responses" => sse(
                    Some("response.output_text.delta"),
                    &json!({"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": text, "sequence_number": 1}),
                ),
                "/v1/completions" => sse(
                    None,
                    &json!({"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": model, "choices": [{"index": 0, "text": text, "finish_reason": null, "logprobs": null}]}),
                ),
                _ => sse(
                    None,
                    &json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}),
                ),
            }
        };
        if path == "/v1/messages" {
            let usage = script
                .usage
                .map(|_| json!({"input_tokens": input, "output_tokens": 1}));
            events.push(sse(Some("message_start"), &json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage}})));
            events.push(sse(Some("content_block_start"), &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})));
        } else if path == "/v1/responses" {
            events.push(sse(Some("response.created"), &json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_fake", "object": "response", "created_at": 0, "status": "in_progress", "model": model, "output": []}})));
        }
        // Content chunks are made as they are sent (a long stream costs no memory up front).
        let first_content = events.len();
        let head = std::mem::take(&mut events);
        match path.as_str() {
            "/v1/messages" => {
                events.push(sse(
                    Some("content_block_stop"),
                    &json!({"type": "content_block_stop", "index": 0}),
                ));
                let usage = script.usage.map(|_| json!({"output_tokens": output}));
                events.push(sse(Some("message_delta"), &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": usage})));
                events.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
            }
            "/v1/responses" => {
                let usage = script.usage.map(|_| json!({"input_tokens": input, "output_tokens": output, "total_tokens": input + output}));
                events.push(sse(Some("response.completed"), &json!({"type": "response.completed", "sequence_number": 2, "response": {"id": "resp_fake", "object": "response", "created_at": 0, "status": "completed", "model": model, "output": [{"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": "hello", "annotations": []}]}], "usage": usage}})));
            }
            _ => {
                if wants_usage && script.usage.is_some() {
                    let object = if path == "/v1/completions" {
                        "text_completion"
                    } else {
                        "chat.completion.chunk"
                    };
                    events.push(sse(None, &json!({"id": "fake", "object": object, "created": 0, "model": model, "choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})));
                }
                events.push(Bytes::from_static(b"data: [DONE]\n\n"));
            }
        }
        let tail = events;
        let total = first_content + script.chunks + tail.len();
        let mut head = head.into_iter();
        let mut tail = tail.into_iter();
        for i in 0..total {
            if i > first_content && script.gap_ms > 0 {
                tokio::time::sleep(Duration::from_millis(script.gap_ms)).await;
            }
            if script.cut_after.is_some_and(|n| i == first_content + n) {
                // What was sent leaves first (a connection cut with bytes still in the
                // server's write buffer would lose them).
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = tx.send(Err(ScriptedCut)).await;
                return;
            }
            if i == first_content + 1 && script.stall_ms > 0 {
                tokio::time::sleep(Duration::from_millis(script.stall_ms)).await;
            }
            let event = if i < first_content {
                head.next()
            } else if i < first_content + script.chunks {
                Some(chunk(&format!("tok{} ", i - first_content)))
            } else {
                tail.next()
            };
            let Some(event) = event else { break };
            if tx.send(Ok(event)).await.is_err() {
                return; // The reader is gone: the body's guard counts the abort.
            }
        }
    });
    let mut response = Response::new(Body::new(ChannelBody(rx, guard)));
    response.headers_mut().extend(quota);
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/event-stream"),
    );
    response
}
