//! A Retry-After pause of a provider lane, as the driver reports it to the event feed and the
//! journal (the console's "breakers and pauses" history).
//!
//! Invariants: a pause is journaled when no journaled pause of its lane is in force or it moves
//! the end of the lane's last journaled pause by at least [`JOURNAL_EXTENSION_MS`], so the
//! journaled end is never more than that before the real one (a restart pauses the lane again
//! until the journaled end plus [`JOURNAL_EXTENSION_MS`]); a [`Pause`] names a provider
//! lane, never a principal, workspace or budget ID
//! (the journal files it under its workspace); `until_epoch_ms` is the instant the lane's pause
//! ends after this pause was applied (the core keeps the later of an existing pause and the new
//! one), so it is never before `at_epoch_ms + retry_after_ms` unless the core capped it.

use serde::Serialize;
use turnstile_admission::Millis;

/// A pause that only moves the end of a pause already in force by less than this is reported
/// to the feed but not journaled: the audit log gets at most one pause record per second and
/// provider lane, however often principals relay Retry-After (their calls are client input).
pub const JOURNAL_EXTENSION_MS: Millis = 1_000;

/// Schema of a pause's audit record.
pub const PAUSE_RECORD_SCHEMA: &str = "turnstile-provider-pause/v1";

/// Why a provider lane was paused: which call asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PauseCause {
    /// `POST /v1/providers/{providerId}/retry-after` (a principal relayed a provider's
    /// Retry-After without holding a lease).
    RetryAfterCall,
    /// A lease released with outcome `retry-after` (the call the lease allowed was told to
    /// back off).
    ReleaseOutcome,
}

/// A Retry-After pause of a provider lane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pause {
    /// The provider lane.
    pub provider_id: String,
    /// How long the provider asked to wait.
    pub retry_after_ms: Millis,
    /// When the pause ends.
    pub until_epoch_ms: Millis,
    /// When it was applied.
    pub at_epoch_ms: Millis,
    /// Which call asked for it.
    pub cause: PauseCause,
}
