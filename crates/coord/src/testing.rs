//! A real Redis-protocol server for tests: started on a free loopback port with no
//! persistence, stopped by its PID (SIGKILL on drop). Shared by this crate's tests and the
//! CLI's multi-replica tests. A missing server is an error (never a skip): `.ci/run` installs
//! it.
//!
//! The binary is `redis-server` unless [`SERVER_ENV`] (`TURNSTILE_TEST_REDIS_SERVER`) names
//! another, e.g. `valkey-server`: the same tests then run, unchanged, against Valkey
//! (`docs/replicas.md`, "Valkey"). Every start asks the server `INFO server` and checks that a
//! binary named `valkey…` runs Valkey (`server_name:valkey`) and any other runs Redis, so a
//! misconfigured run (a `valkey-server` that is really Redis, or the other way round) fails
//! instead of testing the same server twice.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable naming the server binary the tests start (default
/// [`DEFAULT_SERVER`]).
pub const SERVER_ENV: &str = "TURNSTILE_TEST_REDIS_SERVER";

/// The server binary the tests start when [`SERVER_ENV`] is unset or empty.
pub const DEFAULT_SERVER: &str = "redis-server";

/// The server binary the tests start: [`SERVER_ENV`], or [`DEFAULT_SERVER`].
pub fn server_binary() -> String {
    match std::env::var(SERVER_ENV) {
        Ok(binary) if !binary.trim().is_empty() => binary.trim().to_owned(),
        _ => DEFAULT_SERVER.to_owned(),
    }
}

/// Which server implementation answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    Redis,
    Valkey,
}

impl ServerKind {
    /// The kind a binary's file name asks for: `valkey…` is Valkey, anything else Redis.
    pub fn expected_for(binary: &str) -> ServerKind {
        let name = Path::new(binary)
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or(binary);
        if name.to_ascii_lowercase().contains("valkey") {
            ServerKind::Valkey
        } else {
            ServerKind::Redis
        }
    }
}

impl std::fmt::Display for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServerKind::Redis => "Redis",
            ServerKind::Valkey => "Valkey",
        })
    }
}

/// What the running server says about itself (`INFO server`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    pub kind: ServerKind,
    /// The implementation's own version: `valkey_version` on Valkey, `redis_version` on Redis.
    pub version: String,
    /// `redis_version` (Valkey reports the Redis version it is compatible with there).
    pub redis_version: String,
}

impl ServerInfo {
    /// Parses the text of `INFO server`. `server_name:valkey` (and `valkey_version`) mark
    /// Valkey; Redis has neither.
    pub fn parse(info: &str) -> Option<ServerInfo> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
                .map(str::to_owned)
        };
        let redis_version = field("redis_version")?;
        let valkey = field("server_name").is_some_and(|name| name == "valkey");
        match (valkey, field("valkey_version")) {
            (true, Some(version)) => Some(ServerInfo {
                kind: ServerKind::Valkey,
                version,
                redis_version,
            }),
            (true, None) => None,
            (false, _) => Some(ServerInfo {
                kind: ServerKind::Redis,
                version: redis_version.clone(),
                redis_version,
            }),
        }
    }
}

impl std::fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            ServerKind::Redis => write!(f, "Redis {}", self.version),
            ServerKind::Valkey => write!(
                f,
                "Valkey {} (redis_version {})",
                self.version, self.redis_version
            ),
        }
    }
}

/// A running `redis-server` (or the binary [`SERVER_ENV`] names).
pub struct RedisServer {
    child: Child,
    port: u16,
    binary: String,
    info: ServerInfo,
    /// Arguments after the common ones (a cluster node's), kept for a restart.
    extra: Vec<String>,
}

/// Why a test server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RedisServerError {
    #[error(
        "{binary} could not be started (is it installed? `apt-get install redis-server`, or \
         `apt-get install -t bookworm-backports valkey-server`; {SERVER_ENV} names the binary): \
         {source}"
    )]
    Spawn {
        binary: String,
        source: std::io::Error,
    },
    #[error("{binary} did not answer `INFO server` within 5 s (last: {last})")]
    NotReady { binary: String, last: String },
    #[error(
        "{binary} runs {found}, not {expected}: {SERVER_ENV} asked for {expected} and would \
         test the wrong server"
    )]
    WrongServer {
        binary: String,
        expected: ServerKind,
        found: ServerInfo,
    },
    #[error("no free port: {0}")]
    Port(std::io::Error),
    #[error("the cluster could not be formed: {0}")]
    Cluster(String),
}

fn free_port() -> Result<u16, RedisServerError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(RedisServerError::Port)?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(RedisServerError::Port)
}

fn spawn(binary: &str, port: u16, extra: &[String]) -> Result<Child, RedisServerError> {
    Command::new(binary)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| RedisServerError::Spawn {
            binary: binary.to_owned(),
            source,
        })
}

/// `INFO server` over one plain RESP exchange (no client library: this also runs before the
/// server is up).
fn info_server(port: u16) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        // A bulk string: `$<len>\r\n<payload>\r\n`; an error: `-…\r\n`.
        let text = String::from_utf8_lossy(&answer);
        if let Some(rest) = text.strip_prefix('$') {
            if let Some((len, payload)) = rest.split_once("\r\n") {
                let len: usize = len.parse().map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "bad bulk length")
                })?;
                if payload.len() >= len + 2 {
                    return Ok(payload[..len].to_owned());
                }
            }
        } else if text.ends_with("\r\n") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                text.trim_end().to_owned(),
            ));
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "connection closed before the answer",
    ))
}

/// Waits until the server answers `INFO server`, then checks it is the implementation the
/// binary's name asks for.
fn wait_ready(binary: &str, port: u16) -> Result<ServerInfo, RedisServerError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        match info_server(port) {
            Ok(text) => match ServerInfo::parse(&text) {
                Some(info) => {
                    let expected = ServerKind::expected_for(binary);
                    if info.kind != expected {
                        return Err(RedisServerError::WrongServer {
                            binary: binary.to_owned(),
                            expected,
                            found: info,
                        });
                    }
                    return Ok(info);
                }
                None => last = format!("unrecognised INFO server: {text:?}"),
            },
            Err(error) => last = error.to_string(),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(RedisServerError::NotReady {
        binary: binary.to_owned(),
        last,
    })
}

impl RedisServer {
    /// Starts a fresh server (empty state) on a free port: the binary [`server_binary`] names.
    pub fn start() -> Result<Self, RedisServerError> {
        Self::start_binary(&server_binary())
    }

    /// Starts a fresh server (empty state) on a free port from `binary` (`redis-server`,
    /// `valkey-server` or a path).
    pub fn start_binary(binary: &str) -> Result<Self, RedisServerError> {
        Self::start_with(binary, free_port()?, Vec::new())
    }

    fn start_with(binary: &str, port: u16, extra: Vec<String>) -> Result<Self, RedisServerError> {
        let mut child = spawn(binary, port, &extra)?;
        match wait_ready(binary, port) {
            Ok(info) => Ok(RedisServer {
                child,
                port,
                binary: binary.to_owned(),
                info,
                extra,
            }),
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(error)
            }
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis-cli ARGS…` against this server (installed with `redis-server`; it speaks to
    /// Valkey too): its trimmed standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (installed with redis-server)");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The binary this server was started from.
    pub fn binary(&self) -> &str {
        &self.binary
    }

    /// What the server said about itself when it started (`INFO server`).
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    /// Asks the running server `INFO server` now.
    pub fn query_info(&self) -> Result<ServerInfo, RedisServerError> {
        let text = info_server(self.port).map_err(|error| RedisServerError::NotReady {
            binary: self.binary.clone(),
            last: error.to_string(),
        })?;
        ServerInfo::parse(&text).ok_or_else(|| RedisServerError::NotReady {
            binary: self.binary.clone(),
            last: format!("unrecognised INFO server: {text:?}"),
        })
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to the server's PID.
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status();
    }

    /// SIGKILLs the server and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the server and starts a new one, empty, on the same port.
    pub fn restart_empty(&mut self) -> Result<(), RedisServerError> {
        self.kill();
        self.child = spawn(&self.binary, self.port, &self.extra)?;
        self.info = wait_ready(&self.binary, self.port)?;
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.signal("CONT");
        self.kill();
    }
}

/// A running Redis Cluster of [`RedisServer`] nodes on free loopback ports, formed with
/// `redis-cli --cluster create` (every slot assigned), each node's `nodes.conf` in a directory
/// that is removed on drop. Node timeout 2 s (a primary's replica takes over about that long
/// after the primary stops answering).
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    dir: std::path::PathBuf,
}

impl RedisCluster {
    /// Starts `primaries` (at least 3, as `redis-cli --cluster create` demands) nodes of
    /// [`server_binary`] and forms the cluster; answers once every node says `cluster_state:ok`.
    pub fn start(primaries: usize) -> Result<Self, RedisServerError> {
        Self::start_with_replicas(primaries, 0)
    }

    /// [`RedisCluster::start`] with `replicas` replicas of each primary.
    pub fn start_with_replicas(
        primaries: usize,
        replicas: usize,
    ) -> Result<Self, RedisServerError> {
        let binary = server_binary();
        let dir = std::env::temp_dir().join(format!(
            "turnstile-cluster-{}-{}",
            std::process::id(),
            free_port()?
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| RedisServerError::Cluster(format!("{}: {e}", dir.display())))?;
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            dir,
        };
        for _ in 0..primaries * (1 + replicas) {
            let port = free_port()?;
            let extra = vec![
                "--cluster-enabled".to_owned(),
                "yes".to_owned(),
                "--cluster-config-file".to_owned(),
                cluster
                    .dir
                    .join(format!("nodes-{port}.conf"))
                    .to_string_lossy()
                    .into_owned(),
                "--cluster-node-timeout".to_owned(),
                "2000".to_owned(),
                // The bus port is the client port + 10,000 by default: past 65,535 for a free
                // port above 55,535, so it gets a free port of its own.
                "--cluster-port".to_owned(),
                free_port()?.to_string(),
                // A replica writes the RDB it receives from its primary into its working
                // directory (`dump.rdb`), which a later node started there would load.
                "--dir".to_owned(),
                cluster.dir.to_string_lossy().into_owned(),
                "--dbfilename".to_owned(),
                format!("dump-{port}.rdb"),
            ];
            cluster
                .nodes
                .push(RedisServer::start_with(&binary, port, extra)?);
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .map_err(|e| RedisServerError::Cluster(format!("redis-cli: {e}")))?;
        if !created.status.success() {
            return Err(RedisServerError::Cluster(
                String::from_utf8_lossy(&created.stdout).into_owned()
                    + &String::from_utf8_lossy(&created.stderr),
            ));
        }
        cluster.wait_ok(Duration::from_secs(20))?;
        // A replica that has not synced with its primary yet would not take over from it.
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &cluster.nodes {
            while node.cli(&["ROLE"]).lines().next() == Some("slave")
                && !node
                    .cli(&["INFO", "replication"])
                    .contains("master_link_status:up")
            {
                if Instant::now() > deadline {
                    return Err(RedisServerError::Cluster(format!(
                        "replica {} never synced with its primary",
                        node.port
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(cluster)
    }

    /// Waits until every running node (one that answers `PING`) answers `cluster_state:ok` and
    /// they all see the same primaries serving the same slots (`CLUSTER NODES`), so a client
    /// reading the slot map of any of them routes alike.
    pub fn wait_ok(&self, within: Duration) -> Result<(), RedisServerError> {
        let deadline = Instant::now() + within;
        loop {
            let running: Vec<&RedisServer> = self
                .nodes
                .iter()
                .filter(|node| node.cli(&["PING"]) == "PONG")
                .collect();
            let ok = running
                .iter()
                .all(|node| node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            let views: Vec<Vec<String>> = running.iter().map(|node| primaries_seen(node)).collect();
            if ok && views.windows(2).all(|pair| pair[0] == pair[1]) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(RedisServerError::Cluster(format!(
                    "not ok, or the nodes disagree on the primaries, after {} s: {views:?}",
                    within.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The seed URLs of every node, comma-separated (`--redis-url` with `--redis-cluster`).
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(RedisServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The indexes of the nodes that are primaries now (`ROLE`).
    pub fn primaries(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].cli(&["ROLE"]).lines().next() == Some("master"))
            .collect()
    }

    /// One node, to stop, kill or restart.
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }
}

/// The primaries one node sees serving slots (`CLUSTER NODES`: address and slot ranges of
/// each line flagged `master` and not `fail`), sorted.
fn primaries_seen(node: &RedisServer) -> Vec<String> {
    let mut seen: Vec<String> = node
        .cli(&["CLUSTER", "NODES"])
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let serving = flags.contains("master") && !flags.contains("fail") && fields.len() > 8;
            serving.then(|| {
                let address = fields[1].split('@').next().unwrap_or(fields[1]);
                format!("{address} {}", fields[8..].join(" "))
            })
        })
        .collect();
    seen.sort();
    seen
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_server_of_valkey_8_is_recognised_with_its_own_version() {
        let info = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
                    valkey_version:8.0.1\r\nredis_git_sha1:00000000\r\n";
        let parsed = ServerInfo::parse(info).expect("parsed");
        assert_eq!(parsed.kind, ServerKind::Valkey);
        assert_eq!(parsed.version, "8.0.1");
        assert_eq!(parsed.redis_version, "7.2.4");
    }

    #[test]
    fn info_server_of_redis_7_is_recognised_as_redis() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        let parsed = ServerInfo::parse(info).expect("parsed");
        assert_eq!(parsed.kind, ServerKind::Redis);
        assert_eq!(parsed.version, "7.0.15");
    }

    #[test]
    fn the_binary_name_decides_which_server_is_expected() {
        assert_eq!(
            ServerKind::expected_for("valkey-server"),
            ServerKind::Valkey
        );
        assert_eq!(
            ServerKind::expected_for("/usr/bin/valkey-server"),
            ServerKind::Valkey
        );
        assert_eq!(ServerKind::expected_for("redis-server"), ServerKind::Redis);
        assert_eq!(
            ServerKind::expected_for("/opt/redis/bin/redis-server"),
            ServerKind::Redis
        );
    }

    #[test]
    fn a_binary_that_cannot_be_started_is_a_typed_error_naming_it() {
        let error = match RedisServer::start_binary("turnstile-no-such-redis-server") {
            Err(error) => error,
            Ok(_) => panic!("a missing binary must not start"),
        };
        assert!(matches!(error, RedisServerError::Spawn { .. }), "{error}");
        assert!(
            error.to_string().contains("turnstile-no-such-redis-server"),
            "{error}"
        );
    }
}
