//! A response body that holds its key's request slot until the body ends: what an event
//! stream needs, whose handler returns at once while the body runs for minutes.
//!
//! A handler marks such a response with [`SlotHeldByBody`]; the gate then moves the key's slot
//! into the body ([`hold_slot_in_body`]) instead of giving it back when the handler returns.
//!
//! Invariants: the slot is given back exactly once, when the body is dropped (the stream ended
//! and hyper dropped it, or the client left); a response without the mark, or a request without
//! a slot (the reserved slice's unauthenticated calls), is passed through unchanged; frames,
//! end of stream and size hints are the inner body's.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::response::Response;
use http_body::{Frame, SizeHint};

use crate::keys::auth::KeySlot;

/// The mark a handler puts in its response's extensions when the body outlives the handler.
#[derive(Debug, Clone, Copy)]
pub struct SlotHeldByBody;

pin_project_lite::pin_project! {
    /// A body and the slot it holds.
    struct BodyWithSlot {
        #[pin]
        body: Body,
        _slot: KeySlot,
    }
}

impl http_body::Body for BodyWithSlot {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Moves `slot` into the body of a response marked [`SlotHeldByBody`]; otherwise leaves both
/// as they are (the caller gives the slot back when its future ends).
pub fn hold_slot_in_body(response: Response, slot: &mut Option<KeySlot>) -> Response {
    if response.extensions().get::<SlotHeldByBody>().is_none() {
        return response;
    }
    match slot.take() {
        Some(slot) => response.map(|body| Body::new(BodyWithSlot { body, _slot: slot })),
        None => response,
    }
}
