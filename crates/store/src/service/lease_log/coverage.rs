//! Whether the lease log's files cover its whole history (issue 34, item 4): a start that
//! replayed a log with a file missing would come up without the leases that file recorded and
//! admit them a second time, silently.
//!
//! What the writer guarantees, and so what a start checks:
//! - every start writes the snapshot (through segment S) only after it created segment S+1,
//!   and a compaction through S runs only after the writer opened segment S+1; segments are
//!   numbered without gaps: so the segments above the snapshot are S+1, S+2, … (none at all
//!   is accepted: a log of an earlier version whose start died between its snapshot and its
//!   segment looks like that; a deleted last segment is not found, a truncated one is);
//! - a log without a snapshot (a first start that
//!   died before writing it) starts at segment 1; once the first start finished, the
//!   snapshot exists for ever (it is replaced by rename, never deleted);
//! - a segment is created whole with its header (written to a temporary file and renamed), so
//!   a segment without a header was truncated afterwards.
//!
//! Invariant: [`check`] reports every missing file it can name; a headerless segment is found
//! while replaying (`super::replay_segment`). A start refuses on any [`Damage`] unless the
//! operator accepted the loss (`OnDamage::Accept`), and then replays what is there.

use std::path::{Path, PathBuf};

/// A way the lease log does not cover its own history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// No snapshot, yet the first segment is not segment 1: the snapshot was deleted after
    /// the first start wrote it.
    MissingSnapshot,
    /// A segment between the snapshot and a later segment is missing.
    MissingSegment,
    /// A segment without its header line: truncated (to 0 bytes, or into its header).
    Headerless,
}

/// A file of the lease log that is missing or damaged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}", path.display(), match kind {
    DamageKind::MissingSnapshot => "the snapshot is missing, yet the log's first segment is not segment 1",
    DamageKind::MissingSegment => "this segment is missing, yet a later segment follows it",
    DamageKind::Headerless => "this segment has lost its header (truncated)",
})]
pub struct Damage {
    /// The file (the one that should be there, when missing).
    pub path: PathBuf,
    /// What is wrong with it.
    pub kind: DamageKind,
}

/// What a start does with a log that does not cover its history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDamage {
    /// Refuse to open it ([`LeaseLogError::Damaged`](super::LeaseLogError::Damaged)).
    #[default]
    Refuse,
    /// Open it with what is there; the damage is in [`Recovered::damage`](super::Recovered).
    Accept,
}

/// The missing files of a log whose snapshot covers through `snapshot` (`None`: no snapshot)
/// and whose segments are `segments` (sorted by number).
pub fn check(
    dir: &Path,
    snapshot: Option<u64>,
    segments: &[(u64, PathBuf)],
    segment_path: impl Fn(u64) -> PathBuf,
) -> Vec<Damage> {
    let mut damage = Vec::new();
    let through = snapshot.unwrap_or(0);
    let mut expected = through + 1;
    for (n, _) in segments.iter().filter(|(n, _)| *n > through) {
        if *n != expected {
            damage.push(match snapshot {
                None if expected == 1 => Damage {
                    path: dir.join(super::SNAPSHOT_FILE),
                    kind: DamageKind::MissingSnapshot,
                },
                _ => Damage {
                    path: segment_path(expected),
                    kind: DamageKind::MissingSegment,
                },
            });
        }
        expected = n + 1;
    }
    damage
}
