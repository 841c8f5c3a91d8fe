//! Test-only access (feature `testing`, enabled only by dev-dependencies: never in a product
//! build): the protocol's reference encoding of an acquire and a release (the oracle a lane's
//! cached pieces are tested against), and the store's calls that only tests make: one
//! operation as its single call, a batch, and the bucket arithmetic's conformance runs.
//!
//! Invariant: nothing here is used by the product; the product's calls are made by a lane's
//! cached pieces (`crate::lane_keys`) and sent by the coordinator.

use redis::Value;

use crate::error::CoordError;
use crate::store::RedisStore;

pub use crate::protocol::ops::{BucketRun, BucketStep};
pub use crate::protocol::ops::{Op, OpKind, Word};
pub use crate::protocol::reference::{acquire_op, acquire_op_in, release_op, ReleaseCall};

/// `op` as its single call on `store`: its raw answer, what its place in a batch's answer
/// would be.
pub async fn single(store: &RedisStore, op: &Op) -> Result<Value, CoordError> {
    store.single(op).await
}

/// `ops` (all of one workspace, at least one) in one call on `store` (a lone one as its single
/// call, more as one batch), answered by `deadline`: one raw answer per operation, in order.
pub async fn batch<'a>(
    store: &RedisStore,
    ops: impl Iterator<Item = &'a Op> + Clone,
    deadline: tokio::time::Instant,
) -> Result<Vec<Value>, CoordError> {
    store.batch(ops, deadline).await
}

/// The script's bucket arithmetic over each run's steps of (now, units) with an injected clock,
/// on `key`: per step (admitted, wait ms or -1 for never, level in whole units). Pipelined.
pub async fn bucket_runs(
    store: &RedisStore,
    key: &str,
    runs: &[BucketRun],
) -> Result<Vec<Vec<BucketStep>>, CoordError> {
    store.bucket_runs(key, runs).await
}
