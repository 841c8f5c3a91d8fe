//! A lane's key names and argument pieces, built once and reused by every acquire and release
//! of the lane ([`LaneKeys`]), and a replica's bounded memo of them ([`LaneMemo`]).
//!
//! Every acquire of a lane names the same keys and sends the same shape string (only the lease
//! member, the invocation's budget key and the estimate change), and its release names the same
//! lease zsets: formatting them afresh for every call cost about a fifth of the replica's own
//! instructions per pair on the Redis path (docs/performance.md, session 12). A lane's pieces
//! are shared strings ([`Word`]): an operation copies pointers, not text, and a plain acquire's
//! or release's key list is one shared slice.
//!
//! # Invariants
//!
//! - These pieces are the one production encoder of an acquire and a release. What they make
//!   is exactly what the reference encoding (`protocol::reference`: `acquire_op_in`,
//!   `release_op`, compiled for tests only) makes for the same spec, member and release:
//!   the same keys and arguments, and the same bytes on the wire (tested below over random
//!   lanes and limits: a lane's connection writes, from the pieces and their pre-encoded RESP,
//!   exactly what redis-rs packs for the reference operations).
//! - The memo answers an entry only for a spec equal to the one it was built from in
//!   everything the pieces depend on (workspace, provider, every scope's name and limits, the
//!   breaker; the liveness and the turn window are the coordinator's and never change): a
//!   changed profile never meets a stale entry, it builds a new one.
//! - Bounded: at most [`LANES_KEPT`] lanes; past it the memo starts over (a held lease keeps its
//!   lane's pieces through its own `Arc`). Cost: one hash of the lane's IDs and limits and one
//!   comparison per acquire, under the memo's lock.
//! - Key names hold only hashes (they come from [`WorkspaceKeys`]); the IDs an entry keeps to
//!   recognise its lane stay in this replica's memory, never in a key, a log or a metric.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use turnstile_admission::Millis;

use crate::breaker::{BreakerKeys, Outcome};
use crate::keys::WorkspaceKeys;
use crate::protocol::{lane_shape, signed, Op, OpKind, Packed, ScopeFlags, Word};
use crate::spec::{BreakerSpec, LaneSpec, ScopeLimits};

/// How many lanes a replica's memo keeps; past it the memo starts over.
pub const LANES_KEPT: usize = 4096;

/// One lane's key names and argument pieces, for a coordinator's liveness and turn window.
#[derive(Debug)]
pub struct LaneKeys {
    /// What the pieces were built from (checked on every lookup).
    workspace_id: Box<str>,
    provider_id: Box<str>,
    scopes: Vec<ScopeLimits>,
    breaker_spec: Option<BreakerSpec>,
    /// The workspace's keys (its prefix is the batcher's slot).
    workspace: WorkspaceKeys,
    /// `ts_acquire_v5`'s keys; with `budget_at`, the budget key there is the building spec's
    /// and each acquire puts its own invocation's key in its place.
    acquire_keys: Arc<[Word]>,
    budget_at: Option<usize>,
    /// The shape argument ([`lane_shape`]).
    shape: Word,
    /// The principal's scope name, sent when the lane takes part in fair turns.
    turn_principal: Option<Word>,
    /// Whether an acquire sends the estimate (tokens, micro-dollars).
    estimates: bool,
    /// An acquire's fixed bytes (a lane that charges no budget: its keys are all fixed).
    acquire_packed: Option<Arc<Packed>>,
    /// A plain release's fixed bytes (a probe lease's release is never plain: its lane has a
    /// breaker).
    release_packed: Arc<Packed>,
    /// The lease zsets an acquire writes (scopes with a concurrency), and the same with the
    /// probe zset (a probe lease's).
    leases: Arc<[Word]>,
    leases_and_probe: Arc<[Word]>,
    pause: Word,
    /// Scope names whose budget lines an acquire charges.
    budget_scopes: Vec<Word>,
    breaker: Option<LaneBreaker>,
}

/// The lane's shared breaker: its keys (as the degraded bookkeeping keeps them) and its words.
#[derive(Debug)]
struct LaneBreaker {
    keys: BreakerKeys,
    key: Word,
    probes: Word,
    threshold: Word,
}

/// What one release sends besides its lane's pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseOf {
    pub member: Word,
    /// The lease holds the breaker's half-open probe.
    pub probe: bool,
    /// The invocation's budget key (lanes that charge budgets).
    pub budget_key: Option<Word>,
    pub pause_ms: Millis,
    pub charged_tokens: u64,
    pub actual_tokens: Option<u64>,
    pub charged_micro: u64,
    pub actual_micro: Option<u64>,
    pub outcome: Outcome,
}

fn word(text: String) -> Word {
    Word::from(text)
}

impl LaneKeys {
    /// The pieces of `spec`'s lane for a coordinator with `liveness_ms` and `turn_window_ms`.
    pub fn new(spec: &LaneSpec, liveness_ms: Millis, turn_window_ms: Option<Millis>) -> Self {
        let keys = WorkspaceKeys::new(&spec.workspace);
        // Fair turns: every scope but the principal's own (the first) with a concurrency.
        let fair = |i: usize, scope: &ScopeLimits| {
            turn_window_ms.is_some() && i > 0 && scope.concurrency.is_some()
        };
        let flags: Vec<ScopeFlags> = spec
            .scopes
            .iter()
            .enumerate()
            .map(|(i, s)| ScopeFlags::of(s, fair(i, s)))
            .collect();
        let nfair = spec
            .scopes
            .iter()
            .enumerate()
            .filter(|&(i, s)| fair(i, s))
            .count();
        let budgets = spec.scopes.iter().any(ScopeLimits::has_budget);
        let buckets = spec
            .scopes
            .iter()
            .any(|s| s.requests.is_some() || s.tokens.is_some());

        let pause = word(keys.pause(&spec.provider));
        let mut acquire_keys = vec![pause.clone()];
        let mut leases = Vec::new();
        for scope in &spec.scopes {
            if scope.concurrency.is_some() {
                let lease = word(keys.leases(&scope.name));
                leases.push(lease.clone());
                acquire_keys.push(lease);
            }
            if scope.requests.is_some() || scope.tokens.is_some() {
                acquire_keys.push(word(keys.buckets(&scope.name)));
            }
        }
        let budget_at = budgets.then(|| {
            acquire_keys.push(word(keys.budget(&spec.budget_id)));
            acquire_keys.len() - 1
        });
        for (i, scope) in spec.scopes.iter().enumerate() {
            if fair(i, scope) {
                acquire_keys.push(word(keys.waiting(&scope.name)));
            }
        }
        let breaker = spec.breaker.as_ref().map(|b| {
            let breaker = BreakerKeys::new(&keys, &spec.provider, b);
            LaneBreaker {
                key: word(breaker.key.clone()),
                probes: word(breaker.probes.clone()),
                threshold: word(b.failure_threshold.to_string()),
                keys: breaker,
            }
        });
        if let Some(b) = &breaker {
            acquire_keys.push(b.key.clone());
            acquire_keys.push(b.probes.clone());
        }
        let mut leases_and_probe = leases.clone();
        leases_and_probe.push(word(keys.probes(&spec.provider)));
        let shape = word(lane_shape(
            spec,
            &flags,
            liveness_ms,
            turn_window_ms.filter(|_| nfair > 0),
        ));
        let turn_principal = (nfair > 0).then(|| {
            word(
                spec.scopes
                    .first()
                    .map_or(String::new(), |s| s.name.0.clone()),
            )
        });
        let estimates = budgets || buckets;
        // The acquire's arguments: the member, the shape, the principal with turns, the
        // estimate (two) with buckets or budgets.
        let fixed: Vec<Word> = std::iter::once(shape.clone())
            .chain(turn_principal.clone())
            .collect();
        let acquire_packed = budget_at.is_none().then(|| {
            let args = 1 + fixed.len() + if estimates { 2 } else { 0 };
            Arc::new(Packed::new(OpKind::Acquire, &acquire_keys, args, &fixed))
        });
        let release_packed = Arc::new(Packed::new(OpKind::Release, &leases, 1, &[]));
        LaneKeys {
            workspace_id: spec.workspace.as_str().into(),
            provider_id: spec.provider.as_str().into(),
            scopes: spec.scopes.clone(),
            breaker_spec: spec.breaker,
            acquire_keys: acquire_keys.into(),
            budget_at,
            shape,
            turn_principal,
            estimates,
            acquire_packed,
            release_packed,
            leases: leases.into(),
            leases_and_probe: leases_and_probe.into(),
            pause,
            budget_scopes: spec
                .scopes
                .iter()
                .filter(|s| s.has_budget())
                .map(|s| word(s.name.0.clone()))
                .collect(),
            breaker,
            workspace: keys,
        }
    }

    /// Whether these are the pieces of `spec`'s lane.
    pub fn matches(&self, spec: &LaneSpec) -> bool {
        *self.workspace_id == *spec.workspace
            && *self.provider_id == *spec.provider
            && self.scopes == spec.scopes
            && self.breaker_spec == spec.breaker
    }

    /// The lane's workspace keys.
    pub fn workspace(&self) -> &WorkspaceKeys {
        &self.workspace
    }

    /// The invocation `budget_id`'s budget key, when the lane charges budgets.
    pub fn budget_key(&self, budget_id: &str) -> Option<Word> {
        self.budget_at
            .map(|_| word(self.workspace.budget(budget_id)))
    }

    /// The acquire registering `member` for the invocation `budget_id` with the estimate
    /// (`protocol::acquire_op_in` for the lane's spec with these), and the invocation's
    /// budget key ([`budget_key`](Self::budget_key): the lease's release settles it).
    pub fn acquire(
        &self,
        member: &Word,
        budget_id: &str,
        tokens: Option<u64>,
        micro_usd: Option<u64>,
    ) -> (Op, Option<Word>) {
        let budget_key = self.budget_key(budget_id);
        let (keys, packed) = match (self.budget_at, &budget_key) {
            (Some(at), Some(budget)) => {
                let mut keys = self.acquire_keys.to_vec();
                if let Some(slot) = keys.get_mut(at) {
                    *slot = budget.clone();
                }
                (keys.into(), None)
            }
            _ => (self.acquire_keys.clone(), self.acquire_packed.clone()),
        };
        let mut args = Vec::with_capacity(5);
        args.push(member.clone());
        args.push(self.shape.clone());
        args.extend(self.turn_principal.clone());
        if self.estimates {
            args.push(word(signed(tokens).to_string()));
            args.push(word(signed(micro_usd).to_string()));
        }
        let op = Op {
            kind: OpKind::Acquire,
            keys,
            args,
            packed,
        };
        (op, budget_key)
    }

    /// The lease zsets an acquire of this lane wrote (with the probe zset for a probe lease).
    pub fn lease_keys(&self, probe: bool) -> &Arc<[Word]> {
        if probe {
            &self.leases_and_probe
        } else {
            &self.leases
        }
    }

    /// The provider's pause key.
    pub fn pause_key(&self) -> &Word {
        &self.pause
    }

    /// The lane's shared breaker.
    pub fn breaker(&self) -> Option<&BreakerKeys> {
        self.breaker.as_ref().map(|b| &b.keys)
    }

    /// The release `of` a lease of this lane: `protocol::release_op` for the `ReleaseCall`
    /// the lease's record made.
    pub fn release(&self, of: &ReleaseOf) -> Op {
        let lease_keys = self.lease_keys(of.probe);
        let settle = !self.budget_scopes.is_empty()
            && (of.actual_tokens.is_some() || of.actual_micro.is_some());
        if of.pause_ms == 0 && self.breaker.is_none() && !settle {
            // A plain release: every key is a lease zset.
            return Op {
                kind: OpKind::Release,
                keys: lease_keys.clone(),
                args: vec![of.member.clone()],
                packed: (!of.probe).then(|| self.release_packed.clone()),
            };
        }
        let mut keys = lease_keys.to_vec();
        if of.pause_ms > 0 {
            keys.push(self.pause.clone());
        }
        if settle {
            // A lease of a lane that charges budgets always has its invocation's key
            // ([`budget_key`](Self::budget_key)).
            keys.push(of.budget_key.clone().unwrap_or_else(|| Word::from("")));
        }
        if let Some(b) = &self.breaker {
            keys.push(b.key.clone());
            keys.push(b.probes.clone());
        }
        let mut args = vec![
            of.member.clone(),
            word(lease_keys.len().to_string()),
            word(of.pause_ms.to_string()),
        ];
        match &self.breaker {
            Some(b) => {
                args.push(Word::from(of.outcome.as_str()));
                args.push(b.threshold.clone());
            }
            None => args.push(Word::from("-")),
        }
        if settle {
            args.push(word(of.charged_tokens.to_string()));
            args.push(word(signed(of.actual_tokens).to_string()));
            args.push(word(of.charged_micro.to_string()));
            args.push(word(signed(of.actual_micro).to_string()));
            args.extend(self.budget_scopes.iter().cloned());
        }
        Op {
            kind: OpKind::Release,
            keys: keys.into(),
            args,
            packed: None,
        }
    }
}

/// A replica's lanes' pieces, at most [`LANES_KEPT`], for one liveness and turn window.
#[derive(Debug)]
pub struct LaneMemo {
    lanes: HashMap<u64, Arc<LaneKeys>, foldhash::fast::RandomState>,
    hasher: foldhash::fast::RandomState,
    liveness_ms: Millis,
    turn_window_ms: Option<Millis>,
}

impl LaneMemo {
    pub fn new(liveness_ms: Millis, turn_window_ms: Option<Millis>) -> Self {
        LaneMemo {
            lanes: HashMap::default(),
            hasher: foldhash::fast::RandomState::default(),
            liveness_ms,
            turn_window_ms,
        }
    }

    /// How many lanes are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    /// The pieces of `spec`'s lane: remembered, or built (and remembered).
    pub fn get(&mut self, spec: &LaneSpec) -> Arc<LaneKeys> {
        let id =
            self.hasher
                .hash_one((&spec.workspace, &spec.provider, &spec.scopes, &spec.breaker));
        if let Some(lane) = self.lanes.get(&id) {
            if lane.matches(spec) {
                return lane.clone();
            }
        }
        let lane = Arc::new(LaneKeys::new(spec, self.liveness_ms, self.turn_window_ms));
        if self.lanes.len() >= LANES_KEPT {
            self.lanes.clear();
        }
        self.lanes.insert(id, lane.clone());
        lane
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::keys::ScopeName;
    use crate::protocol::{acquire_op_in, ops_command, release_op, write_ops, ReleaseCall};
    use crate::spec::BucketSpec;

    /// The bytes redis-rs sends for the reference encoding's operations (one call).
    fn reference_bytes(ops: &[Op]) -> Vec<u8> {
        let mut cmd = redis::cmd("FCALL");
        ops_command(&mut cmd, ops.iter());
        cmd.get_packed_command()
    }

    /// The bytes a lane's own connection sends for `ops` (one call).
    fn sent_bytes(ops: &[Op]) -> Vec<u8> {
        let mut out = Vec::new();
        write_ops(&mut out, ops.iter());
        out
    }

    /// The release the lease record made before lanes had their pieces (`held_for` then
    /// `ReleaseCall`), for a lease of `spec` acquired with `member`.
    fn reference_release(spec: &LaneSpec, of: &ReleaseOf) -> Op {
        let plain = ReleaseCall::plain(spec, of.member.as_ref());
        let mut lease_keys = plain.lease_keys.clone();
        if of.probe {
            let keys = WorkspaceKeys::new(&spec.workspace);
            lease_keys.push(keys.probes(&spec.provider));
        }
        release_op(&ReleaseCall {
            lease_keys,
            pause_ms: of.pause_ms,
            charged_tokens: of.charged_tokens,
            actual_tokens: of.actual_tokens,
            charged_micro: of.charged_micro,
            actual_micro: of.actual_micro,
            outcome: of.outcome,
            ..plain
        })
    }

    fn bucket() -> impl Strategy<Value = Option<BucketSpec>> {
        proptest::option::weighted(
            0.4,
            (0u64..100_000, 1u64..100_000)
                .prop_map(|(rate, capacity)| BucketSpec { rate, capacity }),
        )
    }

    fn budget() -> impl Strategy<Value = Option<u64>> {
        proptest::option::weighted(0.25, 0u64..10_000_000)
    }

    fn scope(name: ScopeName) -> impl Strategy<Value = ScopeLimits> {
        (
            proptest::option::weighted(0.8, 1u32..10_000),
            bucket(),
            bucket(),
            budget(),
            budget(),
            budget(),
        )
            .prop_map(
                move |(concurrency, requests, tokens, max_attempts, max_micro_usd, max_tokens)| {
                    ScopeLimits {
                        name: name.clone(),
                        concurrency,
                        requests,
                        tokens,
                        max_attempts,
                        max_micro_usd,
                        max_tokens,
                    }
                },
            )
    }

    /// A lane: the principal, workspace and provider scopes (or the first one or two of
    /// them), any limits, breaker and estimate.
    fn lane() -> impl Strategy<Value = LaneSpec> {
        let ids = (
            prop::sample::select(vec!["ws", "acme-corp", "équipe"]),
            prop::sample::select(vec!["openai", "anthropic"]),
            prop::sample::select(vec!["alice", "bob"]),
            prop::sample::select(vec!["", "run-1", "b"]),
        );
        (ids, 1usize..=3).prop_flat_map(|((workspace, provider, principal, budget_id), n)| {
            let scopes = (
                scope(ScopeName::principal(principal)),
                scope(ScopeName::workspace()),
                scope(ScopeName::provider(provider)),
            )
                .prop_map(move |(u, w, p)| {
                    let mut scopes = vec![u, w, p];
                    scopes.truncate(n);
                    scopes
                });
            let breaker = proptest::option::weighted(
                0.4,
                (1u32..10, 1u64..60_000, 1u32..4).prop_map(|(f, o, h)| BreakerSpec {
                    failure_threshold: f,
                    open_ms: o,
                    half_open_max_calls: h,
                }),
            );
            (scopes, breaker, budget(), budget()).prop_map(
                move |(scopes, breaker, tokens, micro_usd)| LaneSpec {
                    workspace: workspace.to_owned(),
                    provider: provider.to_owned(),
                    budget_id: budget_id.to_owned(),
                    scopes,
                    tokens,
                    micro_usd,
                    breaker,
                },
            )
        })
    }

    fn release() -> impl Strategy<Value = (bool, Millis, Option<u64>, Option<u64>, Outcome)> {
        (
            any::<bool>(),
            prop_oneof![Just(0), 1u64..100_000],
            budget(),
            budget(),
            prop::sample::select(vec![Outcome::None, Outcome::Success, Outcome::Failure]),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// The cached path sends byte for byte what the reference encoding sends through
        /// redis-rs: every acquire and release of random lanes and limits (alone and batched),
        /// a second invocation of the same lane (another budget ID and estimate) served by the
        /// same entry, and a changed profile never served by the old one.
        #[test]
        fn a_lanes_pieces_send_what_the_reference_encoding_sends(
            spec in lane(),
            liveness_ms in prop::sample::select(vec![1u64, 10_000, 30_000]),
            turn_window_ms in proptest::option::of(1u64..1_000),
            (probe, pause_ms, actual_tokens, actual_micro, outcome) in release(),
            second_budget in prop::sample::select(vec!["", "run-2"]),
            second_tokens in budget(),
            changed in 1u32..10_000,
        ) {
            let mut memo = LaneMemo::new(liveness_ms, turn_window_ms);
            let lane = memo.get(&spec);
            let member = Word::from("0123456789abcdef-7");
            let (acquire, budget_key) =
                lane.acquire(&member, &spec.budget_id, spec.tokens, spec.micro_usd);
            let keys = WorkspaceKeys::new(&spec.workspace);
            let reference = acquire_op_in(&keys, &spec, &member, liveness_ms, turn_window_ms);
            prop_assert_eq!(&acquire, &reference);

            let of = ReleaseOf {
                member: member.clone(),
                probe: probe && spec.breaker.is_some(),
                budget_key,
                pause_ms,
                charged_tokens: spec.tokens.unwrap_or(0),
                actual_tokens,
                charged_micro: spec.micro_usd.unwrap_or(0),
                actual_micro,
                outcome,
            };
            let release = lane.release(&of);
            let reference_release = reference_release(&spec, &of);
            prop_assert_eq!(&release, &reference_release);

            for (ours, theirs) in [
                (vec![acquire.clone()], vec![reference.clone()]),
                (vec![release.clone()], vec![reference_release.clone()]),
                (
                    vec![acquire.clone(), release.clone(), acquire.clone()],
                    vec![reference.clone(), reference_release.clone(), reference.clone()],
                ),
            ] {
                prop_assert_eq!(sent_bytes(&ours), reference_bytes(&theirs));
            }

            // Another invocation of the same lane: the same entry, its own budget key.
            let second = LaneSpec {
                budget_id: second_budget.to_owned(),
                tokens: second_tokens,
                ..spec.clone()
            };
            let again = memo.get(&second);
            prop_assert!(Arc::ptr_eq(&lane, &again));
            let (second_acquire, _) =
                again.acquire(&member, &second.budget_id, second.tokens, second.micro_usd);
            prop_assert_eq!(
                sent_bytes(&[second_acquire]),
                reference_bytes(&[acquire_op_in(&keys, &second, &member, liveness_ms, turn_window_ms)])
            );

            // A changed limit: a new entry, built from the new limits.
            let mut profile = spec.clone();
            if let Some(first) = profile.scopes.first_mut() {
                first.concurrency = Some(first.concurrency.map_or(changed, |c| c ^ changed));
            }
            let updated = memo.get(&profile);
            prop_assert!(!Arc::ptr_eq(&lane, &updated));
            prop_assert!(updated.matches(&profile) && !updated.matches(&spec));
            prop_assert_eq!(
                updated.acquire(&member, &profile.budget_id, profile.tokens, profile.micro_usd).0,
                acquire_op_in(&keys, &profile, &member, liveness_ms, turn_window_ms)
            );
        }
    }

    #[test]
    fn the_memo_is_bounded_and_still_answers_past_its_bound() {
        let mut memo = LaneMemo::new(10_000, Some(50));
        let spec = |principal: &str| LaneSpec {
            workspace: "ws".into(),
            provider: "openai".into(),
            budget_id: String::new(),
            scopes: vec![ScopeLimits {
                name: ScopeName::principal(principal),
                concurrency: Some(4),
                requests: None,
                tokens: None,
                max_attempts: None,
                max_micro_usd: None,
                max_tokens: None,
            }],
            tokens: None,
            micro_usd: None,
            breaker: None,
        };
        let first = memo.get(&spec("p-0"));
        assert!(Arc::ptr_eq(&first, &memo.get(&spec("p-0"))), "remembered");
        for i in 0..LANES_KEPT + 10 {
            let lane = spec(&format!("p-{i}"));
            assert!(memo.get(&lane).matches(&lane));
            assert!(memo.len() <= LANES_KEPT);
        }
        // Started over past the bound: the first lane's entry was dropped, a lease holding it
        // still has it.
        let again = memo.get(&spec("p-0"));
        assert!(!Arc::ptr_eq(&first, &again));
        assert_eq!(first.lease_keys(false), again.lease_keys(false));
    }
}
