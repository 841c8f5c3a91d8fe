//! The lease log's file format: JSON lines, one record per line, each file opening with a
//! header line that names what it is.
//!
//! - A **segment** (`segment-NNNNNNNNNNNNNNNNNNNN.jsonl`) holds `LeaseChange`s in the order the
//!   driver applied them: `{"granted":{…}}`, `{"released":{…}}`, `{"budgetReleased":{…}}`,
//!   `{"paused":{…}}` (a lane's pause end), `{"breaker":{…}}` (a lane's breaker transition).
//! - The **snapshot** (`snapshot.jsonl`) holds the state through a segment number: the held
//!   leases in grant order (`{"held":{…}}`, their charge already counted), the spend lines
//!   (`{"spend":{…}}`), each lane's latest pause that has not ended (`{"pause":{…}}`) and each
//!   lane's latest breaker transition that is not to closed (`{"breaker":{…}}`); logs written
//!   before pauses and breakers were kept simply hold none. Its header also keeps the instant of the latest grant
//!   (`lastGrantAtMs`), which outlives the released leases it came from.
//!
//! Invariant: a line is complete only with its `\n`. The one line a crash can tear is the
//! last line of a file, which lacks its `\n` (or holds the zeros of a page the machine never
//! wrote): it was never acknowledged and is ignored. Any other line that does not parse is
//! corruption and stops the start with the file and line number.

use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::LeaseLogError;
use crate::service::leases::{LeaseChange, StoredBreaker, StoredLease, StoredPause, StoredSpend};
use crate::service::LeaseChangeRef;

/// The format version in every header.
pub const FORMAT_VERSION: u32 = 1;

/// The first line of every file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Header {
    pub lease_log: u32,
    pub kind: FileKind,
    /// A segment's own number; a snapshot's last covered segment.
    pub segment: u64,
    /// A snapshot's: the latest `admittedAtMs` of any grant through its segment, released
    /// leases included (the instant from which a restart refills the rate buckets). Absent in
    /// segments, and in snapshots written before it existed or of a log that never granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_grant_at_ms: Option<u64>,
}

/// What a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FileKind {
    Segment,
    Snapshot,
}

/// A line of the snapshot after its header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SnapshotRecord {
    Held(StoredLease),
    Spend(StoredSpend),
    Pause(StoredPause),
    Breaker(StoredBreaker),
}

/// A change the lease log can append as one line.
pub trait LogLine {
    /// Appends this change's JSON (no `\n`) to `buf`.
    fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), LeaseLogError>;
}

impl LogLine for LeaseChange {
    fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), LeaseLogError> {
        serde_json::to_writer(&mut *buf, self).map_err(LeaseLogError::Encode)
    }
}

impl LogLine for &LeaseChange {
    fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), LeaseLogError> {
        (*self).write_json(buf)
    }
}

/// The driver's records: written by the hand encoder, byte for byte serde's encoding.
impl<T: std::fmt::Display> LogLine for LeaseChangeRef<'_, T> {
    fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), LeaseLogError> {
        LeaseChangeRef::write_json(self, buf).map_err(LeaseLogError::Encode)
    }
}

/// Appends `value` and its `\n` to `buf`.
pub fn encode_line(buf: &mut Vec<u8>, value: &impl Serialize) -> Result<(), LeaseLogError> {
    serde_json::to_writer(&mut *buf, value).map_err(LeaseLogError::Encode)?;
    buf.push(b'\n');
    Ok(())
}

/// Reads one file: checks its header is `kind` (returns it) and hands every complete record to
/// `each`, in order. `None`: the file holds no complete line (created, then the process died
/// before its header was written).
pub fn read_file<T: for<'de> Deserialize<'de>>(
    path: &Path,
    kind: FileKind,
    mut each: impl FnMut(T),
) -> Result<Option<Header>, LeaseLogError> {
    let file = std::fs::File::open(path).map_err(|source| LeaseLogError::io(path, source))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let corrupt = |line: usize, reason: String| LeaseLogError::Corrupt {
        path: path.display().to_string(),
        line,
        reason,
    };
    let mut header = None;
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| LeaseLogError::io(path, source))?;
        if read == 0 {
            break;
        }
        number += 1;
        if line.last() != Some(&b'\n') {
            // A torn last line: never acknowledged.
            break;
        }
        let text = &line[..line.len() - 1];
        if header.is_none() {
            let parsed: Header = serde_json::from_slice(text)
                .map_err(|e| corrupt(number, format!("bad header: {e}")))?;
            if parsed.lease_log != FORMAT_VERSION || parsed.kind != kind {
                return Err(corrupt(
                    number,
                    format!(
                        "expected a {kind:?} of format {FORMAT_VERSION}, found a {:?} of format {}",
                        parsed.kind, parsed.lease_log
                    ),
                ));
            }
            header = Some(parsed);
            continue;
        }
        match serde_json::from_slice::<T>(text) {
            Ok(record) => each(record),
            Err(e) => {
                // Zeros of a page a machine crash never wrote, up to the end: a torn tail.
                if text.iter().all(|b| *b == 0) && at_end(&mut reader, path)? {
                    break;
                }
                return Err(corrupt(number, e.to_string()));
            }
        }
    }
    Ok(header)
}

fn at_end(reader: &mut impl BufRead, path: &Path) -> Result<bool, LeaseLogError> {
    let rest = reader
        .fill_buf()
        .map_err(|source| LeaseLogError::io(path, source))?;
    Ok(rest.is_empty())
}
