//! The replica's multiplexed link to Redis: one standalone server (redis-rs `ConnectionManager`,
//! reconnecting in the background) or a **Redis Cluster** (redis-rs's async cluster
//! connection, routing each call by the slot of its first key).
//!
//! # Invariants
//!
//! - Every call this crate makes names its keys, all under one hash tag (a workspace's `{W}`,
//!   or the identity's `{ts-id}`), so on a cluster each call goes to the one primary owning
//!   that slot; a keyless call (the health probe's `TIME`, `FUNCTION LOAD`) goes to **every**
//!   primary ([`Link::on_every_primary`]).
//! - A call is never sent twice once it may have run. redis-rs's cluster connection re-sends a
//!   command after an I/O error by default, so it is built with no retries; this link follows
//!   only the answers that say the command did **not** run: `MOVED` (the slot moved: the
//!   connection rebuilds its slot map, the call goes to the new owner), `ASK` (a slot being
//!   migrated: `ASKING` then the call, on the named node), at most [`MAX_REDIRECTS`] times, and
//!   `TRYAGAIN` (a multi-key call whose slot is being migrated, its keys split between the two
//!   nodes: Redis runs none until the slot's migration ends) and `CLUSTERDOWN`, every
//!   [`CLUSTER_PAUSE`] until the caller's timeout. Everything else, an I/O error first of all,
//!   is the caller's failure (degraded mode), as on a standalone Redis.
//! - No call waits on its own: callers bound every call with the command timeout.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, ServerErrorKind, Value};

use crate::error::CoordError;

/// How many `MOVED` / `ASK` answers one call follows.
pub const MAX_REDIRECTS: u32 = 8;

/// How long a call waits before it tries again after `TRYAGAIN` or `CLUSTERDOWN`.
pub const CLUSTER_PAUSE: Duration = Duration::from_millis(5);

/// What the coordination URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Topology {
    /// One Redis (a primary, possibly with replicas for failover): `redis://host:port`.
    #[default]
    Standalone,
    /// A Redis Cluster: the URL is one or more seed nodes, comma-separated
    /// (`redis://a:7000,redis://b:7001`); the rest of the cluster is discovered from them.
    Cluster,
}

/// The multiplexed link (cheap to clone: every clone shares the connection).
#[derive(Clone)]
pub(crate) enum Link {
    Standalone(ConnectionManager),
    Cluster(Arc<ClusterLink>),
}

/// The shortest time between two rebuilds of a cluster connection.
const REBUILD_EVERY: Duration = Duration::from_millis(250);

/// A cluster connection that can be built again from the seeds. redis-rs refreshes its slot
/// map on `MOVED`, but a primary that died and was replaced by its replica (a failover) only
/// ever answers connection errors, which make it reconnect to the same dead address: after a
/// failed call a new connection is built in the background (at most one at a time, at most
/// every [`REBUILD_EVERY`]), reading the slot map afresh from the seeds, and replaces the old
/// one once it is connected (calls go on using the old one meanwhile).
pub(crate) struct ClusterLink {
    client: ClusterClient,
    config: ClusterConfig,
    current: Mutex<ClusterConnection>,
    /// When the last rebuild started, and whether one is running.
    rebuilding: Mutex<(Instant, bool)>,
}

impl ClusterLink {
    fn connection(&self) -> ClusterConnection {
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn rebuild(self: &Arc<Self>) {
        {
            let mut rebuilding = self
                .rebuilding
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if rebuilding.1 || rebuilding.0.elapsed() < REBUILD_EVERY {
                return;
            }
            *rebuilding = (Instant::now(), true);
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.finished_rebuild();
            return;
        };
        let link = Arc::clone(self);
        runtime.spawn(async move {
            let fresh = link
                .client
                .get_async_connection_with_config(link.config.clone())
                .await;
            if let Ok(fresh) = fresh {
                *link
                    .current
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh;
            }
            link.finished_rebuild();
        });
    }

    fn finished_rebuild(&self) {
        self.rebuilding
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .1 = false;
    }
}

/// The one URL a single connection uses: a standalone Redis's URL, or a cluster's first
/// seed (its credentials serve every node); `None` for an empty seed list.
pub fn first_url(url: &str, topology: Topology) -> Option<&str> {
    match topology {
        Topology::Standalone => Some(url),
        Topology::Cluster => seed_urls(url).first().copied(),
    }
}

/// The seed URLs of a cluster's comma-separated list.
pub fn seed_urls(urls: &str) -> Vec<&str> {
    urls.split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .collect()
}

/// The reason an answer gives for a call that did not run on this node, if it is one.
enum Redirect<'a> {
    Moved,
    Ask(&'a str),
    Pause,
}

fn redirect(error: &RedisError) -> Option<Redirect<'_>> {
    match error.kind() {
        ErrorKind::Server(ServerErrorKind::Moved) => Some(Redirect::Moved),
        ErrorKind::Server(ServerErrorKind::Ask) => error
            .redirect_node()
            .map(|(node, _slot)| Redirect::Ask(node)),
        ErrorKind::Server(ServerErrorKind::TryAgain | ServerErrorKind::ClusterDown) => {
            Some(Redirect::Pause)
        }
        _ => None,
    }
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the part between the first `{`
/// and the next `}`, if not empty) or of the whole key, modulo 16,384 (the Redis Cluster
/// specification's `HASH_SLOT`).
pub fn slot_of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(key) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// `host:port` (IPv6 hosts may contain colons: the port is after the last one).
fn node_address(node: &str) -> Option<(String, u16)> {
    let (host, port) = node.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

impl Link {
    /// A link to `url` whose connects and answers are bounded by `timeout`; it connects on
    /// first use, so a Redis that is down fails calls, not this.
    pub(crate) fn connect_lazily(
        url: &str,
        topology: Topology,
        timeout: Duration,
    ) -> Result<Link, CoordError> {
        let invalid = |e: RedisError| CoordError::InvalidUrl(e.to_string());
        match topology {
            Topology::Standalone => {
                let client = redis::Client::open(url).map_err(invalid)?;
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_connection_timeout(Some(timeout))
                    .set_number_of_retries(1)
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(Duration::from_millis(100));
                ConnectionManager::new_lazy_with_config(client, config)
                    .map(Link::Standalone)
                    .map_err(invalid)
            }
            Topology::Cluster => {
                let seeds = seed_urls(url);
                if seeds.is_empty() {
                    return Err(CoordError::InvalidUrl("no cluster seed URL".into()));
                }
                let client = ClusterClient::builder(seeds)
                    .retries(0)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()
                    .map_err(invalid)?;
                let config = ClusterConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                let connection = client.get_pending_async_connection_with_config(config.clone());
                Ok(Link::Cluster(Arc::new(ClusterLink {
                    client,
                    config,
                    current: Mutex::new(connection),
                    rebuilding: Mutex::new((Instant::now(), false)),
                })))
            }
        }
    }

    /// One command (routed by its first key on a cluster, following redirects that mean it
    /// did not run).
    pub(crate) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Link::Standalone(connection) => {
                let mut connection = connection.clone();
                cmd.query_async::<Value>(&mut connection).await
            }
            Link::Cluster(link) => {
                let mut connection = link.connection();
                let mut redirects = 0;
                let mut answer = cmd.query_async::<Value>(&mut connection).await;
                loop {
                    let Err(error) = &answer else {
                        return answer;
                    };
                    answer = match redirect(error) {
                        Some(Redirect::Moved) if redirects < MAX_REDIRECTS => {
                            // The connection rebuilds its slot map on a `MOVED` answer:
                            // sending again routes by the new map.
                            redirects += 1;
                            cmd.query_async::<Value>(&mut connection).await
                        }
                        Some(Redirect::Ask(node)) if redirects < MAX_REDIRECTS => {
                            redirects += 1;
                            let Some((host, port)) = node_address(node) else {
                                return answer;
                            };
                            asking(&mut connection, cmd, host, port).await
                        }
                        Some(Redirect::Pause) => {
                            tokio::time::sleep(CLUSTER_PAUSE).await;
                            cmd.query_async::<Value>(&mut connection).await
                        }
                        _ => return answer,
                    };
                }
            }
        }
    }

    /// A pipeline whose commands all name keys of one slot (one hash tag).
    pub(crate) async fn pipeline(&self, pipe: &Pipeline) -> RedisResult<Vec<Value>> {
        match self {
            Link::Standalone(connection) => {
                let mut connection = connection.clone();
                pipe.query_async::<Vec<Value>>(&mut connection).await
            }
            Link::Cluster(link) => {
                let mut connection = link.connection();
                let mut redirects = 0;
                loop {
                    let answer = pipe.query_async::<Vec<Value>>(&mut connection).await;
                    match answer.as_ref().err().and_then(redirect) {
                        Some(Redirect::Moved) if redirects < MAX_REDIRECTS => {
                            // Renewals are not in a hurry: the slot map is read again first.
                            redirects += 1;
                            tokio::time::sleep(CLUSTER_PAUSE).await;
                        }
                        Some(Redirect::Pause) => tokio::time::sleep(CLUSTER_PAUSE).await,
                        _ => return answer,
                    }
                }
            }
        }
    }

    /// A keyless command on every primary (a standalone Redis: on it); answers one primary's
    /// answer when every primary succeeded, else the first failure.
    pub(crate) async fn on_every_primary(&self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Link::Standalone(_) => self.query(cmd).await,
            Link::Cluster(link) => {
                let mut connection = link.connection();
                let routing = RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::AllSucceeded),
                ));
                connection
                    .route_command(cmd.clone(), routing)
                    .await
                    .and_then(Value::extract_error)
            }
        }
    }

    /// Every primary's answer to a keyless command, in no particular order (a standalone
    /// Redis: its one answer).
    pub(crate) async fn each_primary(&self, cmd: &Cmd) -> RedisResult<Vec<Value>> {
        match self {
            Link::Standalone(_) => Ok(vec![self.query(cmd).await?]),
            Link::Cluster(link) => {
                let mut connection = link.connection();
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                match connection.route_command(cmd.clone(), routing).await? {
                    Value::Map(pairs) => pairs
                        .into_iter()
                        .map(|(_node, value)| value.extract_error())
                        .collect(),
                    other => Ok(vec![other.extract_error()?]),
                }
            }
        }
    }

    /// A keyless command (`TIME`) on the primary that owns `key`'s slot (a standalone Redis:
    /// on it), so it reads the clock of the node that runs the calls on that key.
    pub(crate) async fn query_at_key(&self, cmd: &Cmd, key: &str) -> RedisResult<Value> {
        match self {
            Link::Standalone(_) => self.query(cmd).await,
            Link::Cluster(link) => {
                let mut connection = link.connection();
                let route = Route::with_key(key, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                connection.route_command(cmd.clone(), routing).await
            }
        }
    }

    /// The address (`host`, `port`) of the primary that owns `key`'s slot, from `CLUSTER SLOTS`
    /// as one node sees it now; `None` on a standalone Redis.
    pub(crate) async fn owner_of(&self, key: &str) -> RedisResult<Option<(String, u16)>> {
        if let Link::Standalone(_) = self {
            return Ok(None);
        }
        let slot = i64::from(slot_of(key.as_bytes()));
        let ranges = self
            .query(&redis::cmd("CLUSTER").arg("SLOTS").clone())
            .await?;
        let Value::Array(ranges) = ranges else {
            return Ok(None);
        };
        for range in ranges {
            let Value::Array(range) = range else { continue };
            let [Value::Int(start), Value::Int(end), Value::Array(primary), ..] = range.as_slice()
            else {
                continue;
            };
            if !(*start..=*end).contains(&slot) {
                continue;
            }
            if let [Value::BulkString(host), Value::Int(port), ..] = primary.as_slice() {
                // An empty host ("the node you asked") or `?` (unknown): no address to use.
                let host = String::from_utf8_lossy(host).into_owned();
                if host.is_empty() || host == "?" {
                    return Ok(None);
                }
                return Ok(u16::try_from(*port).ok().map(|port| (host, port)));
            }
        }
        Ok(None)
    }

    /// After a failed call: a cluster connection is built again from the seeds (at most every
    /// [`REBUILD_EVERY`]), so a primary replaced by its replica is found; nothing on a
    /// standalone Redis (its connection manager reconnects on its own).
    pub(crate) fn rebuild(&self) {
        if let Link::Cluster(link) = self {
            link.rebuild();
        }
    }

    /// Whether this link is to a cluster.
    pub(crate) fn topology(&self) -> Topology {
        match self {
            Link::Standalone(_) => Topology::Standalone,
            Link::Cluster(_) => Topology::Cluster,
        }
    }
}

/// `ASKING` then `cmd` on the node a slot is being migrated to (one pipeline, its second
/// answer).
async fn asking(
    connection: &mut ClusterConnection,
    cmd: &Cmd,
    host: String,
    port: u16,
) -> RedisResult<Value> {
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").add_command(cmd.clone());
    let route = SingleNodeRoutingInfo::ByAddress { host, port };
    let mut answers = connection.route_pipeline(pipe, 1, 1, route).await?;
    answers
        .pop()
        .ok_or_else(|| RedisError::from((ErrorKind::Client, "ASKING: no answer")))?
        .extract_error()
}

#[cfg(test)]
mod tests {
    use super::{first_url, node_address, seed_urls, slot_of, Topology};

    #[test]
    fn slots_are_the_cluster_specifications() {
        // The specification's test vector: CRC16-XMODEM("123456789") = 0x31C3 (12,739).
        assert_eq!(slot_of(b"123456789"), 0x31C3);
        // Only the hash tag counts; an empty tag does not.
        assert_eq!(slot_of(b"ts:{abc}:lease:w"), slot_of(b"abc"));
        assert_ne!(slot_of(b"{}x"), slot_of(b"x"));
        // What Redis 7's `CLUSTER KEYSLOT` answers.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{user1000}.following"), 3443);
        assert_eq!(slot_of(b"ts:{abc}:lease:w"), 7638);
    }

    #[test]
    fn seed_lists_split_on_commas_and_ignore_blanks() {
        assert_eq!(
            seed_urls("redis://a:7000, redis://b:7001,"),
            vec!["redis://a:7000", "redis://b:7001"]
        );
        assert!(seed_urls(" , ").is_empty());
        let seeds = "redis://a:7000,redis://b:7001";
        assert_eq!(first_url(seeds, Topology::Cluster), Some("redis://a:7000"));
        assert_eq!(first_url(seeds, Topology::Standalone), Some(seeds));
        assert_eq!(first_url(",", Topology::Cluster), None);
    }

    #[test]
    fn redirect_addresses_take_the_port_after_the_last_colon() {
        assert_eq!(
            node_address("10.0.0.5:7001"),
            Some(("10.0.0.5".into(), 7001))
        );
        assert_eq!(node_address("::1:7001"), Some(("::1".into(), 7001)));
        assert_eq!(node_address("nohost"), None);
    }
}
