//! The service's bounds on the numbers a caller asks for: `deadlineMs` at most
//! `admission.max_wait_ms`, `retryAfterMs` at most `admission.max_retry_after_ms`.
//!
//! Decides what a value above a bound becomes: the bound. The client does not know the
//! service's settings up front; the service's 422 `invalid-request` naming the field carries
//! the bound as `maximum` (`docs/server.md`), and [`capped`] then asks once more at the bound
//! and remembers it, so every later call (of this client and its clones, and of their leases)
//! is capped before it is sent.
//!
//! Invariants: a value is only ever lowered, never raised; a bound is learned only from the
//! service's answer for that field, and a call is repeated at most once.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::ClientError;

/// One bound of the service, shared by a client's clones; `u64::MAX` until learned.
#[derive(Debug)]
pub(crate) struct Bound {
    field: &'static str,
    maximum: AtomicU64,
}

impl Bound {
    /// The bound of the request field `field`, not known yet.
    pub(crate) const fn unknown(field: &'static str) -> Self {
        Bound {
            field,
            maximum: AtomicU64::new(u64::MAX),
        }
    }

    /// `value`, lowered to the bound once it is known.
    pub(crate) fn cap(&self, value: u64) -> u64 {
        value.min(self.maximum.load(Ordering::Relaxed))
    }

    /// The bound the service stated in `error` for this field (remembered), if it did.
    fn learn(&self, error: &ClientError) -> Option<u64> {
        let maximum = error.maximum_of(self.field)?;
        self.maximum.fetch_min(maximum, Ordering::Relaxed);
        Some(maximum)
    }
}

/// `call(value)` with `value` capped at `bound`; if the service refuses it as above a bound
/// it states, once more at that bound.
pub(crate) async fn capped<T, F, Fut>(bound: &Bound, value: u64, call: F) -> Result<T, ClientError>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let asked = bound.cap(value);
    match call(asked).await {
        Err(error) => match bound.learn(&error) {
            Some(maximum) if maximum < asked => call(maximum).await,
            _ => Err(error),
        },
        answer => answer,
    }
}

/// The bounds a client learns.
#[derive(Debug)]
pub(crate) struct Bounds {
    /// `deadlineMs` of an acquire (`admission.max_wait_ms`).
    pub wait: Bound,
    /// `retryAfterMs` of a release or a pause (`admission.max_retry_after_ms`).
    pub retry_after: Bound,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            wait: Bound::unknown("deadlineMs"),
            retry_after: Bound::unknown("retryAfterMs"),
        }
    }
}
