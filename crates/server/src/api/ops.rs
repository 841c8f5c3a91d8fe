//! Operations endpoints: `/healthz` (the process answers), `/readyz` (start-up finished and not
//! shutting down), `/metrics` (Prometheus text, one registry: [`exposition`]), `/openapi.json`,
//! and the typed 404 / 405.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use turnstile_shell::{Exposition, METRICS_CONTENT_TYPE};

use crate::api::{AppParts, AppState};
use crate::error::ApiError;

/// The OpenAPI 3.1 document of every route, the proxy's included (checked against
/// [`crate::routes::ROUTES`] and [`turnstile_proxy::ROUTES`] by a test).
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
/// it answers 503 (a load balancer drains it).
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let ready = state.ready.load(Ordering::Relaxed);
    let (status, body) = match (ready, state.coord.as_ref()) {
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, Readiness::of(false)),
        (true, None) => (StatusCode::OK, Readiness::of(true)),
        (true, Some(coord)) => {
            let health = coord.health();
            let closed = coord.config().degraded_share == turnstile_coord::DegradedShare::Closed;
            let healthy = health == turnstile_coord::Health::Healthy;
            let serving = healthy || !closed;
            let status = if serving {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            // Why a replica is not healthy: the kind of its last failed Redis call, from a
            // closed vocabulary (this endpoint is public: never Redis's own text).
            let failure = if healthy { None } else { coord.last_failure() };
            let body = Readiness {
                coordination: Some(health.as_str()),
                coordination_failure: failure,
                ..Readiness::of(serving)
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
        exposition(&state).text(),
    )
}

/// The one registry of `/metrics`: every part's collector, each family written once, in this
/// order: admission decisions and breaker transitions, the driver's leases and waiters, the
/// HTTP service, the proxy's lanes, and on a replica coordination and the identity mirror.
/// Built per scrape (a few boxed references to the parts' atomics; nothing is copied).
pub fn exposition(state: &AppParts) -> Exposition {
    let mut exposition = Exposition::new()
        .with(state.telemetry.collector())
        .with(Arc::clone(&state.lease_metrics))
        .with(Arc::clone(&state.metrics))
        .with(Arc::clone(&state.proxy.metrics));
    if let Some(coord) = &state.coord {
        exposition = exposition.with(coord.collector());
    }
    if let Some(mirror) = &state.identity {
        exposition = exposition.with(mirror.collector());
    }
    exposition
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
    }
}
