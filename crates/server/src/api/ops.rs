//! Operations endpoints: `/healthz` (the process answers), `/readyz` (start-up finished and not
//! shutting down), `/metrics` (Prometheus text), `/openapi.json`, and the typed 404 / 405.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;

use crate::api::AppState;
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
    let coordination = state.coord.as_ref().map(|coord| {
        (
            coord.health(),
            coord.config().degraded_share == turnstile_coord::DegradedShare::Closed,
            coord.last_failure(),
        )
    });
    let ready = state.ready.load(Ordering::Relaxed);
    let (status, body) = match (ready, coordination) {
        (false, _) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "{\"status\":\"not-ready\"}".to_owned(),
        ),
        (true, None) => (StatusCode::OK, "{\"status\":\"ready\"}".to_owned()),
        (true, Some((health, closed, failure))) => {
            let status = if health != turnstile_coord::Health::Healthy && closed {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            };
            let word = if status == StatusCode::OK {
                "ready"
            } else {
                "not-ready"
            };
            // Why a replica is not healthy: the kind of its last failed Redis call, from a
            // closed vocabulary (this endpoint is public: never Redis's own text).
            let failure = match failure {
                Some(kind) if health != turnstile_coord::Health::Healthy => {
                    format!(",\"coordinationFailure\":\"{kind}\"")
                }
                _ => String::new(),
            };
            (
                status,
                format!(
                    "{{\"status\":\"{word}\",\"coordination\":\"{}\"{failure}}}",
                    health.as_str()
                ),
            )
        }
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body)
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        {
            let mut text = state.telemetry.prometheus_text();
            text.push_str(&state.lease_metrics.render());
            text.push_str(&state.metrics.render());
            text.push_str(&state.proxy.metrics.render());
            if let Some(coord) = &state.coord {
                text.push_str(&coord.render_metrics());
            }
            if let Some(mirror) = &state.mirror {
                text.push_str(&mirror.render_metrics());
            }
            text
        },
    )
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
