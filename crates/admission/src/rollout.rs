//! Rollouts (issue 33): a candidate profile revision tried beside the active one, in shadow or
//! on a canary slice of principals, before it binds; and the records they leave.
//!
//! # The API (stable: the HTTP layer builds on these names)
//!
//! On [`crate::Registry`]:
//!
//! - `start_rollout(workspace, revision, profile, RolloutMode, now) -> Result<RolloutView,
//!   RolloutError>`: registers the candidate revision (immutable, digested and checked like any
//!   revision, kept by the registry) **without** making it current, and starts the rollout.
//!   One rollout per workspace ([`RolloutError::AlreadyRunning`] → 409).
//! - `rollout(workspace) -> Option<RolloutView>`: the running rollout: candidate revision and
//!   digest, mode (and share), start, and its decision comparison ([`Comparison`]).
//! - `promote_rollout(workspace, now) -> Result<(FinishedRollout, Option<ProfileChangeRecord>),
//!   RolloutError>`: makes the candidate current exactly as a registration would (a `change`
//!   profile-change record, or `rollback` if the revision was current once before).
//! - `abort_rollout(workspace, now) -> Result<FinishedRollout, RolloutError>`: ends it; the
//!   active revision is untouched.
//! - `rollouts(workspace) -> Vec<FinishedRollout>`: the last [`ROLLOUT_HISTORY_LIMIT`] finished
//!   rollouts, oldest first.
//!
//! # Shadow, exactly
//!
//! The candidate is a second controller under the candidate's limits (with every principal the
//! active revision knows) that never decides anything real: its counters, buckets, budgets,
//! pauses and breakers follow what actually happened.
//!
//! - At the start it takes the active's held leases as grants, the active's bucket levels, its
//!   provider pauses, breakers and announced quotas. Budget spend before the start is not
//!   copied: the candidate counts an invocation's spend from the start.
//! - Every real arrival is offered to the candidate first, read-only: the decision it would
//!   have made at that moment ([`RolloutDecision`]: admit now, queue for a reason, or refuse
//!   with a reason). Then the active decides; the real answer is never changed or delayed.
//! - Every real grant (at arrival or later from the active's queue) is applied to the candidate
//!   as a fact, even past its own limits (a forced grant: concurrency, buckets, budgets and
//!   quota charged as the active charged them); every real release (with its outcome and actual
//!   usage), Retry-After pause, announced quota and budget release is applied to it too.
//!   Heartbeats do not reach the core (the host keeps lease expiry), so nothing follows them.
//! - A grant on a provider the candidate does not configure is not counted by the candidate
//!   (it has no lane for it, so its workspace scope misses it too).
//! - The candidate holds no waiter in shadow, so its queue-length and queue-share checks see no
//!   queue of its own, and it never refuses `deadline-unreachable` (such a request counts as
//!   `queue`). Everything else is the controller's own check, in its order.
//! - Cost per arrival: one read-only pass of the candidate's checks (O(1) in lanes and leases,
//!   like the controller's own; the reservation rule is O(reserved principals)), and per grant
//!   and release one O(1) forced update and one hash-map entry.
//!
//! # Canary
//!
//! A stable hash of the principal ID ([`canary_hash`], seeded with the candidate's digest, so
//! every replica and every restart puts a principal in the same slice; never exposed) puts a
//! `share` of principals under the candidate (a request whose principal or provider only the
//! candidate names stays with the active, which could not count its grant). Both controllers are then real: the candidate
//! decides (and queues) its slice's requests, the active the rest. **Neither forgets load the
//! other admitted**: each grant of one side is forced into the other's books (and its release
//! follows it), so one provider limit shared by both slices is counted whole on both sides.
//! Each side's limits then bind its own slice: a tighter candidate admits its slice less, never
//! more than the active's counts allow under its own limits. The comparison still runs on every
//! arrival (the side that does not decide it answers read-only). A canary decision's evidence
//! is marked ([`crate::Evidence::candidate`]) and [`crate::Registry::revision_of`] names the
//! revision that decided (the candidate's), for the host to write as `profileRevision`.
//!
//! Lease and waiter IDs of the two controllers never collide (a candidate counts from
//! `rollout number << 40`), so a release or cancellation finds its controller in O(1).
//!
//! # Comparison
//!
//! For each arrival: `compared` +1, then `agree` when both decisions have the same kind (admit,
//! queue, refuse) and, for refusals, the same reason; otherwise `differ`, counted in `byReason`
//! under the candidate's reason (`admitted` for an admit) and in `candidateOnly` under the
//! candidate's kind. Counts only: never a principal or workspace.
//!
//! # Ending, revisions, restarts and replicas
//!
//! - Promote and abort both end the rollout and keep a [`FinishedRollout`]. In canary the
//!   candidate's slice may still hold leases and waiters: the candidate controller then stays
//!   on, deciding only its remaining waiters, until it holds no real lease or waiter; new
//!   arrivals all go to the (now) active controller. A new rollout is refused
//!   ([`RolloutError::Draining`]) until then.
//! - While a rollout runs, registering any revision (PUT, rollback) is refused with
//!   [`crate::RegistryError::RolloutRunning`]: promote or abort first.
//! - A rollout is not persisted by the core: after a restart none runs (the candidate revision
//!   was never current, so the replayed profiles do not include it); a host that journals
//!   rollouts may start it again.
//! - Replicas: each replica runs the rollout on its own local decisions (its own arrivals,
//!   grants and releases); the comparison counts that replica's arrivals only. The canary slice
//!   is the same on every replica (the hash is seeded with the candidate's digest).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::controller::Acquired;
use crate::evidence::{Lease, Rejection};
use crate::reason::Reason;
use crate::registry::RegistryError;
use crate::time::Millis;

/// Finished rollouts kept per workspace ([`crate::Registry::rollouts`]).
pub const ROLLOUT_HISTORY_LIMIT: usize = 64;

/// How a candidate is tried.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "mode")]
pub enum RolloutMode {
    /// The candidate decides nothing; it only records what it would have decided.
    Shadow,
    /// The candidate decides for `share` (0 to 1) of the principals.
    Canary {
        /// The share of principals under the candidate, in `[0, 1]`.
        share: f64,
    },
}

/// How a rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutOutcome {
    /// The candidate became the current revision.
    Promoted,
    /// The candidate was dropped; the active revision stayed.
    Aborted,
}

/// What the side that did not decide an arrival would have done with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutDecision {
    /// Admitted at once.
    Admit,
    /// Queued, waiting for the reason.
    Queue(Reason),
    /// Refused with the reason.
    Refuse(Reason),
}

impl RolloutDecision {
    /// The decision an answer of a controller stands for.
    pub fn of(acquired: &Acquired) -> Self {
        match acquired {
            Acquired::Admitted(_) => RolloutDecision::Admit,
            Acquired::Queued { evidence, .. } => RolloutDecision::Queue(evidence.reason),
            Acquired::Rejected(rejection) => RolloutDecision::Refuse(rejection.reason),
        }
    }

    /// The decision a try-now answer stands for.
    pub fn of_try(answer: &Result<Lease, Rejection>) -> Self {
        match answer {
            Ok(_) => RolloutDecision::Admit,
            Err(rejection) => RolloutDecision::Refuse(rejection.reason),
        }
    }

    fn reason(self) -> Reason {
        match self {
            RolloutDecision::Admit => Reason::Admitted,
            RolloutDecision::Queue(reason) | RolloutDecision::Refuse(reason) => reason,
        }
    }

    fn agrees_with(self, other: RolloutDecision) -> bool {
        match (self, other) {
            (RolloutDecision::Admit, RolloutDecision::Admit)
            | (RolloutDecision::Queue(_), RolloutDecision::Queue(_)) => true,
            (RolloutDecision::Refuse(a), RolloutDecision::Refuse(b)) => a == b,
            _ => false,
        }
    }
}

/// The candidate's decisions where they differ from the active's, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateOnly {
    /// The candidate would admit, the active did not (or the reverse in canary).
    pub admit: u64,
    /// The candidate would queue.
    pub queue: u64,
    /// The candidate would refuse.
    pub refuse: u64,
}

/// The decision comparison of a rollout: counts only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// Arrivals both sides decided.
    pub compared: u64,
    /// Arrivals both decided alike.
    pub agree: u64,
    /// Arrivals decided differently.
    pub differ: u64,
    /// Differing arrivals by the candidate's reason (`admitted` for an admit).
    pub by_reason: BTreeMap<String, u64>,
    /// Differing arrivals by the candidate's decision.
    pub candidate_only: CandidateOnly,
}

impl Comparison {
    /// Counts one arrival.
    pub fn note(&mut self, candidate: RolloutDecision, active: RolloutDecision) {
        self.compared += 1;
        if candidate.agrees_with(active) {
            self.agree += 1;
            return;
        }
        self.differ += 1;
        *self
            .by_reason
            .entry(candidate.reason().as_str().to_owned())
            .or_default() += 1;
        let kind = &mut self.candidate_only;
        match candidate {
            RolloutDecision::Admit => kind.admit += 1,
            RolloutDecision::Queue(_) => kind.queue += 1,
            RolloutDecision::Refuse(_) => kind.refuse += 1,
        }
    }
}

/// A running rollout, as [`crate::Registry::rollout`] answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    /// The candidate revision.
    pub revision: String,
    /// The candidate's `{providers, workspace}` digest.
    pub digest: String,
    /// Shadow or canary (with its share).
    pub mode: RolloutMode,
    /// When it started.
    pub started_at_epoch_ms: Millis,
    /// The decision comparison so far.
    pub decisions: Comparison,
}

/// A rollout that ended, kept in the workspace's bounded history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinishedRollout {
    /// The candidate revision.
    pub revision: String,
    /// The candidate's digest.
    pub digest: String,
    /// Shadow or canary (with its share).
    pub mode: RolloutMode,
    /// Promoted or aborted.
    pub outcome: RolloutOutcome,
    /// When it started.
    pub started_at_epoch_ms: Millis,
    /// When it ended.
    pub ended_at_epoch_ms: Millis,
    /// The final decision comparison.
    pub decisions: Comparison,
}

/// A rollout operation that cannot be done; nothing changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RolloutError {
    /// No profile has been registered for the workspace.
    #[error("no admission profile is registered for this workspace")]
    UnknownWorkspace,
    /// A rollout already runs in the workspace (one at a time).
    #[error("rollout-running: a rollout already runs in this workspace")]
    AlreadyRunning,
    /// The canary slice of the last rollout still holds leases or waiters.
    #[error("rollout-draining: the last canary's principals still hold leases or waiters")]
    Draining,
    /// No rollout runs in the workspace.
    #[error("no rollout runs in this workspace")]
    NoRollout,
    /// The candidate is the current revision already.
    #[error("invalid-definition: the candidate revision {revision} is the current revision")]
    CandidateIsCurrent {
        /// The revision named.
        revision: String,
    },
    /// A canary share outside `[0, 1]` or not a number.
    #[error("invalid-definition: canaryShare must be a number from 0 to 1")]
    InvalidShare,
    /// The candidate revision cannot be registered (conflict, invalid limits).
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// FNV-1a over `bytes`, continuing from `state`.
fn fnv1a(mut state: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        state ^= u64::from(byte);
        state = state.wrapping_mul(0x0000_0100_0000_01b3);
    }
    state
}

/// The seed of a candidate's canary slice: a hash of its digest.
pub(crate) fn canary_seed(digest: &str) -> u64 {
    fnv1a(0xcbf2_9ce4_8422_2325, digest.as_bytes())
}

/// A stable, seeded 64-bit hash of a principal ID (FNV-1a, then the splitmix64 finalizer so
/// every bit depends on every byte); the same on every machine. Never exposed.
pub(crate) fn canary_hash(seed: u64, principal_id: &str) -> u64 {
    let mut z = fnv1a(seed, principal_id.as_bytes());
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash threshold below which a principal is in a canary of `share`.
pub(crate) fn canary_threshold(share: f64) -> u128 {
    // 2^64 × share; the cast saturates, so a share of 1 takes every hash.
    (share * 18_446_744_073_709_551_616.0) as u128
}

/// Whether `share` is a valid canary share.
pub(crate) fn valid_share(share: f64) -> bool {
    share.is_finite() && (0.0..=1.0).contains(&share)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_stable_and_the_share_is_kept() {
        let seed = canary_seed("sha256:abc");
        assert_eq!(canary_hash(seed, "p1"), canary_hash(seed, "p1"));
        let threshold = canary_threshold(0.25);
        let inside = (0..10_000)
            .filter(|i| u128::from(canary_hash(seed, &format!("p{i}"))) < threshold)
            .count();
        assert!((2_300..2_700).contains(&inside), "{inside}");
        assert_eq!(canary_threshold(0.0), 0);
        assert!(canary_threshold(1.0) > u128::from(u64::MAX));
    }

    #[test]
    fn differing_decisions_are_counted_by_the_candidates_reason() {
        let mut comparison = Comparison::default();
        comparison.note(RolloutDecision::Admit, RolloutDecision::Admit);
        comparison.note(
            RolloutDecision::Queue(Reason::Concurrency),
            RolloutDecision::Admit,
        );
        comparison.note(
            RolloutDecision::Refuse(Reason::QueueFull),
            RolloutDecision::Refuse(Reason::Concurrency),
        );
        assert_eq!((comparison.compared, comparison.agree), (3, 1));
        assert_eq!(comparison.differ, 2);
        assert_eq!(comparison.by_reason["concurrency"], 1);
        assert_eq!(comparison.by_reason["queue-full"], 1);
        assert_eq!(
            comparison.candidate_only,
            CandidateOnly {
                admit: 0,
                queue: 1,
                refuse: 1
            }
        );
    }
}
