//! The vocabulary of a call: an operation of a batch ([`Op`], an acquire or a release with
//! exactly the keys and arguments of its single call), its words ([`Word`]), a scope's flags
//! word ([`ScopeFlags`]) and a renewal batch ([`RenewBatch`]).
//!
//! Invariant: two operations are equal when their kind, keys and arguments are; the bytes an
//! operation may carry pre-encoded (`packed`, built by a lane's cached pieces) are exactly the
//! RESP of those words (see `encode::Packed`).

use std::sync::Arc;

use super::encode::Packed;
use super::Function;
use crate::spec::ScopeLimits;

/// The per-scope flags word of an acquire: which values (and keys) follow for a scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScopeFlags(pub(crate) u8);

impl ScopeFlags {
    const CONCURRENCY: u8 = 1;
    const REQUESTS: u8 = 2;
    const TOKENS: u8 = 4;
    const MAX_ATTEMPTS: u8 = 8;
    const MAX_MICRO: u8 = 16;
    const MAX_TOKENS: u8 = 32;
    const FAIR: u8 = 64;

    /// The flags of `scope`; `fair`: the scope takes part in fair turns.
    pub(crate) fn of(scope: &ScopeLimits, fair: bool) -> Self {
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

/// One operation of a batch: an acquire or a release, with exactly the keys and arguments its
/// single call takes.
///
/// Two operations are equal when their kind, keys and arguments are; the pre-encoded bytes
/// only cache them.
#[derive(Debug, Clone)]
pub struct Op {
    /// An acquire or a release.
    pub kind: OpKind,
    /// The keys, in the function's order (a lane's plain list is shared, not copied).
    pub keys: Arc<[Word]>,
    /// The arguments, in the function's order.
    pub args: Vec<Word>,
    /// The operation's fixed words already in RESP (a lane's cached operation,
    /// `crate::lane_keys`): `encode::write_ops` copies them instead of encoding them again.
    pub(crate) packed: Option<Arc<Packed>>,
}

impl PartialEq for Op {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.keys == other.keys && self.args == other.args
    }
}

impl Eq for Op {}

/// What an [`Op`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Checks and charges the lane's shared limits and registers the lease.
    Acquire,
    /// Removes the lease, settles its budgets, reports its outcome, sets a pause.
    Release,
}

impl OpKind {
    /// The kind's letter in a batch's arguments.
    pub(crate) fn letter(self) -> &'static str {
        match self {
            OpKind::Acquire => "a",
            OpKind::Release => "r",
        }
    }

    /// The single-call function of this kind.
    pub(crate) fn function(self) -> &'static str {
        match self {
            OpKind::Acquire => Function::Acquire.name(),
            OpKind::Release => Function::Release.name(),
        }
    }
}

/// One batch of lease renewals: the leases of one workspace (one hash tag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenewBatch {
    /// The workspace's key prefix `ts:{W}:` (what the replica remembers its epoch by).
    pub(crate) workspace: String,
    /// The workspace's books epoch as this replica last saw it (`None`: never).
    pub(crate) known: Option<String>,
    /// The lease zsets named by `members`.
    pub(crate) keys: Vec<String>,
    /// (index into `keys`, lease member).
    pub(crate) members: Vec<(usize, String)>,
}

/// How a renewal writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewMode {
    /// Only leases Redis still has (`ZADD XX`): a lease released meanwhile is not brought back.
    Existing,
    /// Every lease (`ZADD`): re-registers leases after Redis lost them (reconcile).
    Register,
    /// Nothing written unless the books' epoch is missing or not the one known (then every
    /// lease, as `Register`): the check of every probe.
    Check,
}

/// A conformance run of the bucket arithmetic: (rate, capacity, period ms, steps of (now,
/// units)).
#[cfg(any(test, feature = "testing"))]
pub type BucketRun = (u64, u64, u64, Vec<(u64, u64)>);

/// One step's answer of a [`BucketRun`]: (admitted, wait ms or -1 for never, level in whole
/// units).
#[cfg(any(test, feature = "testing"))]
pub type BucketStep = (bool, i64, u64);
