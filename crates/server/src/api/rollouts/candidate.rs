//! Naming the revision that decided a canary answer (issue 33, item 3): an answer whose
//! evidence the candidate decided (`Evidence::candidate`) carries `evidence.profileRevision`,
//! the candidate's revision; every other answer is the current revision's and carries none.
//!
//! Decides: which name goes with a candidate's answer. The rollout routes record the candidate
//! of each workspace when a rollout starts ([`CandidateRevisions::started`]); the name is kept
//! after the rollout ends, because a canary's slice may still be answered by the candidate
//! while it drains, and a new rollout cannot start before that is over (the core refuses it),
//! so the name of a workspace is never another rollout's.
//!
//! Invariants: the common answer (no candidate) takes no lock and is written by the fast
//! writer (`crate::http::lease_answer`) unchanged; a candidate's answer is re-encoded once
//! with the name added (canary slices only). The name is a revision, never a principal.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::response::Response;
use turnstile_admission::{Evidence, Millis};

use crate::http::json_answer::json_response;
use crate::http::lease_answer;

/// The candidate revision of each workspace's latest rollout.
#[derive(Debug, Default)]
pub struct CandidateRevisions(Mutex<HashMap<String, String>>);

impl CandidateRevisions {
    /// A rollout of `revision` started in `workspace`.
    pub fn started(&self, workspace: &str, revision: &str) {
        let mut names = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        names.insert(workspace.to_owned(), revision.to_owned());
    }

    /// The candidate revision of `workspace`'s latest rollout.
    pub fn of(&self, workspace: &str) -> Option<String> {
        let names = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        names.get(workspace).cloned()
    }
}

/// Adds `profileRevision` to the `evidence` object of an answer.
pub fn named(mut answer: serde_json::Value, revision: &str) -> serde_json::Value {
    if let Some(evidence) = answer.get_mut("evidence").and_then(|e| e.as_object_mut()) {
        evidence.insert("profileRevision".into(), revision.into());
    }
    answer
}

/// The `200` answer of a grant the candidate decided, naming it.
pub fn lease_response(
    revision: &str,
    lease_id: &str,
    expires_at_epoch_ms: Millis,
    ttl_ms: Millis,
    evidence: &Evidence,
) -> Response {
    let mut out = Vec::new();
    let written =
        lease_answer::write_lease(&mut out, lease_id, expires_at_epoch_ms, ttl_ms, evidence)
            .and_then(|()| serde_json::from_slice::<serde_json::Value>(&out))
            .and_then(|answer| serde_json::to_vec(&named(answer, revision)));
    let mut response = json_response(written);
    lease_answer::caller_headers(&mut response, &evidence.caller);
    response
}
