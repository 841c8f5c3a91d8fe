//! Errors of the coordination client, one variant per failure.

/// Why a call to the shared store did not give an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordError {
    /// The Redis URL does not parse.
    #[error("invalid Redis URL: {0}")]
    InvalidUrl(String),
    /// No answer within the command timeout (a hung or stopped Redis).
    #[error("Redis did not answer within {0} ms")]
    Timeout(u64),
    /// The connection failed or Redis answered with an error.
    #[error("Redis call failed: {0}")]
    Redis(String),
    /// Redis answered something the scripts never return.
    #[error("unexpected answer from Redis: {0}")]
    Protocol(String),
    /// A limit whose fixed-point arithmetic would not be exact in Lua's doubles (capacity x
    /// period above 2^53).
    #[error("a bucket limit is too large to be shared exactly (capacity x period above 2^53)")]
    Inexact,
    /// The probe interval is too long for the books' reconciliation window: a replica holding
    /// leases would not see a loss of Redis's books before grants resume there.
    #[error("coordination.probe_every_ms is {0} ms: at most {max} ms (half the books' reconciliation window)", max = crate::coordinator::PROBE_EVERY_MAX_MS)]
    ProbeTooSlow(u64),
    /// Coordination is degraded: the call was not tried.
    #[error("coordination is degraded")]
    Degraded,
}

impl CoordError {
    /// The kind of failure, from a closed vocabulary that is safe to show anyone (`/readyz`
    /// is public): never Redis's own text, which may name nodes or echo arguments.
    pub fn kind(&self) -> &'static str {
        match self {
            CoordError::InvalidUrl(_) => "invalid-url",
            CoordError::Timeout(_) => "timeout",
            CoordError::Redis(_) => "redis",
            CoordError::Protocol(_) => "protocol",
            CoordError::Inexact => "inexact",
            CoordError::ProbeTooSlow(_) => "probe-too-slow",
            CoordError::Degraded => "degraded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CoordError;

    #[test]
    fn kinds_name_no_detail() {
        let failures = [
            (CoordError::Timeout(100), "timeout"),
            (CoordError::Redis("MOVED 12 10.0.0.5:7000".into()), "redis"),
            (CoordError::Protocol("answer".into()), "protocol"),
        ];
        for (error, kind) in failures {
            assert_eq!(error.kind(), kind);
        }
    }
}
