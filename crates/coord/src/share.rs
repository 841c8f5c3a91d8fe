//! The declared per-replica share of each lane while coordination is degraded.
//!
//! `slice:F` (0 < F <= 1): this replica alone admits within `floor(limit x F)` concurrent
//! leases per scope (counting every lease it holds, including those granted through Redis
//! before the loss) and refills its own buckets at `floor(rate x F)` with capacity
//! `floor(capacity x F)`. `closed`: nothing is admitted while degraded. Money and token budgets
//! fail closed in both (their spend lives in Redis only).
//!
//! With N replicas each declaring `1/N`, losing Redis at once overshoots no limit; a replica
//! partitioned alone, or an imbalance at the moment of loss, overshoots by at most one share
//! per degraded replica (`docs/replicas.md`).

use std::fmt;
use std::str::FromStr;

/// What a degraded replica may admit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DegradedShare {
    /// A fraction in (0, 1] of every concurrency and bucket limit.
    Slice(f64),
    /// Nothing.
    Closed,
}

impl DegradedShare {
    /// `floor(value x share)`; 0 when closed.
    pub fn of(self, value: u64) -> u64 {
        match self {
            DegradedShare::Slice(f) => (value as f64 * f).floor() as u64,
            DegradedShare::Closed => 0,
        }
    }
}

/// A share that does not parse: neither `closed` nor a fraction in (0, 1].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("degraded share must be `closed` or a fraction in (0, 1], not {0:?}")]
pub struct InvalidShare(pub String);

impl FromStr for DegradedShare {
    type Err = InvalidShare;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "closed" {
            return Ok(DegradedShare::Closed);
        }
        match text.parse::<f64>() {
            Ok(f) if f > 0.0 && f <= 1.0 => Ok(DegradedShare::Slice(f)),
            _ => Err(InvalidShare(text.to_owned())),
        }
    }
}

impl fmt::Display for DegradedShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DegradedShare::Slice(share) => write!(f, "{share}"),
            DegradedShare::Closed => f.write_str("closed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_parse_and_round_down() {
        assert_eq!("closed".parse(), Ok(DegradedShare::Closed));
        let third: DegradedShare = "0.34".parse().unwrap();
        assert_eq!(third.of(9), 3);
        assert_eq!(third.of(2), 0);
        assert!("0".parse::<DegradedShare>().is_err());
        assert!("1.5".parse::<DegradedShare>().is_err());
        assert_eq!(DegradedShare::Closed.of(100), 0);
    }
}
