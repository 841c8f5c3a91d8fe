//! A replica's coordination settings ([`CoordConfig`]) and the fair-turn timing constants.
//!
//! Invariant: the defaults keep a lease's liveness in Redis (10 s) several renewal periods
//! (2 s) long, so one missed renewal never lets a held lease expire.

use std::time::Duration;

use turnstile_admission::Millis;

use crate::link::Topology;
use crate::share::DegradedShare;

/// How long a principal refused a shared slot counts as waiting (fair turns): five of the
/// server's 10 ms polls, so a waiter delayed by a busy machine still holds its turn.
pub const DEFAULT_TURN_WINDOW_MS: Millis = 50;

/// How soon a waiter whose principal has the next turn of a full shared scope tries again (a
/// slot freed on another replica is seen by polling; the other waiters poll at the host's
/// interval).
pub const TURN_NEXT_POLL_MS: Millis = 2;

/// How a replica coordinates.
#[derive(Debug, Clone)]
pub struct CoordConfig {
    /// One Redis, or a cluster's seed nodes (comma-separated), as [`CoordConfig::topology`] says.
    pub redis_url: String,
    /// Whether the URL names one Redis or a Redis Cluster.
    pub topology: Topology,
    /// Longest wait for one Redis call.
    pub timeout: Duration,
    /// A lease's liveness in Redis after each renewal.
    pub liveness_ms: Millis,
    /// How often the replica renews all its leases (one call).
    pub renew_every: Duration,
    /// How often the replica probes Redis.
    pub probe_every: Duration,
    /// What the replica admits alone while degraded.
    pub degraded_share: DegradedShare,
    /// Fair turns on contended shared scopes: how long a refused principal counts as waiting
    /// after its last try (a few of the waiters' poll intervals). `None`: first come, first
    /// served.
    pub turn_window_ms: Option<Millis>,
}

impl CoordConfig {
    /// The defaults: 100 ms timeout, 10 s liveness renewed every 2 s, probe every 100 ms.
    pub fn new(redis_url: &str, degraded_share: DegradedShare) -> Self {
        CoordConfig {
            redis_url: redis_url.to_owned(),
            topology: Topology::Standalone,
            timeout: Duration::from_millis(100),
            liveness_ms: 10_000,
            renew_every: Duration::from_secs(2),
            probe_every: Duration::from_millis(100),
            degraded_share,
            turn_window_ms: Some(DEFAULT_TURN_WINDOW_MS),
        }
    }
}
