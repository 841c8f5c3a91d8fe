//! Replicas of one deployment on a Redis (or a Redis Cluster), for the `replicas_*` tests:
//! each a `turnstile serve` process ([`Replica`]); the first on a Redis registers the
//! deployment's profile and keys ([`Deployment`], [`PerRedis`]), later ones adopt them; their
//! `/readyz` state ([`coordination`], [`wait_for_all`]); the leases Redis holds for them
//! ([`live_leases`]); and load through them ([`drive_clients`], the fake upstream).
//!
//! Invariant: one replica scenario runs at a time within a test binary ([`one_at_a_time`]).

mod deployment;
mod leases;
mod load;

pub use deployment::{
    coordination, coordination_failure, one_at_a_time, replica_config, start_cluster_replica,
    start_replica, wait_for_all, Deployment, Keys, PerRedis, Replica,
};
pub use leases::live_leases;
pub use load::{acquire, call_upstream, drive_clients, fake_upstream, next, release, FakeUpstream};
