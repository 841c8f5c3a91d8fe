//! The contract between a replica and its Redis: the function library (`lua/turnstile_v5.lua`),
//! the name of every function, which keys and arguments each call sends and what each answers.
//! The transport that carries the calls is `crate::store` (and a lane's own connection,
//! `crate::direct`); nothing here does I/O.
//!
//! - [`ops`]: the vocabulary of a call: an operation ([`Op`], [`OpKind`]), its words, a
//!   scope's flags word, a renewal batch.
//! - [`encode`]: the calls' bytes: an operation alone or a batch of them (as a `redis::Cmd`, or
//!   written straight into a buffer by [`write_ops`]), the lane's shape string, and the other
//!   functions' calls. The acquires and releases themselves are made from a lane's cached
//!   pieces (`crate::lane_keys::LaneKeys`, the one production encoder of those calls).
//! - [`decode`]: the answers.
//! - `reference` (tests, and the `testing` feature only): the reference encoding of an acquire
//!   and a release, formatted word by word from the spec; the oracle `LaneKeys` is tested
//!   against, byte for byte.
//!
//! Redis's time per `FCALL` grows with every key and argument passed (each is copied into a
//! Lua table) and with every `tonumber` the script needs, so a call passes only what the
//! lane's scopes use: bucket, budget, wait and breaker keys only when configured; the lane's
//! limits as one shape string ([`lane_shape`]: per scope a flags word, [`ScopeFlags`], and the
//! values those flags announce), which the script decodes once per distinct shape; a plain
//! release passes its lease keys and the member, nothing else.
//!
//! # Invariants
//!
//! - Every function's name and the library's name carry one version (the `version!` macro, a
//!   literal so that names are built at compile time with `concat!`); a change of
//!   contract (keys, arguments or answers of any function) bumps it, and replicas of two
//!   releases never call each other's functions. The names the Lua file registers are tested
//!   equal to [`Function`]'s.
//! - The keys and values are in exactly the order the Lua header of each function documents.
//! - A batch's operations are all of one workspace (one hash tag, one slot); each operation's
//!   keys and arguments in a batch are exactly those of its single call.
//! - Scope indices in the answers are the positions in `LaneSpec::scopes` (1-based).
//! - A release names only lease zsets the acquire wrote (scopes with a concurrency, plus the
//!   probe zset of a probe lease): see `LaneKeys::lease_keys` (`crate::lane_keys`).

/// The contract's version, as it appears in every name (a macro so that names are built at
/// compile time with `concat!`).
macro_rules! version {
    () => {
        "5"
    };
}

/// The name of the library's function `$name` (`ts_<name>_v<version>`).
macro_rules! function_name {
    ($name:literal) => {
        concat!("ts_", $name, "_v", version!())
    };
}

pub(crate) mod decode;
pub(crate) mod encode;
pub(crate) mod ops;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod reference;

pub(crate) use decode::{
    array, decode_acquire, decode_release, decode_renew, int, is_missing_function,
    is_missing_function_reply, ops_answers, text, Renewed,
};
pub(crate) use encode::{lane_shape, ops_command, signed, write_ops, Packed};
pub(crate) use ops::{Op, OpKind, RenewBatch, RenewMode, ScopeFlags, Word};
#[cfg(test)]
pub(crate) use reference::{acquire_op_in, release_op, ReleaseCall};

/// The function library's name (`#!lua name=…`).
#[cfg(test)]
const LIBRARY_NAME: &str = concat!("turnstile_v", version!());

/// The function library (Lua), versioned by name.
pub(crate) const LIBRARY: &str = include_str!(concat!("../lua/turnstile_v", version!(), ".lua"));

/// The functions of the library: a closed vocabulary, each name built from [`VERSION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Function {
    /// One acquire.
    Acquire,
    /// One release.
    Release,
    /// Several acquires and releases of one workspace.
    Batch,
    /// A provider pause.
    Pause,
    /// Outcomes a degraded replica saw, merged into the shared breaker.
    Breaker,
    /// Lease renewals.
    Renew,
    /// The bucket arithmetic's conformance hook (tests).
    #[cfg(any(test, feature = "testing"))]
    BucketRun,
    /// The server clock (the health probe).
    Time,
}

impl Function {
    /// Every function, in the order the library registers them.
    #[cfg(test)]
    const ALL: [Function; 8] = [
        Function::Acquire,
        Function::Release,
        Function::Batch,
        Function::Pause,
        Function::Breaker,
        Function::Renew,
        Function::BucketRun,
        Function::Time,
    ];

    /// The name `FCALL` calls it by.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Function::Acquire => function_name!("acquire"),
            Function::Release => function_name!("release"),
            Function::Batch => function_name!("batch"),
            Function::Pause => function_name!("pause"),
            Function::Breaker => function_name!("breaker"),
            Function::Renew => function_name!("renew"),
            #[cfg(any(test, feature = "testing"))]
            Function::BucketRun => function_name!("bucket_run"),
            Function::Time => function_name!("time"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library is the one named by the version, and registers exactly the functions of
    /// [`Function`], by the names the client calls.
    #[test]
    fn the_library_registers_every_function_under_the_versioned_name() {
        assert_eq!(version!(), "5");
        assert_eq!(
            LIBRARY.lines().next(),
            Some(format!("#!lua name={LIBRARY_NAME}").as_str())
        );
        let registered: Vec<&str> = LIBRARY
            .lines()
            .filter(|line| line.starts_with("redis.register_function"))
            .filter_map(|line| line.split('\'').nth(1))
            .collect();
        let names: Vec<&str> = Function::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(registered, names);
        assert_eq!(Function::Acquire.name(), "ts_acquire_v5");
        // The books' reconciliation window is the client's constant.
        assert!(LIBRARY.contains(&format!(
            "local RECONCILE_MS = {}\n",
            crate::coordinator::BOOKS_RECONCILE_MS
        )));
        assert_eq!(Function::BucketRun.name(), "ts_bucket_run_v5");
    }
}
