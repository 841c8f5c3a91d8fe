//! The upstream connection pool: keep-alive HTTP/1.1 connections per upstream, on
//! `hyper::client::conn::http1`, with no task or lock beyond what a call needs.
//!
//! A call takes an idle connection of its upstream (the most recently used one first) or opens
//! a new one (TCP with `TCP_NODELAY` and `proxy.connect_timeout_ms`, rustls with the webpki
//! roots for `https://`, then the HTTP/1 handshake; the connection's own task is spawned once
//! per connection, not per call). The answer's body ([`PooledBody`]) carries the connection
//! and puts it back into the idle list the moment the body has ended; nothing is spawned per
//! call to watch for that.
//!
//! Invariants:
//! - A connection is only reused after its previous answer was read to the end. A body dropped
//!   early (the client left, the answer was too large) or broken drops its connection with it:
//!   hyper closes the socket at once, so the upstream sees the abort.
//! - A request that fails or is cancelled after it may have been written is never sent again
//!   (a second call could be billed twice). Only a request hyper hands back unsent from a reused
//!   connection that closed meanwhile is sent once more, on another connection: it never left.
//! - The idle list of an upstream holds at most [`MAX_IDLE`] connections; one idle longer than
//!   [`IDLE_TIMEOUT`] or whose connection closed is dropped instead of used.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::{Request, Response, Uri};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower_service::Service;

/// The most idle connections kept per upstream; a connection coming back to a full list is
/// closed.
pub const MAX_IDLE: usize = 256;
/// An idle connection unused this long is closed when it is next looked at.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

type Sender = SendRequest<Full<Bytes>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client that could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up TLS for upstream calls: {0}")]
pub struct ClientError(String);

/// Why an upstream request got no answer head.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection could be made (connect, TLS, handshake), or hyper handed the request back
    /// unsent: it never left.
    #[error("upstream connection failed: {0}")]
    NotSent(BoxError),
    /// The request may have reached the upstream.
    #[error("upstream request failed: {0}")]
    Failed(hyper::Error),
}

impl SendError {
    /// Whether the request certainly never left (sending it again cannot bill twice).
    pub fn never_sent(&self) -> bool {
        matches!(self, SendError::NotSent(_))
    }
}

/// The idle connections of one upstream.
#[derive(Default)]
pub struct Idle {
    /// Oldest first; each with the instant it became idle.
    list: Mutex<VecDeque<(Sender, Instant)>>,
}

impl Idle {
    /// The most recently used idle connection that is still open and not expired.
    fn take(&self) -> Option<Sender> {
        let now = Instant::now();
        let mut list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        while list
            .front()
            .is_some_and(|(_, since)| now.duration_since(*since) > IDLE_TIMEOUT)
        {
            list.pop_front();
        }
        while let Some((sender, _)) = list.pop_back() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    /// Keeps `sender` for the next call, unless its connection closed or the list is full.
    fn put(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        if list.len() < MAX_IDLE {
            list.push_back((sender, now));
        }
    }

    /// How many connections are idle (closed ones not yet noticed included).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.list
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no connection is idle.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Opens upstream connections; shared by every upstream.
#[derive(Clone)]
pub struct Client {
    connector: HttpsConnector<HttpConnector>,
}

impl Client {
    /// A client whose connects give up after `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Result<Self, ClientError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|e| ClientError(e.to_string()))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Client { connector })
    }

    /// A new connection to `origin` (scheme and authority), its task spawned.
    async fn connect(&self, origin: &Uri) -> Result<Sender, SendError> {
        let io = self
            .connector
            .clone()
            .call(origin.clone())
            .await
            .map_err(SendError::NotSent)?;
        let (sender, connection) = http1::handshake(io)
            .await
            .map_err(|e| SendError::NotSent(Box::new(e)))?;
        // Ends when the connection closes: an error, the upstream closing it, or every handle
        // (the sender, the answer's body) dropped.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    /// Sends `request` (origin-form URI, `Host` set) to the upstream at `origin` over one of
    /// `idle`'s connections or a new one; the answer's body returns the connection to `idle`
    /// once it has ended.
    pub async fn send(
        &self,
        origin: &Uri,
        idle: &Arc<Idle>,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<PooledBody>, SendError> {
        loop {
            let (mut sender, reused) = match idle.take() {
                Some(sender) => (sender, true),
                // Boxed: the connect and handshake state is large, and this future lives inside
                // the handler's, which is copied into its box on every call.
                None => (Box::pin(self.connect(origin)).await?, false),
            };
            // A reused connection is ready once its dispatcher saw the previous answer's end
            // (usually already): a closed one is dropped and the next one tried.
            if reused && !sender.is_ready() && sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let back = Some((sender, idle.clone()));
                    return Ok(response.map(|body| PooledBody { body, back }));
                }
                Err(mut error) => match error.take_message() {
                    // Handed back unsent from a connection that closed while idle: never left.
                    Some(unsent) if reused => request = unsent,
                    Some(_) => return Err(SendError::NotSent(Box::new(error.into_error()))),
                    None => return Err(SendError::Failed(error.into_error())),
                },
            }
        }
    }
}

/// An upstream answer's body holding its connection until the body has ended.
pub struct PooledBody {
    body: Incoming,
    /// The connection and where it goes back to; `None` once returned or given up.
    back: Option<(Sender, Arc<Idle>)>,
}

impl std::fmt::Debug for PooledBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBody")
            .field("holds_connection", &self.back.is_some())
            .finish()
    }
}

impl PooledBody {
    fn check_in(&mut self) {
        if let Some((sender, idle)) = self.back.take() {
            idle.put(sender);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.check_in(),
            // The last frame of a sized body: its reader may stop here (hyper's server does).
            Poll::Ready(Some(Ok(_))) if this.body.is_end_stream() => this.check_in(),
            Poll::Ready(Some(Err(_))) => this.back = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use hyper::service::service_fn;
    use tokio::net::TcpListener;

    use super::*;

    /// A loopback HTTP/1 server counting the connections it accepted and closed; `/close`
    /// answers with `connection: close`, `/big` with a body of 3 frames of 64 KiB.
    struct Server {
        origin: Uri,
        accepted: Arc<AtomicUsize>,
        closed: Arc<AtomicUsize>,
    }

    /// Three frames of 64 KiB, 20 ms apart.
    struct Slow {
        left: usize,
        pause: Pin<Box<tokio::time::Sleep>>,
    }

    impl Slow {
        fn new() -> Self {
            Slow {
                left: 3,
                pause: Box::pin(tokio::time::sleep(Duration::ZERO)),
            }
        }
    }

    impl Body for Slow {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            if self.left == 0 {
                return Poll::Ready(None);
            }
            std::task::ready!(self.pause.as_mut().poll(cx));
            self.left -= 1;
            let next = tokio::time::Instant::now() + Duration::from_millis(20);
            self.pause.as_mut().reset(next);
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; 65536])))))
        }
    }

    async fn server() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin: Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (a, c) = (accepted.clone(), closed.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                a.fetch_add(1, Ordering::SeqCst);
                let c = c.clone();
                tokio::spawn(async move {
                    let service = service_fn(|request: Request<Incoming>| async move {
                        let path = request.uri().path().to_owned();
                        let _ = request.into_body().collect().await;
                        let mut response = match path.as_str() {
                            "/big" => Response::new(http_body_util::Either::Left(Slow::new())),
                            _ => Response::new(http_body_util::Either::Right(Full::new(
                                Bytes::from_static(b"{\"ok\":true}"),
                            ))),
                        };
                        if path == "/close" {
                            response
                                .headers_mut()
                                .insert("connection", "close".parse().unwrap());
                        }
                        Ok::<_, std::convert::Infallible>(response)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                    c.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Server {
            origin,
            accepted,
            closed,
        }
    }

    fn request(origin: &Uri, path: &'static str) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(Bytes::from_static(b"{}")));
        *request.method_mut() = axum::http::Method::POST;
        *request.uri_mut() = Uri::from_static(path);
        let host = origin.authority().unwrap().as_str().parse().unwrap();
        request.headers_mut().insert("host", host);
        request
    }

    async fn wait_for(what: impl Fn() -> bool) {
        for _ in 0..200 {
            if what() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("condition not reached within 1 s");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_is_reused_only_after_its_body_ended() {
        let server = server().await;
        let client = Client::new(Duration::from_secs(1)).unwrap();
        let idle = Arc::new(Idle::default());
        for _ in 0..3 {
            let response = client
                .send(&server.origin, &idle, request(&server.origin, "/a"))
                .await
                .unwrap();
            assert!(idle.is_empty(), "in use while its body is unread");
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"{\"ok\":true}");
            assert_eq!(idle.len(), 1);
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), 1);

        // Two at once: the second cannot share the first's connection.
        let first = client
            .send(&server.origin, &idle, request(&server.origin, "/a"))
            .await
            .unwrap();
        let second = client
            .send(&server.origin, &idle, request(&server.origin, "/a"))
            .await
            .unwrap();
        assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
        first.into_body().collect().await.unwrap();
        second.into_body().collect().await.unwrap();
        assert_eq!(idle.len(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_dropped_before_its_end_closes_its_connection() {
        let server = server().await;
        let client = Client::new(Duration::from_secs(1)).unwrap();
        let idle = Arc::new(Idle::default());
        let response = client
            .send(&server.origin, &idle, request(&server.origin, "/big"))
            .await
            .unwrap();
        let mut body = response.into_body();
        assert!(body.frame().await.unwrap().unwrap().is_data());
        drop(body);
        wait_for(|| server.closed.load(Ordering::SeqCst) == 1).await;
        assert!(idle.is_empty());
        // The next call opens a new connection and works.
        let response = client
            .send(&server.origin, &idle, request(&server.origin, "/a"))
            .await
            .unwrap();
        response.into_body().collect().await.unwrap();
        assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_the_upstream_closed_is_not_used_again() {
        let server = server().await;
        let client = Client::new(Duration::from_secs(1)).unwrap();
        let idle = Arc::new(Idle::default());
        let response = client
            .send(&server.origin, &idle, request(&server.origin, "/close"))
            .await
            .unwrap();
        response.into_body().collect().await.unwrap();
        wait_for(|| server.closed.load(Ordering::SeqCst) == 1).await;
        for _ in 0..2 {
            let response = client
                .send(&server.origin, &idle, request(&server.origin, "/a"))
                .await
                .unwrap();
            response.into_body().collect().await.unwrap();
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_refused_connect_is_never_sent() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin: Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        drop(listener);
        let client = Client::new(Duration::from_secs(1)).unwrap();
        let idle = Arc::new(Idle::default());
        let error = client
            .send(&origin, &idle, request(&origin, "/a"))
            .await
            .unwrap_err();
        assert!(error.never_sent(), "{error}");
        assert!(idle.is_empty());
    }

    #[test]
    fn the_send_future_stays_small() {
        // It is part of every proxied call's handler future, which axum boxes (a copy of its
        // whole size per call): the rare connect path must not grow it.
        let client = Client::new(Duration::from_secs(1)).unwrap();
        let idle = Arc::new(Idle::default());
        let origin = Uri::from_static("http://127.0.0.1:9");
        let send = client.send(&origin, &idle, request(&origin, "/a"));
        assert!(
            std::mem::size_of_val(&send) <= 1024,
            "{} bytes",
            std::mem::size_of_val(&send)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_expired_idle_connection_is_dropped_not_used() {
        let server = server().await;
        let client = Client::new(Duration::from_secs(1)).unwrap();
        let idle = Arc::new(Idle::default());
        let sender = client.connect(&server.origin).await.unwrap();
        let long_ago = Instant::now()
            .checked_sub(IDLE_TIMEOUT + Duration::from_secs(1))
            .unwrap();
        idle.list.lock().unwrap().push_back((sender, long_ago));
        assert!(idle.take().is_none());
        assert!(idle.is_empty());
        wait_for(|| server.closed.load(Ordering::SeqCst) == 1).await;
    }
}
