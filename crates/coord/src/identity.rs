//! The shared identity of a deployment: API keys (hashes only), revocations, profile
//! registrations and audit records, as one ordered change feed in Redis (the
//! `turnstile_identity_v2` library, `lua/turnstile_identity_v2.lua`).
//!
//! Each replica keeps its SQLite store as a mirror of the feed and follows it with a short
//! poll ([`IdentityStore::since`]: one read-only call answers the feed's epoch, its head and
//! the events after the replica's cursor), so authenticating a request costs no Redis call;
//! writes ([`IdentityStore::create_key`], [`IdentityStore::revoke_key`],
//! [`IdentityStore::register`], [`IdentityStore::append`]) are one function call each, atomic
//! across replicas. Events are opaque strings here (the server writes JSON).
//!
//! Invariants:
//! - No tenant ID and no secret in any key name: the keys are fixed (`ts:{ts-id}:…`); key
//!   hashes (sha256 of 256-bit secrets) and [`key_tag`]s (a truncated sha256 of the workspace)
//!   are the only index values.
//! - Events are numbered 1, 2, 3, … without gaps within one epoch; every replica applies them
//!   in that order.
//! - A write names the epoch its writer follows; a feed that Redis lost and a replica seeded
//!   again has a new epoch, so no write lands in a feed its writer does not follow.
//! - No call waits longer than the timeout; the library is loaded again when Redis lost it.
//! - Every write carries a deadline in Redis's clock ([`deadline`]) and a write that did not
//!   answer is answered [`WriteError::OutcomeUnknown`] no earlier than its send + the timeout,
//!   when Redis's clock is past that deadline: a write this client did not see succeed either
//!   applied before that answer or never will (the feed shows which). A write refused before
//!   it was sent, or answered by Redis with an error or `late`, wrote nothing
//!   ([`WriteError::NotWritten`], [`WriteError::Late`]).

pub mod deadline;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Cmd, ErrorKind, RedisError, Value};

use crate::error::CoordError;
use crate::keys::short_hash;
use crate::link::{Link, Topology};
use crate::protocol::{array, int, text};
use deadline::ClockReading;

/// The identity contract's version, as it appears in the library's and every function's name
/// (a literal, so that names are built at compile time; a changed contract bumps it:
/// `docs/replicas.md`, "Rolling deploys").
macro_rules! identity_version {
    () => {
        "2"
    };
}

/// The name of the identity library's function `$name` (`ts_id_<name>_v<version>`).
macro_rules! identity_function {
    ($name:literal) => {
        concat!("ts_id_", $name, "_v", identity_version!())
    };
}

/// The function library (Lua), versioned by name.
pub const IDENTITY_LIBRARY: &str = include_str!(concat!(
    "lua/turnstile_identity_v",
    identity_version!(),
    ".lua"
));

/// The library's functions.
const SEED: &str = identity_function!("seed");
const KEY: &str = identity_function!("key");
const REVOKE: &str = identity_function!("revoke");
const REGISTER: &str = identity_function!("register");
const APPEND: &str = identity_function!("append");
const SINCE: &str = identity_function!("since");

/// The keys every identity function names, in the library's order.
pub const KEYS: [&str; 5] = [
    "ts:{ts-id}:epoch",
    "ts:{ts-id}:seq",
    "ts:{ts-id}:feed",
    "ts:{ts-id}:keys",
    "ts:{ts-id}:regs",
];

/// The index tag of a key: `admin`, or `principal:W` with W = 16 hex digits of
/// sha256(workspace ID). A revocation names the tag it expects, so only a principal key of
/// that workspace is revoked.
pub fn key_tag(workspace: Option<&str>) -> String {
    match workspace {
        None => "admin".to_owned(),
        Some(workspace) => format!("principal:{}", short_hash(workspace)),
    }
}

/// The index name of a workspace's registration counter (never its ID).
pub fn workspace_tag(workspace: &str) -> String {
    short_hash(workspace)
}

/// One event of the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedEvent {
    /// Its number: 1, 2, 3, … within one epoch.
    pub seq: u64,
    /// The event's document, as its writer stored it.
    pub event: String,
}

/// One read of the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedPage {
    /// The feed's epoch; `None` when Redis has no feed (never seeded, or it lost its state).
    pub epoch: Option<String>,
    /// The number of the feed's last event.
    pub head: u64,
    /// Events after the asked cursor, oldest first (a bounded page: ask again while
    /// `events.last().seq < head`).
    pub events: Vec<FeedEvent>,
}

/// The answer to a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Appended as event `seq`; a registration is its workspace's `registration`-th.
    Appended {
        /// The event's number.
        seq: u64,
        /// The workspace's registration number (registrations only).
        registration: Option<u64>,
    },
    /// A key with this hash is live already.
    Duplicate,
    /// No live key with this hash and tag (never created, revoked already, another workspace).
    Unknown,
    /// The workspace has had `registrations` registrations, not the number the writer
    /// validated against: catch up and validate again.
    Stale {
        /// The registrations the workspace has had.
        registrations: u64,
    },
    /// The feed's epoch is not the writer's (`None`: Redis has no feed).
    WrongEpoch {
        /// The feed's epoch now.
        current: Option<String>,
    },
}

/// Why a write has no answer to give. Each variant says what is known about the feed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// Not sent (Redis did not answer the clock reading, or the connection could not be
    /// made), or Redis answered it with an error: nothing was written.
    #[error("{0}; nothing was written")]
    NotWritten(CoordError),
    /// Redis ran it after its deadline and refused it: nothing was written.
    #[error("Redis ran the write after its deadline and refused it; nothing was written")]
    Late,
    /// Sent, and no usable answer came back: a timeout (Redis hangs) or a connection broken
    /// after sending, answered only once Redis's clock is past the write's deadline; or an
    /// answer that does not parse (Redis ran it). Either way it applied before this answer,
    /// or it never will.
    #[error("{0}; the write either applied before this answer or never will")]
    OutcomeUnknown(CoordError),
}

/// How one call ended without an answer, as far as knowing whether it ran.
enum CallFailure {
    /// The command was not sent, or Redis answered it with an error.
    Refused(CoordError),
    /// The command may have reached Redis and run.
    Unknown(CoordError),
}

/// Sorts a redis-rs error: Redis's own error answer and a refused connection wrote nothing;
/// anything else (a timeout, a connection broken after sending) may have run.
fn classify(error: &RedisError, timeout: &CoordError) -> CallFailure {
    if error.is_timeout() {
        return CallFailure::Unknown(timeout.clone());
    }
    let coord = CoordError::Redis(error.to_string());
    if error.is_connection_refusal() {
        return CallFailure::Refused(coord);
    }
    match error.kind() {
        ErrorKind::Server(_) | ErrorKind::Extension => CallFailure::Refused(coord),
        _ => CallFailure::Unknown(coord),
    }
}

/// What seeding did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seeded {
    /// This call created the feed (epoch, head).
    Created {
        /// The new feed's epoch.
        epoch: String,
        /// The number of its last event.
        head: u64,
    },
    /// A feed existed already (someone else seeded it): adopt it.
    Exists {
        /// The existing feed's epoch.
        epoch: String,
        /// The number of its last event.
        head: u64,
    },
}

/// One item of a seed, in feed order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedItem {
    /// A live key: its hash, its [`key_tag`] and its event.
    Key {
        /// The key's hash.
        hash: String,
        /// Its [`key_tag`].
        tag: String,
        /// Its event.
        event: String,
    },
    /// A registration of the workspace with this [`workspace_tag`].
    Registration {
        /// The workspace's [`workspace_tag`].
        workspace_tag: String,
        /// The registration's event.
        event: String,
    },
    /// Any other event (an audit record).
    Event(String),
}

/// The Redis client of the shared identity: its own multiplexed connection, so following the
/// feed never queues behind the limits' calls.
#[derive(Clone)]
pub struct IdentityStore {
    link: Link,
    /// The (first seed) URL, for the start's check of what kind of Redis it names.
    url: String,
    timeout: Duration,
    /// The latest reading of Redis's clock (every feed read answers one).
    clock: Arc<Mutex<Option<ClockReading>>>,
}

/// Whether an `INFO cluster` answer says `cluster_enabled:1`.
fn says_cluster_enabled(value: &Value) -> Result<bool, CoordError> {
    let text = match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::SimpleString(text) => text.clone(),
        other => return Err(CoordError::Protocol(format!("INFO answer {other:?}"))),
    };
    Ok(text.lines().any(|line| line.trim() == "cluster_enabled:1"))
}

fn unsigned(value: &Value) -> Result<u64, CoordError> {
    u64::try_from(int(value)?).map_err(|_| CoordError::Protocol("negative".into()))
}

fn epoch_of(value: &Value) -> Result<Option<String>, CoordError> {
    let epoch = text(value)?;
    Ok((!epoch.is_empty()).then_some(epoch))
}

impl IdentityStore {
    /// A client for `url` (a cluster's seed nodes, comma-separated); connects lazily (a Redis
    /// that is down fails calls, not this).
    pub fn new(url: &str, topology: Topology, timeout: Duration) -> Result<Self, CoordError> {
        let link = Link::connect_lazily(url, topology, timeout)?;
        let url = crate::link::first_url(url, topology)
            .unwrap_or_default()
            .to_owned();
        Ok(IdentityStore {
            link,
            url,
            timeout,
            clock: Arc::new(Mutex::new(None)),
        })
    }

    /// What the URL names: one Redis or a cluster.
    pub fn topology(&self) -> Topology {
        self.link.topology()
    }

    /// The command timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn run(&self, cmd: &Cmd) -> Result<Value, CoordError> {
        self.bounded(self.link.query(cmd)).await
    }

    async fn bounded(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<Value>>,
    ) -> Result<Value, CoordError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) if error.is_timeout() => Err(self.timed_out()),
            Ok(Err(error)) => Err(CoordError::Redis(error.to_string())),
            Err(_) => Err(self.timed_out()),
        }
    }

    fn timed_out(&self) -> CoordError {
        CoordError::Timeout(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX))
    }

    /// Loads (or replaces) the identity library (on every primary of a cluster: the one owning
    /// `{ts-id}` may change).
    pub async fn load_library(&self) -> Result<(), CoordError> {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(IDENTITY_LIBRARY);
        self.bounded(self.link.on_every_primary(&cmd))
            .await
            .map(|_| ())
    }

    /// One `FCALL` (or `FCALL_RO`) of `function` over the identity keys, loading the library
    /// and trying once more when Redis does not have it.
    async fn fcall(
        &self,
        function: &str,
        read_only: bool,
        args: &[&str],
    ) -> Result<Value, CoordError> {
        let mut cmd = redis::cmd(if read_only { "FCALL_RO" } else { "FCALL" });
        cmd.arg(function).arg(KEYS.len()).arg(&KEYS[..]).arg(args);
        match self.run(&cmd).await {
            Err(CoordError::Redis(message)) if message.contains("Function not found") => {
                self.load_library().await?;
                self.run(&cmd).await
            }
            answer => answer,
        }
    }

    /// Whether this Redis is a Redis Cluster node (`INFO cluster`: `cluster_enabled:1`; Valkey
    /// answers the same): a standalone link to one (its functions loaded on that node only, its
    /// calls not following `MOVED`) is refused at start, naming `--redis-cluster`.
    pub async fn cluster_enabled(&self) -> Result<bool, CoordError> {
        self.bounded(self.link.query(redis::cmd("INFO").arg("cluster")))
            .await
            .and_then(|value| says_cluster_enabled(&value))
    }

    /// Whether the (first) seed node of the URL is a Redis Cluster node, asked over a
    /// connection of its own (a cluster link to a standalone Redis cannot connect at all).
    pub async fn seed_cluster_enabled(&self) -> Result<bool, CoordError> {
        let link = Link::connect_lazily(&self.url, Topology::Standalone, self.timeout)?;
        self.bounded(link.query(redis::cmd("INFO").arg("cluster")))
            .await
            .and_then(|value| says_cluster_enabled(&value))
    }

    /// The feed's epoch and head and up to `count` events numbered above `after`.
    pub async fn since(&self, after: u64, count: usize) -> Result<FeedPage, CoordError> {
        let value = self
            .fcall(
                SINCE,
                true,
                &[&after.to_string(), &count.max(1).to_string()],
            )
            .await?;
        let received = Instant::now();
        let items = array(value)?;
        let [epoch, head, now, rest @ ..] = items.as_slice() else {
            return Err(CoordError::Protocol("since answer".into()));
        };
        self.remember(ClockReading {
            server_ms: unsigned(now)?,
            received,
        });
        let events = rest
            .chunks(2)
            .map(|pair| match pair {
                [seq, event] => Ok(FeedEvent {
                    seq: unsigned(seq)?,
                    event: text(event)?,
                }),
                _ => Err(CoordError::Protocol("since event".into())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(FeedPage {
            epoch: epoch_of(epoch)?,
            head: unsigned(head)?,
            events,
        })
    }

    /// Creates the feed with `epoch` and `items` (in order), unless a feed exists.
    pub async fn seed(&self, epoch: &str, items: &[SeedItem]) -> Result<Seeded, WriteError> {
        let mut args: Vec<&str> = vec![epoch];
        for item in items {
            match item {
                SeedItem::Key { hash, tag, event } => {
                    args.extend(["k", hash.as_str(), tag.as_str(), event.as_str()])
                }
                SeedItem::Registration {
                    workspace_tag,
                    event,
                } => args.extend(["r", workspace_tag.as_str(), "", event.as_str()]),
                SeedItem::Event(event) => args.extend(["e", "", "", event.as_str()]),
            }
        }
        let answer = self.dated_write(SEED, &args).await?;
        Self::seeded(answer).map_err(WriteError::OutcomeUnknown)?
    }

    fn seeded(answer: Value) -> Result<Result<Seeded, WriteError>, CoordError> {
        let items = array(answer)?;
        if let [outcome, _] = items.as_slice() {
            if text(outcome)? == "late" {
                return Ok(Err(WriteError::Late));
            }
        }
        let [outcome, epoch, head] = items.as_slice() else {
            return Err(CoordError::Protocol("seed answer".into()));
        };
        let (epoch, head) = (text(epoch)?, unsigned(head)?);
        match text(outcome)?.as_str() {
            "seeded" => Ok(Ok(Seeded::Created { epoch, head })),
            "exists" => Ok(Ok(Seeded::Exists { epoch, head })),
            other => Err(CoordError::Protocol(format!("seed outcome {other}"))),
        }
    }

    async fn write(&self, function: &str, args: &[&str]) -> Result<Written, WriteError> {
        let answer = self.dated_write(function, args).await?;
        match Self::written(answer) {
            Ok(Some(written)) => Ok(written),
            Ok(None) => Err(WriteError::Late),
            // Redis ran it (it answered) but the answer does not say how.
            Err(error) => Err(WriteError::OutcomeUnknown(error)),
        }
    }

    /// A write's answer; `None` for `late`.
    fn written(answer: Value) -> Result<Option<Written>, CoordError> {
        let items = array(answer)?;
        let outcome = items
            .first()
            .map(text)
            .transpose()?
            .ok_or_else(|| CoordError::Protocol("empty write answer".into()))?;
        let written = match (outcome.as_str(), &items[1..]) {
            ("ok", [seq]) => Written::Appended {
                seq: unsigned(seq)?,
                registration: None,
            },
            ("ok", [seq, n]) => Written::Appended {
                seq: unsigned(seq)?,
                registration: Some(unsigned(n)?),
            },
            ("duplicate", []) => Written::Duplicate,
            ("unknown", []) => Written::Unknown,
            ("stale", [count]) => Written::Stale {
                registrations: unsigned(count)?,
            },
            ("epoch", [current]) => Written::WrongEpoch {
                current: epoch_of(current)?,
            },
            ("late", [_]) => return Ok(None),
            (other, _) => return Err(CoordError::Protocol(format!("write outcome {other}"))),
        };
        Ok(Some(written))
    }

    /// Stores a new key's hash with its [`key_tag`] and appends `event`.
    pub async fn create_key(
        &self,
        epoch: &str,
        hash: &str,
        tag: &str,
        event: &str,
    ) -> Result<Written, WriteError> {
        self.write(KEY, &[epoch, hash, tag, event]).await
    }

    /// Removes the live key with `hash` and `tag` and appends `event`.
    pub async fn revoke_key(
        &self,
        epoch: &str,
        hash: &str,
        tag: &str,
        event: &str,
    ) -> Result<Written, WriteError> {
        self.write(REVOKE, &[epoch, hash, tag, event]).await
    }

    /// Appends a registration of the workspace with `workspace_tag`, validated against
    /// `expected` earlier registrations (compare-and-set).
    pub async fn register(
        &self,
        epoch: &str,
        workspace_tag: &str,
        expected: u64,
        event: &str,
    ) -> Result<Written, WriteError> {
        self.write(
            REGISTER,
            &[epoch, workspace_tag, &expected.to_string(), event],
        )
        .await
    }

    /// Appends an event (an audit record) as it is.
    pub async fn append(&self, epoch: &str, event: &str) -> Result<Written, WriteError> {
        self.write(APPEND, &[epoch, event]).await
    }

    /// Calls `function` with a deadline as its first argument (see [`deadline`]); the raw
    /// answer, or why there is none. A call that may have run and did not answer is answered
    /// no earlier than its send + the timeout.
    async fn dated_write(&self, function: &str, args: &[&str]) -> Result<Value, WriteError> {
        let mut reading = match self.reading(Instant::now()) {
            Some(reading) => reading,
            // No recent reading: ask Redis's clock first (nothing is sent if it does not answer).
            None => self.read_clock().await.map_err(WriteError::NotWritten)?,
        };
        let mut retried = false;
        loop {
            let sent = Instant::now();
            let deadline = reading.deadline(sent, self.timeout).to_string();
            let mut cmd = redis::cmd("FCALL");
            cmd.arg(function)
                .arg(KEYS.len())
                .arg(&KEYS[..])
                .arg(&deadline)
                .arg(args);
            match self.call(&cmd).await {
                Ok(value) => return Ok(value),
                Err(CallFailure::Refused(CoordError::Redis(message)))
                    if !retried && message.contains("Function not found") =>
                {
                    // A Redis without the library restarted or failed over: read its clock
                    // again rather than extrapolate one read before.
                    self.load_library().await.map_err(WriteError::NotWritten)?;
                    reading = self.read_clock().await.map_err(WriteError::NotWritten)?;
                    retried = true;
                }
                Err(CallFailure::Refused(error)) => return Err(WriteError::NotWritten(error)),
                Err(CallFailure::Unknown(error)) => {
                    // Until then Redis may still run it within its deadline.
                    tokio::time::sleep_until((sent + self.timeout).into()).await;
                    return Err(WriteError::OutcomeUnknown(error));
                }
            }
        }
    }

    /// One call, telling a call that may have run from one that did not.
    async fn call(&self, cmd: &Cmd) -> Result<Value, CallFailure> {
        match tokio::time::timeout(self.timeout, self.link.query(cmd)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(classify(&error, &self.timed_out())),
            Err(_) => Err(CallFailure::Unknown(self.timed_out())),
        }
    }

    /// Redis's clock, read now (`TIME`; on a cluster, the clock of the primary that runs the
    /// identity's writes), remembered for the next writes.
    async fn read_clock(&self) -> Result<ClockReading, CoordError> {
        let value = self
            .bounded(self.link.query_at_key(&redis::cmd("TIME"), KEYS[0]))
            .await?;
        let received = Instant::now();
        let items = array(value)?;
        let [seconds, micros] = items.as_slice() else {
            return Err(CoordError::Protocol("TIME answer".into()));
        };
        let server_ms = unsigned(seconds)?
            .saturating_mul(1_000)
            .saturating_add(unsigned(micros)? / 1_000);
        let reading = ClockReading {
            server_ms,
            received,
        };
        self.remember(reading);
        Ok(reading)
    }

    /// The latest reading if it may still date a write sent at `now`.
    fn reading(&self, now: Instant) -> Option<ClockReading> {
        let latest = *self.clock.lock().unwrap_or_else(|e| e.into_inner());
        latest.filter(|reading| reading.fresh(now))
    }

    fn remember(&self, reading: ClockReading) {
        let mut latest = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        if latest.is_none_or(|old| old.received <= reading.received) {
            *latest = Some(reading);
        }
    }
}

/// A fresh random epoch (16 hex digits).
pub fn new_epoch() -> Result<String, CoordError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|_| CoordError::Protocol("no randomness".into()))?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_keys_name_no_id() {
        let tag = key_tag(Some("acme-corp"));
        assert!(tag.starts_with("principal:") && !tag.contains("acme"));
        assert_eq!(key_tag(None), "admin");
        assert!(!workspace_tag("acme-corp").contains("acme"));
        for key in KEYS {
            assert!(key.starts_with("ts:{ts-id}:"));
        }
    }

    /// The library is the one named by the version and registers exactly the functions the
    /// client calls, by the same names.
    #[test]
    fn the_library_registers_every_function_under_the_versioned_name() {
        assert_eq!(
            IDENTITY_LIBRARY.lines().next(),
            Some(concat!(
                "#!lua name=turnstile_identity_v",
                identity_version!()
            ))
        );
        let registered: Vec<&str> = IDENTITY_LIBRARY
            .lines()
            .filter(|line| line.starts_with("redis.register_function"))
            .filter_map(|line| line.split('\'').nth(1))
            .collect();
        assert_eq!(registered, [SEED, KEY, REVOKE, REGISTER, APPEND, SINCE]);
        assert_eq!(SINCE, "ts_id_since_v2");
    }
}
