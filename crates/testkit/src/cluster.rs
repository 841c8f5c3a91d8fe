//! A Redis Cluster for tests, formed from [`RedisServer`] nodes with `redis-cli --cluster
//! create`.
//!
//! Invariant: [`RedisCluster::start`] answers only once every slot is served, every node says
//! `cluster_state:ok`, the nodes agree on the primaries, and every replica has synced with its
//! primary; the nodes' directory is removed on drop.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::server::{free_port, server_binary, RedisServer, RedisServerError};

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
            .map(|node| format!("127.0.0.1:{}", node.port()))
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
                        node.port()
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
