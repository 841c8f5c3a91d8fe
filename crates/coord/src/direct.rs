//! A Redis connection owned by one workspace's lane ([`crate::batcher`]) and used by whichever
//! call borrowed the lane's link (a caller sending its operation alone, or the lane's task
//! sending a batch): a call costs one `write` and one `read` (or a few, for a large answer) in
//! the task that makes it, with no connection task in between (redis-rs's multiplexed
//! connection runs its own task: a call wakes it, and its answer wakes the caller back).
//!
//! # Invariants
//!
//! - At most one command is in flight on the connection (the lane lends its link to one call
//!   at a time; the next is sent only after the answer to the last was read, or after the
//!   connection of a call abandoned in flight was dropped, [`Direct::disconnect`]).
//! - Any I/O error, timeout or unparsable answer drops the connection (its state is unknown):
//!   the next call connects again, within that call's deadline. An error *reply* (a complete
//!   answer) keeps it. A connection idle for more than [`IDLE_CHECK`] is checked (one
//!   non-blocking read: would block = alive) before it is used, and the batcher drops every
//!   lane's connection after any failed call of the replica (`Batcher::invalidate`), so a
//!   Redis restarted while a connection sat idle costs no failed call. A call is never
//!   re-sent on a new connection.
//! - The caller brings the command's bytes (`protocol::write_ops`: no `redis::Cmd` per call);
//!   an answer is read by [`crate::resp`] when it is a common one, by redis-rs otherwise.
//! - The handshake sends `AUTH` (and `SELECT`) when the URL has a password (a database); no
//!   credential is ever logged or put in an error.
//! - On a Redis Cluster the connection starts at the first seed node and follows its
//!   workspace's slot: a `MOVED` answer (the call did not run) moves it to the node named
//!   ([`Direct::follow`]), with the same credentials; see [`redirect_of`].

use std::io;

use redis::{ConnectionAddr, ConnectionInfo, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::error::CoordError;
use crate::resp::{parse_common, value_end};

enum Stream {
    Tcp(tokio::net::TcpStream),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

impl Stream {
    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes).await,
            #[cfg(unix)]
            Stream::Unix(s) => s.write_all(bytes).await,
        }
    }

    /// Whether the peer is still there: nothing to read (would block) on an idle connection.
    fn alive(&self) -> bool {
        let mut byte = [0u8; 1];
        let probe = match self {
            Stream::Tcp(s) => s.try_read(&mut byte),
            #[cfg(unix)]
            Stream::Unix(s) => s.try_read(&mut byte),
        };
        matches!(probe, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read_buf(buf).await,
            #[cfg(unix)]
            Stream::Unix(s) => s.read_buf(buf).await,
        }
    }
}

/// How long a connection may sit idle before it is checked (one non-blocking read) before use.
pub const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The connection of one workspace's lane.
pub struct Direct {
    info: ConnectionInfo,
    stream: Option<Stream>,
    /// When the connection last answered: one idle longer than [`IDLE_CHECK`] is checked for a
    /// peer that went away (closed by Redis's idle `timeout`, or a restart) before it is used.
    used: Instant,
    buf: Vec<u8>,
    timeout_ms: u64,
}

impl Direct {
    /// A connection to `url`'s server, opened on the first call.
    pub fn new(url: &str, timeout_ms: u64) -> Result<Self, CoordError> {
        let client = redis::Client::open(url).map_err(|e| CoordError::InvalidUrl(e.to_string()))?;
        if !matches!(
            client.get_connection_info().addr(),
            ConnectionAddr::Tcp(..) | ConnectionAddr::Unix(..)
        ) {
            return Err(CoordError::InvalidUrl("TLS is not supported".into()));
        }
        Ok(Direct {
            info: client.get_connection_info().clone(),
            stream: None,
            used: Instant::now(),
            buf: Vec::with_capacity(4096),
            timeout_ms,
        })
    }

    async fn connect(&self) -> Result<Stream, CoordError> {
        let io = |e: io::Error| CoordError::Redis(e.to_string());
        let mut stream = match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(io)?;
                tcp.set_nodelay(true).map_err(io)?;
                Stream::Tcp(tcp)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => {
                Stream::Unix(tokio::net::UnixStream::connect(path).await.map_err(io)?)
            }
            _ => return Err(CoordError::InvalidUrl("TLS is not supported".into())),
        };
        let settings = self.info.redis_settings();
        let mut handshake = Vec::new();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            handshake.push(auth);
        }
        if settings.db() != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(settings.db());
            handshake.push(select);
        }
        let mut buf = Vec::new();
        for cmd in handshake {
            stream
                .write_all(&cmd.get_packed_command())
                .await
                .map_err(io)?;
            buf.clear();
            let value = read_value(&mut stream, &mut buf).await?;
            if let Value::ServerError(_) = value {
                // Never the server's text: it may echo the credential's user.
                return Err(CoordError::Redis("the handshake was refused".into()));
            }
        }
        Ok(stream)
    }

    /// Points the connection at `host:port` (a cluster's `MOVED` answer), same credentials; the
    /// next call connects there.
    pub fn follow(&mut self, host: &str, port: u16) {
        self.info = self
            .info
            .clone()
            .set_addr(ConnectionAddr::Tcp(host.to_owned(), port));
        self.stream = None;
    }

    /// The command timeout in ms (what a timeout error reports).
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms
    }

    /// Sends `packed` (one command, in RESP: `protocol::write_ops`, or a `Cmd`'s
    /// `get_packed_command`) and reads its answer, by `deadline`. A `Value::ServerError` answer
    /// is returned as it is (the connection stays).
    pub async fn call(&mut self, packed: &[u8], deadline: Instant) -> Result<Value, CoordError> {
        match tokio::time::timeout_at(deadline, self.exchange(packed)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                self.stream = None;
                Err(error)
            }
            Err(_) => {
                self.stream = None;
                Err(CoordError::Timeout(self.timeout_ms))
            }
        }
    }

    /// Drops the connection: the next call opens a new one.
    pub fn disconnect(&mut self) {
        self.stream = None;
    }

    async fn exchange(&mut self, packed: &[u8]) -> Result<Value, CoordError> {
        if self.used.elapsed() > IDLE_CHECK && !self.stream.as_ref().is_some_and(Stream::alive) {
            self.stream = None;
        }
        if self.stream.is_none() {
            self.stream = Some(self.connect().await?);
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(CoordError::Redis("not connected".into()));
        };
        stream
            .write_all(packed)
            .await
            .map_err(|e| CoordError::Redis(e.to_string()))?;
        self.buf.clear();
        let value = read_value(stream, &mut self.buf).await?;
        self.used = Instant::now();
        Ok(value)
    }
}

/// A cluster's answer that the call did not run on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// `MOVED <slot> <host:port>`: the slot lives there now.
    Moved { host: String, port: u16 },
    /// `ASK` (a slot being migrated), `TRYAGAIN` (its keys split by the migration) or
    /// `CLUSTERDOWN`: the replica's cluster link handles these.
    Other,
}

/// Whether `value` is a cluster redirect, and which.
pub fn redirect_of(value: &Value) -> Option<Redirect> {
    let Value::ServerError(error) = value else {
        return None;
    };
    match error.code() {
        "MOVED" => {
            let node = error.details()?.split_ascii_whitespace().nth(1)?;
            let (host, port) = node.rsplit_once(':')?;
            Some(Redirect::Moved {
                host: host.to_owned(),
                port: port.parse().ok()?,
            })
        }
        "ASK" | "TRYAGAIN" | "CLUSTERDOWN" => Some(Redirect::Other),
        _ => None,
    }
}

async fn read_value(stream: &mut Stream, buf: &mut Vec<u8>) -> Result<Value, CoordError> {
    loop {
        if let Some(end) = value_end(buf, 0)? {
            // The common answers (an integer, an array of integers and strings) without
            // redis-rs's general parser; everything else through it.
            let value = match parse_common(&buf[..end]) {
                Some(value) => value,
                None => redis::parse_redis_value(&buf[..end])
                    .map_err(|e| CoordError::Protocol(e.to_string()))?,
            };
            if end != buf.len() {
                // One command in flight: nothing may follow its answer.
                return Err(CoordError::Protocol("more than one answer".into()));
            }
            return Ok(value);
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(buf.capacity().max(4096));
        }
        let n = stream
            .read_buf(buf)
            .await
            .map_err(|e| CoordError::Redis(e.to_string()))?;
        if n == 0 {
            return Err(CoordError::Redis("the connection was closed".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{redirect_of, Redirect};

    fn reply(text: &str) -> redis::Value {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap()
    }

    #[test]
    fn moved_names_the_node_and_the_other_cluster_answers_are_handed_on() {
        assert_eq!(
            redirect_of(&reply("MOVED 3999 127.0.0.1:7001")),
            Some(Redirect::Moved {
                host: "127.0.0.1".into(),
                port: 7001
            })
        );
        assert_eq!(
            redirect_of(&reply("ASK 3999 127.0.0.1:7002")),
            Some(Redirect::Other)
        );
        assert_eq!(
            redirect_of(&reply(
                "TRYAGAIN Multiple keys request during rehashing of slot"
            )),
            Some(Redirect::Other)
        );
        assert_eq!(
            redirect_of(&reply("CLUSTERDOWN The cluster is down")),
            Some(Redirect::Other)
        );
        assert_eq!(redirect_of(&reply("ERR Function not found")), None);
        assert_eq!(redirect_of(&redis::Value::Int(1)), None);
    }
}
