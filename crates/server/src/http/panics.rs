//! A panic in a request handler is answered, counted and logged, never a dropped connection.
//!
//! [`CatchPanic`] wraps the service each connection calls (the gate and the router behind it).
//! A panic while the service is called or while its response future is polled is caught for
//! that one request: the caller gets 500 `internal-error` (the API's typed error body), the
//! connection stays usable, `turnstile_http_handler_panics_total` counts it, and one `error`
//! event (`turnstile::http`, `a request handler panicked`) names where it panicked (file and
//! line) and nothing of the request or the panic's message (which may quote request data).
//!
//! The process's panic hook would also print the message (and, with `RUST_BACKTRACE`, a
//! backtrace) to stderr. [`CatchPanic::new`] installs, once per process, a hook that stays
//! silent for a panic this module is about to catch (a flag set on the polling thread) and
//! records its location for the event; every other panic goes to the previous hook unchanged.
//!
//! Not covered: a panic while a response *body* is streamed (after the status went out) ends
//! that connection, as before; the handlers' bodies are buffers or channels.
//!
//! Invariants: the inner future is never polled again after it panicked; one panic is one
//! answer, one count and one log event.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Once};
use std::task::{Context, Poll};

use axum::response::{IntoResponse, Response};
use tower::Service;

use crate::http::error::ApiError;
use crate::metrics::Metrics;

thread_local! {
    /// Set while this thread runs a call or poll that [`CatchPanic`] catches.
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// Where the last caught panic of this thread happened (set by the hook).
    static LOCATION: RefCell<Option<(String, u32)>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Installs the hook that keeps caught panics off stderr (once per process).
fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) {
                // Only the location is kept: it is code, never request data.
                let at = info.location().map(|l| (l.file().to_owned(), l.line()));
                LOCATION.with(|cell| *cell.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f` with this thread marked as catching.
fn catching<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    CATCHING.with(|c| c.set(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(false));
    result
}

/// The answer to a caught panic: counted, logged once, 500 `internal-error`.
fn answer(metrics: &Metrics) -> Response {
    metrics.handler_panics.fetch_add(1, Ordering::Relaxed);
    let (file, line) = LOCATION
        .with(|cell| cell.borrow_mut().take())
        .unwrap_or_else(|| ("(unknown)".to_owned(), 0));
    tracing::error!(
        target: "turnstile::http",
        file = file.as_str(),
        line,
        "a request handler panicked"
    );
    ApiError::Internal.into_response()
}

/// The service `inner` with its panics caught per request.
#[derive(Clone)]
pub struct CatchPanic<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S> CatchPanic<S> {
    pub fn new(inner: S, metrics: Arc<Metrics>) -> Self {
        install_hook();
        CatchPanic { inner, metrics }
    }
}

impl<S, R> Service<R> for CatchPanic<S>
where
    S: Service<R, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = CatchPanicFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let inner = &mut self.inner;
        let state = match catching(|| inner.call(request)) {
            Ok(future) => State::Running { future },
            Err(_) => State::Panicked {
                answer: Some(answer(&self.metrics)),
            },
        };
        CatchPanicFuture {
            state,
            metrics: self.metrics.clone(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner response future, or the answer to its panic.
    pub struct CatchPanicFuture<F> {
        #[pin]
        state: State<F>,
        metrics: Arc<Metrics>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProjection]
    #[project_replace = StateReplace]
    enum State<F> {
        Running { #[pin] future: F },
        Panicked { answer: Option<Response> },
    }
}

impl<F, E> Future for CatchPanicFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let polled = match this.state.as_mut().project() {
            StateProjection::Running { future } => catching(|| future.poll(cx)),
            StateProjection::Panicked { answer } => {
                return Poll::Ready(Ok(answer
                    .take()
                    .unwrap_or_else(|| ApiError::Internal.into_response())));
            }
        };
        match polled {
            Ok(poll) => poll,
            Err(_) => {
                // Never poll the future that panicked again: drop it now (a drop that panics
                // too is caught the same way).
                let state = &mut this.state;
                let _ = catching(|| {
                    state
                        .as_mut()
                        .project_replace(State::Panicked { answer: None })
                });
                Poll::Ready(Ok(answer(this.metrics)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::convert::Infallible;

    use axum::body::Body;
    use hyper::server::conn::http1;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A handler with real bugs: `/call` panics when called, `/poll` when its future is
    /// polled; anything else is 200.
    #[derive(Clone)]
    struct Buggy;

    impl<B> Service<axum::http::Request<B>> for Buggy {
        type Response = Response;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
            let path = request.uri().path().to_owned();
            assert!(path != "/call", "a bug while calling");
            Box::pin(async move {
                tokio::task::yield_now().await;
                let index: Vec<u8> = Vec::new();
                let byte = if path == "/poll" { index[3] } else { 1 };
                Ok(Response::new(Body::from(format!("ok {byte}"))))
            })
        }
    }

    /// Issue 34: a panicking handler is one 500 `internal-error` with the typed body, counted
    /// once; the connection carries the next request.
    #[tokio::test]
    async fn a_panicking_handler_is_answered_500_and_the_connection_stays() {
        let metrics = Arc::new(Metrics::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = metrics.clone();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let service = TowerToHyperService::new(CatchPanic::new(Buggy, served));
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut answers = Vec::new();
        for path in ["/call", "/poll", "/fine"] {
            let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
            stream.write_all(head.as_bytes()).await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            // One whole answer: the head and its Content-Length of body.
            loop {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the connection was dropped after {path}");
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .unwrap()
                        .parse()
                        .unwrap();
                    if body.len() >= length {
                        answers.push((head.to_owned(), body.to_owned()));
                        break;
                    }
                }
            }
        }
        for (head, body) in &answers[..2] {
            assert!(head.starts_with("HTTP/1.1 500"), "{head}");
            let body: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(body["error"], "internal-error", "{body}");
        }
        assert!(answers[2].0.starts_with("HTTP/1.1 200"), "{:?}", answers[2]);
        assert_eq!(answers[2].1, "ok 1");
        assert_eq!(metrics.handler_panics.load(Ordering::Relaxed), 2);
        let text = turnstile_shell::Exposition::new().with(metrics).text();
        assert!(
            text.contains("turnstile_http_handler_panics_total 2"),
            "{text}"
        );
    }
}
