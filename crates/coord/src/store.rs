//! The transport to Redis: one multiplexed link (`crate::link`: a standalone Redis, or a Redis
//! Cluster routed by slot), the function library loaded and reloaded, and a hard timeout on
//! every call. What each call sends and answers is the protocol's (`crate::protocol`); this
//! module only carries it.
//! (Acquires and releases are batched per workspace, `crate::batcher`, and sent on the batch
//! task's own connection, `crate::direct`; `RedisStore::batch` is the multiplexed way.)
//!
//! Invariants:
//! - No call waits longer than the command timeout ([`RedisStore::timeout`], 100 ms by
//!   default): a stopped Redis (SIGSTOP) costs one timeout, never a hang.
//! - The library is loaded with `FUNCTION LOAD REPLACE` (on every primary of a cluster) at
//!   start and again whenever a call finds it missing (a restarted Redis with empty state, a
//!   failover to a replica without it, a primary added to a cluster); the call is then retried
//!   once.
//! - One admission and one release are each one operation of exactly one `FCALL` (a batch:
//!   several operations of one workspace per call; a lone operation as its single call); fair
//!   turns and the shared breaker ride in the same calls;
//!   renewals of all of a replica's leases are one pipeline (on a cluster: one pipeline per
//!   workspace, all sent at once, since a pipeline may not cross slots).

use std::time::Duration;

use redis::{Cmd, Value};
use turnstile_admission::Millis;

use crate::breaker::{BreakerKeys, BreakerState, SeenOutcomes};
use crate::error::CoordError;
use crate::keys::WorkspaceKeys;
use crate::link::{Link, Topology};
use crate::protocol::decode::{decode_breaker, decode_pause, decode_time};
use crate::protocol::encode::{
    breaker_command, load_library_command, pause_command, renew_pipeline, time_command,
};
use crate::protocol::{
    decode_renew, is_missing_function, ops_answers, ops_command, Op, RenewBatch, RenewMode, Renewed,
};
use crate::stats::FcallStats;

/// The Redis side of coordination: a client of one Redis or one Redis Cluster, every call
/// bounded by the command timeout.
#[derive(Clone)]
pub struct RedisStore {
    link: Link,
    timeout: Duration,
}

fn redis_error(error: &redis::RedisError) -> CoordError {
    CoordError::Redis(error.to_string())
}

impl RedisStore {
    /// A client for `url` (`redis://host:port`, `unix:///path`; a cluster's seed nodes,
    /// comma-separated); connects lazily, so a Redis that is down at start makes the replica
    /// degraded, not unable to start.
    pub fn new(url: &str, topology: Topology, timeout: Duration) -> Result<Self, CoordError> {
        let link = Link::connect_lazily(url, topology, timeout)?;
        Ok(RedisStore { link, timeout })
    }

    /// A call failed: on a cluster the connection is built again from the seeds (at most
    /// every 250 ms), so a primary replaced by its replica (a failover) is found; a failed
    /// node only ever answers connection errors, which redis-rs meets by reconnecting to the
    /// same address. Nothing on a standalone Redis.
    pub(crate) fn rebuild(&self) {
        self.link.rebuild();
    }

    /// What the URL names: one Redis or a cluster.
    pub fn topology(&self) -> Topology {
        self.link.topology()
    }

    /// On a cluster, the address of the primary that owns `key`'s slot now (`CLUSTER SLOTS`);
    /// `None` on a standalone Redis or when no node names one.
    pub(crate) async fn owner_of(&self, key: &str) -> Result<Option<(String, u16)>, CoordError> {
        self.bounded(self.link.owner_of(key))
            .await
            .map_err(|e| self.classify(&e))
    }

    /// The command timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn run(&self, cmd: &Cmd) -> Result<Value, redis::RedisError> {
        self.bounded(self.link.query(cmd)).await
    }

    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> redis::RedisResult<T> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(answer) => answer,
            Err(_) => Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "timeout",
                format!("no answer within {} ms", self.timeout.as_millis()),
            ))),
        }
    }

    fn classify(&self, error: &redis::RedisError) -> CoordError {
        if error.is_timeout()
            || error
                .detail()
                .is_some_and(|d| d.starts_with("no answer within"))
        {
            CoordError::Timeout(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX))
        } else {
            redis_error(error)
        }
    }

    /// Loads (or replaces) the function library (on every primary of a cluster).
    pub async fn load_library(&self) -> Result<(), CoordError> {
        let cmd = load_library_command();
        self.bounded(self.link.on_every_primary(&cmd))
            .await
            .map(|_| ())
            .map_err(|e| self.classify(&e))
    }

    /// Runs an `FCALL`, loading the library and retrying once if Redis does not have it.
    /// Answers whether the library had to be loaded (Redis lost its state).
    async fn fcall(&self, cmd: &Cmd) -> Result<(Value, bool), CoordError> {
        match self.run(cmd).await {
            Ok(value) => Ok((value, false)),
            Err(error) if is_missing_function(&error) => {
                self.load_library().await?;
                let value = self.run(cmd).await.map_err(|e| self.classify(&e))?;
                Ok((value, true))
            }
            Err(error) => Err(self.classify(&error)),
        }
    }

    /// The server clock; the health probe (on a cluster: of every primary, so any primary
    /// that fails or hangs fails it). Answers whether the library had to be loaded.
    pub(crate) async fn time(&self) -> Result<(Millis, bool), CoordError> {
        let cmd = time_command();
        let probe = || self.bounded(self.link.on_every_primary(&cmd));
        let (value, loaded) = match probe().await {
            Ok(value) => (value, false),
            Err(error) if is_missing_function(&error) => {
                self.load_library().await?;
                (probe().await.map_err(|e| self.classify(&e))?, true)
            }
            Err(error) => return Err(self.classify(&error)),
        };
        Ok((decode_time(&value)?, loaded))
    }

    /// One operation as its single call: its raw answer, what its place in a batch's answer
    /// would be (the batch conformance test, through `crate::testing`).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) async fn single(&self, op: &Op) -> Result<Value, CoordError> {
        let mut cmd = redis::cmd("FCALL");
        op.single_command(&mut cmd);
        Ok(self.fcall(&cmd).await?.0)
    }

    /// `ops` (all of one workspace, at least one) in one call ([`ops_command`]: a lone one as
    /// its single call, more as one batch), answered by `deadline`: one answer per operation,
    /// in order (decode each with `protocol::decode_acquire` / `decode_release`). The
    /// library-missing retry happens within the same deadline; a timeout is
    /// [`CoordError::Timeout`] (the batch may have run).
    pub(crate) async fn batch<'a>(
        &self,
        ops: impl Iterator<Item = &'a Op> + Clone,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<Value>, CoordError> {
        let count = ops.clone().count();
        let mut cmd = redis::cmd("FCALL");
        ops_command(&mut cmd, ops);
        let answer = tokio::time::timeout_at(deadline, self.fcall(&cmd)).await;
        let (value, _) = answer.map_err(|_| {
            CoordError::Timeout(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX))
        })??;
        ops_answers(value, count)
    }

    /// `ts_breaker_v5`: merges the outcomes a degraded replica saw into the shared breaker (a
    /// success first if one was seen, then the failures after the last success). Answers the
    /// state after the merge.
    pub(crate) async fn merge_breaker(
        &self,
        breaker: &BreakerKeys,
        seen: &SeenOutcomes,
    ) -> Result<Option<BreakerState>, CoordError> {
        let (value, _) = self.fcall(&breaker_command(breaker, seen)).await?;
        decode_breaker(value)
    }

    /// `ts_pause_v5`: answers the pause's end (server ms) and the server's now.
    pub(crate) async fn pause(
        &self,
        workspace: &str,
        provider: &str,
        pause_ms: Millis,
    ) -> Result<(Millis, Millis), CoordError> {
        let keys = WorkspaceKeys::new(workspace);
        self.pause_key(&keys, &keys.pause(provider), pause_ms).await
    }

    /// `ts_pause_v5` on a pause key of `keys`' workspace.
    pub(crate) async fn pause_key(
        &self,
        _keys: &WorkspaceKeys,
        pause_key: &str,
        pause_ms: Millis,
    ) -> Result<(Millis, Millis), CoordError> {
        let (value, _) = self.fcall(&pause_command(pause_key, pause_ms)).await?;
        decode_pause(value)
    }

    /// `ts_renew_v5` for every batch, in one pipeline (one round trip); on a cluster, one
    /// pipeline per batch (a pipeline may not cross slots), all sent at once. Answers each
    /// batch's [`Renewed`], in order.
    pub(crate) async fn renew(
        &self,
        batches: &[RenewBatch],
        liveness_ms: Millis,
        mode: RenewMode,
    ) -> Result<Vec<Renewed>, CoordError> {
        if batches.is_empty() {
            return Ok(Vec::new());
        }
        let pipes: Vec<redis::Pipeline> = match self.link.topology() {
            Topology::Standalone => vec![renew_pipeline(batches, liveness_ms, mode)],
            Topology::Cluster => batches
                .chunks(1)
                .map(|batch| renew_pipeline(batch, liveness_ms, mode))
                .collect(),
        };
        let calls = pipes.iter().map(|pipe| self.link.pipeline(pipe));
        let answer = self
            .bounded(futures_util::future::try_join_all(calls))
            .await;
        match answer {
            Ok(answers) => answers
                .into_iter()
                .flatten()
                .map(decode_renew)
                .collect::<Result<Vec<_>, _>>()
                .and_then(|renewed| {
                    if renewed.len() == batches.len() {
                        Ok(renewed)
                    } else {
                        Err(CoordError::Protocol("renew answers".into()))
                    }
                }),
            Err(error) if is_missing_function(&error) => {
                self.load_library().await?;
                Err(CoordError::Redis("the function library was missing".into()))
            }
            Err(error) => Err(self.classify(&error)),
        }
    }

    /// The script's bucket arithmetic over `steps` of (now, units) with an injected clock; per
    /// step (admitted, wait ms or -1 for never, level in whole units). The conformance hook
    /// that tests the script against `bucket.rs` (through `crate::testing`); pipelined over
    /// `runs`.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) async fn bucket_runs(
        &self,
        key: &str,
        runs: &[crate::protocol::ops::BucketRun],
    ) -> Result<Vec<Vec<crate::protocol::ops::BucketStep>>, CoordError> {
        let pipe = crate::protocol::encode::bucket_runs_pipeline(key, runs);
        let answers = self
            .link
            .pipeline(&pipe)
            .await
            .map_err(|e| redis_error(&e))?;
        answers
            .into_iter()
            .map(crate::protocol::decode::decode_bucket_run)
            .collect()
    }

    /// `INFO commandstats`' line for `FCALL` (what turnstile's shared limits cost Redis):
    /// (calls, µs), summed over a cluster's primaries. Benchmarks read it before and after a run; the difference is exact for the
    /// run when nothing else calls functions on that Redis.
    pub async fn fcall_stats(&self) -> Result<FcallStats, CoordError> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("commandstats");
        let answers = self
            .bounded(self.link.each_primary(&cmd))
            .await
            .map_err(|e| self.classify(&e))?;
        let mut total = FcallStats::default();
        for value in answers {
            let info = match value {
                Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Value::VerbatimString { text, .. } => text,
                other => return Err(CoordError::Protocol(format!("{other:?}"))),
            };
            let stats = FcallStats::parse(&info);
            total.calls += stats.calls;
            total.usec += stats.usec;
        }
        Ok(total)
    }

    /// `CONFIG GET maxmemory-policy maxmemory` on every primary: per primary its eviction
    /// policy and memory limit (bytes, 0: none). An error when Redis refuses `CONFIG` (managed
    /// Redis often does) or does not answer.
    pub(crate) async fn memory_policies(&self) -> Result<Vec<(String, u64)>, CoordError> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg("maxmemory-policy").arg("maxmemory");
        let answers = self
            .bounded(self.link.each_primary(&cmd))
            .await
            .map_err(|e| self.classify(&e))?;
        answers
            .into_iter()
            .map(|value| {
                let pairs: Vec<(String, String)> = match value {
                    Value::Map(pairs) => pairs
                        .iter()
                        .map(|(k, v)| Ok((crate::protocol::text(k)?, crate::protocol::text(v)?)))
                        .collect::<Result<_, CoordError>>()?,
                    Value::Array(items) => items
                        .chunks(2)
                        .map(|pair| match pair {
                            [k, v] => Ok((crate::protocol::text(k)?, crate::protocol::text(v)?)),
                            _ => Err(CoordError::Protocol("CONFIG GET answer".into())),
                        })
                        .collect::<Result<_, CoordError>>()?,
                    other => return Err(CoordError::Protocol(format!("{other:?}"))),
                };
                let get = |name: &str| {
                    pairs
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.clone())
                };
                let policy = get("maxmemory-policy")
                    .ok_or_else(|| CoordError::Protocol("no maxmemory-policy".into()))?;
                let limit = get("maxmemory").and_then(|v| v.parse().ok()).unwrap_or(0);
                Ok((policy, limit))
            })
            .collect()
    }

    /// Deletes an invocation's budget lines (`POST /v1/budgets/{id}/release`).
    pub(crate) async fn release_budget(
        &self,
        workspace: &str,
        budget_id: &str,
    ) -> Result<(), CoordError> {
        let keys = WorkspaceKeys::new(workspace);
        let mut cmd = redis::cmd("DEL");
        cmd.arg(keys.budget(budget_id));
        self.run(&cmd)
            .await
            .map(|_| ())
            .map_err(|e| self.classify(&e))
    }
}
