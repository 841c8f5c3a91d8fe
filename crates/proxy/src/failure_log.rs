//! The log line of an upstream failure (`turnstile::proxy`, `warn`): which upstream failed, on
//! which provider lane, and how ([`FailureKind`]), whether the call failed before its answer
//! began or its streamed answer broke off midway.
//!
//! # Invariants
//!
//! - A line names the upstream (a name from the proxy config), the provider lane (a lane name
//!   of the profile) and a kind from a closed vocabulary: never a key, a principal, a workspace
//!   or the upstream's own text.
//! - One line per failed call attempt (a failover attempt that failed is a line of its own).

use std::sync::Arc;

use crate::deployment_config::Deployment;

/// How an upstream call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureKind {
    /// No connection could be made (the request never left).
    Unreachable,
    /// The connection broke before the answer's head.
    ConnectionLost,
    /// No answer head within `proxy.first_byte_timeout_ms`.
    FirstByteTimeout,
    /// The upstream answered 5xx.
    ServerError,
    /// A whole answer's body broke off, stalled or was too large.
    BodyBroken,
    /// A streamed answer's body broke off midway (the client's stream is cut).
    StreamBroken,
    /// A streamed answer stalled longer than `proxy.idle_timeout_ms`.
    StreamStalled,
}

impl FailureKind {
    /// Its name in the log (`kind`).
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            FailureKind::Unreachable => "unreachable",
            FailureKind::ConnectionLost => "connection-lost",
            FailureKind::FirstByteTimeout => "first-byte-timeout",
            FailureKind::ServerError => "server-error",
            FailureKind::BodyBroken => "body-broken",
            FailureKind::StreamBroken => "stream-broken",
            FailureKind::StreamStalled => "stream-stalled",
        }
    }
}

/// Where a call was sent, as its failure's log line names it.
#[derive(Debug, Clone)]
pub(crate) struct FailureSite {
    /// The upstream's name (proxy config).
    upstream: Arc<str>,
    /// The provider lane that admitted the call.
    lane: Arc<str>,
}

impl FailureSite {
    /// The site of a call sent to `deployment`.
    pub(crate) fn of(deployment: &Deployment) -> Self {
        FailureSite {
            upstream: deployment.upstream.name.clone(),
            lane: deployment.provider.clone(),
        }
    }

    /// Logs one failure of the call.
    pub(crate) fn failed(&self, kind: FailureKind) {
        tracing::warn!(
            target: "turnstile::proxy",
            upstream = &*self.upstream,
            lane = &*self.lane,
            kind = kind.as_str(),
            "upstream failure"
        );
    }
}
