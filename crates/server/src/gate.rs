//! The gate as a `tower` layer: [`crate::auth::admit`] before every handler, the key's request
//! slot held until the handler's response future finished.
//!
//! It replaces `axum::middleware::from_fn(gate)`, which per request boxed the middleware's
//! future, boxed the inner service into a `Next` and cloned it (three allocations and a copy
//! of a large future on every call of the hot path). Here the future is a two-state enum
//! around the inner service's own future.
//!
//! Invariants: the handler runs only when `admit` let the request through; the slot is
//! released when the handler's future completes or is dropped (a client that leaves), never
//! before; the inner service is called only after its `poll_ready` (forwarded).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service};

use crate::api::AppState;
use crate::auth::{admit, Admitted, KeySlot};

/// Applies the gate to every route of a router.
#[derive(Clone)]
pub struct GateLayer {
    state: AppState,
}

impl GateLayer {
    pub fn new(state: AppState) -> Self {
        GateLayer { state }
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = Gate<S>;

    fn layer(&self, inner: S) -> Gate<S> {
        Gate {
            inner,
            state: self.state.clone(),
        }
    }
}

/// A route behind the gate.
#[derive(Clone)]
pub struct Gate<S> {
    inner: S,
    state: AppState,
}

impl<S> Service<Request> for Gate<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = GateFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        match admit(&self.state, &mut request) {
            Admitted::Answered(answer) => GateFuture {
                state: State::Answered {
                    answer: Some(answer),
                },
            },
            Admitted::Through(slot) => GateFuture {
                state: State::Handling {
                    handler: self.inner.call(request),
                    _slot: slot,
                },
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The handler's future with the key's slot, or the gate's own answer.
    pub struct GateFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProjection]
    enum State<F> {
        Answered { answer: Option<Response> },
        Handling {
            #[pin]
            handler: F,
            _slot: Option<KeySlot>,
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
                None => Poll::Ready(Ok(crate::error::ApiError::Overloaded.into_response())),
            },
            StateProjection::Handling { handler, .. } => handler.poll(cx),
        }
    }
}
