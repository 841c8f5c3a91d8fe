//! Structured log records of admission telemetry: one per non-admit decision and per breaker
//! transition. Fields are fixed vocabularies, counts and the adapter id — the same information
//! as the span, so a log line can never carry more than the span does.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

/// Severity of a [`LogRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Informational.
    Info,
    /// A warning.
    Warn,
}

/// One log line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogRecord {
    /// The severity.
    pub level: LogLevel,
    /// A constant message (`admission throttled`, `breaker transition`).
    pub message: &'static str,
    /// Attributes of the record (fixed vocabularies, never a tenant ID).
    pub attributes: BTreeMap<&'static str, String>,
}

/// Where log records go (a host logger, a test buffer). A panicking sink is ignored.
pub type LogSink = Arc<dyn Fn(&LogRecord) + Send + Sync>;
