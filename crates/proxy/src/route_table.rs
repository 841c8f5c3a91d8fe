//! [`route_table!`](macro@crate::route_table): one list of routes, two uses: the `(method, path)`
//! table that documents and tests them, and the function that adds exactly those routes to a
//! router. The proxy's routes ([`crate::ROUTES`]) and the service's (`turnstile-server`'s
//! `routes.rs`) are both declared with it.
//!
//! Invariant: a route declared with the macro is in its table, and the function serves nothing
//! else, so a test comparing the tables with `openapi.json` fails for a route added without
//! documenting it (`openapi_lists_exactly_the_served_routes` in `crates/server/tests`).
//!
//! Two routes on one path (`get` and `put`, say) are two entries: axum merges the method
//! routers of a path into one, as if written `get(a).put(b)`.

/// Declares a route table and the function that serves it:
///
/// ```ignore
/// turnstile_proxy::route_table! {
///     /// Every route, as (method, path).
///     pub const ROUTES;
///     /// Adds every route of [`ROUTES`].
///     fn serve_routes(Router<AppState>);
///     get "/healthz" => ops::healthz,
///     post "/v1/admissions" => admissions::acquire,
/// }
/// ```
///
/// The method is the name of an `axum::routing` function (`get`, `post`, `put`, `delete`,
/// …), written lower-case in the table as in OpenAPI. The crate that uses the macro depends on
/// `axum`.
#[macro_export]
macro_rules! route_table {
    (
        $(#[$table_meta:meta])*
        $table_vis:vis const $table:ident;
        $(#[$serve_meta:meta])*
        $serve_vis:vis fn $serve:ident(Router<$state:ty>);
        $($method:ident $path:literal => $handler:expr),+ $(,)?
    ) => {
        $(#[$table_meta])*
        $table_vis const $table: &[(&str, &str)] = &[$((stringify!($method), $path)),+];

        $(#[$serve_meta])*
        $serve_vis fn $serve(router: ::axum::Router<$state>) -> ::axum::Router<$state> {
            router$(.route($path, ::axum::routing::$method($handler)))+
        }
    };
}
