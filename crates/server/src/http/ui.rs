//! The operator's console: `GET /ui` and its assets, embedded in the binary.
//!
//! Plain HTML, CSS and JavaScript under `crates/server/ui/`, compiled in with `include_str!`:
//! no build step, no CDN, nothing fetched from elsewhere, so the console works offline and is
//! exactly as versioned as the binary. The page talks to the same HTTP API as every other
//! client (see `docs/console.md`); it has no endpoint of its own.
//!
//! # Security
//!
//! - Every asset is sent with a strict `Content-Security-Policy`: scripts, styles and
//!   connections from this origin only, no inline script, no framing ([`CSP`]).
//! - The page needs no key to load; the API key the operator types stays in the tab
//!   (`sessionStorage`) and travels only in `Authorization` headers, never in a URL.
//! - Unknown assets are the typed 404.

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::http::error::ApiError;

/// The policy every console response carries.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'";

/// (name, content type, body) of every asset.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../../ui/app.css"),
    ),
    (
        "charts.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/charts.js"),
    ),
    (
        "rollout.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/rollout.js"),
    ),
    ("favicon.svg", "image/svg+xml", FAVICON),
];

/// The console's icon (also `GET /favicon.ico`).
const FAVICON: &str = include_str!("../../ui/favicon.svg");

const INDEX: &str = include_str!("../../ui/index.html");

fn asset_response(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /ui`: the console page.
pub async fn index() -> Response {
    asset_response("text/html; charset=utf-8", INDEX)
}

/// `GET /favicon.ico`: the console's icon, for browsers that ask for it by that name.
pub async fn favicon() -> Response {
    asset_response("image/svg+xml", FAVICON)
}

/// `GET /ui/{asset}`: a script, style sheet or the icon of the page.
pub async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, content_type, body)| asset_response(content_type, body))
        .ok_or_else(|| ApiError::NotFound {
            code: "not-found",
            message: "no such console asset".into(),
        })
}
