//! Operations endpoints: `/healthz` (the process answers), `/readyz` (start-up finished, not
//! shutting down, and the lease log takes writes), `/metrics` (Prometheus text, one registry: [`exposition`]), `/openapi.json`,
//! and the typed 404 / 405.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use turnstile_shell::{Exposition, METRICS_CONTENT_TYPE};

use crate::api::AppState;
use crate::http::error::ApiError;

/// The OpenAPI 3.1 document of every route, the proxy's included (checked against
/// [`crate::http::routes::ROUTES`] and [`turnstile_proxy::ROUTES`] by a test).
pub const OPENAPI: &str = include_str!("../../openapi.json");

pub async fn healthz() -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        "{\"status\":\"ok\"}",
    )
}

/// Ready: 200 once start-up finished, 503 while starting or shutting down. A replica says
/// how it coordinates (`"coordination": "healthy" | "degraded" | "reconciling"`), and when not
/// healthy the kind of its last failed Redis call (`"coordinationFailure": "timeout" |
/// "redis" | "protocol" | …`); one that is degraded with a `closed` share admits nothing, so
/// it answers 503 (a load balancer drains it). While a lease log write failed and the log is
/// not repaired yet, every grant is refused: 503 with `"journal": "failing"` (issue 34).
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let ready = state.ready.load(Ordering::Relaxed);
    if ready && state.journal.is_failing() {
        let body = Readiness {
            journal: Some(JournalState::Failing),
            ..Readiness::of(false)
        };
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body));
    }
    let (status, body) = match (ready, state.books.coordination()) {
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, Readiness::of(false)),
        (true, None) => (StatusCode::OK, Readiness::of(true)),
        (true, Some(coordination)) => {
            let status = if coordination.serving {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            let body = Readiness {
                coordination: Some(coordination.health),
                coordination_failure: coordination.failure,
                ..Readiness::of(coordination.serving)
            };
            (status, body)
        }
    };
    (status, Json(body))
}

/// The `/readyz` answer: `{"status":…}`, and on a replica how it coordinates.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Readiness {
    status: ReadyStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    coordination: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    coordination_failure: Option<&'static str>,
    /// Absent while the lease log takes writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    journal: Option<JournalState>,
}

/// Why the lease log keeps the service from being ready.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "kebab-case")]
enum JournalState {
    /// A write failed; the log retries until it is repaired, refusing every grant meanwhile.
    Failing,
}

impl Readiness {
    fn of(ready: bool) -> Self {
        Readiness {
            status: if ready {
                ReadyStatus::Ready
            } else {
                ReadyStatus::NotReady
            },
            coordination: None,
            coordination_failure: None,
            journal: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "kebab-case")]
enum ReadyStatus {
    Ready,
    NotReady,
}

/// `/metrics`: the text of [`exposition`], read now.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        state.exposition.text(),
    )
}

/// The one registry of `/metrics`, built once at start-up: every part's collector, each
/// family written once, in this order: admission decisions and breaker transitions, the
/// driver's leases and waiters, the HTTP service, the proxy's lanes, then what the deployment
/// adds (on a replica: coordination and the identity mirror). Collectors read the parts'
/// atomics at scrape time.
pub fn exposition(
    telemetry: &turnstile_shell::Telemetry,
    lease_metrics: &Arc<turnstile_shell::LeaseMetrics>,
    metrics: &Arc<crate::metrics::Metrics>,
    proxy: &turnstile_proxy::Proxy,
) -> Exposition {
    Exposition::new()
        .with(telemetry.collector())
        .with(Arc::clone(lease_metrics))
        .with(Arc::clone(metrics))
        .with(Arc::clone(proxy.metrics()))
}

pub async fn openapi() -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
}

pub async fn not_found() -> ApiError {
    ApiError::NotFound {
        code: "not-found",
        message: "no such route".into(),
    }
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_bytes_are_what_readyz_has_always_answered() {
        let json = |r: &Readiness| serde_json::to_string(r).unwrap();
        assert_eq!(json(&Readiness::of(false)), r#"{"status":"not-ready"}"#);
        assert_eq!(json(&Readiness::of(true)), r#"{"status":"ready"}"#);
        let replica = Readiness {
            coordination: Some("healthy"),
            ..Readiness::of(true)
        };
        assert_eq!(
            json(&replica),
            r#"{"status":"ready","coordination":"healthy"}"#
        );
        let failing = Readiness {
            coordination: Some("degraded"),
            coordination_failure: Some("timeout"),
            ..Readiness::of(false)
        };
        assert_eq!(
            json(&failing),
            r#"{"status":"not-ready","coordination":"degraded","coordinationFailure":"timeout"}"#
        );
        let journal = Readiness {
            journal: Some(JournalState::Failing),
            ..Readiness::of(false)
        };
        assert_eq!(
            json(&journal),
            r#"{"status":"not-ready","journal":"failing"}"#
        );
    }
}
