//! The router: every route of the service in one table.
//!
//! [`ROUTES`] lists (method, path) exactly as in `openapi.json`; a test checks that the two
//! agree and that each listed route is served.

use axum::routing::{delete, get, post, put};
use axum::Router;

use crate::gate::Gate;

use crate::api::{
    admissions, coordination, events, fairness, keys, leases, ops, profiles, revisions, AppState,
};
use crate::ui;

/// Every route, as (method, OpenAPI path).
pub const ROUTES: &[(&str, &str)] = &[
    (
        "put",
        "/v1/workspaces/{workspaceId}/profiles/{profileVersion}",
    ),
    (
        "get",
        "/v1/workspaces/{workspaceId}/profiles/{profileVersion}",
    ),
    ("get", "/v1/workspaces/{workspaceId}/profiles"),
    ("get", "/v1/workspaces/{workspaceId}/events"),
    ("get", "/v1/workspaces/{workspaceId}/breakers"),
    ("get", "/v1/workspaces/{workspaceId}/pauses"),
    ("get", "/v1/workspaces/{workspaceId}/fairness"),
    ("get", "/v1/workspaces/{workspaceId}/snapshot"),
    ("post", "/v1/workspaces/{workspaceId}/keys"),
    ("get", "/v1/workspaces/{workspaceId}/keys"),
    ("delete", "/v1/workspaces/{workspaceId}/keys/{keyId}"),
    ("post", "/v1/admissions"),
    ("post", "/v1/leases/{leaseId}/release"),
    ("post", "/v1/leases/{leaseId}/heartbeat"),
    ("post", "/v1/budgets/{budgetId}/release"),
    ("post", "/v1/providers/{providerId}/retry-after"),
    ("get", "/metrics"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/openapi.json"),
    ("get", "/ui"),
    ("get", "/ui/{asset}"),
];

/// The service over `state`: the router behind the gate, for the general connections or
/// (`reserved`) for those of the operators' reserved slice.
///
/// The gate wraps the whole router, not each route (`Router::layer` would box the gate's
/// service and future once per route and request). Request bodies are capped by their readers
/// (`crate::body`, the proxy's `body::read`), so no `DefaultBodyLimit` layer is needed.
pub fn router(state: AppState, reserved: bool) -> Gate<Router> {
    let router = Router::new()
        .route(
            "/v1/workspaces/{workspaceId}/profiles/{profileVersion}",
            put(profiles::put_profile).get(revisions::profile_revision),
        )
        .route(
            "/v1/workspaces/{workspaceId}/profiles",
            get(profiles::profile_history),
        )
        .route("/v1/workspaces/{workspaceId}/events", get(events::events))
        .route(
            "/v1/workspaces/{workspaceId}/breakers",
            get(profiles::breaker_history),
        )
        .route(
            "/v1/workspaces/{workspaceId}/pauses",
            get(profiles::pause_history),
        )
        .route(
            "/v1/workspaces/{workspaceId}/fairness",
            get(fairness::fairness),
        )
        .route(
            "/v1/workspaces/{workspaceId}/snapshot",
            get(profiles::snapshot),
        )
        .route(
            "/v1/workspaces/{workspaceId}/keys",
            post(keys::create_key).get(keys::list_keys),
        )
        .route(
            "/v1/workspaces/{workspaceId}/keys/{keyId}",
            delete(keys::revoke_key),
        )
        .route("/v1/admissions", post(admissions::acquire))
        .route("/v1/leases/{leaseId}/release", post(leases::release))
        .route("/v1/leases/{leaseId}/heartbeat", post(leases::heartbeat))
        .route(
            "/v1/budgets/{budgetId}/release",
            post(coordination::release_budget),
        )
        .route(
            "/v1/providers/{providerId}/retry-after",
            post(coordination::retry_after),
        )
        .route("/metrics", get(ops::metrics))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/openapi.json", get(ops::openapi))
        .route("/ui", get(ui::index))
        .route("/ui/{asset}", get(ui::asset))
        .merge(turnstile_proxy::router(state.proxy.clone()))
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .with_state(state.clone());
    Gate::new(router, state, reserved)
}
