//! Enqueue: re-enqueuing a generation replaces its entry; `pendingSince` is kept only while the
//! evidence digest is unchanged (a new digest resets it to `now`); the entry moves to the end.
//!
//! Invariant: at most one pending entry per generation. O(n) in the pending list.

use crate::{Band, PendingItem};

/// The entry that replaces `existing` (the generation's current entry, if any).
pub fn next_entry(
    existing: Option<&PendingItem>,
    generation_id: &str,
    evidence_digest: &str,
    band: Band,
    now: u64,
) -> PendingItem {
    let pending_since = match existing {
        Some(entry) if entry.evidence_digest == evidence_digest => entry.pending_since,
        _ => now,
    };
    PendingItem {
        generation_id: generation_id.to_owned(),
        evidence_digest: evidence_digest.to_owned(),
        band,
        pending_since,
    }
}

/// Enqueues into an in-memory pending list (the rule in list form; stores apply the same rule
/// through [`next_entry`]). Returns the new entry.
pub fn enqueue(
    pending: &mut Vec<PendingItem>,
    generation_id: &str,
    evidence_digest: &str,
    band: Band,
    now: u64,
) -> PendingItem {
    let position = pending
        .iter()
        .position(|item| item.generation_id == generation_id);
    let existing = position.map(|index| pending.remove(index));
    let entry = next_entry(existing.as_ref(), generation_id, evidence_digest, band, now);
    pending.push(entry.clone());
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_digest_keeps_pending_since_and_moves_to_end() {
        let mut pending = Vec::new();
        enqueue(&mut pending, "a", "d1", Band::Routine, 10);
        enqueue(&mut pending, "b", "d2", Band::Routine, 11);
        let entry = enqueue(&mut pending, "a", "d1", Band::Routine, 20);
        assert_eq!(entry.pending_since, 10);
        assert_eq!(pending.len(), 2);
        assert_eq!(pending[1].generation_id, "a");
    }

    #[test]
    fn new_digest_resets_pending_since() {
        let mut pending = Vec::new();
        enqueue(&mut pending, "a", "d1", Band::Routine, 10);
        let entry = enqueue(&mut pending, "a", "d2", Band::Priority, 30);
        assert_eq!(entry.pending_since, 30);
        assert_eq!(entry.band, Band::Priority);
        assert_eq!(pending.len(), 1);
    }
}
