//! The start-up check of Redis's eviction policy: what turnstile keeps in Redis (leases,
//! budgets, pauses, the books epoch) must never be evicted, so `maxmemory-policy` should be
//! `noeviction` (`docs/replicas.md`, "Redis loses the books"). An evicting policy is logged
//! once at `warn` with what it risks; a Redis that refuses `CONFIG GET` (managed Redis often
//! does) or does not answer is not reported at all.
//!
//! What eviction does if it happens anyway: a lease zset evicted alone is found by its
//! holders' next renewal (leases of their own missing) and registered again, and until then
//! other replicas may grant into it; the books epoch evicted (with or without the leases)
//! starts the books' reconciliation window, as after a `FLUSHALL`.

use crate::coordinator::Coordinator;

/// Whether `policy` lets Redis evict keys (every policy but `noeviction`).
pub(crate) fn evicts(policy: &str) -> bool {
    policy != "noeviction"
}

impl Coordinator {
    /// Asks Redis for its eviction policy (every primary of a cluster) and logs a warning when
    /// one evicts. Silent when Redis refuses `CONFIG GET` or does not answer. Answers whether
    /// a warning was logged.
    pub async fn warn_if_evicting(&self) -> bool {
        let Ok(policies) = self.store.memory_policies().await else {
            return false;
        };
        let mut warned = false;
        for (policy, maxmemory) in policies {
            if evicts(&policy) {
                tracing::warn!(
                    target: "turnstile::coordination",
                    policy = policy.as_str(),
                    maxmemory,
                    "Redis may evict turnstile's keys (maxmemory-policy is not noeviction): an evicted lease set lets replicas admit past a shared limit until its holders renew; set maxmemory-policy noeviction"
                );
                warned = true;
            }
        }
        warned
    }
}

#[cfg(test)]
mod tests {
    use super::evicts;

    #[test]
    fn only_noeviction_keeps_every_key() {
        assert!(!evicts("noeviction"));
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            assert!(evicts(policy), "{policy}");
        }
    }
}
