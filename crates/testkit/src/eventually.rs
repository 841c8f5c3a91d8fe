//! Async tests next to a blocking [`crate::TestServer`]: their [`runtime`], and waiting for a
//! state another task or process reaches on its own (a service settling a dropped lease or a
//! cancelled waiter): poll, never sleep-and-assert.
//!
//! Invariant: a condition that never holds fails the test after [`EVENTUALLY_WITHIN`] with
//! what was awaited, instead of hanging it.

use std::future::Future;
use std::time::Duration;

/// A two-worker multi-thread runtime with IO and time: tests block on it from a plain
/// `#[test]`, so the blocking `TestServer` calls stay outside any async context.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// How long [`eventually`] polls before failing the test.
pub const EVENTUALLY_WITHIN: Duration = Duration::from_secs(10);

/// Polls `probe` every 25 ms until it answers `Some`; panics naming `what` after
/// [`EVENTUALLY_WITHIN`].
pub async fn eventually<T, Fut>(what: &str, mut probe: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let pause = Duration::from_millis(25);
    let tries = EVENTUALLY_WITHIN.as_millis() / pause.as_millis();
    for _ in 0..tries {
        if let Some(value) = probe().await {
            return value;
        }
        tokio::time::sleep(pause).await;
    }
    panic!("{what} did not happen within {EVENTUALLY_WITHIN:?}");
}
