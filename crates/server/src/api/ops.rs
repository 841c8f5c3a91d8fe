//! Operations endpoints: `/healthz` (the process answers), `/readyz` (start-up finished and not
//! shutting down), `/metrics` (Prometheus text), `/openapi.json`, and the typed 404 / 405.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;

use crate::api::AppState;
use crate::error::ApiError;

/// The OpenAPI 3.1 document of every route (checked against [`crate::routes::ROUTES`] by a
/// test).
pub const OPENAPI: &str = include_str!("../../openapi.json");

pub async fn healthz() -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        "{\"status\":\"ok\"}",
    )
}

pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.ready.load(Ordering::Relaxed) {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            "{\"status\":\"ready\"}",
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "application/json")],
            "{\"status\":\"not-ready\"}",
        )
    }
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
