//! Service configuration: a TOML file, every field optional with an embedded default.
//!
//! Unknown keys are refused (a typo is an error, not a silently ignored setting), and
//! [`Config::validate`] refuses values that would disable a protection (a zero timeout, a zero
//! connection cap, a zero lease TTL).
//!
//! ```toml
//! listen = "127.0.0.1:8686"
//! data_dir = "turnstile-data"
//! demo = true
//!
//! [http]
//! max_body_bytes = 65536
//! header_read_timeout_ms = 5000
//! max_connections = 1024
//! shutdown_grace_ms = 10000
//! body_read_timeout_ms = 10000
//! body_min_bytes_per_sec = 1024
//! response_write_timeout_ms = 10000
//! keep_alive_idle_ms = 5000
//! max_connections_per_address = 512
//! reserved_connections = 32
//! full_pool_first_byte_ms = 250
//! max_requests_per_key = 256
//!
//! [admission]
//! default_wait_ms = 30000
//! max_wait_ms = 300000
//! max_retry_after_ms = 3600000
//! max_pending_per_key = 128
//!
//! [leases]
//! ttl_ms = 30000
//! durability = "process"   # or "machine"
//!
//! [budgets]
//! idle_ms = 3600000
//! max_open_per_workspace = 100000
//! max_open_per_principal = 10000   # below max_open_per_workspace; profiles: maxOpenBudgets
//!
//! [proxy]   # proxy mode: see turnstile_proxy::config and docs/proxy.md
//!
//! [coordination]   # replicas sharing limits through Redis: docs/replicas.md
//! redis_url = "redis://127.0.0.1:6379"   # absent: one process, nothing shared
//! redis_cluster = false                  # true: redis_url names Redis Cluster seed nodes
//! degraded_share = "closed"              # or a fraction in (0, 1], e.g. "0.33"
//! timeout_ms = 100
//! lease_liveness_ms = 10000
//! renew_every_ms = 2000
//! probe_every_ms = 100
//! turn_window_ms = 50                    # fair turns across replicas; 0: first come, first served
//! follow_every_ms = 100                  # shared keys/profiles feed; bounds revocation delay
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Everything the service can be told.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on; loopback by default. `HOST:PORT`, a resolvable host name
    /// (`localhost:8686`) or a port alone (loopback) ([`crate::parse_listen`]).
    #[serde(deserialize_with = "crate::listen::deserialize")]
    pub listen: SocketAddr,
    /// Directory of the SQLite file.
    pub data_dir: PathBuf,
    /// On first start, register the example profile in workspace `demo` and print one key of
    /// principal `demo`.
    pub demo: bool,
    /// HTTP limits: connections, request sizes and times, per-key requests.
    pub http: HttpConfig,
    /// Admission defaults (how long a caller waits by default).
    pub admission: AdmissionConfig,
    /// Lease lifetimes and how durable a granted lease is.
    pub leases: LeaseConfig,
    /// Budget bookkeeping.
    pub budgets: BudgetsConfig,
    /// Proxy mode: model routing, upstreams and prices (`docs/proxy.md`).
    pub proxy: turnstile_proxy::ProxyConfig,
    /// Replicas: limits shared through Redis (`docs/replicas.md`).
    pub coordination: CoordinationConfig,
    /// Start even when the lease log does not cover its own history (a file deleted or
    /// truncated), with every lane paused for one lease TTL; never from the file, only from
    /// `turnstile serve --accept-lease-log-loss` (a decision for one start).
    #[serde(skip)]
    pub accept_lease_log_loss: bool,
}

/// Limits shared across replicas through Redis; without `redis_url`, nothing is shared.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CoordinationConfig {
    /// `redis://host:port` (or `unix:///path`); also `--redis-url` / `TURNSTILE_REDIS_URL`.
    /// With `redis_cluster`: one or more seed nodes of the cluster, comma-separated.
    pub redis_url: Option<String>,
    /// The URL names a Redis Cluster (also `--redis-cluster` / `TURNSTILE_REDIS_CLUSTER`):
    /// calls are routed by slot, the functions loaded on every primary.
    pub redis_cluster: bool,
    /// What this replica admits alone while Redis is unreachable: `closed`, or a fraction in
    /// (0, 1] of every concurrency and bucket limit (money and token budgets always fail
    /// closed).
    pub degraded_share: String,
    /// Longest wait for one Redis call.
    pub timeout_ms: u64,
    /// A lease's liveness in Redis after each renewal: a dead replica's leases are back this
    /// long after its last renewal at the latest (plus `renew_every_ms`).
    pub lease_liveness_ms: u64,
    /// How often a replica renews all its leases (one pipelined call).
    pub renew_every_ms: u64,
    /// How often a replica probes Redis.
    pub probe_every_ms: u64,
    /// Fair turns across replicas: how long a principal refused a contended shared slot counts
    /// as waiting after its last try; 0 turns them off (first come, first served).
    pub turn_window_ms: u64,
    /// How often a replica reads the shared feed of keys, revocations, profiles and audit
    /// records: a revocation is refused by every replica within about this long.
    pub follow_every_ms: u64,
}

impl Default for CoordinationConfig {
    fn default() -> Self {
        CoordinationConfig {
            redis_url: None,
            redis_cluster: false,
            degraded_share: "closed".to_owned(),
            timeout_ms: 100,
            lease_liveness_ms: 10_000,
            renew_every_ms: 2_000,
            probe_every_ms: 100,
            turn_window_ms: turnstile_coord::DEFAULT_TURN_WINDOW_MS,
            follow_every_ms: 100,
        }
    }
}

impl CoordinationConfig {
    /// What `redis_url` names: one Redis, or a Redis Cluster.
    pub fn topology(&self) -> turnstile_coord::Topology {
        if self.redis_cluster {
            turnstile_coord::Topology::Cluster
        } else {
            turnstile_coord::Topology::Standalone
        }
    }

    /// The timeout of the shared identity's calls (key and profile writes, the follower):
    /// not on any request's hot path, so at least 1 s, whatever `timeout_ms` says.
    pub fn identity_timeout_ms(&self) -> u64 {
        self.timeout_ms.max(1_000)
    }

    /// The coordinator's settings, or `None` without a Redis URL.
    pub fn coord(&self) -> Result<Option<turnstile_coord::CoordConfig>, ConfigError> {
        let Some(url) = &self.redis_url else {
            if self.redis_cluster {
                return Err(ConfigError::Invalid {
                    field: "coordination.redis_cluster",
                    expected: "a coordination.redis_url (the cluster's seed nodes) beside it",
                });
            }
            return Ok(None);
        };
        if !self.redis_cluster && url.contains(',') {
            return Err(ConfigError::Invalid {
                field: "coordination.redis_url",
                expected: "one URL; several (a Redis Cluster's seed nodes, comma-separated) \
                           need coordination.redis_cluster = true (--redis-cluster)",
            });
        }
        let share = self
            .degraded_share
            .parse()
            .map_err(|_| ConfigError::Invalid {
                field: "coordination.degraded_share",
                expected: "\"closed\" or a fraction in (0, 1]",
            })?;
        let positive = |value: u64, field: &'static str| {
            if value == 0 {
                Err(ConfigError::Invalid {
                    field,
                    expected: "at least 1",
                })
            } else {
                Ok(Duration::from_millis(value))
            }
        };
        let mut config = turnstile_coord::CoordConfig::new(url, share);
        config.topology = self.topology();
        config.timeout = positive(self.timeout_ms, "coordination.timeout_ms")?;
        config.renew_every = positive(self.renew_every_ms, "coordination.renew_every_ms")?;
        config.probe_every = positive(self.probe_every_ms, "coordination.probe_every_ms")?;
        config.turn_window_ms = (self.turn_window_ms > 0).then_some(self.turn_window_ms);
        positive(self.follow_every_ms, "coordination.follow_every_ms")?;
        if self.lease_liveness_ms <= self.renew_every_ms {
            return Err(ConfigError::Invalid {
                field: "coordination.lease_liveness_ms",
                expected: "greater than coordination.renew_every_ms",
            });
        }
        config.liveness_ms = self.lease_liveness_ms;
        Ok(Some(config))
    }
}

/// Bounds on budget (invocation) state, whose IDs come from clients.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetsConfig {
    /// A budget nobody has charged or settled for this long, that holds no lease and no spend
    /// a budget limit counts, is forgotten (counted in `turnstile_budgets_evicted_total`); its
    /// next attempt opens a new one. A budget holding such spend is kept (compactly) until
    /// `POST /v1/budgets/{id}/release`.
    pub idle_ms: u64,
    /// Open budgets per workspace at most (the proxy's per-call budgets aside); an admission
    /// that would open one more is refused `too-many-budgets` (429, retryable, evidence
    /// `budgetCap: workspace`).
    pub max_open_per_workspace: usize,
    /// Open budgets one principal may hold when its profile sets no `maxOpenBudgets` (on the
    /// principal or the workspace); below `max_open_per_workspace`, so one principal at its cap
    /// never fills the workspace. One more is refused `too-many-budgets` (evidence
    /// `budgetCap: principal`). Unset: 10,000 or half the workspace cap, whichever is smaller
    /// ([`BudgetsConfig::principal_cap`]), so lowering the workspace cap alone stays valid.
    pub max_open_per_principal: Option<usize>,
}

impl BudgetsConfig {
    /// The per-principal cap in force: the configured one, else 10,000 or half the workspace
    /// cap (at least 1), whichever is smaller.
    pub fn principal_cap(&self) -> usize {
        self.max_open_per_principal
            .unwrap_or_else(|| (self.max_open_per_workspace / 2).clamp(1, 10_000))
    }
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        BudgetsConfig {
            idle_ms: 3_600_000,
            max_open_per_workspace: 100_000,
            max_open_per_principal: None,
        }
    }
}

/// Connection-level protections.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
    /// A client must send its complete request head within this time, or the connection is
    /// closed.
    pub header_read_timeout_ms: u64,
    /// Open connections at most; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// How long shutdown waits for in-flight requests before closing connections.
    pub shutdown_grace_ms: u64,
    /// A request body must arrive whole within this time from the end of its head (408).
    pub body_read_timeout_ms: u64,
    /// After a one-second grace, a body must keep arriving at this average rate at least (408).
    pub body_min_bytes_per_sec: u64,
    /// A response write that makes no progress for this long closes the connection (a client
    /// that never reads its answers).
    pub response_write_timeout_ms: u64,
    /// A keep-alive connection with no new request for this long is closed (hyper's header
    /// timer also runs while idle, so the effective idle limit is the smaller of the two).
    pub keep_alive_idle_ms: u64,
    /// Open connections per client address at most; further ones are closed at accept.
    pub max_connections_per_address: usize,
    /// Connections beyond `max_connections` kept for operators: they serve `/healthz`,
    /// `/readyz`, `/metrics`, `/openapi.json` and admin-key calls, and answer anything else
    /// 503 `overloaded`.
    pub reserved_connections: usize,
    /// While every connection slot (general and reserved) is taken, a connection that has sent
    /// nothing for this long is closed, oldest first, for one waiting in the listen backlog.
    pub full_pool_first_byte_ms: u64,
    /// Requests in flight per API key at most (429 `key-busy` above).
    pub max_requests_per_key: usize,
}

/// Admission request bounds.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdmissionConfig {
    /// How long `POST /v1/admissions` may wait when the body has no `deadlineMs`.
    pub default_wait_ms: u64,
    /// The largest `deadlineMs` accepted (422 above).
    pub max_wait_ms: u64,
    /// The largest provider pause a principal may request (422 above).
    pub max_retry_after_ms: u64,
    /// Admission requests per principal key waiting for an answer at most (429 `key-busy`).
    pub max_pending_per_key: usize,
}

/// Lease time to live.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaseConfig {
    /// A lease not heartbeated or released within this time is reclaimed.
    pub ttl_ms: u64,
    /// How far a granted or released lease survives once answered (`docs/server.md`,
    /// "Durability").
    pub durability: LeaseDurability,
    /// The size at which a lease log segment is closed and folded into the snapshot.
    pub segment_bytes: u64,
}

/// How far an answered grant or release survives a crash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LeaseDurability {
    /// A crash of the process (the lease log is written before the answer).
    #[default]
    Process,
    /// A crash of the machine too (one `fdatasync` of the lease log per group of batches).
    Machine,
}

impl LeaseDurability {
    /// The store's setting.
    pub fn store(self) -> turnstile_store::LeaseDurability {
        match self {
            LeaseDurability::Process => turnstile_store::LeaseDurability::Process,
            LeaseDurability::Machine => turnstile_store::LeaseDurability::Machine,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8686)),
            data_dir: PathBuf::from("turnstile-data"),
            demo: true,
            http: HttpConfig::default(),
            admission: AdmissionConfig::default(),
            leases: LeaseConfig::default(),
            budgets: BudgetsConfig::default(),
            proxy: turnstile_proxy::ProxyConfig::default(),
            coordination: CoordinationConfig::default(),
            accept_lease_log_loss: false,
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_body_bytes: 64 * 1024,
            header_read_timeout_ms: 5_000,
            max_connections: 1024,
            shutdown_grace_ms: 10_000,
            body_read_timeout_ms: 10_000,
            body_min_bytes_per_sec: 1024,
            response_write_timeout_ms: 10_000,
            keep_alive_idle_ms: 5_000,
            max_connections_per_address: 512,
            reserved_connections: 32,
            full_pool_first_byte_ms: 250,
            max_requests_per_key: 256,
        }
    }
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            default_wait_ms: 30_000,
            max_wait_ms: 300_000,
            max_retry_after_ms: 3_600_000,
            max_pending_per_key: 128,
        }
    }
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            ttl_ms: 30_000,
            durability: LeaseDurability::Process,
            segment_bytes: turnstile_store::DEFAULT_SEGMENT_BYTES,
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (unknown keys included).
    #[error("invalid config file {path}: {source}")]
    Parse {
        /// The file.
        path: String,
        /// What the TOML parser said.
        source: Box<toml::de::Error>,
    },
    /// A value that would disable a protection.
    #[error("config value {field} must be {expected}")]
    Invalid {
        /// The field (`section.key`).
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let config: Config = toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.display().to_string(),
            source: Box::new(source),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Refuses values that would disable a protection.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let http = &self.http;
        let budgets = &self.budgets;
        let checks: [(&'static str, bool, &'static str); 20] = [
            ("budgets.idle_ms", self.budgets.idle_ms >= 1, "at least 1"),
            (
                "leases.segment_bytes",
                self.leases.segment_bytes >= 4096,
                "at least 4096",
            ),
            (
                "budgets.max_open_per_workspace",
                self.budgets.max_open_per_workspace >= 1,
                "at least 1",
            ),
            (
                "budgets.max_open_per_principal",
                budgets
                    .max_open_per_principal
                    .is_none_or(|cap| cap >= 1 && cap < budgets.max_open_per_workspace),
                "at least 1 and below budgets.max_open_per_workspace",
            ),
            (
                "http.body_read_timeout_ms",
                http.body_read_timeout_ms >= 1,
                "at least 1",
            ),
            (
                "http.body_min_bytes_per_sec",
                http.body_min_bytes_per_sec >= 1,
                "at least 1",
            ),
            (
                "http.response_write_timeout_ms",
                http.response_write_timeout_ms >= 1,
                "at least 1",
            ),
            (
                "http.keep_alive_idle_ms",
                http.keep_alive_idle_ms >= 1,
                "at least 1",
            ),
            (
                "http.max_connections_per_address",
                http.max_connections_per_address >= 1,
                "at least 1",
            ),
            (
                "http.reserved_connections",
                http.reserved_connections >= 1,
                "at least 1",
            ),
            (
                "http.full_pool_first_byte_ms",
                http.full_pool_first_byte_ms >= 1,
                "at least 1",
            ),
            (
                "http.max_requests_per_key",
                http.max_requests_per_key >= 1,
                "at least 1",
            ),
            (
                "admission.max_pending_per_key",
                self.admission.max_pending_per_key >= 1,
                "at least 1",
            ),
            (
                "http.max_body_bytes",
                self.http.max_body_bytes >= 64,
                "at least 64",
            ),
            (
                "http.header_read_timeout_ms",
                self.http.header_read_timeout_ms >= 1,
                "at least 1",
            ),
            (
                "http.max_connections",
                self.http.max_connections >= 1,
                "at least 1",
            ),
            (
                "admission.max_wait_ms",
                self.admission.max_wait_ms >= 1,
                "at least 1",
            ),
            (
                "admission.default_wait_ms",
                self.admission.default_wait_ms <= self.admission.max_wait_ms,
                "at most admission.max_wait_ms",
            ),
            ("leases.ttl_ms", self.leases.ttl_ms >= 1, "at least 1"),
            (
                "admission.max_retry_after_ms",
                self.admission.max_retry_after_ms <= turnstile_admission::MAX_SAFE_INTEGER,
                "at most 2^53-1",
            ),
        ];
        for (field, ok, expected) in checks {
            if !ok {
                return Err(ConfigError::Invalid { field, expected });
            }
        }
        self.coordination.coord()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_from_an_empty_file_and_unknown_keys_are_refused() {
        let config: Config = toml::from_str("").unwrap();
        assert_eq!(config, Config::default());
        config.validate().unwrap();
        assert!(toml::from_str::<Config>("[http]\nmax_conections = 3\n").is_err());
        let partial: Config = toml::from_str("[leases]\nttl_ms = 250\n").unwrap();
        assert_eq!(partial.leases.ttl_ms, 250);
        assert_eq!(partial.http, HttpConfig::default());
    }

    #[test]
    fn zero_protections_are_refused() {
        type Zero = fn(&mut Config);
        let zeroed: [(&str, Zero); 2] = [
            ("http.header_read_timeout_ms", |c| {
                c.http.header_read_timeout_ms = 0
            }),
            ("http.full_pool_first_byte_ms", |c| {
                c.http.full_pool_first_byte_ms = 0
            }),
        ];
        for (name, zero) in zeroed {
            let mut config = Config::default();
            zero(&mut config);
            assert!(
                matches!(config.validate(), Err(ConfigError::Invalid { field, .. }) if field == name),
                "{name}"
            );
        }
    }

    #[test]
    fn a_seed_list_needs_redis_cluster_and_redis_cluster_needs_a_url() {
        let seeds = "[coordination]\nredis_url = \"redis://a:7000,redis://b:7000\"\n";
        let config: Config = toml::from_str(seeds).unwrap();
        assert!(matches!(
            config.validate(),
            Err(ConfigError::Invalid {
                field: "coordination.redis_url",
                ..
            })
        ));
        let config: Config = toml::from_str(&format!("{seeds}redis_cluster = true\n")).unwrap();
        let coord = config.coordination.coord().unwrap().unwrap();
        assert_eq!(coord.topology, turnstile_coord::Topology::Cluster);
        let config: Config = toml::from_str("[coordination]\nredis_cluster = true\n").unwrap();
        assert!(matches!(
            config.validate(),
            Err(ConfigError::Invalid {
                field: "coordination.redis_cluster",
                ..
            })
        ));
    }

    #[test]
    fn coordination_is_off_without_a_url_and_its_share_is_validated() {
        assert_eq!(
            Config::default().coordination.coord().unwrap().map(|_| ()),
            None
        );
        let config: Config = toml::from_str(
            "[coordination]\nredis_url = \"redis://127.0.0.1:6379\"\ndegraded_share = \"0.5\"\n",
        )
        .unwrap();
        let coord = config.coordination.coord().unwrap().unwrap();
        assert_eq!(
            coord.degraded_share,
            turnstile_coord::DegradedShare::Slice(0.5)
        );
        assert_eq!(coord.timeout, Duration::from_millis(100));
        assert_eq!(coord.liveness_ms, 10_000);
        let mut config = config;
        config.coordination.degraded_share = "half".to_owned();
        assert!(matches!(
            config.validate(),
            Err(ConfigError::Invalid {
                field: "coordination.degraded_share",
                ..
            })
        ));
        config.coordination.degraded_share = "closed".to_owned();
        config.coordination.lease_liveness_ms = 1_000;
        assert!(matches!(
            config.validate(),
            Err(ConfigError::Invalid {
                field: "coordination.lease_liveness_ms",
                ..
            })
        ));
    }
}
