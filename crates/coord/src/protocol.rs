//! The compact call protocol of an acquire and a release (library `turnstile_v4`,
//! `lua/turnstile_v4.lua`; the v3 contract, unchanged): which keys and arguments one
//! admission and one release send, alone (`ts_acquire_v4` / `ts_release_v4`) or as operations
//! of one batch (`ts_batch_v4`, [`batch_command`]); [`ops_command`] picks: a lone operation
//! alone, more as one batch.
//!
//! Redis's time per `FCALL` grows with every key and argument passed (each is copied into a
//! Lua table) and with every `tonumber` the script needs, so a call passes only what the
//! lane's scopes use: bucket, budget, wait and breaker keys only when configured; the lane's
//! limits as one shape string ([`lane_shape`]: per scope a flags word, [`ScopeFlags`], and the
//! values those flags announce), which the script decodes once per distinct shape; a plain
//! release passes its lease keys and the member, nothing else.
//!
//! [`acquire_op_in`] and [`release_op`] are the reference encoding: they format every key and
//! argument from the spec. The coordinator sends the same operations from its lanes' cached
//! pieces (`crate::lane_keys`, tested equal to these), and a lane's own connection writes them
//! with [`write_ops`] instead of a `redis::Cmd` (tested byte for byte against redis-rs).
//!
//! Invariants:
//! - The keys and values are in exactly the order the Lua header of each function documents;
//!   a change to either side is a change of contract and gets new function names.
//! - A batch's operations are all of one workspace (one hash tag, one slot); each operation's
//!   keys and arguments in a batch are exactly those of its single call.
//! - Scope indices in the answers are the positions in `LaneSpec::scopes` (1-based), as in v1.
//! - A release names only lease zsets the acquire wrote (scopes with a concurrency, plus the
//!   probe zset of a probe lease): see `LaneKeys::lease_keys` (`crate::lane_keys`).

use std::sync::Arc;

use redis::Cmd;
use turnstile_admission::Millis;

use crate::keys::WorkspaceKeys;
use crate::resp::{write_array, write_bulk, write_bulk_count};
use crate::spec::{LaneSpec, ScopeLimits};
use crate::store::ReleaseCall;

/// The per-scope flags word of `ts_acquire_v4`: which values (and keys) follow for a scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeFlags(pub u8);

impl ScopeFlags {
    pub const CONCURRENCY: u8 = 1;
    pub const REQUESTS: u8 = 2;
    pub const TOKENS: u8 = 4;
    pub const MAX_ATTEMPTS: u8 = 8;
    pub const MAX_MICRO: u8 = 16;
    pub const MAX_TOKENS: u8 = 32;
    pub const FAIR: u8 = 64;

    /// The flags of `scope`; `fair`: the scope takes part in fair turns.
    pub fn of(scope: &ScopeLimits, fair: bool) -> Self {
        let mut flags = 0;
        let mut set = |on: bool, flag: u8| {
            if on {
                flags |= flag;
            }
        };
        set(scope.concurrency.is_some(), Self::CONCURRENCY);
        set(scope.requests.is_some(), Self::REQUESTS);
        set(scope.tokens.is_some(), Self::TOKENS);
        set(scope.max_attempts.is_some(), Self::MAX_ATTEMPTS);
        set(scope.max_micro_usd.is_some(), Self::MAX_MICRO);
        set(scope.max_tokens.is_some(), Self::MAX_TOKENS);
        set(fair, Self::FAIR);
        ScopeFlags(flags)
    }
}

/// One word of a call (a key or an argument): shared, so a lane's cached pieces
/// (`crate::lane_keys`) go into every call by pointer.
pub type Word = Arc<str>;

/// An optional count as the scripts take it: `-1` for none.
pub(crate) fn signed(v: Option<u64>) -> i64 {
    v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// One operation of a batch (`ts_batch_v4`): an acquire or a release, with exactly the keys
/// and arguments its single call (`ts_acquire_v4` / `ts_release_v4`) takes.
///
/// Two operations are equal when their kind, keys and arguments are; `packed` only caches
/// their bytes.
#[derive(Debug, Clone)]
pub struct Op {
    pub kind: OpKind,
    /// The keys, in the function's order (a lane's plain list is shared, not copied).
    pub keys: Arc<[Word]>,
    pub args: Vec<Word>,
    /// The operation's fixed words already in RESP (a lane's cached operation,
    /// `crate::lane_keys`): [`write_ops`] copies them instead of encoding them again.
    pub(crate) packed: Option<Arc<Packed>>,
}

impl PartialEq for Op {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.keys == other.keys && self.args == other.args
    }
}

impl Eq for Op {}

/// The words an operation of a lane sends on every call, in RESP: everything but its first
/// argument (the lease member) and the arguments after `tail_words` more (the estimate).
///
/// Invariant: the bytes are exactly [`write_bulk`] of the words they stand for, with the
/// single call's header for `words` words in all (built only by [`Packed::new`]; the lane's
/// property test compares the bytes sent with redis-rs's).
#[derive(Debug)]
pub struct Packed {
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

/// What an [`Op`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Acquire,
    Release,
}

impl OpKind {
    /// The kind's letter in `ts_batch_v4`'s arguments.
    pub fn letter(self) -> &'static str {
        match self {
            OpKind::Acquire => "a",
            OpKind::Release => "r",
        }
    }

    /// The single-call function of this kind.
    pub fn function(self) -> &'static str {
        match self {
            OpKind::Acquire => "ts_acquire_v4",
            OpKind::Release => "ts_release_v4",
        }
    }
}

impl Op {
    /// Fills `cmd` (an `FCALL`) with this operation as a single call.
    pub fn single_command(&self, cmd: &mut Cmd) {
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
/// one): a lone operation as its single call (`ts_acquire_v4` / `ts_release_v4`: the same
/// decision and answer as a batch of one, at about four fifths of Redis's instructions per
/// pair, docs/performance.md, session 10), more as one `ts_batch_v4` ([`batch_command`]).
/// Decode the answer with `store::ops_answers`.
pub fn ops_command<'a>(cmd: &mut Cmd, ops: impl Iterator<Item = &'a Op> + Clone) {
    let mut rest = ops.clone();
    match (rest.next(), rest.next()) {
        (Some(op), None) => op.single_command(cmd),
        _ => batch_command(cmd, ops),
    }
}

/// Fills `cmd` (an `FCALL`) with one `ts_batch_v4` of `ops` (all of one workspace: one slot):
/// every operation's keys in order, then per operation its kind, key count, argument count
/// and arguments.
pub fn batch_command<'a>(cmd: &mut Cmd, ops: impl Iterator<Item = &'a Op> + Clone) {
    let nkeys: usize = ops.clone().map(|op| op.keys.len()).sum();
    cmd.arg("ts_batch_v4").arg(nkeys);
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
pub fn write_ops<'a>(out: &mut Vec<u8>, ops: impl Iterator<Item = &'a Op> + Clone) {
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
    write_bulk(out, b"ts_batch_v4");
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

/// Fills `cmd` (an `FCALL`) with `ts_acquire_v4` for `spec` (see [`acquire_op`]).
pub fn acquire_command(
    cmd: &mut Cmd,
    spec: &LaneSpec,
    member: &str,
    liveness_ms: Millis,
    turn_window_ms: Option<Millis>,
) {
    acquire_op(spec, member, liveness_ms, turn_window_ms).single_command(cmd);
}

/// The acquire of `spec` registering `member`. Fair turns: every scope but the principal's
/// own (the first) with a concurrency, when `turn_window_ms` is set.
pub fn acquire_op(
    spec: &LaneSpec,
    member: &str,
    liveness_ms: Millis,
    turn_window_ms: Option<Millis>,
) -> Op {
    acquire_op_in(
        &WorkspaceKeys::new(&spec.workspace),
        spec,
        member,
        liveness_ms,
        turn_window_ms,
    )
}

/// [`acquire_op`] with the workspace's keys already at hand (`keys` must be `spec`'s).
pub fn acquire_op_in(
    keys: &WorkspaceKeys,
    spec: &LaneSpec,
    member: &str,
    liveness_ms: Millis,
    turn_window_ms: Option<Millis>,
) -> Op {
    let fair = |i: usize| {
        turn_window_ms.is_some()
            && i > 0
            && spec.scopes.get(i).is_some_and(|s| s.concurrency.is_some())
    };
    let flags: Vec<ScopeFlags> = spec
        .scopes
        .iter()
        .enumerate()
        .map(|(i, s)| ScopeFlags::of(s, fair(i)))
        .collect();
    let nfair = (0..spec.scopes.len()).filter(|&i| fair(i)).count();
    let budgets = spec.scopes.iter().any(ScopeLimits::has_budget);
    let mut key_list: Vec<String> = vec![keys.pause(&spec.provider)];
    for scope in &spec.scopes {
        if scope.concurrency.is_some() {
            key_list.push(keys.leases(&scope.name));
        }
        if scope.requests.is_some() || scope.tokens.is_some() {
            key_list.push(keys.buckets(&scope.name));
        }
    }
    if budgets {
        key_list.push(keys.budget(&spec.budget_id));
    }
    for (i, scope) in spec.scopes.iter().enumerate() {
        if fair(i) {
            key_list.push(keys.waiting(&scope.name));
        }
    }
    if spec.breaker.is_some() {
        key_list.push(keys.breaker(&spec.provider));
        key_list.push(keys.probes(&spec.provider));
    }
    let mut args = vec![
        member.to_owned(),
        lane_shape(
            spec,
            &flags,
            liveness_ms,
            turn_window_ms.filter(|_| nfair > 0),
        ),
    ];
    if nfair > 0 {
        args.push(
            spec.scopes
                .first()
                .map_or(String::new(), |s| s.name.0.clone()),
        );
    }
    let buckets = spec
        .scopes
        .iter()
        .any(|s| s.requests.is_some() || s.tokens.is_some());
    if budgets || buckets {
        args.push(signed(spec.tokens).to_string());
        args.push(signed(spec.micro_usd).to_string());
    }
    Op {
        kind: OpKind::Acquire,
        keys: words(key_list).into(),
        args: words(args),
        packed: None,
    }
}

fn words(texts: Vec<String>) -> Vec<Word> {
    texts.into_iter().map(Word::from).collect()
}

/// The shape of `ts_acquire_v4`: what stays the same from one admission of the lane to the
/// next (the script decodes each distinct shape once), e.g. `10000;50;-;1,4096;65,4096;65,4096`.
pub fn lane_shape(
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

/// Fills `cmd` (an `FCALL`) with `ts_release_v4` for `call` (see [`release_op`]).
pub fn release_command(cmd: &mut Cmd, call: &ReleaseCall) {
    release_op(call).single_command(cmd);
}

/// The release of `call`.
pub fn release_op(call: &ReleaseCall) -> Op {
    let settle = !call.budget_scopes.is_empty()
        && (call.actual_tokens.is_some() || call.actual_micro.is_some());
    let mut keys = call.lease_keys.clone();
    if call.pause_ms > 0 {
        keys.push(call.pause_key.clone());
    }
    if settle {
        keys.push(call.budget_key.clone());
    }
    if let Some(b) = &call.breaker {
        keys.push(b.key.clone());
        keys.push(b.probes.clone());
    }
    let mut args = vec![call.member.clone()];
    if call.pause_ms == 0 && call.breaker.is_none() && !settle {
        // A plain release: every key is a lease zset.
        return Op {
            kind: OpKind::Release,
            keys: words(keys).into(),
            args: words(args),
            packed: None,
        };
    }
    args.push(call.lease_keys.len().to_string());
    args.push(call.pause_ms.to_string());
    match &call.breaker {
        Some(b) => {
            args.push(call.outcome.as_str().to_owned());
            args.push(b.failure_threshold.to_string());
        }
        None => args.push("-".to_owned()),
    }
    if settle {
        args.push(call.charged_tokens.to_string());
        args.push(signed(call.actual_tokens).to_string());
        args.push(call.charged_micro.to_string());
        args.push(signed(call.actual_micro).to_string());
        args.extend(call.budget_scopes.iter().cloned());
    }
    Op {
        kind: OpKind::Release,
        keys: words(keys).into(),
        args: words(args),
        packed: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::Outcome;
    use crate::keys::ScopeName;
    use crate::spec::BucketSpec;

    fn words(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<cursor>".into(),
            })
            .collect()
    }

    fn scope(name: &str, concurrency: u32) -> ScopeLimits {
        ScopeLimits {
            name: ScopeName(name.into()),
            concurrency: Some(concurrency),
            requests: None,
            tokens: None,
            max_attempts: None,
            max_micro_usd: None,
            max_tokens: None,
        }
    }

    fn lane(scopes: Vec<ScopeLimits>) -> LaneSpec {
        LaneSpec {
            workspace: "ws".into(),
            provider: "openai".into(),
            budget_id: "b".into(),
            scopes,
            tokens: None,
            micro_usd: None,
            breaker: None,
        }
    }

    /// The concurrency-only three-scope lane with fair turns (the default): what
    /// `bench/lua-cost.sh conc` sends, key for key.
    #[test]
    fn a_concurrency_only_lane_sends_its_lease_and_wait_keys_only() {
        let spec = lane(vec![
            scope("uaaaa", 4096),
            scope("w", 4096),
            scope("pbbbb", 4096),
        ]);
        let keys = WorkspaceKeys::new("ws");
        let mut cmd = redis::cmd("FCALL");
        acquire_command(&mut cmd, &spec, "r-0", 10_000, Some(50));
        let expected: Vec<String> = [
            "FCALL".to_owned(),
            "ts_acquire_v4".into(),
            "6".into(),
            keys.pause("openai"),
            keys.leases(&ScopeName("uaaaa".into())),
            keys.leases(&ScopeName("w".into())),
            keys.leases(&ScopeName("pbbbb".into())),
            keys.waiting(&ScopeName("w".into())),
            keys.waiting(&ScopeName("pbbbb".into())),
        ]
        .into_iter()
        .chain(["r-0", "10000;50;-;1,4096;65,4096;65,4096", "uaaaa"].map(str::to_owned))
        .collect();
        assert_eq!(words(&cmd), expected);

        let mut cmd = redis::cmd("FCALL");
        acquire_command(&mut cmd, &spec, "r-0", 10_000, None);
        assert_eq!(
            words(&cmd)[2..].join(" "),
            format!(
                "4 {} {} {} {} r-0 10000;-;-;1,4096;1,4096;1,4096",
                keys.pause("openai"),
                keys.leases(&ScopeName("uaaaa".into())),
                keys.leases(&ScopeName("w".into())),
                keys.leases(&ScopeName("pbbbb".into())),
            ),
            "no wait keys, no principal, no window without turns"
        );
    }

    #[test]
    fn buckets_budgets_and_breaker_add_their_keys_and_values_in_order() {
        let mut provider = scope("pbbbb", 4);
        provider.requests = Some(BucketSpec {
            rate: 10,
            capacity: 600,
        });
        provider.tokens = Some(BucketSpec {
            rate: 1000,
            capacity: 1000,
        });
        let mut principal = scope("uaaaa", 8);
        principal.max_attempts = Some(3);
        principal.max_tokens = Some(500);
        let mut spec = lane(vec![principal, provider]);
        spec.tokens = Some(100);
        spec.breaker = Some(crate::spec::BreakerSpec {
            failure_threshold: 5,
            open_ms: 30_000,
            half_open_max_calls: 1,
        });
        let keys = WorkspaceKeys::new("ws");
        let mut cmd = redis::cmd("FCALL");
        acquire_command(&mut cmd, &spec, "m", 10_000, Some(50));
        let w = words(&cmd);
        let p = ScopeName("pbbbb".into());
        assert_eq!(w[2], "8");
        assert_eq!(
            w[3..11],
            [
                keys.pause("openai"),
                keys.leases(&ScopeName("uaaaa".into())),
                keys.leases(&p),
                keys.buckets(&p),
                keys.budget("b"),
                keys.waiting(&p),
                keys.breaker("openai"),
                keys.probes("openai"),
            ]
        );
        // uaaaa: concurrency + attempts + token budget = 1 + 8 + 32; pbbbb: 1 + 2 + 4 + 64.
        assert_eq!(
            w[11..].join(" "),
            "m 10000;50;5,30000,1;41,8,uaaaa,3,500;71,4,10,600,1000,1000 uaaaa 100 -1"
        );
    }

    #[test]
    fn a_plain_release_sends_its_lease_keys_and_the_member_only() {
        let call = ReleaseCall {
            member: "m".into(),
            lease_keys: vec!["a".into(), "b".into()],
            pause_key: "pause".into(),
            budget_key: "bud".into(),
            budget_scopes: vec!["uaaaa".into()],
            pause_ms: 0,
            charged_tokens: 0,
            actual_tokens: None,
            charged_micro: 0,
            actual_micro: None,
            breaker: None,
            outcome: Outcome::None,
        };
        let mut cmd = redis::cmd("FCALL");
        release_command(&mut cmd, &call);
        assert_eq!(words(&cmd).join(" "), "FCALL ts_release_v4 2 a b m");

        let settled = ReleaseCall {
            pause_ms: 1500,
            charged_tokens: 100,
            actual_tokens: Some(90),
            ..call
        };
        let mut cmd = redis::cmd("FCALL");
        release_command(&mut cmd, &settled);
        assert_eq!(
            words(&cmd).join(" "),
            "FCALL ts_release_v4 4 a b pause bud m 2 1500 - 100 90 0 -1 uaaaa"
        );
    }

    /// A batch sends every operation's keys first, in order, then per operation its kind, key
    /// count, argument count and arguments: each operation exactly as its single call.
    #[test]
    fn a_batch_sends_each_operation_as_its_single_call() {
        let spec = lane(vec![scope("uaaaa", 4), scope("w", 8)]);
        let acquire = acquire_op(&spec, "r-1", 10_000, None);
        let release = release_op(&ReleaseCall {
            member: "r-0".into(),
            lease_keys: vec!["a".into(), "b".into()],
            pause_key: "pause".into(),
            budget_key: "bud".into(),
            budget_scopes: Vec::new(),
            pause_ms: 0,
            charged_tokens: 0,
            actual_tokens: None,
            charged_micro: 0,
            actual_micro: None,
            breaker: None,
            outcome: Outcome::None,
        });
        let mut single = redis::cmd("FCALL");
        acquire.single_command(&mut single);
        assert_eq!(words(&single)[1], "ts_acquire_v4");
        let mut cmd = redis::cmd("FCALL");
        batch_command(&mut cmd, [&acquire, &release].into_iter());
        let keys = WorkspaceKeys::new("ws");
        let expected = format!(
            "FCALL ts_batch_v4 5 {} {} {} a b a 3 2 r-1 10000;-;-;1,4;1,8 r 2 1 r-0",
            keys.pause("openai"),
            keys.leases(&ScopeName("uaaaa".into())),
            keys.leases(&ScopeName("w".into())),
        );
        assert_eq!(words(&cmd).join(" "), expected);
    }
}
