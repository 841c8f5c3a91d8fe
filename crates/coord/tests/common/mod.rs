//! What coord's integration tests share: the runtime they run on, a scope's limits, and the
//! wait for a replica to be healthy. Each test binary uses a part of it.
#![allow(dead_code)]

use std::time::Duration;

use turnstile_admission::Limits;
use turnstile_coord::{CoordConfig, Coordinator, DegradedShare, Health};

/// The multi-threaded runtime of the tests (two workers: the machine's cores are shared).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Limits with a `concurrency` and nothing else.
pub fn limits(concurrency: u32) -> Limits {
    Limits {
        concurrency,
        ..Limits::default()
    }
}

/// A replica's configuration for `url` with `share`, quick enough for a test to see expiries
/// and recoveries: a 1 s liveness renewed every 200 ms, a probe every 50 ms.
pub fn quick_config(url: &str, share: DegradedShare) -> CoordConfig {
    let mut config = CoordConfig::new(url, share);
    config.liveness_ms = 1_000;
    config.renew_every = Duration::from_millis(200);
    config.probe_every = Duration::from_millis(50);
    config
}

/// Probes `coord` until it is healthy, at most `tries` probes with `pause` after each one that
/// did not make it healthy, then asserts that it is. The first probe loads the library
/// (`FUNCTION LOAD`; on a cluster, on every primary), which can outlast the 100 ms timeout on
/// a loaded host; the replica then recovers on a later probe, as in production.
pub async fn until_healthy(coord: &Coordinator, tries: usize, pause: Duration) {
    for _ in 0..tries {
        coord.tick(0, false).await;
        if coord.health() == Health::Healthy {
            break;
        }
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    assert_eq!(coord.health(), Health::Healthy);
}
