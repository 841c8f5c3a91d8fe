//! The calls' bytes. An operation alone or a batch of them, as a `redis::Cmd` filled by
//! [`ops_command`] (the multiplexed link) or written straight into a buffer by [`write_ops`]
//! (a lane's own connection, `crate::direct`): both send the same bytes (tested byte for byte
//! in `crate::lane_keys`). The lane's shape string ([`lane_shape`]), and the calls of the
//! other functions (renew, pause, breaker merge, clock, conformance runs).
//!
//! # Invariants
//!
//! - [`Packed`]'s bytes are exactly [`write_bulk`] of the words they stand for, with the
//!   single call's header for the operation's words in all (built only by [`Packed::new`]).
//! - A lone operation goes as its single call; more as one batch call (the same decision and
//!   answer as a batch of one, at about four fifths of Redis's instructions per pair,
//!   docs/performance.md, session 10).

use redis::{Cmd, Pipeline};
use turnstile_admission::Millis;

use super::ops::{Op, OpKind, RenewBatch, RenewMode, ScopeFlags, Word};
use super::Function;
use crate::breaker::{BreakerKeys, SeenOutcomes};
use crate::resp::{write_array, write_bulk, write_bulk_count};
use crate::spec::LaneSpec;

/// An optional count as the scripts take it: `-1` for none.
pub(crate) fn signed(v: Option<u64>) -> i64 {
    v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// The words an operation of a lane sends on every call, in RESP: everything but its first
/// argument (the lease member) and the arguments after `tail_words` more (the estimate).
///
/// Invariant: the bytes are exactly [`write_bulk`] of the words they stand for, with the
/// single call's header for `words` words in all (built only by [`Packed::new`]; the lane's
/// property test compares the bytes sent with redis-rs's).
#[derive(Debug)]
pub(crate) struct Packed {
    /// The single call up to its first argument: `*<words>`, `FCALL`, the function, the key
    /// count, the keys.
    single_head: Box<[u8]>,
    /// The keys alone (a batch's key section).
    keys: Box<[u8]>,
    /// The fixed arguments after the first one.
    tail: Box<[u8]>,
    tail_words: usize,
}

impl Packed {
    /// The fixed bytes of a `kind` operation with `keys` and `args` arguments in all, of which
    /// the second to the `tail.len() + 1`-th are `tail`.
    pub(crate) fn new(kind: OpKind, keys: &[Word], args: usize, tail: &[Word]) -> Self {
        let mut key_bytes = Vec::new();
        for key in keys {
            write_bulk(&mut key_bytes, key.as_bytes());
        }
        let mut single_head = Vec::with_capacity(key_bytes.len() + 48);
        write_array(&mut single_head, 3 + keys.len() + args);
        write_bulk(&mut single_head, b"FCALL");
        write_bulk(&mut single_head, kind.function().as_bytes());
        write_bulk_count(&mut single_head, keys.len());
        single_head.extend_from_slice(&key_bytes);
        let mut tail_bytes = Vec::new();
        for word in tail {
            write_bulk(&mut tail_bytes, word.as_bytes());
        }
        Packed {
            single_head: single_head.into(),
            keys: key_bytes.into(),
            tail: tail_bytes.into(),
            tail_words: tail.len(),
        }
    }
}

impl Op {
    /// Fills `cmd` (an `FCALL`) with this operation as a single call.
    pub(crate) fn single_command(&self, cmd: &mut Cmd) {
        cmd.arg(self.kind.function()).arg(self.keys.len());
        for word in self.keys.iter().chain(&self.args) {
            cmd.arg(&**word);
        }
    }

    /// Appends the RESP of this operation as its single call: what redis-rs packs for the `Cmd`
    /// [`single_command`](Self::single_command) fills.
    fn write_single(&self, out: &mut Vec<u8>) {
        match &self.packed {
            Some(packed) => out.extend_from_slice(&packed.single_head),
            None => {
                write_array(out, 3 + self.keys.len() + self.args.len());
                write_bulk(out, b"FCALL");
                write_bulk(out, self.kind.function().as_bytes());
                write_bulk_count(out, self.keys.len());
                self.write_keys(out);
            }
        }
        self.write_args(out);
    }

    /// Appends the keys, each a bulk string.
    fn write_keys(&self, out: &mut Vec<u8>) {
        match &self.packed {
            Some(packed) => out.extend_from_slice(&packed.keys),
            None => {
                for key in self.keys.iter() {
                    write_bulk(out, key.as_bytes());
                }
            }
        }
    }

    /// Appends the arguments, each a bulk string.
    fn write_args(&self, out: &mut Vec<u8>) {
        let Some(packed) = &self.packed else {
            for arg in &self.args {
                write_bulk(out, arg.as_bytes());
            }
            return;
        };
        let mut args = self.args.iter();
        if let Some(first) = args.next() {
            write_bulk(out, first.as_bytes());
        }
        out.extend_from_slice(&packed.tail);
        for arg in args.skip(packed.tail_words) {
            write_bulk(out, arg.as_bytes());
        }
    }
}

/// Fills `cmd` (an `FCALL`) with the one call that runs `ops` (all of one workspace, at least
/// one): a lone operation as its single call, more as one batch ([`batch_command`]). Decode
/// the answer with `decode::ops_answers`.
pub(crate) fn ops_command<'a>(cmd: &mut Cmd, ops: impl Iterator<Item = &'a Op> + Clone) {
    let mut rest = ops.clone();
    match (rest.next(), rest.next()) {
        (Some(op), None) => op.single_command(cmd),
        _ => batch_command(cmd, ops),
    }
}

/// Fills `cmd` (an `FCALL`) with one batch of `ops` (all of one workspace: one slot): every
/// operation's keys in order, then per operation its kind, key count, argument count and
/// arguments.
pub(crate) fn batch_command<'a>(cmd: &mut Cmd, ops: impl Iterator<Item = &'a Op> + Clone) {
    let nkeys: usize = ops.clone().map(|op| op.keys.len()).sum();
    cmd.arg(Function::Batch.name()).arg(nkeys);
    for op in ops.clone() {
        for key in op.keys.iter() {
            cmd.arg(&**key);
        }
    }
    for op in ops {
        cmd.arg(op.kind.letter())
            .arg(op.keys.len())
            .arg(op.args.len());
        for arg in &op.args {
            cmd.arg(&**arg);
        }
    }
}

/// Appends to `out` the RESP bytes of the call [`ops_command`] makes for `ops`: byte for byte
/// what redis-rs packs for that `Cmd` (tested), without building one (a lane's own
/// connection, `crate::direct`, sends these).
pub(crate) fn write_ops<'a>(out: &mut Vec<u8>, ops: impl Iterator<Item = &'a Op> + Clone) {
    let mut rest = ops.clone();
    if let (Some(op), None) = (rest.next(), rest.next()) {
        op.write_single(out);
        return;
    }
    let (mut nkeys, mut words) = (0, 3);
    for op in ops.clone() {
        nkeys += op.keys.len();
        words += op.keys.len() + 3 + op.args.len();
    }
    write_array(out, words);
    write_bulk(out, b"FCALL");
    write_bulk(out, Function::Batch.name().as_bytes());
    write_bulk_count(out, nkeys);
    for op in ops.clone() {
        op.write_keys(out);
    }
    for op in ops {
        write_bulk(out, op.kind.letter().as_bytes());
        write_bulk_count(out, op.keys.len());
        write_bulk_count(out, op.args.len());
        op.write_args(out);
    }
}

/// The shape of an acquire: what stays the same from one admission of the lane to the next
/// (the script decodes each distinct shape once), e.g. `10000;50;-;1,4096;65,4096;65,4096`.
pub(crate) fn lane_shape(
    spec: &LaneSpec,
    flags: &[ScopeFlags],
    liveness_ms: Millis,
    turn_window_ms: Option<Millis>,
) -> String {
    let mut shape = liveness_ms.to_string();
    shape.push(';');
    shape.push_str(&turn_window_ms.map_or("-".to_owned(), |w| w.to_string()));
    shape.push(';');
    shape.push_str(&spec.breaker.map_or("-".to_owned(), |b| {
        format!(
            "{},{},{}",
            b.failure_threshold, b.open_ms, b.half_open_max_calls
        )
    }));
    for (scope, flags) in spec.scopes.iter().zip(flags) {
        let mut values = vec![flags.0.to_string()];
        values.extend(scope.concurrency.map(|c| c.to_string()));
        for bucket in [scope.requests, scope.tokens].into_iter().flatten() {
            values.push(bucket.rate.to_string());
            values.push(bucket.capacity.to_string());
        }
        if scope.has_budget() {
            values.push(scope.name.0.clone());
            values.extend(
                [scope.max_attempts, scope.max_micro_usd, scope.max_tokens]
                    .into_iter()
                    .flatten()
                    .map(|v| v.to_string()),
            );
        }
        shape.push(';');
        shape.push_str(&values.join(","));
    }
    shape
}

/// An `FCALL` of `function` with `keys` keys to follow.
fn fcall(function: Function, keys: usize) -> Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(function.name()).arg(keys);
    cmd
}

/// `FUNCTION LOAD REPLACE` of the library.
pub(crate) fn load_library_command() -> Cmd {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD").arg("REPLACE").arg(super::LIBRARY);
    cmd
}

/// The clock (a read-only call: the health probe).
pub(crate) fn time_command() -> Cmd {
    let mut cmd = redis::cmd("FCALL_RO");
    cmd.arg(Function::Time.name()).arg(0);
    cmd
}

/// The merge of the outcomes a degraded replica saw into the shared breaker.
pub(crate) fn breaker_command(breaker: &BreakerKeys, seen: &SeenOutcomes) -> Cmd {
    let mut cmd = fcall(Function::Breaker, 2);
    cmd.arg(&breaker.key)
        .arg(&breaker.probes)
        .arg(breaker.failure_threshold)
        .arg(u8::from(seen.success))
        .arg(seen.failures);
    cmd
}

/// A pause of `pause_ms` on `pause_key`.
pub(crate) fn pause_command(pause_key: &str, pause_ms: Millis) -> Cmd {
    let mut cmd = fcall(Function::Pause, 1);
    cmd.arg(pause_key).arg(pause_ms);
    cmd
}

/// One pipeline of renewals, one call per batch (workspace).
pub(crate) fn renew_pipeline(
    batches: &[RenewBatch],
    liveness_ms: Millis,
    mode: RenewMode,
) -> Pipeline {
    let mut pipe = redis::pipe();
    for batch in batches {
        let cmd = pipe
            .cmd("FCALL")
            .arg(Function::Renew.name())
            .arg(batch.keys.len());
        for key in &batch.keys {
            cmd.arg(key);
        }
        cmd.arg(liveness_ms)
            .arg(match mode {
                RenewMode::Existing => "xx",
                RenewMode::Register => "add",
                RenewMode::Check => "check",
            })
            .arg(batch.known.as_deref().unwrap_or("-"));
        for (index, member) in &batch.members {
            cmd.arg(index + 1).arg(member);
        }
    }
    pipe
}

/// One pipeline of the bucket arithmetic's conformance runs on `key`.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn bucket_runs_pipeline(key: &str, runs: &[super::ops::BucketRun]) -> Pipeline {
    let mut pipe = redis::pipe();
    for (rate, capacity, period, steps) in runs {
        let cmd = pipe
            .cmd("FCALL")
            .arg(Function::BucketRun.name())
            .arg(1)
            .arg(key)
            .arg(*rate)
            .arg(*capacity)
            .arg(*period);
        for (now, units) in steps {
            cmd.arg(*now).arg(*units);
        }
    }
    pipe
}
