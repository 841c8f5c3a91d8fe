//! The Redis client: one multiplexed link ([`crate::link`]: a standalone Redis, or a Redis
//! Cluster routed by slot), the `turnstile_v4` function library, and a hard timeout on every
//! call.
//! (Acquires and releases are batched per workspace, `crate::batcher`, and sent on the batch
//! task's own connection, `crate::direct`; [`RedisStore::batch`] is the multiplexed way.)
//!
//! Invariants:
//! - No call waits longer than the command timeout ([`RedisStore::timeout`], 100 ms by
//!   default): a stopped Redis (SIGSTOP) costs one timeout, never a hang.
//! - The library is loaded with `FUNCTION LOAD REPLACE` (on every primary of a cluster) at
//!   start and again whenever a call finds it missing (a restarted Redis with empty state, a
//!   failover to a replica without it, a primary added to a cluster); the call is then retried
//!   once.
//! - One admission and one release are each one operation of exactly one `FCALL`
//!   (`ts_batch_v4`, several operations of one workspace per call; `ts_acquire_v4` /
//!   `ts_release_v4` alone); fair turns and the shared breaker ride in the same calls;
//!   renewals of all of a replica's leases are one pipeline (on a cluster: one pipeline per
//!   workspace, all sent at once, since a pipeline may not cross slots).

use std::time::Duration;

use redis::{Cmd, Value};
use turnstile_admission::Millis;

use crate::breaker::{BreakerKeys, BreakerState, Outcome, SeenOutcomes};
use crate::error::CoordError;
use crate::keys::WorkspaceKeys;
use crate::link::{Link, Topology};
use crate::protocol::{acquire_command, ops_command, release_command, Op};
use crate::spec::LaneSpec;
use crate::verdict::Verdict;

/// The function library (Lua), versioned by name.
pub const LIBRARY: &str = include_str!("lua/turnstile_v4.lua");

/// A conformance run: (rate, capacity, period ms, steps of (now, units)).
pub type BucketRun = (u64, u64, u64, Vec<(u64, u64)>);

/// One step's answer: (admitted, wait ms or -1 for never, level in whole units).
pub type BucketStep = (bool, i64, u64);

/// One batch of lease renewals: the leases of one workspace (one hash tag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewBatch {
    /// The lease zsets named by `members`.
    pub keys: Vec<String>,
    /// (index into `keys`, lease member).
    pub members: Vec<(usize, String)>,
}

/// How a renewal writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewMode {
    /// Only leases Redis still has (`ZADD XX`): a lease released meanwhile is not brought back.
    Existing,
    /// Every lease (`ZADD`): re-registers leases after Redis lost them (reconcile).
    Register,
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The server clock, read only when the release set a pause (0 otherwise).
    pub now: Millis,
    /// The provider pause after this release (server ms), if it set or met one.
    pub paused_until: Option<Millis>,
    /// The shared breaker's state after this release (when the lane has one).
    pub breaker: Option<BreakerState>,
}

/// A release: the lease, its scopes' zsets, budget corrections and an optional pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseCall {
    pub member: String,
    pub lease_keys: Vec<String>,
    pub pause_key: String,
    pub budget_key: String,
    /// Scope names whose budget lines were charged.
    pub budget_scopes: Vec<String>,
    pub pause_ms: Millis,
    pub charged_tokens: u64,
    pub actual_tokens: Option<u64>,
    pub charged_micro: u64,
    pub actual_micro: Option<u64>,
    /// The lane's shared breaker, if it has one, and what this call reports to it.
    pub breaker: Option<BreakerKeys>,
    pub outcome: Outcome,
}

impl ReleaseCall {
    /// The plain release of `member`, a lease of `spec`: its scopes' lease zsets (those with a
    /// concurrency limit), the lane's pause, budget and breaker keys and the budget lines it
    /// charged; no pause, no charge or usage, no outcome. Callers set what their release
    /// reports with struct update syntax.
    pub fn plain(spec: &LaneSpec, member: &str) -> ReleaseCall {
        let keys = WorkspaceKeys::new(&spec.workspace);
        ReleaseCall {
            member: member.to_owned(),
            lease_keys: spec
                .scopes
                .iter()
                .filter(|s| s.concurrency.is_some())
                .map(|s| keys.leases(&s.name))
                .collect(),
            pause_key: keys.pause(&spec.provider),
            budget_key: keys.budget(&spec.budget_id),
            budget_scopes: spec
                .scopes
                .iter()
                .filter(|s| s.has_budget())
                .map(|s| s.name.0.clone())
                .collect(),
            pause_ms: 0,
            charged_tokens: 0,
            actual_tokens: None,
            charged_micro: 0,
            actual_micro: None,
            breaker: spec
                .breaker
                .as_ref()
                .map(|b| BreakerKeys::new(&keys, &spec.provider, b)),
            outcome: Outcome::None,
        }
    }
}

/// The Redis side of coordination.
/// Calls of `FCALL` and the µs Redis spent in them (`INFO commandstats`, `cmdstat_fcall`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FcallStats {
    pub calls: u64,
    pub usec: u64,
}

impl FcallStats {
    /// Reads `cmdstat_fcall:calls=N,usec=N,…` out of `INFO commandstats` (zero when absent).
    pub fn parse(info: &str) -> Self {
        let mut stats = FcallStats::default();
        let Some(line) = info
            .lines()
            .find_map(|line| line.trim().strip_prefix("cmdstat_fcall:"))
        else {
            return stats;
        };
        for field in line.split(',') {
            match field.split_once('=') {
                Some(("calls", n)) => stats.calls = n.parse().unwrap_or(0),
                Some(("usec", n)) => stats.usec = n.parse().unwrap_or(0),
                _ => {}
            }
        }
        stats
    }

    /// What happened between `self` (before) and `after`.
    pub fn delta(self, after: FcallStats) -> FcallStats {
        FcallStats {
            calls: after.calls.saturating_sub(self.calls),
            usec: after.usec.saturating_sub(self.usec),
        }
    }
}

#[derive(Clone)]
pub struct RedisStore {
    link: Link,
    timeout: Duration,
}

fn redis_error(error: &redis::RedisError) -> CoordError {
    CoordError::Redis(error.to_string())
}

fn is_missing_function(error: &redis::RedisError) -> bool {
    error.to_string().contains("Function not found")
}

/// Whether a raw answer is Redis's "function not found" error reply.
pub fn is_missing_function_reply(value: &Value) -> bool {
    matches!(value, Value::ServerError(error) if error.details().is_some_and(|d| d.contains("Function not found")) || error.code().contains("Function not found"))
}

/// The answer of the call [`ops_command`] made for `count` operations: one value per
/// operation (a lone operation's single call answers its value alone), or why not.
pub fn ops_answers(value: Value, count: usize) -> Result<Vec<Value>, CoordError> {
    if count == 1 {
        server_error(&value)?;
        return Ok(vec![value]);
    }
    batch_answers(value, count)
}

fn server_error(value: &Value) -> Result<(), CoordError> {
    if let Value::ServerError(error) = value {
        return Err(CoordError::Redis(format!(
            "{} {}",
            error.code(),
            error.details().unwrap_or("")
        )));
    }
    Ok(())
}

/// A `ts_batch_v4` answer: one value per operation (`count`), or why not.
pub fn batch_answers(value: Value, count: usize) -> Result<Vec<Value>, CoordError> {
    server_error(&value)?;
    let answers = array(value)?;
    if answers.len() != count {
        return Err(CoordError::Protocol(format!(
            "batch of {count} answered {}",
            answers.len()
        )));
    }
    Ok(answers)
}

pub(crate) fn int(value: &Value) -> Result<i64, CoordError> {
    match value {
        Value::Int(i) => Ok(*i),
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| CoordError::Protocol("not an integer".into())),
        other => Err(CoordError::Protocol(format!("{other:?}"))),
    }
}

pub(crate) fn text(value: &Value) -> Result<String, CoordError> {
    match value {
        Value::BulkString(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        other => Err(CoordError::Protocol(format!("{other:?}"))),
    }
}

pub(crate) fn array(value: Value) -> Result<Vec<Value>, CoordError> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(CoordError::Protocol(format!("{other:?}"))),
    }
}

/// An acquire's answer (`ts_acquire_v4`, or its place in a `ts_batch_v4` answer).
pub fn decode_acquire(value: Value) -> Result<Verdict, CoordError> {
    if let Value::Int(now) = value {
        // A plain grant answers its instant alone.
        let now = u64::try_from(now).map_err(|_| CoordError::Protocol("negative time".into()))?;
        return Ok(Verdict::Granted { now, probe: false });
    }
    let items = array(value)?;
    let [verdict, reason, scope, instant, now] = items.as_slice() else {
        return Err(CoordError::Protocol("acquire answer".into()));
    };
    Verdict::decode(
        &text(verdict)?,
        &text(reason)?,
        int(scope)?,
        int(instant)?,
        int(now)?,
    )
}

/// A release's answer (`ts_release_v4`, or its place in a `ts_batch_v4` answer).
pub fn decode_release(value: Value) -> Result<Released, CoordError> {
    if let Value::Int(_) = value {
        // A plain release: no clock read, no pause, no breaker.
        return Ok(Released {
            now: 0,
            paused_until: None,
            breaker: None,
        });
    }
    let items = array(value)?;
    let (now, until, state) = match items.as_slice() {
        [now, until] => (now, until, None),
        [now, until, state] => (now, until, Some(state)),
        _ => return Err(CoordError::Protocol("release answer".into())),
    };
    let until = int(until)?;
    let breaker = match state {
        Some(state) => BreakerState::decode(&text(state)?)?,
        None => None,
    };
    Ok(Released {
        now: u64::try_from(int(now)?).unwrap_or(0),
        paused_until: (until > 0).then(|| u64::try_from(until).unwrap_or(0)),
        breaker,
    })
}

/// One pipeline of `ts_renew_v4` calls, one per batch (workspace).
fn renew_pipeline(batches: &[RenewBatch], liveness_ms: Millis, mode: RenewMode) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for batch in batches {
        let cmd = pipe.cmd("FCALL").arg("ts_renew_v4").arg(batch.keys.len());
        for key in &batch.keys {
            cmd.arg(key);
        }
        cmd.arg(liveness_ms).arg(match mode {
            RenewMode::Existing => "xx",
            RenewMode::Register => "add",
        });
        for (index, member) in &batch.members {
            cmd.arg(index + 1).arg(member);
        }
    }
    pipe
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
    pub fn rebuild(&self) {
        self.link.rebuild();
    }

    /// What the URL names: one Redis or a cluster.
    pub fn topology(&self) -> Topology {
        self.link.topology()
    }

    /// On a cluster, the address of the primary that owns `key`'s slot now (`CLUSTER SLOTS`);
    /// `None` on a standalone Redis or when no node names one.
    pub async fn owner_of(&self, key: &str) -> Result<Option<(String, u16)>, CoordError> {
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
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(LIBRARY);
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
    pub async fn time(&self) -> Result<(Millis, bool), CoordError> {
        let mut cmd = redis::cmd("FCALL_RO");
        cmd.arg("ts_time_v4").arg(0);
        let probe = || self.bounded(self.link.on_every_primary(&cmd));
        let (value, loaded) = match probe().await {
            Ok(value) => (value, false),
            Err(error) if is_missing_function(&error) => {
                self.load_library().await?;
                (probe().await.map_err(|e| self.classify(&e))?, true)
            }
            Err(error) => return Err(self.classify(&error)),
        };
        let now = u64::try_from(int(&value)?).map_err(|_| CoordError::Protocol("time".into()))?;
        Ok((now, loaded))
    }

    /// `ts_acquire_v4` for `spec`, registering `member` with a liveness of `liveness_ms`.
    /// `turn_window_ms`: fair turns on the lane's shared scopes, a waiting principal counting
    /// for that long after it was last refused (`None`: first come, first served).
    pub async fn acquire(
        &self,
        spec: &LaneSpec,
        member: &str,
        liveness_ms: Millis,
        turn_window_ms: Option<Millis>,
    ) -> Result<Verdict, CoordError> {
        let mut cmd = redis::cmd("FCALL");
        acquire_command(&mut cmd, spec, member, liveness_ms, turn_window_ms);
        let (value, _) = self.fcall(&cmd).await?;
        decode_acquire(value)
    }

    /// `ts_release_v4`.
    pub async fn release(&self, call: &ReleaseCall) -> Result<Released, CoordError> {
        let mut cmd = redis::cmd("FCALL");
        release_command(&mut cmd, call);
        let (value, _) = self.fcall(&cmd).await?;
        decode_release(value)
    }

    /// One operation as its single call (`ts_acquire_v4` / `ts_release_v4`): its raw answer,
    /// what its place in a batch's answer would be (tools and the batch conformance test).
    pub async fn single(&self, op: &Op) -> Result<Value, CoordError> {
        let mut cmd = redis::cmd("FCALL");
        op.single_command(&mut cmd);
        Ok(self.fcall(&cmd).await?.0)
    }

    /// `ops` (all of one workspace, at least one) in one call ([`ops_command`]: a lone one as
    /// its single call, more as one `ts_batch_v4`), answered by `deadline`: one answer per
    /// operation, in order (decode each with [`decode_acquire`] / [`decode_release`]). The
    /// library-missing retry happens within the same deadline; a timeout is
    /// [`CoordError::Timeout`] (the batch may have run).
    pub async fn batch<'a>(
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

    /// `ts_breaker_v4`: merges the outcomes a degraded replica saw into the shared breaker (a
    /// success first if one was seen, then the failures after the last success). Answers the
    /// state after the merge.
    pub async fn merge_breaker(
        &self,
        breaker: &BreakerKeys,
        seen: &SeenOutcomes,
    ) -> Result<Option<BreakerState>, CoordError> {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg("ts_breaker_v4")
            .arg(2)
            .arg(&breaker.key)
            .arg(&breaker.probes)
            .arg(breaker.failure_threshold)
            .arg(u8::from(seen.success))
            .arg(seen.failures);
        let (value, _) = self.fcall(&cmd).await?;
        let items = array(value)?;
        let [_now, state] = items.as_slice() else {
            return Err(CoordError::Protocol("breaker answer".into()));
        };
        BreakerState::decode(&text(state)?)
    }

    /// `ts_pause_v4`: answers the pause's end (server ms) and the server's now.
    pub async fn pause(
        &self,
        workspace: &str,
        provider: &str,
        pause_ms: Millis,
    ) -> Result<(Millis, Millis), CoordError> {
        let keys = WorkspaceKeys::new(workspace);
        self.pause_key(&keys, &keys.pause(provider), pause_ms).await
    }

    /// `ts_pause_v4` on a pause key of `keys`' workspace.
    pub async fn pause_key(
        &self,
        _keys: &WorkspaceKeys,
        pause_key: &str,
        pause_ms: Millis,
    ) -> Result<(Millis, Millis), CoordError> {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg("ts_pause_v4").arg(1).arg(pause_key).arg(pause_ms);
        let (value, _) = self.fcall(&cmd).await?;
        let items = array(value)?;
        let [now, until] = items.as_slice() else {
            return Err(CoordError::Protocol("pause answer".into()));
        };
        Ok((
            u64::try_from(int(until)?).unwrap_or(0),
            u64::try_from(int(now)?).unwrap_or(0),
        ))
    }

    /// `ts_renew_v4` for every batch, in one pipeline (one round trip); on a cluster, one
    /// pipeline per batch (a pipeline may not cross slots), all sent at once.
    pub async fn renew(
        &self,
        batches: &[RenewBatch],
        liveness_ms: Millis,
        mode: RenewMode,
    ) -> Result<(), CoordError> {
        if batches.is_empty() {
            return Ok(());
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
            Ok(_) => Ok(()),
            Err(error) if is_missing_function(&error) => {
                self.load_library().await?;
                Err(CoordError::Redis("the function library was missing".into()))
            }
            Err(error) => Err(self.classify(&error)),
        }
    }

    /// `ts_bucket_run_v4`: the script's bucket arithmetic over `steps` of (now, units) with an
    /// injected clock; per step (admitted, wait ms or -1 for never, level in whole units). The
    /// conformance hook that tests the script against `bucket.rs`; pipelined over `runs`.
    pub async fn bucket_runs(
        &self,
        key: &str,
        runs: &[BucketRun],
    ) -> Result<Vec<Vec<BucketStep>>, CoordError> {
        let mut pipe = redis::pipe();
        for (rate, capacity, period, steps) in runs {
            let cmd = pipe
                .cmd("FCALL")
                .arg("ts_bucket_run_v4")
                .arg(1)
                .arg(key)
                .arg(*rate)
                .arg(*capacity)
                .arg(*period);
            for (now, units) in steps {
                cmd.arg(*now).arg(*units);
            }
        }
        let answers = self
            .link
            .pipeline(&pipe)
            .await
            .map_err(|e| redis_error(&e))?;
        answers
            .into_iter()
            .map(|answer| {
                let items = array(answer)?;
                items
                    .chunks(3)
                    .map(|step| match step {
                        [ok, wait, level] => Ok((
                            int(ok)? == 1,
                            int(wait)?,
                            u64::try_from(int(level)?).unwrap_or(0),
                        )),
                        _ => Err(CoordError::Protocol("bucket step".into())),
                    })
                    .collect()
            })
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

    /// Deletes an invocation's budget lines (`POST /v1/budgets/{id}/release`).
    pub async fn release_budget(&self, workspace: &str, budget_id: &str) -> Result<(), CoordError> {
        let keys = WorkspaceKeys::new(workspace);
        let mut cmd = redis::cmd("DEL");
        cmd.arg(keys.budget(budget_id));
        self.run(&cmd)
            .await
            .map(|_| ())
            .map_err(|e| self.classify(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::FcallStats;

    #[test]
    fn fcall_stats_are_read_from_info_commandstats() {
        let info = "# Commandstats\r\ncmdstat_fcall_ro:calls=7,usec=70,usec_per_call=10.00\r\n\
                    cmdstat_fcall:calls=40000,usec=1868628,usec_per_call=46.72,rejected_calls=0\r\n";
        let stats = FcallStats::parse(info);
        assert_eq!(
            stats,
            FcallStats {
                calls: 40000,
                usec: 1868628
            }
        );
        assert_eq!(
            FcallStats::parse("# Commandstats\r\n"),
            FcallStats::default()
        );
        let later = FcallStats {
            calls: 40010,
            usec: 1868728,
        };
        assert_eq!(
            stats.delta(later),
            FcallStats {
                calls: 10,
                usec: 100
            }
        );
    }
}
