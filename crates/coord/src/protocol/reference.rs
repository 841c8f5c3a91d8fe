//! The reference encoding of an acquire and a release: every key and argument formatted from
//! the spec ([`acquire_op_in`]) or from a [`ReleaseCall`] ([`release_op`]). Not used in
//! production (there a lane's cached pieces, `crate::lane_keys::LaneKeys`, make the calls);
//! compiled for tests and the `testing` feature only, as the oracle those pieces are tested
//! against, byte for byte, and as the plain way the batch conformance test builds operations.
//!
//! Invariant: the words are in exactly the order the Lua header of each function documents
//! (the tests below pin them word for word).

use turnstile_admission::Millis;

use super::encode::{lane_shape, signed};
use super::ops::{Op, OpKind, ScopeFlags, Word};
use crate::breaker::{BreakerKeys, Outcome};
use crate::keys::WorkspaceKeys;
use crate::spec::{LaneSpec, ScopeLimits};

/// A release, word by word: the lease, its scopes' zsets, budget corrections and an optional
/// pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseCall {
    /// The lease member.
    pub member: String,
    /// The lease zsets the acquire wrote.
    pub lease_keys: Vec<String>,
    /// The provider's pause key.
    pub pause_key: String,
    /// The invocation's budget key.
    pub budget_key: String,
    /// Scope names whose budget lines were charged.
    pub budget_scopes: Vec<String>,
    /// The pause this release sets (0: none).
    pub pause_ms: Millis,
    /// The tokens the acquire charged.
    pub charged_tokens: u64,
    /// The tokens the call used, when known.
    pub actual_tokens: Option<u64>,
    /// The micro-dollars the acquire charged.
    pub charged_micro: u64,
    /// The micro-dollars the call cost, when known.
    pub actual_micro: Option<u64>,
    /// The lane's shared breaker, if it has one, and what this call reports to it.
    pub breaker: Option<BreakerKeys>,
    /// What this release reports to the breaker.
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
    use redis::Cmd;

    use super::*;
    use crate::breaker::Outcome;
    use crate::keys::ScopeName;
    use crate::protocol::encode::batch_command;
    use crate::spec::BucketSpec;

    /// Fills `cmd` (an `FCALL`) with `ts_acquire_v5` for `spec` (see [`acquire_op`]).
    fn acquire_command(
        cmd: &mut Cmd,
        spec: &LaneSpec,
        member: &str,
        liveness_ms: Millis,
        turn_window_ms: Option<Millis>,
    ) {
        acquire_op(spec, member, liveness_ms, turn_window_ms).single_command(cmd);
    }

    /// Fills `cmd` (an `FCALL`) with `ts_release_v5` for `call` (see [`release_op`]).
    fn release_command(cmd: &mut Cmd, call: &ReleaseCall) {
        release_op(call).single_command(cmd);
    }

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
            "ts_acquire_v5".into(),
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

    /// A plain release of `member` from lease zsets `a` and `b`, with pause key `pause` and
    /// budget key `bud`, whose acquire charged the budget lines of `budget_scopes`.
    fn plain_release(member: &str, budget_scopes: Vec<String>) -> ReleaseCall {
        ReleaseCall {
            member: member.into(),
            lease_keys: vec!["a".into(), "b".into()],
            pause_key: "pause".into(),
            budget_key: "bud".into(),
            budget_scopes,
            pause_ms: 0,
            charged_tokens: 0,
            actual_tokens: None,
            charged_micro: 0,
            actual_micro: None,
            breaker: None,
            outcome: Outcome::None,
        }
    }

    #[test]
    fn a_plain_release_sends_its_lease_keys_and_the_member_only() {
        let call = plain_release("m", vec!["uaaaa".into()]);
        let mut cmd = redis::cmd("FCALL");
        release_command(&mut cmd, &call);
        assert_eq!(words(&cmd).join(" "), "FCALL ts_release_v5 2 a b m");

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
            "FCALL ts_release_v5 4 a b pause bud m 2 1500 - 100 90 0 -1 uaaaa"
        );
    }

    /// A batch sends every operation's keys first, in order, then per operation its kind, key
    /// count, argument count and arguments: each operation exactly as its single call.
    #[test]
    fn a_batch_sends_each_operation_as_its_single_call() {
        let spec = lane(vec![scope("uaaaa", 4), scope("w", 8)]);
        let acquire = acquire_op(&spec, "r-1", 10_000, None);
        let release = release_op(&plain_release("r-0", Vec::new()));
        let mut single = redis::cmd("FCALL");
        acquire.single_command(&mut single);
        assert_eq!(words(&single)[1], "ts_acquire_v5");
        let mut cmd = redis::cmd("FCALL");
        batch_command(&mut cmd, [&acquire, &release].into_iter());
        let keys = WorkspaceKeys::new("ws");
        let expected = format!(
            "FCALL ts_batch_v5 5 {} {} {} a b a 3 2 r-1 10000;-;-;1,4;1,8 r 2 1 r-0",
            keys.pause("openai"),
            keys.leases(&ScopeName("uaaaa".into())),
            keys.leases(&ScopeName("w".into())),
        );
        assert_eq!(words(&cmd).join(" "), expected);
    }
}
