//! turnstile-shell: the async shell every host of the admission core shares.
//!
//! - [`Clock`]: the one clock. Epoch milliseconds on tokio time, so it follows
//!   `tokio::time::pause()`; the only place the shells read time.
//! - [`Driver`]: the one task that owns the admission [`Registry`](turnstile_admission::Registry),
//!   arms one timer, keeps the lease table (unguessable tokens, optional TTL, each lease owning
//!   its span) and hands events to a [`Journal`]; hosts talk to it through a [`DriverHandle`]
//!   and hold [`Grant`]s, which give their permit back on drop.
//! - [`telemetry`]: `decision.admit` spans, breaker events, one metrics family fed to both
//!   OpenTelemetry and the Prometheus text of `/metrics`, structured logs.
//! - [`Exposition`]: the one `/metrics` registry (`prometheus-client`) every part's counters
//!   join as a [`Collector`].
//!
//! The core ([`turnstile_admission`]) decides; this crate only carries: it reads the clock, arms
//! one timer at the core's `poll_timeout()`, delivers resolutions and events, and never makes
//! an admission decision of its own.
//!
//! # Layout
//!
//! Every module is private; the crate's API is what this file re-exports, plus [`telemetry`]
//! (its attribute names and, with the `otlp` feature, the OTLP pipeline).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod clock;
mod command;
mod driver;
mod error;
mod exposition;
mod fairness;
mod feed;
mod grant;
mod handle;
mod journal;
mod lease_metrics;
mod lease_table;
mod log;
mod pause;
mod rollout;
mod shared;
pub mod telemetry;

pub use clock::Clock;
pub use command::{
    Acquire, AcquireCommand, AcquireReply, Command, LaneLimits, Standing, Wait, WorkspaceSnapshot,
};
pub use driver::{Driver, DriverConfig, ReinstateFailure};
pub use error::DriverError;
pub use exposition::{
    metric_family, plain_metrics, Collector, DescriptorEncoder, Exposition, MetricKind,
    MetricSeries, CONTENT_TYPE as METRICS_CONTENT_TYPE,
};
pub use fairness::{
    FairnessView, FairnessWindows, MinuteGrants, PrincipalShare, ProviderFairness, TokensServed,
};
pub use feed::{DecisionCount, Feed, FeedEvent, Pause, PrincipalTally};
pub use grant::Grant;
pub use handle::{CancelGuard, DriverHandle, Submitted};
pub use journal::{Approval, Done, HeldLease, Journal, LeaseEvent, NoJournal, Registration};
pub use lease_metrics::LeaseMetrics;
pub use lease_table::{LeaseToken, RandomError};
pub use pause::{PauseCause, JOURNAL_EXTENSION_MS, PAUSE_RECORD_SCHEMA};
/// Rollouts through the driver: the commands and what a promote answers.
pub use rollout::{Promoted, RolloutCommand};
pub use shared::{
    Admitting, SharedFuture, SharedHook, SharedLimits, SharedTry, SharedVerdict, SHARED_POLL_MS,
};
pub use telemetry::{AdmitSpan, LogLevel, LogRecord, LogSink, Telemetry};
