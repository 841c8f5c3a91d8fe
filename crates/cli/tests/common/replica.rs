//! A replica of a deployment on one Redis, for the `replicas_*` tests: its `turnstile serve`
//! (killed on drop), its data directory and the principals' keys.
//!
//! Keys and profiles are shared through Redis (`docs/replicas.md`, "Shared keys, profiles and
//! audit"): the first replica started on a Redis registers the deployment's profile and
//! creates its keys; every later replica on the same Redis adopts them.
//!
//! The Redis is [`RedisServer`] (`turnstile_coord::testing`): `redis-server`, or the binary
//! `TURNSTILE_TEST_REDIS_SERVER` names (`valkey-server`: `.ci/run` runs the replica tests again
//! against Valkey), checked at start by `INFO server`.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use turnstile_coord::testing::RedisServer;

use super::{http, start_with, PerRedis, Service};

/// Keys by principal.
pub type Keys = Vec<(String, String)>;

/// One running replica.
pub struct Replica {
    pub service: Service,
    pub keys: Keys,
    config: PathBuf,
    data: tempfile::TempDir,
}

impl Replica {
    /// The key of `principal`.
    pub fn key(&self, principal: &str) -> &str {
        self.keys
            .iter()
            .find(|(p, _)| p == principal)
            .map(|(_, k)| k.as_str())
            .expect("a key for the principal")
    }

    /// SIGKILL, then a restart on the same data directory and configuration.
    pub fn kill_and_restart(&mut self, redis: &RedisServer) {
        let _ = self.service.child.kill();
        let _ = self.service.child.wait();
        let url = redis.url();
        self.service = start_with(
            self.data.path(),
            &self.config,
            false,
            &["--redis-url", &url],
        );
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.service.child.kill();
        let _ = self.service.child.wait();
    }
}

/// What the first replica of a deployment sets up.
pub struct Deployment<'a> {
    pub workspace: &'a str,
    pub profile: Value,
    pub principals: &'a [&'a str],
}

/// Starts a replica on `redis` with the configuration file `config` writes into its data
/// directory; the first replica on this Redis (as `deployments` records it) sets `deployment`
/// up, later ones adopt its keys.
pub fn start_replica(
    redis: &RedisServer,
    deployments: &PerRedis<Keys>,
    config: impl FnOnce(&Path) -> PathBuf,
    deployment: &Deployment,
) -> Replica {
    let data = tempfile::tempdir().unwrap();
    let config = config(data.path());
    let url = redis.url();
    let id = (redis.port(), redis.pid());
    let shared = deployments.get(id);
    let service = start_with(
        data.path(),
        &config,
        shared.is_none(),
        &["--redis-url", &url],
    );
    if let Some(keys) = shared {
        return Replica {
            service,
            keys,
            config,
            data,
        };
    }
    let admin = service.admin_key.clone().expect("first start");
    let workspace = deployment.workspace;
    let (status, answer) = http(
        &service.addr,
        "PUT",
        &format!("/v1/workspaces/{workspace}/profiles/v1"),
        &admin,
        Some(&deployment.profile),
    )
    .unwrap();
    assert_eq!(status, 201, "{answer}");
    let keys: Keys = deployment
        .principals
        .iter()
        .map(|principal| {
            let (status, answer) = http(
                &service.addr,
                "POST",
                &format!("/v1/workspaces/{workspace}/keys"),
                &admin,
                Some(&json!({ "principalId": principal })),
            )
            .unwrap();
            assert_eq!(status, 201, "{answer}");
            (
                (*principal).to_owned(),
                answer["key"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    deployments.insert(id, keys.clone());
    Replica {
        service,
        keys,
        config,
        data,
    }
}
