//! What turnstile's shared limits cost Redis: the calls of `FCALL` and the µs Redis spent in
//! them, read out of `INFO commandstats` ([`FcallStats`]; `RedisStore::fcall_stats` sums them
//! over a cluster's primaries). Benchmarks read it before and after a run.
//!
//! Invariant: a line or field that is absent or unreadable counts zero, never an error (an
//! older Redis, or one that has run no function yet).

/// Calls of `FCALL` and the µs Redis spent in them (`INFO commandstats`, `cmdstat_fcall`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FcallStats {
    /// Calls of `FCALL`.
    pub calls: u64,
    /// µs Redis spent in them.
    pub usec: u64,
}

impl FcallStats {
    /// Reads `cmdstat_fcall:calls=N,usec=N,…` out of `INFO commandstats` (zero when absent).
    pub fn parse(info: &str) -> Self {
        let mut stats = FcallStats::default();
        let Some(line) = info
            .lines()
            .find_map(|line| line.trim().strip_prefix("cmdstat_fcall:"))
        else {
            return stats;
        };
        for field in line.split(',') {
            match field.split_once('=') {
                Some(("calls", n)) => stats.calls = n.parse().unwrap_or(0),
                Some(("usec", n)) => stats.usec = n.parse().unwrap_or(0),
                _ => {}
            }
        }
        stats
    }

    /// What happened between `self` (before) and `after`.
    pub fn delta(self, after: FcallStats) -> FcallStats {
        FcallStats {
            calls: after.calls.saturating_sub(self.calls),
            usec: after.usec.saturating_sub(self.usec),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FcallStats;

    #[test]
    fn fcall_stats_are_read_from_info_commandstats() {
        let info = "# Commandstats\r\ncmdstat_fcall_ro:calls=7,usec=70,usec_per_call=10.00\r\n\
                    cmdstat_fcall:calls=40000,usec=1868628,usec_per_call=46.72,rejected_calls=0\r\n";
        let stats = FcallStats::parse(info);
        assert_eq!(
            stats,
            FcallStats {
                calls: 40000,
                usec: 1868628
            }
        );
        assert_eq!(
            FcallStats::parse("# Commandstats\r\n"),
            FcallStats::default()
        );
        let later = FcallStats {
            calls: 40010,
            usec: 1868728,
        };
        assert_eq!(
            stats.delta(later),
            FcallStats {
                calls: 10,
                usec: 100
            }
        );
    }
}
