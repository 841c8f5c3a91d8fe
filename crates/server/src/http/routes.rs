//! The router: every route of the service in one table.
//!
//! [`ROUTES`] and the proxy's [`turnstile_proxy::ROUTES`] list (method, path) exactly as in
//! `openapi.json`, and the router serves nothing else: both are declared with
//! [`turnstile_proxy::route_table!`], which makes the table and the routes from one list. A
//! test (`openapi_lists_exactly_the_served_routes`) checks that the tables and the document
//! agree and that each listed route is served, so a route added without documenting it fails.

use axum::Router;

use crate::http::gate::Gate;

use crate::api::{
    admissions, coordination, events, fairness, keys, leases, ops, profiles, revisions, rollouts,
    workspaces, AppState,
};
use crate::http::ui;

turnstile_proxy::route_table! {
    /// Every route of the service's own, as (method, OpenAPI path): exactly what
    /// [`serve_routes`] serves. The proxy's are [`turnstile_proxy::ROUTES`].
    pub const ROUTES;
    /// Adds every route of [`ROUTES`].
    fn serve_routes(Router<AppState>);
    get "/v1/workspaces" => workspaces::list_workspaces,
    put "/v1/workspaces/{workspaceId}/profiles/{profileVersion}" => profiles::put_profile,
    get "/v1/workspaces/{workspaceId}/profiles/{profileVersion}" => revisions::profile_revision,
    get "/v1/workspaces/{workspaceId}/profiles" => profiles::profile_history,
    get "/v1/workspaces/{workspaceId}/events" => events::events,
    get "/v1/workspaces/{workspaceId}/breakers" => profiles::breaker_history,
    get "/v1/workspaces/{workspaceId}/pauses" => profiles::pause_history,
    get "/v1/workspaces/{workspaceId}/fairness" => fairness::fairness,
    get "/v1/workspaces/{workspaceId}/snapshot" => profiles::snapshot,
    post "/v1/workspaces/{workspaceId}/rollouts" => rollouts::start_rollout,
    get "/v1/workspaces/{workspaceId}/rollouts" => rollouts::rollout_history,
    get "/v1/workspaces/{workspaceId}/rollouts/current" => rollouts::current_rollout,
    post "/v1/workspaces/{workspaceId}/rollouts/current/promote" => rollouts::promote_rollout,
    post "/v1/workspaces/{workspaceId}/rollouts/current/abort" => rollouts::abort_rollout,
    post "/v1/workspaces/{workspaceId}/keys" => keys::create_key,
    get "/v1/workspaces/{workspaceId}/keys" => keys::list_keys,
    delete "/v1/workspaces/{workspaceId}/keys/{keyId}" => keys::revoke_key,
    post "/v1/admissions" => admissions::acquire,
    post "/v1/leases/{leaseId}/release" => leases::release,
    post "/v1/leases/{leaseId}/heartbeat" => leases::heartbeat,
    post "/v1/budgets/{budgetId}/release" => coordination::release_budget,
    post "/v1/providers/{providerId}/retry-after" => coordination::retry_after,
    get "/metrics" => ops::metrics,
    get "/healthz" => ops::healthz,
    get "/readyz" => ops::readyz,
    get "/openapi.json" => ops::openapi,
    get "/ui" => ui::index,
    get "/ui/{asset}" => ui::asset,
    get "/favicon.ico" => ui::favicon,
}

/// The service over `state`: the router behind the gate, for the general connections or
/// (`reserved`) for those of the operators' reserved slice.
///
/// The gate wraps the whole router, not each route (`Router::layer` would box the gate's
/// service and future once per route and request). Request bodies are capped by their readers
/// (`crate::http::body`, the proxy's `body::read`), so no `DefaultBodyLimit` layer is needed.
pub fn router(state: AppState, reserved: bool) -> Gate<Router> {
    let router = serve_routes(Router::new())
        .merge(turnstile_proxy::router(state.proxy.clone()))
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .with_state(state.clone());
    Gate::new(router, state, reserved)
}
