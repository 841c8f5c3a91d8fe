//! The gate: [`crate::keys::auth::admit`] before every handler, the key's request slot held until
//! the handler's response future finished. It wraps the whole router (see
//! [`crate::http::routes::router`]) and is the service each connection calls.
//!
//! It replaced `axum::middleware::from_fn(gate)`, which per request boxed the middleware's
//! future, boxed the inner service into a `Next` and cloned it, and then a per-route
//! `Router::layer`, which boxed the gate's future once more per request. Here the future is a
//! small enum around the router's own future, and the connection's request body becomes
//! axum's [`Body`] once, here (the router would otherwise do it). The two requests of every
//! governed call skip the router: [`crate::http::hot_routes`].
//!
//! Invariants: the handler runs only when `admit` let the request through; the slot is
//! released when the handler's future completes or is dropped (a client that leaves), never
//! before, or, for a response marked [`crate::http::slot_held_body::SlotHeldByBody`] (an event
//! stream), when its body is dropped; the inner service is called only after its
//! `poll_ready` (forwarded); a gate of the reserved slice (`reserved`) lets only operators'
//! calls through; a hot route gets the same gate (`admit`, the slot) as a routed request.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use tower::Service;

use crate::api::AppState;
use crate::http::hot_routes::HotRoute;
use crate::http::slot_held_body::hold_slot_in_body;
use crate::keys::auth::{admit, Admitted, KeySlot};

/// The router behind the gate.
#[derive(Clone)]
pub struct Gate<S> {
    inner: S,
    state: AppState,
    /// Serves the connections of the operators' reserved slice.
    reserved: bool,
}

impl<S> Gate<S> {
    pub fn new(inner: S, state: AppState, reserved: bool) -> Self {
        Gate {
            inner,
            state,
            reserved,
        }
    }
}

impl<S, B> Service<axum::http::Request<B>> for Gate<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = GateFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let mut request = request.map(Body::new);
        match admit(&self.state, self.reserved, &mut request) {
            Admitted::Answered(answer) => GateFuture {
                state: State::Answered {
                    answer: Some(answer),
                },
            },
            Admitted::Through {
                slot,
                authenticated,
            } => match HotRoute::of(request.method(), request.uri().path()) {
                Some(route) => GateFuture {
                    state: State::Hot {
                        handler: route.serve(
                            self.state.clone(),
                            authenticated.map(|who| who.caller),
                            request,
                        ),
                        _slot: slot,
                    },
                },
                None => {
                    if let Some(authenticated) = authenticated {
                        request.extensions_mut().insert(authenticated);
                    }
                    GateFuture {
                        state: State::Handling {
                            handler: self.inner.call(request),
                            slot,
                        },
                    }
                }
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The handler's future (a hot route's or the router's) with the key's slot, or the
    /// gate's own answer.
    pub struct GateFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProjection]
    enum State<F> {
        Answered { answer: Option<Response> },
        Hot {
            handler: Pin<Box<dyn Future<Output = Response> + Send>>,
            _slot: Option<KeySlot>,
        },
        Handling {
            #[pin]
            handler: F,
            slot: Option<KeySlot>,
        },
    }
}

impl<F: Future<Output = Result<Response, Infallible>>> Future for GateFuture<F> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProjection::Answered { answer } => match answer.take() {
                Some(answer) => Poll::Ready(Ok(answer)),
                // Polled again after it answered: a caller bug; answer something well-formed.
                None => Poll::Ready(Ok(crate::http::error::ApiError::Overloaded.into_response())),
            },
            StateProjection::Hot { handler, .. } => handler.as_mut().poll(cx).map(Ok),
            StateProjection::Handling { handler, slot } => handler
                .poll(cx)
                .map(|answer| answer.map(|response| hold_slot_in_body(response, slot))),
        }
    }
}
