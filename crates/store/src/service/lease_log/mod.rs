//! The lease log: where the service journals every grant, release and budget release, and
//! every Retry-After pause and breaker transition a restart puts back, before it answers (issue 14: leases survive a crash of the process), as an append-only file the
//! driver writes itself.
//!
//! Why not SQLite: a grant and a release are each one tiny record that must reach the operating
//! system before the reply goes out. Through the store thread and a SQLite transaction that
//! cost a thread hop and a B-tree update per driver batch (measured: saturation 6,700 pairs/s
//! against 9,000–10,000 without a journal, request p50 0.3 → 0.65 ms at 3,000 pairs/s). One
//! `write(2)` of the batch's lines from the driver task costs a few microseconds, and the bytes
//! are in the page cache, which a crash of the process does not lose.
//!
//! # Files (in `leases/` of the data directory, format in `record.rs`)
//!
//! - `segment-N.jsonl`: the changes in driver order. Exactly one segment is open for writing,
//!   the highest; at `segment_bytes` the writer opens segment N+1 and asks the compaction
//!   thread to fold segments ≤ N into the snapshot.
//! - `snapshot.jsonl`: the state (held leases, spend lines, lanes' pauses and open breakers)
//!   through segment S, written to a temporary file and renamed, so it is always whole. Segments ≤ S are deleted after the
//!   rename; a crash in between leaves them, and they are skipped.
//!
//! Opening replays the snapshot and every later segment (a torn last line is ignored: it was
//! never acknowledged), starts a new segment, writes a fresh snapshot through the last old
//! segment and deletes the rest, so each process starts from one snapshot and writes one new
//! segment. Before it replays, it checks that the files cover the log's whole history
//! (`coverage.rs`: no segment missing, no snapshot deleted, no segment without its header)
//! and refuses with [`LeaseLogError::Damaged`], naming the file, unless told to accept the
//! loss ([`OnDamage::Accept`]).
//!
//! # Durability ([`LeaseDurability`])
//!
//! - `Process`: a batch is acknowledged once `write(2)` returned. A crash of the process keeps
//!   it (the page cache belongs to the kernel); a crash of the machine may lose the last
//!   seconds of grants.
//! - `Machine`: a batch is acknowledged once a `fdatasync` of its segment returned. The sync
//!   thread syncs once for every batch written meanwhile (group commit), new files and renames
//!   are followed by a sync of the directory.
//!
//! Invariants: records reach the file in the order `append` was called; `done` of a batch runs
//! only after its bytes are written (and synced at `Machine`), or with `Err`; after a failed
//! write the log refuses every later batch (a partial line in the middle of a segment would
//! otherwise hide the records behind it), so the driver fails grants closed, and says so
//! ([`LeaseLogStats::is_failing`], `/readyz`), until the compaction thread repaired the segment
//! (issue 34, item 7): it retries with a capped backoff (`compact.rs`) to append a probe and cut
//! the segment back to its last acknowledged byte; once that succeeded the log writes again.

mod compact;
mod coverage;
mod legacy;
mod record;
mod state;
mod sync;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub use state::LeaseState;

use self::compact::Compactor;
pub use self::coverage::{Damage, DamageKind, OnDamage};
pub use self::record::LogLine;
use self::record::{encode_line, read_file, FileKind, Header, SnapshotRecord, FORMAT_VERSION};
use self::sync::Syncer;
use super::leases::{
    LeaseChange, LeaseDurability, StoredBreaker, StoredLease, StoredPause, StoredSpend,
};

/// The lease log's directory inside the data directory.
pub const LEASE_LOG_DIR: &str = "leases";
/// The default size at which a segment is closed and folded into the snapshot.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

const SNAPSHOT_FILE: &str = "snapshot.jsonl";
const SNAPSHOT_TMP: &str = "snapshot.jsonl.tmp";
const SEGMENT_TMP: &str = "segment.jsonl.tmp";

/// Why the lease log cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LeaseLogError {
    /// A file of the log could not be read or written.
    #[error("lease log {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// A line that is not a record (other than a torn last line).
    #[error("lease log {path}, line {line}: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// The line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A record could not be encoded.
    #[error("a lease log record cannot be encoded: {0}")]
    Encode(#[source] serde_json::Error),
    /// A lease file of an earlier version could not be read.
    #[error("lease file of an earlier version {path}: {source}")]
    Legacy {
        /// The file.
        path: String,
        /// The failure.
        #[source]
        source: rusqlite::Error,
    },
    /// The log does not cover its own history: a file is missing or has lost its header.
    #[error("the lease log is damaged: {0}. Leases it recorded may still be running, and a start from it would grant their slots again. To start anyway, accepting the loss: `turnstile serve --accept-lease-log-loss` (every lane then waits one lease TTL before it grants; docs/server.md, \"Durability\")")]
    Damaged(Damage),
    /// An earlier write failed, so every later batch is refused.
    #[error("the lease log refuses writes after an earlier write failed")]
    Broken,
    /// The sync thread is gone.
    #[error("the lease log's sync thread is gone")]
    SyncGone,
    /// A thread of the log could not be started.
    #[error("the lease log's thread cannot start: {0}")]
    Thread(#[source] std::io::Error),
}

impl LeaseLogError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        LeaseLogError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Called once a batch is durable (`Ok`) or cannot be made durable (`Err`, its message).
pub type Done = Box<dyn FnOnce(Result<(), String>) + Send>;

/// What the log held when it was opened: put it back before serving.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Recovered {
    /// Held leases, oldest grant first.
    pub leases: Vec<StoredLease>,
    /// Spend lines of open invocations.
    pub spend: Vec<StoredSpend>,
    /// The latest `admitted_at_ms` of any grant the log recorded, released leases included
    /// (`None`: it never granted anything). The rate buckets restart as if empty then.
    pub last_grant_at_ms: Option<u64>,
    /// Each lane's latest pause, unless it ended more than
    /// [`PAUSE_KEPT_AFTER_END_MS`](super::PAUSE_KEPT_AFTER_END_MS) before the log was opened.
    pub pauses: Vec<StoredPause>,
    /// Each lane's latest breaker transition, unless it was to closed.
    pub breakers: Vec<StoredBreaker>,
    /// The damage found and accepted ([`OnDamage::Accept`]): the first file missing or
    /// truncated (`None`: the log covered its history).
    pub damage: Option<Damage>,
}

/// Counters of the log's background work (for `/metrics`).
#[derive(Debug, Default)]
pub struct LeaseLogStats {
    /// Bytes appended since the process started.
    pub bytes_written: AtomicU64,
    /// Segments folded into the snapshot.
    pub compactions: AtomicU64,
    /// Compactions that failed (the segments stay; a later one or the next start retries).
    pub compaction_failures: AtomicU64,
    /// Batches refused because a write failed (the one that failed included).
    pub write_failures: AtomicU64,
    /// A write failed and the segment is not repaired yet: every batch is refused.
    failing: AtomicBool,
}

impl LeaseLogStats {
    /// Whether the log refuses every batch now (a write failed, not repaired yet).
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// The segment ends at its last acknowledged byte again: the writer may write.
    fn mark_repaired(&self) {
        self.failing.store(false, Ordering::Release);
    }
}

/// The writer of the lease log (owned by the driver's journal).
pub struct LeaseLog {
    dir: PathBuf,
    durability: LeaseDurability,
    file: Arc<File>,
    segment: u64,
    /// Bytes counted towards the next rotation.
    written: u64,
    /// The segment's length: every byte of it acknowledged or being acknowledged.
    len: u64,
    segment_bytes: u64,
    buf: Vec<u8>,
    broken: bool,
    compactor: Compactor,
    syncer: Option<Syncer>,
    stats: Arc<LeaseLogStats>,
}

fn segment_name(segment: u64) -> String {
    format!("segment-{segment:020}.jsonl")
}

/// The segment number of a file name, when it is a segment.
fn segment_number(name: &str) -> Option<u64> {
    name.strip_prefix("segment-")?
        .strip_suffix(".jsonl")?
        .parse()
        .ok()
}

/// Every segment file in `dir`, by number.
fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, LeaseLogError> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| LeaseLogError::io(dir, e))? {
        let entry = entry.map_err(|e| LeaseLogError::io(dir, e))?;
        if let Some(n) = entry.file_name().to_str().and_then(segment_number) {
            found.push((n, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// Makes a directory's entries (new files, renames) durable.
fn sync_dir(dir: &Path) -> Result<(), LeaseLogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LeaseLogError::io(dir, e))
}

/// The snapshot's state and the last segment it covers (0: none).
fn read_snapshot(dir: &Path, state: &mut LeaseState) -> Result<u64, LeaseLogError> {
    Ok(read_snapshot_if_any(dir, state)?.unwrap_or(0))
}

/// The snapshot's state and the last segment it covers (`None`: no snapshot).
fn read_snapshot_if_any(dir: &Path, state: &mut LeaseState) -> Result<Option<u64>, LeaseLogError> {
    let path = dir.join(SNAPSHOT_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let header = read_file(&path, FileKind::Snapshot, |record| match record {
        SnapshotRecord::Held(lease) => state.restore_lease(lease),
        SnapshotRecord::Spend(line) => state.restore_spend(line),
        SnapshotRecord::Pause(pause) => state.restore_pause(pause),
        SnapshotRecord::Breaker(transition) => state.restore_breaker(transition),
    })?;
    state.note_grant_at(header.and_then(|h| h.last_grant_at_ms));
    header
        .map(|h| Some(h.segment))
        .ok_or_else(|| LeaseLogError::Corrupt {
            path: path.display().to_string(),
            line: 1,
            reason: "a snapshot without a header".into(),
        })
}

/// Applies segment `n` at `path` to `state`; `Ok(false)`: it has no header (truncated).
fn replay_segment(path: &Path, n: u64, state: &mut LeaseState) -> Result<bool, LeaseLogError> {
    let header = read_file(path, FileKind::Segment, |change: LeaseChange| {
        state.apply(change)
    })?;
    match header {
        Some(h) if h.segment != n => Err(LeaseLogError::Corrupt {
            path: path.display().to_string(),
            line: 1,
            reason: format!("the header names segment {}", h.segment),
        }),
        header => Ok(header.is_some()),
    }
}

/// Writes `state` as the snapshot through `segment` (temporary file, then rename), then deletes
/// the segments it covers. Pauses that ended are forgotten first.
fn write_snapshot(
    dir: &Path,
    state: &mut LeaseState,
    segment: u64,
    durability: LeaseDurability,
) -> Result<(), LeaseLogError> {
    let tmp = dir.join(SNAPSHOT_TMP);
    let mut out = std::io::BufWriter::with_capacity(
        1 << 16,
        File::create(&tmp).map_err(|e| LeaseLogError::io(&tmp, e))?,
    );
    state.forget_ended_pauses(now_epoch_ms());
    let mut buf = Vec::with_capacity(512);
    let header = Header {
        lease_log: FORMAT_VERSION,
        kind: FileKind::Snapshot,
        segment,
        last_grant_at_ms: state.last_grant_at_ms(),
    };
    encode_line(&mut buf, &header)?;
    for lease in state.held_leases() {
        encode_line(&mut buf, &SnapshotRecord::Held(lease.clone()))?;
        if buf.len() >= 1 << 15 {
            out.write_all(&buf)
                .map_err(|e| LeaseLogError::io(&tmp, e))?;
            buf.clear();
        }
    }
    for line in state.spend() {
        encode_line(&mut buf, &SnapshotRecord::Spend(line.clone()))?;
        if buf.len() >= 1 << 15 {
            out.write_all(&buf)
                .map_err(|e| LeaseLogError::io(&tmp, e))?;
            buf.clear();
        }
    }
    // Bounded by the profiles' lanes: no flush needed in between.
    for pause in state.pauses() {
        encode_line(&mut buf, &SnapshotRecord::Pause(pause.clone()))?;
    }
    for transition in state.breakers() {
        encode_line(&mut buf, &SnapshotRecord::Breaker(transition.clone()))?;
    }
    out.write_all(&buf)
        .map_err(|e| LeaseLogError::io(&tmp, e))?;
    let file = out
        .into_inner()
        .map_err(|e| LeaseLogError::io(&tmp, e.into_error()))?;
    if durability == LeaseDurability::Machine {
        file.sync_data().map_err(|e| LeaseLogError::io(&tmp, e))?;
    }
    drop(file);
    let path = dir.join(SNAPSHOT_FILE);
    std::fs::rename(&tmp, &path).map_err(|e| LeaseLogError::io(&path, e))?;
    if durability == LeaseDurability::Machine {
        sync_dir(dir)?;
    }
    for (n, path) in segments(dir)? {
        if n <= segment {
            std::fs::remove_file(&path).map_err(|e| LeaseLogError::io(&path, e))?;
        }
    }
    Ok(())
}

/// The wall clock in epoch milliseconds (0 before 1970: nothing is forgotten then).
fn now_epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Creates segment `n` whole with its header: written to a temporary file and renamed, so a
/// segment without a header was truncated afterwards (`coverage.rs`).
fn create_segment(
    dir: &Path,
    n: u64,
    durability: LeaseDurability,
) -> Result<(File, u64), LeaseLogError> {
    let path = dir.join(segment_name(n));
    if path.exists() {
        return Err(LeaseLogError::io(
            &path,
            std::io::ErrorKind::AlreadyExists.into(),
        ));
    }
    let tmp = dir.join(SEGMENT_TMP);
    // A leftover of a start that died here; appending (not writing at an offset) keeps every
    // write at the end after a repair cut the file back.
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(LeaseLogError::io(&tmp, e)),
    }
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&tmp)
        .map_err(|e| LeaseLogError::io(&tmp, e))?;
    let mut buf = Vec::with_capacity(80);
    encode_line(
        &mut buf,
        &Header {
            lease_log: FORMAT_VERSION,
            kind: FileKind::Segment,
            segment: n,
            last_grant_at_ms: None,
        },
    )?;
    file.write_all(&buf)
        .map_err(|e| LeaseLogError::io(&tmp, e))?;
    if durability == LeaseDurability::Machine {
        file.sync_data().map_err(|e| LeaseLogError::io(&tmp, e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| LeaseLogError::io(&path, e))?;
    if durability == LeaseDurability::Machine {
        sync_dir(dir)?;
    }
    Ok((file, buf.len() as u64))
}

impl LeaseLog {
    /// Opens the log in `data_dir/leases` (creating it), replays it, compacts it into one
    /// snapshot and starts a new segment. A data directory written by the interim SQLite lease
    /// file (`service.leases.sqlite3`) is imported once and that file removed. A log that does
    /// not cover its own history is refused ([`LeaseLogError::Damaged`]).
    pub fn open(
        data_dir: &Path,
        durability: LeaseDurability,
        segment_bytes: u64,
    ) -> Result<(LeaseLog, Recovered), LeaseLogError> {
        LeaseLog::open_checked(data_dir, durability, segment_bytes, OnDamage::Refuse)
    }

    /// [`LeaseLog::open`], with what to do when the log does not cover its own history.
    pub fn open_checked(
        data_dir: &Path,
        durability: LeaseDurability,
        segment_bytes: u64,
        on_damage: OnDamage,
    ) -> Result<(LeaseLog, Recovered), LeaseLogError> {
        let dir = data_dir.join(LEASE_LOG_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| LeaseLogError::io(&dir, e))?;
        let mut state = LeaseState::default();
        let snapshot = read_snapshot_if_any(&dir, &mut state)?;
        let through = snapshot.unwrap_or(0);
        let imported = if snapshot.is_none() {
            legacy::import(data_dir, &mut state)?
        } else {
            None
        };
        let found = segments(&dir)?;
        let mut damage = coverage::check(&dir, snapshot, &found, |n| dir.join(segment_name(n)));
        let mut last = through;
        for (n, path) in found {
            if n > through && !replay_segment(&path, n, &mut state)? {
                damage.push(Damage {
                    path,
                    kind: DamageKind::Headerless,
                });
            }
            last = last.max(n);
        }
        let damage = damage.into_iter().next();
        if let (Some(found), OnDamage::Refuse) = (&damage, on_damage) {
            return Err(LeaseLogError::Damaged(found.clone()));
        }
        // The new segment before the snapshot: a snapshot through S is always followed by
        // segment S+1 (`coverage.rs`).
        let segment = last + 1;
        let (file, written) = create_segment(&dir, segment, durability)?;
        write_snapshot(&dir, &mut state, last, durability)?;
        if let Some(legacy) = imported {
            legacy.remove()?;
        }
        let recovered = Recovered {
            leases: state.held_leases().cloned().collect(),
            spend: state.spend().into_iter().cloned().collect(),
            last_grant_at_ms: state.last_grant_at_ms(),
            pauses: state.pauses().into_iter().cloned().collect(),
            breakers: state.breakers().into_iter().cloned().collect(),
            damage,
        };
        drop(state);
        let stats = Arc::new(LeaseLogStats::default());
        let compactor = Compactor::spawn(dir.clone(), durability, stats.clone())?;
        let syncer = match durability {
            LeaseDurability::Process => None,
            LeaseDurability::Machine => Some(Syncer::spawn()?),
        };
        let log = LeaseLog {
            dir,
            durability,
            file: Arc::new(file),
            segment,
            written,
            len: written,
            segment_bytes: segment_bytes.max(1),
            buf: Vec::with_capacity(4096),
            broken: false,
            compactor,
            syncer,
            stats,
        };
        Ok((log, recovered))
    }

    /// Appends one batch of changes, in order; `done` runs once they are durable (at once for
    /// `Process`, on the sync thread for `Machine`) or failed.
    /// A change is a [`LeaseChange`] or its borrowed form ([`LeaseChangeRef`](crate::service::LeaseChangeRef)),
    /// the driver's, written by a hand encoder (`LogLine`).
    pub fn append<C: LogLine>(&mut self, changes: impl IntoIterator<Item = C>, done: Done) {
        match self.write_batch(changes) {
            Err(error) => done(Err(error.to_string())),
            Ok(()) => match &self.syncer {
                None => done(Ok(())),
                Some(syncer) => syncer.sync(self.file.clone(), done),
            },
        }
        if self.written >= self.segment_bytes && !self.broken {
            self.rotate();
        }
    }

    fn write_batch<C: LogLine>(
        &mut self,
        changes: impl IntoIterator<Item = C>,
    ) -> Result<(), LeaseLogError> {
        if self.broken {
            // Repaired by the compaction thread: the file ends at `written` again.
            if self.stats.is_failing() {
                self.stats.write_failures.fetch_add(1, Ordering::Relaxed);
                return Err(LeaseLogError::Broken);
            }
            self.broken = false;
        }
        self.buf.clear();
        for change in changes {
            change.write_json(&mut self.buf)?;
            self.buf.push(b'\n');
        }
        if let Err(source) = (&*self.file).write_all(&self.buf) {
            self.broken = true;
            self.stats.write_failures.fetch_add(1, Ordering::Relaxed);
            self.stats.failing.store(true, Ordering::Release);
            self.compactor.repair(self.file.clone(), self.len);
            return Err(LeaseLogError::io(
                &self.dir.join(segment_name(self.segment)),
                source,
            ));
        }
        self.written += self.buf.len() as u64;
        self.len += self.buf.len() as u64;
        self.stats
            .bytes_written
            .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Starts the next segment and hands the closed ones to the compaction thread. A segment
    /// that cannot be created leaves the current one open (it only grows; retried after another
    /// `segment_bytes`).
    fn rotate(&mut self) {
        match create_segment(&self.dir, self.segment + 1, self.durability) {
            Ok((file, written)) => {
                self.file = Arc::new(file);
                self.compactor.compact_through(self.segment);
                self.segment += 1;
                self.written = written;
                self.len = written;
            }
            Err(_) => {
                self.stats
                    .compaction_failures
                    .fetch_add(1, Ordering::Relaxed);
                self.written = 0;
            }
        }
    }

    /// The log's counters.
    pub fn stats(&self) -> Arc<LeaseLogStats> {
        self.stats.clone()
    }

    /// The segment being written (tests and diagnostics).
    pub fn current_segment(&self) -> u64 {
        self.segment
    }

    /// Waits until every compaction asked for so far has run (tests).
    pub fn wait_for_compaction(&self) {
        self.compactor.wait_idle();
    }
}
