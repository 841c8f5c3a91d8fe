//! The bucket checkpoint (issue 14): the level of every rate bucket, written into the data
//! directory at a graceful stop and read back by the next start, so a deploy or a config
//! change does not restart every lane with empty buckets.
//!
//! # The file
//!
//! `bucket-checkpoint.json` in the data directory, one JSON object
//! (`turnstile-bucket-checkpoint/v1`, unknown fields refused):
//!
//! - `format`: `"turnstile-bucket-checkpoint/v1"`;
//! - `lastGrantAtMs`: the lease log's last grant when the levels were read (`null`: none);
//! - `workspaces`: by workspace ID, the core's [`BucketLevels`] (`readAtMs`, and the levels of
//!   the workspace's, each provider's and each principal's buckets in the core's fixed-point
//!   units: units × refill period in ms).
//!
//! It names workspaces, providers and principals: it stays inside the data directory, as the
//! lease log and the store do, and nothing of it is ever logged (only counts).
//!
//! # Invariants
//!
//! - **Whole or absent.** Written to `bucket-checkpoint.json.tmp`, `fsync`ed, renamed over the
//!   file, then the directory is `fsync`ed: a crash during the write leaves the previous state
//!   (no file, since every start removes it), never a torn file.
//! - **Read after the last grant.** The host reads the levels only once its driver drains (no
//!   grant can follow), and `lastGrantAtMs` is at least every grant the lease log holds from
//!   that process.
//! - **Used at most once.** A start that finds the file restores it only if the lease log's
//!   last grant is not later than `lastGrantAtMs` (no process granted anything since), then
//!   removes it (and `fsync`s the directory) **before it serves**; so a later crash never
//!   finds old levels, even if the grants after them were lost from the lease log (a machine
//!   crash at `durability = "process"`). The last-grant comparison guards the case where the
//!   removal did not happen (a start that failed before it): levels restored while no grant
//!   followed them are exact however many starts pass, since a bucket changes only by grants
//!   and by its refill, which restoring replays.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use turnstile_admission::{BucketLevels, Millis};

/// The checkpoint's file name inside the data directory.
pub const CHECKPOINT_FILE: &str = "bucket-checkpoint.json";
const CHECKPOINT_TMP: &str = "bucket-checkpoint.json.tmp";
/// The `format` field of version 1.
pub const CHECKPOINT_FORMAT: &str = "turnstile-bucket-checkpoint/v1";

/// `turnstile-bucket-checkpoint/v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BucketCheckpoint {
    pub format: String,
    /// The lease log's last grant when the levels were read.
    pub last_grant_at_ms: Option<Millis>,
    /// By workspace ID.
    pub workspaces: BTreeMap<String, BucketLevels>,
}

impl BucketCheckpoint {
    pub fn new(
        last_grant_at_ms: Option<Millis>,
        workspaces: BTreeMap<String, BucketLevels>,
    ) -> Self {
        BucketCheckpoint {
            format: CHECKPOINT_FORMAT.to_owned(),
            last_grant_at_ms,
            workspaces,
        }
    }
}

/// Why the checkpoint cannot be written, read or removed (the message names the file, never an
/// ID).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file could not be read or written.
    #[error("bucket checkpoint {path}: {source}")]
    Io {
        /// The checkpoint file.
        path: String,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a checkpoint's JSON.
    #[error("bucket checkpoint {path} cannot be parsed: {source}")]
    Parse {
        /// The checkpoint file.
        path: String,
        /// What the parser said.
        #[source]
        source: serde_json::Error,
    },
    /// The file has another format tag.
    #[error("bucket checkpoint {path} has format {found:?}, not {CHECKPOINT_FORMAT}")]
    Format {
        /// The checkpoint file.
        path: String,
        /// Its format tag.
        found: String,
    },
    /// The checkpoint could not be encoded.
    #[error("the bucket checkpoint cannot be encoded: {0}")]
    Encode(#[source] serde_json::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// The checkpoint's path in `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(CHECKPOINT_FILE)
}

/// Writes `checkpoint` into `data_dir`, durably and atomically (see the module docs).
pub fn write(data_dir: &Path, checkpoint: &BucketCheckpoint) -> Result<(), CheckpointError> {
    let bytes = serde_json::to_vec(checkpoint).map_err(CheckpointError::Encode)?;
    let tmp = data_dir.join(CHECKPOINT_TMP);
    let written = File::create(&tmp).and_then(|mut file| {
        file.write_all(&bytes)?;
        file.sync_all()
    });
    if let Err(source) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io(&tmp)(source));
    }
    let target = path(data_dir);
    fs::rename(&tmp, &target).map_err(io(&target))?;
    sync_dir(data_dir)
}

/// The checkpoint in `data_dir`, `None` if there is none.
pub fn read(data_dir: &Path) -> Result<Option<BucketCheckpoint>, CheckpointError> {
    let path = path(data_dir);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    let checkpoint: BucketCheckpoint =
        serde_json::from_slice(&bytes).map_err(|source| CheckpointError::Parse {
            path: path.display().to_string(),
            source,
        })?;
    if checkpoint.format != CHECKPOINT_FORMAT {
        return Err(CheckpointError::Format {
            path: path.display().to_string(),
            found: checkpoint.format,
        });
    }
    Ok(Some(checkpoint))
}

/// Removes the checkpoint (and a temporary file a crash left) from `data_dir`, durably;
/// nothing to remove is not an error.
pub fn remove(data_dir: &Path) -> Result<(), CheckpointError> {
    for name in [CHECKPOINT_FILE, CHECKPOINT_TMP] {
        let file = data_dir.join(name);
        match fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&file)(e)),
        }
    }
    sync_dir(data_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstile_admission::ScopeLevels;

    fn checkpoint() -> BucketCheckpoint {
        let levels = BucketLevels {
            read_at_ms: 1_000,
            workspace: ScopeLevels {
                requests: None,
                tokens: Some(u128::from(u64::MAX) * 1_000),
            },
            providers: [(
                "jev".to_owned(),
                ScopeLevels {
                    requests: Some(42),
                    tokens: None,
                },
            )]
            .into_iter()
            .collect(),
            principals: BTreeMap::new(),
        };
        BucketCheckpoint::new(Some(900), [("w".to_owned(), levels)].into_iter().collect())
    }

    #[test]
    fn a_checkpoint_round_trips_and_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        write(dir.path(), &checkpoint()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(checkpoint()));
        assert!(!dir.path().join(CHECKPOINT_TMP).exists());
        let text = fs::read_to_string(path(dir.path())).unwrap();
        assert!(
            text.starts_with(r#"{"format":"turnstile-bucket-checkpoint/v1","lastGrantAtMs":900,"#),
            "{text}"
        );
        remove(dir.path()).unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        remove(dir.path()).unwrap();
    }

    #[test]
    fn an_unknown_format_field_or_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // Levels above `u64::MAX` do not fit a `serde_json::Value`: edit the text.
        let text = serde_json::to_string(&checkpoint()).unwrap();
        let extra = text.replacen('{', "{\"extra\":1,", 1);
        fs::write(path(dir.path()), extra).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(CheckpointError::Parse { .. })
        ));
        let mut other = checkpoint();
        other.format = "turnstile-bucket-checkpoint/v2".into();
        fs::write(path(dir.path()), serde_json::to_vec(&other).unwrap()).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(CheckpointError::Format { .. })
        ));
        fs::write(path(dir.path()), b"{\"format\":").unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(CheckpointError::Parse { .. })
        ));
    }
}
