//! The answer of the shared acquire script, as a closed vocabulary.

use turnstile_admission::{Millis, Reason};

use crate::error::CoordError;

/// What the shared limits say about one admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every shared scope admitted it; the lease is registered. `probe`: it holds the shared
    /// breaker's half-open probe lease.
    Granted { now: Millis, probe: bool },
    /// A shared scope is full; it may change at `wake` (server ms, when known).
    Defer {
        reason: Reason,
        wake: Option<Millis>,
        now: Millis,
        /// A full fair scope, and this principal has the next turn (no other waiting
        /// principal holds fewer): worth polling soon.
        turn_next: bool,
    },
    /// A contended scope has room, but another waiting principal is further behind its share:
    /// its turn first (fair turns across replicas).
    Turn { now: Millis },
    /// The provider is paused until `until` (server ms).
    Paused { until: Millis, now: Millis },
    /// The shared breaker is open until `until` (server ms).
    Open { until: Millis, now: Millis },
    /// A shared budget (or a bucket's capacity) can never fit it: waiting cannot help.
    Reject { reason: Reason, now: Millis },
    /// The workspace's books are being rebuilt (Redis lost them, or the workspace is new):
    /// nothing is granted before `until` (server ms), when every replica holding leases in it
    /// has registered them again.
    Reconciling { until: Millis, now: Millis },
}

impl Verdict {
    /// Decodes `{verdict, reason, scope, instant, now}` from `ts_acquire_v5` (a negative scope
    /// index on a deferral: the next turn is this principal's).
    pub fn decode(
        verdict: &str,
        reason: &str,
        scope: i64,
        instant: i64,
        now: i64,
    ) -> Result<Self, CoordError> {
        let now = u64::try_from(now).map_err(|_| CoordError::Protocol("negative time".into()))?;
        let instant = u64::try_from(instant).unwrap_or(0);
        let reason_of = |text: &str| match text {
            "concurrency" => Ok(Reason::Concurrency),
            "requests-per-minute" => Ok(Reason::RequestsPerMinute),
            "tokens-per-second" => Ok(Reason::TokensPerSecond),
            "attempts" => Ok(Reason::Attempts),
            "cost" => Ok(Reason::Cost),
            "tokens" => Ok(Reason::Tokens),
            "retry-after" => Ok(Reason::RetryAfter),
            "circuit-open" => Ok(Reason::CircuitOpen),
            other => Err(CoordError::Protocol(format!("reason {other}"))),
        };
        match verdict {
            "granted" => Ok(Verdict::Granted {
                now,
                probe: reason == "probe",
            }),
            "turn" => Ok(Verdict::Turn { now }),
            "open" => Ok(Verdict::Open {
                until: instant,
                now,
            }),
            "defer" => Ok(Verdict::Defer {
                reason: reason_of(reason)?,
                wake: (instant > 0).then_some(instant),
                now,
                turn_next: scope < 0,
            }),
            "paused" => Ok(Verdict::Paused {
                until: instant,
                now,
            }),
            "reconciling" => Ok(Verdict::Reconciling {
                until: instant,
                now,
            }),
            "reject" => Ok(Verdict::Reject {
                reason: reason_of(reason)?,
                now,
            }),
            other => Err(CoordError::Protocol(format!("verdict {other}"))),
        }
    }
}
