//! The durable shapes of held leases and budget spend (issue 14: leases survive a crash of the
//! process), and the rules a [`ServiceStore`](super::ServiceStore) applies to them.
//!
//! The service journals every grant, release and budget release as a [`LeaseChange`], in the
//! order its driver applied them, in batches, into the lease log ([`super::LeaseLog`]); the
//! replies of a batch go out only after it was written. On start the service reads the held
//! leases and the spend back and reinstates them in the admission core.
//!
//! # Rules
//!
//! - `Granted` stores the lease under its token and adds its charge to the spend line of its
//!   invocation and lane (workspace, budget, principal, provider).
//! - `Released` forgets the lease. With actual usage, the lease's charged tokens / cost are
//!   replaced by the actual ones in its spend line (never below zero), as the core corrects its
//!   own budgets; a lease whose budget was released since corrects nothing. An unknown token
//!   changes nothing.
//! - `BudgetReleased` forgets every spend line of the invocation, and detaches its held leases
//!   from it (their `budget_id` becomes `None`), so a later opening of the same budget ID is
//!   never corrected by an older lease.
//! - `Paused` keeps the latest pause end of its (workspace, provider) lane; a pause that ended
//!   (more than [`PAUSE_KEPT_AFTER_END_MS`] ago, when a snapshot is written) is forgotten.
//! - `Breaker` keeps the latest transition of its (workspace, provider) lane; a transition to
//!   [`BREAKER_CLOSED`] forgets the lane's entry (a closed breaker needs nothing at restart).
//!
//! Pauses and breaker transitions travel in the same batches as grants and releases, so the
//! answer that caused one waits until it is written (a restart pauses the lane again and
//! reopens its breaker from the log). Both are bounded by the lanes the profiles name.
//!
//! The store keeps plain numbers and IDs, never admission types, like the rest of this module.

use serde::{Deserialize, Serialize};

/// How far an acknowledged grant or release survives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LeaseDurability {
    /// A crash of the process (SIGKILL, panic, OOM kill): a batch is acknowledged once it was
    /// written to the log file (it is in the kernel's page cache, not yet on the disk).
    #[default]
    Process,
    /// A crash of the machine (power loss, kernel panic) too: a batch is acknowledged once a
    /// `fdatasync` of the log that started after its write returned (one per group of batches).
    Machine,
}

impl LeaseDurability {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseDurability::Process => "process",
            LeaseDurability::Machine => "machine",
        }
    }
}

/// One held lease as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredLease {
    /// The lease ID its holder knows (32 hex digits).
    pub token: String,
    /// The workspace.
    pub workspace_id: String,
    /// The principal holding it.
    pub principal_id: String,
    /// The provider lane.
    pub provider_id: String,
    /// The invocation charged; `None` once its budget was released.
    pub budget_id: Option<String>,
    /// What the invocation was charged at admission.
    pub attempts: u64,
    /// Tokens charged, when estimated.
    pub tokens: Option<u64>,
    /// Cost charged in USD, when estimated.
    pub cost_usd: Option<f64>,
    /// When it was granted.
    pub admitted_at_ms: u64,
    /// When the lease expires without a heartbeat, as granted (`None`: never).
    pub expires_at_ms: Option<u64>,
}

/// What one invocation has spent on one lane (live leases' estimates and released leases'
/// corrected usage).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredSpend {
    /// The workspace.
    pub workspace_id: String,
    /// The invocation.
    pub budget_id: String,
    /// The principal.
    pub principal_id: String,
    /// The provider lane.
    pub provider_id: String,
    /// Attempts spent.
    pub attempts: u64,
    /// Tokens spent.
    pub tokens: u64,
    /// Cost spent in USD.
    pub cost_usd: f64,
}

/// A pause is kept this long after its end (a restart adds the shell's journaling slack to
/// the end it restores, so a pause that only just ended may still be in force after it).
pub const PAUSE_KEPT_AFTER_END_MS: u64 = 60_000;

/// The breaker state that needs nothing at restart (its transition forgets the lane's entry).
pub const BREAKER_CLOSED: &str = "closed";

/// The latest Retry-After pause of a provider lane, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredPause {
    /// The workspace.
    pub workspace_id: String,
    /// The provider lane.
    pub provider_id: String,
    /// When the lane's pause ends (epoch milliseconds).
    pub until_epoch_ms: u64,
}

/// The latest breaker transition of a provider lane, as stored (states in the spec's
/// spelling: `closed`, `open`, `half-open`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredBreaker {
    /// The workspace.
    pub workspace_id: String,
    /// The provider lane.
    pub provider_id: String,
    /// The state before.
    pub from: String,
    /// The state after.
    pub to: String,
    /// When it changed.
    pub at_epoch_ms: u64,
    /// Consecutive failures counted when it changed.
    pub failures: u32,
}

/// One change to the held leases or the spend, as the service's driver made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum LeaseChange {
    /// A lease was granted.
    Granted(StoredLease),
    /// Released by its holder, reclaimed, or expired; with what the call actually used, when
    /// reported.
    Released {
        /// The lease released.
        token: String,
        /// The tokens the call used, when reported.
        actual_tokens: Option<u64>,
        /// The cost in USD the call had, when reported.
        actual_cost_usd: Option<f64>,
    },
    /// An invocation's budget was released.
    BudgetReleased {
        /// The workspace.
        workspace_id: String,
        /// The invocation.
        budget_id: String,
    },
    /// A provider lane was paused (or its pause extended) until `until_epoch_ms`.
    Paused {
        /// The workspace.
        workspace_id: String,
        /// The provider lane.
        provider_id: String,
        /// When the pause ends (epoch milliseconds).
        until_epoch_ms: u64,
    },
    /// A provider lane's breaker changed state.
    Breaker(StoredBreaker),
}

/// `spent` with a charge replaced by the actual amount (never below zero).
pub(crate) fn corrected_tokens(spent: u64, charged: Option<u64>, actual: u64) -> u64 {
    spent
        .saturating_sub(charged.unwrap_or(0))
        .saturating_add(actual)
}

/// `spent` with a charged cost replaced by the actual one (never below zero).
pub(crate) fn corrected_cost(spent: f64, charged: Option<f64>, actual: f64) -> f64 {
    (spent - charged.unwrap_or(0.0)).max(0.0) + actual
}
