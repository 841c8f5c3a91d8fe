//! What Redis itself holds for a deployment: the leases of a lane whose liveness has not run
//! out, by Redis's own clock (not the test's, not a replica's).

use turnstile_coord::{ScopeName, WorkspaceKeys};

use crate::RedisServer;

/// Leases of provider lane `provider` of `workspace` whose liveness has not run out by Redis's
/// clock (`u64::MAX` when Redis does not answer with a count).
pub fn live_leases(redis: &RedisServer, workspace: &str, provider: &str) -> u64 {
    let key = WorkspaceKeys::new(workspace).leases(&ScopeName::provider(provider));
    let time = redis.cli(&["TIME"]);
    let mut parts = time
        .lines()
        .map(|l| l.trim().parse::<u64>().expect("TIME answers two integers"));
    let seconds = parts.next().expect("TIME's seconds");
    let micros = parts.next().expect("TIME's microseconds");
    let now_ms = seconds * 1000 + micros / 1000;
    redis
        .cli(&["ZCOUNT", &key, &format!("({now_ms}"), "+inf"])
        .parse()
        .unwrap_or(u64::MAX)
}
