//! The load generator's HTTP client: one keep-alive HTTP/1.1 connection per simulated client,
//! spoken directly on the socket.
//!
//! The load generator shares the machine's cores with the service it measures, so every
//! instruction it spends is taken from the figure being measured. A general-purpose client
//! (reqwest) cost more than half of a run's CPU; hyper's client connection (a task of its own
//! per connection, a header map, URI parsing and a body channel per request) still cost about
//! 28 % of a run's user-space instructions in 2026-12. This client does only what the benchmark
//! needs, the way `wrk` does: each request is a byte string built once (the acquire) or from a
//! prefix, the lease ID and a suffix (the release), written with one `write` on the client's
//! own connection, in the client's own task; the answer is parsed with `httparse` (the parser
//! hyper uses), its body is read by `content-length`, and only the lease ID is taken from it.
//!
//! Invariants:
//! - A client that sees a transport error, an answer it cannot frame or an unexpected status
//!   does not reuse its connection; it reconnects before its next pair, so one failure never
//!   poisons the next. An answer that says `connection: close` closes it too.
//! - At most one request is in flight per connection (no pipelining), so every byte read
//!   belongs to the answer of the request just written.

use std::ops::Range;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where the service listens and what every request of one client carries.
#[derive(Clone)]
pub struct Endpoint {
    /// `host:port` to connect to.
    authority: String,
    /// The whole `POST /v1/admissions` request of this client (its own budget).
    acquire_request: Vec<u8>,
    /// The release request after the lease ID: the rest of the request line, headers, body.
    release_suffix: Vec<u8>,
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
        for (what, value) in [("host", authority), ("key", key)] {
            if value.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
                bail!("the {what} must be printable ASCII without spaces to go into a header");
            }
        }
        let body = serde_json::to_vec(&serde_json::json!({
            "providerId": provider,
            "budgetId": budget,
            "estimate": {"tokens": 100, "costUsd": 0.0001},
            "deadlineMs": 5000,
        }))?;
        let headers = |length: usize| {
            format!(
                "host: {authority}\r\nauthorization: Bearer {key}\r\n\
                 content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
            )
        };
        let mut acquire_request =
            format!("POST /v1/admissions HTTP/1.1\r\n{}", headers(body.len())).into_bytes();
        acquire_request.extend_from_slice(&body);
        let mut release_suffix =
            format!("/release HTTP/1.1\r\n{}", headers(RELEASE_BODY.len())).into_bytes();
        release_suffix.extend_from_slice(RELEASE_BODY);
        Ok(Endpoint {
            authority: authority.to_owned(),
            acquire_request,
            release_suffix,
        })
    }
}

const RELEASE_BODY: &[u8] = br#"{"outcome":"success"}"#;

/// Every release request up to the lease ID.
const RELEASE_PREFIX: &[u8] = b"POST /v1/leases/";

/// What precedes the lease ID in a `200` admission answer (the service writes it first; it is
/// searched for, so another field order works too).
const LEASE_ID_FIELD: &[u8] = br#""leaseId":""#;

/// The most header lines an answer may carry.
const MAX_HEADERS: usize = 32;

/// The largest answer head plus body this client reads; a larger one is a framing failure.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// One simulated client: a connection (opened on demand), its endpoint and its buffers.
pub struct BenchClient {
    endpoint: Endpoint,
    stream: Option<TcpStream>,
    /// Bytes read from the connection and not yet consumed.
    read: BytesMut,
    /// The release request being built (reused across pairs).
    release_request: Vec<u8>,
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
    /// An answer this client cannot frame: not HTTP/1.1, no `content-length`, or too large.
    Framing,
}

impl std::fmt::Display for PairFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PairFailure::Transport => f.write_str("transport"),
            PairFailure::Status(status) => write!(f, "status {status}"),
            PairFailure::MalformedLease => f.write_str("malformed lease"),
            PairFailure::Framing => f.write_str("unframed answer"),
        }
    }
}

/// A complete answer: its status, whether the server closes the connection after it, and
/// where its body lies in the read buffer.
struct Answer {
    status: u16,
    closes: bool,
    head_len: usize,
    body_len: usize,
}

impl BenchClient {
    pub fn new(endpoint: Endpoint) -> Self {
        BenchClient {
            endpoint,
            stream: None,
            read: BytesMut::with_capacity(4096),
            release_request: Vec::with_capacity(256),
        }
    }

    /// One acquire + release. On a failure the connection is dropped (see the invariants).
    pub async fn pair(&mut self) -> Result<PairTimes, PairFailure> {
        let began = Instant::now();
        let body = self.exchange(Outgoing::Acquire).await?;
        let built = match lease_id(&self.read[body.clone()]) {
            Some(id) => {
                self.release_request.clear();
                self.release_request.extend_from_slice(RELEASE_PREFIX);
                self.release_request.extend_from_slice(id);
                self.release_request
                    .extend_from_slice(&self.endpoint.release_suffix);
                true
            }
            None => false,
        };
        self.read.advance(body.end);
        if !built {
            self.stream = None;
            return Err(PairFailure::MalformedLease);
        }
        let acquire = began.elapsed();
        let released_at = Instant::now();
        let body = self.exchange(Outgoing::Release).await?;
        self.read.advance(body.end);
        Ok(PairTimes {
            acquire,
            release: released_at.elapsed(),
        })
    }

    /// Writes a request and reads its answer: the range of a `200`'s body in `self.read`
    /// (the caller consumes up to its end). Any failure drops the connection.
    async fn exchange(&mut self, outgoing: Outgoing) -> Result<Range<usize>, PairFailure> {
        let result = self.try_exchange(outgoing).await;
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn try_exchange(&mut self, outgoing: Outgoing) -> Result<Range<usize>, PairFailure> {
        let stream = match &mut self.stream {
            Some(stream) => stream,
            slot => {
                self.read.clear();
                slot.insert(connect(&self.endpoint.authority).await?)
            }
        };
        let request = match outgoing {
            Outgoing::Acquire => &self.endpoint.acquire_request,
            Outgoing::Release => &self.release_request,
        };
        stream
            .write_all(request)
            .await
            .map_err(|_| PairFailure::Transport)?;
        let answer = loop {
            if let Some(answer) = frame(&self.read)? {
                if self.read.len() >= answer.head_len + answer.body_len {
                    break answer;
                }
            }
            if self.read.len() >= MAX_ANSWER_BYTES {
                return Err(PairFailure::Framing);
            }
            self.read.reserve(4096);
            match stream.read_buf(&mut self.read).await {
                Ok(0) | Err(_) => return Err(PairFailure::Transport),
                Ok(_) => {}
            }
        };
        if answer.closes {
            self.stream = None;
        }
        let body = answer.head_len..answer.head_len + answer.body_len;
        if answer.status != 200 {
            self.read.advance(body.end);
            return Err(PairFailure::Status(answer.status));
        }
        Ok(body)
    }
}

/// Which of a client's two requests to send.
#[derive(Clone, Copy)]
enum Outgoing {
    Acquire,
    Release,
}

/// The answer's head, once `read` holds all of it; `Ok(None)` while it is incomplete.
fn frame(read: &[u8]) -> Result<Option<Answer>, PairFailure> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(read) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(PairFailure::Framing),
    };
    let status = response.code.ok_or(PairFailure::Framing)?;
    let mut body_len = None;
    let mut closes = response.version != Some(1);
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            let length = std::str::from_utf8(header.value)
                .ok()
                .and_then(|text| text.trim().parse::<usize>().ok())
                .ok_or(PairFailure::Framing)?;
            body_len = Some(length);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(PairFailure::Framing);
        } else if header.name.eq_ignore_ascii_case("connection") {
            closes |= header.value.eq_ignore_ascii_case(b"close");
        }
    }
    let body_len = body_len.ok_or(PairFailure::Framing)?;
    if head_len + body_len > MAX_ANSWER_BYTES {
        return Err(PairFailure::Framing);
    }
    Ok(Some(Answer {
        status,
        closes,
        head_len,
        body_len,
    }))
}

/// The lease ID of an admission answer's body, if it is one that can go into a path segment
/// unescaped (the service's IDs are hex).
fn lease_id(body: &[u8]) -> Option<&[u8]> {
    let start = body
        .windows(LEASE_ID_FIELD.len())
        .position(|window| window == LEASE_ID_FIELD)?
        + LEASE_ID_FIELD.len();
    let length = body[start..].iter().position(|&b| b == b'"')?;
    let id = &body[start..start + length];
    let path_safe = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
    (!id.is_empty() && id.iter().all(path_safe)).then_some(id)
}

/// Opens one connection with Nagle's algorithm off (each request is one write).
async fn connect(authority: &str) -> Result<TcpStream, PairFailure> {
    let stream = TcpStream::connect(authority)
        .await
        .map_err(|_| PairFailure::Transport)?;
    stream
        .set_nodelay(true)
        .map_err(|_| PairFailure::Transport)?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_a_complete_answer_and_waits_for_a_partial_one() {
        let answer =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5\r\n\r\nhello";
        let framed = frame(answer).expect("frames").expect("complete head");
        assert_eq!(
            (framed.status, framed.closes, framed.body_len),
            (200, false, 5)
        );
        assert_eq!(&answer[framed.head_len..], b"hello");
        assert!(frame(&answer[..20]).expect("partial is fine").is_none());
    }

    #[test]
    fn refuses_what_it_cannot_frame() {
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        assert!(matches!(frame(chunked), Err(PairFailure::Framing)));
        let no_length = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n";
        assert!(matches!(frame(no_length), Err(PairFailure::Framing)));
        let garbage = b"SMTP ready\r\n\r\n";
        assert!(matches!(frame(garbage), Err(PairFailure::Framing)));
        let huge = b"HTTP/1.1 200 OK\r\ncontent-length: 99999999\r\n\r\n";
        assert!(matches!(frame(huge), Err(PairFailure::Framing)));
    }

    #[test]
    fn a_closing_answer_closes_the_connection() {
        let close =
            b"HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let framed = frame(close).expect("frames").expect("complete");
        assert_eq!((framed.status, framed.closes), (413, true));
        let old = b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert!(frame(old).expect("frames").expect("complete").closes);
    }

    #[test]
    fn takes_only_a_path_safe_lease_id() {
        let body = br#"{"leaseId":"c4a67ef66556068145bb1d18b3730879","ttlMs":30000}"#;
        assert_eq!(
            lease_id(body),
            Some(&b"c4a67ef66556068145bb1d18b3730879"[..])
        );
        assert_eq!(
            lease_id(br#"{"ttlMs":1,"leaseId":"ab-1_Z"}"#),
            Some(&b"ab-1_Z"[..])
        );
        assert_eq!(lease_id(br#"{"leaseId":"../admin"}"#), None);
        assert_eq!(lease_id(br#"{"leaseId":""}"#), None);
        assert_eq!(lease_id(br#"{"leaseId":"abc"#), None);
        assert_eq!(lease_id(br#"{"error":"x"}"#), None);
    }

    #[test]
    fn builds_both_requests_once() {
        let endpoint = Endpoint::new("http://127.0.0.1:9/", "tsk_k", "llm", "b-1").expect("ok");
        let acquire = String::from_utf8(endpoint.acquire_request.clone()).expect("ascii");
        assert!(acquire.starts_with("POST /v1/admissions HTTP/1.1\r\nhost: 127.0.0.1:9\r\n"));
        assert!(acquire.contains("authorization: Bearer tsk_k\r\n"));
        let (head, body) = acquire.split_once("\r\n\r\n").expect("head and body");
        assert!(head.ends_with(&format!("content-length: {}", body.len())));
        assert!(body.contains(r#""budgetId":"b-1""#));
        let suffix = String::from_utf8(endpoint.release_suffix.clone()).expect("ascii");
        assert!(suffix.starts_with("/release HTTP/1.1\r\n"));
        assert!(suffix.ends_with("content-length: 21\r\n\r\n{\"outcome\":\"success\"}"));
        assert!(Endpoint::new("http://h:1", "bad key", "p", "b").is_err());
        assert!(Endpoint::new("https://h:1", "k", "p", "b").is_err());
    }
}
