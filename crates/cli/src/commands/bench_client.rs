//! The load generator's HTTP client: one hyper HTTP/1.1 connection per simulated client.
//!
//! A general-purpose client (reqwest) parses a URL, looks up a connection pool and builds a
//! header map for every request; on a 2-core machine that shares its cores with the service
//! under test, those costs were more than half of the CPU of a benchmark run and so capped the
//! figure being measured. This client does only what the benchmark needs: each simulated client
//! owns one keep-alive connection (no pool), request bodies and header values are built once,
//! and a response is read as bytes, from which only the lease ID is decoded.
//!
//! Invariant: a client that sees a transport error or an unexpected status does not reuse its
//! connection; it reconnects before its next pair, so one failure never poisons the next.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::http::HeaderValue;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpStream;

/// Where the service listens and what every request of one client carries.
#[derive(Clone)]
pub struct Endpoint {
    /// `host:port` to connect to.
    authority: String,
    host: HeaderValue,
    bearer: HeaderValue,
    /// `POST /v1/admissions` body of this client (its own budget).
    acquire_body: Bytes,
}

impl Endpoint {
    /// An endpoint for `http://host:port` (no path, no TLS) acting with `key`, acquiring on
    /// `provider` against the budget `budget`.
    pub fn new(base: &str, key: &str, provider: &str, budget: &str) -> anyhow::Result<Self> {
        let authority = base
            .strip_prefix("http://")
            .context("the benchmark speaks plain HTTP: the URL must start with http://")?
            .trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            bail!("the URL must be http://host:port without a path, got {base}");
        }
        let body = serde_json::json!({
            "providerId": provider,
            "budgetId": budget,
            "estimate": {"tokens": 100, "costUsd": 0.0001},
            "deadlineMs": 5000,
        });
        Ok(Endpoint {
            authority: authority.to_owned(),
            host: HeaderValue::from_str(authority).context("the host is not a header value")?,
            bearer: HeaderValue::from_str(&format!("Bearer {key}"))
                .context("the key is not a header value")?,
            acquire_body: Bytes::from(serde_json::to_vec(&body)?),
        })
    }
}

/// The lease ID of a `200` admission answer; every other field is skipped.
#[derive(Deserialize)]
struct LeaseReply<'a> {
    #[serde(rename = "leaseId", borrow)]
    lease_id: &'a str,
}

const RELEASE_BODY: &[u8] = br#"{"outcome":"success"}"#;

/// One simulated client: a connection (opened on demand) and its endpoint.
pub struct BenchClient {
    endpoint: Endpoint,
    sender: Option<SendRequest<Full<Bytes>>>,
}

/// The latency of each half of a successful pair.
pub struct PairTimes {
    pub acquire: Duration,
    pub release: Duration,
}

/// Why a pair failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PairFailure {
    /// Connecting, sending or reading failed.
    Transport,
    /// The service answered with a status other than 200 (e.g. 429 under a binding profile).
    Status(u16),
    /// A 200 admission answer without a readable `leaseId`.
    MalformedLease,
}

impl std::fmt::Display for PairFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PairFailure::Transport => f.write_str("transport"),
            PairFailure::Status(status) => write!(f, "status {status}"),
            PairFailure::MalformedLease => f.write_str("malformed lease"),
        }
    }
}

impl BenchClient {
    pub fn new(endpoint: Endpoint) -> Self {
        BenchClient {
            endpoint,
            sender: None,
        }
    }

    /// One acquire + release. On a failure the connection is dropped (see the invariant).
    pub async fn pair(&mut self) -> Result<PairTimes, PairFailure> {
        let began = Instant::now();
        let acquired = self
            .exchange("/v1/admissions", self.endpoint.acquire_body.clone())
            .await?;
        let Ok(lease) = serde_json::from_slice::<LeaseReply<'_>>(&acquired) else {
            self.sender = None;
            return Err(PairFailure::MalformedLease);
        };
        let path = format!("/v1/leases/{}/release", lease.lease_id);
        let acquire = began.elapsed();
        let released_at = Instant::now();
        self.exchange(&path, Bytes::from_static(RELEASE_BODY))
            .await?;
        Ok(PairTimes {
            acquire,
            release: released_at.elapsed(),
        })
    }

    /// `POST path` with `body`; the response body when the status is 200.
    async fn exchange(&mut self, path: &str, body: Bytes) -> Result<Bytes, PairFailure> {
        let result = self.try_exchange(path, body).await;
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    async fn try_exchange(&mut self, path: &str, body: Bytes) -> Result<Bytes, PairFailure> {
        let sender = match &mut self.sender {
            Some(sender) => sender,
            slot => slot.insert(
                connect(&self.endpoint.authority)
                    .await
                    .map_err(|_| PairFailure::Transport)?,
            ),
        };
        sender.ready().await.map_err(|_| PairFailure::Transport)?;
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = path.parse().map_err(|_| PairFailure::MalformedLease)?;
        let headers = request.headers_mut();
        headers.insert(HOST, self.endpoint.host.clone());
        headers.insert(AUTHORIZATION, self.endpoint.bearer.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let response = sender
            .send_request(request)
            .await
            .map_err(|_| PairFailure::Transport)?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|_| PairFailure::Transport)?
            .to_bytes();
        if status == StatusCode::OK {
            Ok(bytes)
        } else {
            Err(PairFailure::Status(status.as_u16()))
        }
    }
}

/// Opens one HTTP/1.1 connection; its driver runs as its own task.
async fn connect(authority: &str) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        // The connection ends when the client drops its sender or the server closes it.
        let _ = connection.await;
    });
    Ok(sender)
}
