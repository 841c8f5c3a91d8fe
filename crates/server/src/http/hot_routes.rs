//! The two routes of every governed call, `POST /v1/admissions` and
//! `POST /v1/leases/{leaseId}/release`, served by the gate without the router.
//!
//! The router costs a hot request its path match, the boxed route service with its mapping
//! futures, the URL-parameter extension and axum's extractor plumbing; for the two requests of
//! every acquire + release pair that was a few thousand instructions each. Here the gate
//! recognises them by an exact comparison and calls the same handler functions with the same
//! arguments, in the order axum would extract them (the caller the gate authenticated, then
//! the body), without the request extension the router's extractors read the caller from.
//!
//! Invariants: a request is served here only when the router would route it to the same
//! handler with the same arguments; anything else (another method, a trailing slash, an empty
//! or encoded lease ID: axum percent-decodes path parameters) goes to the router unchanged.

use std::future::Future;
use std::pin::Pin;

use axum::extract::{FromRequest, Path, Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};

use crate::api::{admissions, leases, AppState};
use crate::http::body::RawBody;
use crate::http::error::ApiError;
use crate::keys::Caller;

const ADMISSIONS: &str = "/v1/admissions";
const LEASES: &str = "/v1/leases/";
const RELEASE: &str = "/release";

/// A request the gate serves itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HotRoute {
    Acquire,
    /// With the lease ID as the router's `{leaseId}` would have extracted it.
    Release(String),
}

impl HotRoute {
    /// The hot route of `method` and `path`, if it is one.
    pub fn of(method: &Method, path: &str) -> Option<HotRoute> {
        if method != Method::POST {
            return None;
        }
        if path == ADMISSIONS {
            return Some(HotRoute::Acquire);
        }
        let lease_id = path.strip_prefix(LEASES)?.strip_suffix(RELEASE)?;
        let plain = !lease_id.is_empty() && !lease_id.contains(['/', '%']);
        plain.then(|| HotRoute::Release(lease_id.to_owned()))
    }

    /// The handler's answer to `request` from `caller`, whom the gate authenticated (`None`:
    /// no known key, which the router's [`Caller`] extractor answers with 401).
    pub fn serve(
        self,
        state: AppState,
        caller: Option<Caller>,
        request: Request,
    ) -> Pin<Box<dyn Future<Output = Response> + Send>> {
        Box::pin(async move {
            let Some(caller) = caller else {
                return ApiError::Unauthorized.into_response();
            };
            let Ok(body) = RawBody::from_request(request, &state).await;
            match self {
                HotRoute::Acquire => admissions::acquire(State(state), caller, body)
                    .await
                    .into_response(),
                HotRoute::Release(lease_id) => {
                    leases::release(State(state), caller, Path(lease_id), body)
                        .await
                        .into_response()
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_hot_paths_are_served_without_the_router() {
        let post = Method::POST;
        assert_eq!(
            HotRoute::of(&post, "/v1/admissions"),
            Some(HotRoute::Acquire)
        );
        assert_eq!(
            HotRoute::of(&post, "/v1/leases/lease-1/release"),
            Some(HotRoute::Release("lease-1".into()))
        );
        for path in [
            "/v1/admissions/",
            "/v1/admissions?x=1",
            "/v1/leases//release",
            "/v1/leases/a/b/release",
            "/v1/leases/a%2Fb/release",
            "/v1/leases/a/release/",
            "/v1/leases/a/heartbeat",
            "/v1/leasesx/release",
        ] {
            assert_eq!(HotRoute::of(&post, path), None, "{path}");
        }
        assert_eq!(HotRoute::of(&Method::GET, "/v1/admissions"), None);
        assert_eq!(HotRoute::of(&Method::PUT, "/v1/leases/a/release"), None);
    }
}
