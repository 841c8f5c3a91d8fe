//! The live event feed of a workspace: `GET /v1/workspaces/{workspaceId}/events`, a
//! `text/event-stream` (server-sent events) for the operator's console.
//!
//! - Who: an admin key (any workspace) or a principal key of that workspace (403 otherwise),
//!   like the snapshot.
//! - What: an `update` event at once (the lanes now), then one per change the driver publishes
//!   (at most every 250 ms per workspace, see `turnstile_shell::feed`), and while nothing
//!   changes, an `update` with the lanes every second, so pause and probe countdowns and bucket
//!   refills stay live. Each `update` is one JSON object: `atEpochMs`, `sinceEpochMs`, `lanes`,
//!   `decisions` (admissions and refusals by provider and reason in `(since, at]`),
//!   `transitions`, `pauses`, `profileChange`, `dropped`, and for admin keys only `principals`
//!   (grants and summed queue delay per principal: the fairness view). A subscriber that fell
//!   behind gets a `lagged` event (`{"missed": n}`) and continues with the next update.
//! - `?maxEvents=N` (1–100000) ends the stream after N events (tests, `curl`).
//! - The stream ends when the service starts shutting down.
//! - An open stream holds one of its key's `http.max_requests_per_key` request slots until it
//!   ends or its client leaves ([`crate::http::slot_held_body`]).
//!
//! Invariant: the feed never reaches a log line or a metric; principal IDs reach admin keys
//! only, and only through this authenticated response.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::broadcast::Receiver;
use turnstile_shell::FeedEvent;

use crate::api::{validate, AppState};
use crate::http::error::ApiError;
use crate::http::slot_held_body::SlotHeldByBody;
use crate::keys::auth::{authorize, Operation};
use crate::keys::Caller;

/// With no change, the lanes are sent again after this long.
pub const QUIET_MS: u64 = 1_000;

/// The largest `maxEvents`.
pub const MAX_EVENTS: u64 = 100_000;

/// `maxEvents` from the query string (`None`: unbounded); any other parameter is refused.
fn max_events(uri: &Uri) -> Result<u64, ApiError> {
    let invalid = || ApiError::invalid("maxEvents", "must be an integer in 1..=100000");
    let Some(query) = uri.query().filter(|q| !q.is_empty()) else {
        return Ok(u64::MAX);
    };
    let mut left = None;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("maxEvents", value)) if left.is_none() => {
                let n: u64 = value.parse().map_err(|_| invalid())?;
                if !(1..=MAX_EVENTS).contains(&n) {
                    return Err(invalid());
                }
                left = Some(n);
            }
            _ => {
                return Err(ApiError::invalid(
                    "query",
                    "the only query parameter is maxEvents",
                ))
            }
        }
    }
    Ok(left.unwrap_or(u64::MAX))
}

struct Stream {
    state: AppState,
    workspace: String,
    admin: bool,
    rx: Receiver<Arc<FeedEvent>>,
    first: Option<Value>,
    left: u64,
}

fn frame(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// The JSON of one feed event as this subscriber may see it.
fn update(event: &FeedEvent, admin: bool) -> Value {
    let mut value = serde_json::to_value(event).unwrap_or(Value::Null);
    if admin {
        if let Some(object) = value.as_object_mut() {
            object.insert(
                "principals".into(),
                serde_json::to_value(&event.principals).unwrap_or(Value::Null),
            );
        }
    }
    value
}

/// The lanes now, as an `update` with no counts (`principals` for admin keys only, as in
/// every update).
fn quiet(at: u64, lanes: &impl serde::Serialize, admin: bool) -> Value {
    let mut update = json!({
        "atEpochMs": at,
        "sinceEpochMs": at,
        "lanes": lanes,
        "decisions": [],
        "transitions": [],
        "pauses": [],
        "dropped": 0,
    });
    if let (true, Some(object)) = (admin, update.as_object_mut()) {
        object.insert("principals".into(), json!([]));
    }
    update
}

impl Stream {
    /// The next frame, or `None` when the stream ends.
    async fn next(&mut self) -> Option<Bytes> {
        if self.left == 0 || !self.state.ready.load(Ordering::Relaxed) {
            return None;
        }
        self.left -= 1;
        if let Some(first) = self.first.take() {
            return Some(frame("update", &first));
        }
        let quiet_after = Duration::from_millis(QUIET_MS);
        loop {
            match tokio::time::timeout(quiet_after, self.rx.recv()).await {
                Ok(Ok(event)) if *event.workspace == *self.workspace => {
                    return Some(frame("update", &update(&event, self.admin)));
                }
                Ok(Ok(_)) => continue,
                Ok(Err(RecvError::Lagged(missed))) => {
                    return Some(frame("lagged", &json!({ "missed": missed })));
                }
                Ok(Err(RecvError::Closed)) => return None,
                Err(_elapsed) => {
                    if !self.state.ready.load(Ordering::Relaxed) {
                        return None;
                    }
                    let (at, lanes) = self.state.driver.lanes(&self.workspace).await.ok()??;
                    return Some(frame("update", &quiet(at, &lanes, self.admin)));
                }
            }
        }
    }
}

pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(workspace_id): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    authorize(&state, &caller, Operation::WatchEvents, Some(&workspace_id)).await?;
    validate::id("workspaceId", &workspace_id)?;
    let left = max_events(&uri)?;
    // Subscribe before reading the lanes: no change falls between the two.
    let rx = state.feed.subscribe();
    let (at, lanes) = state
        .driver
        .lanes(&workspace_id)
        .await?
        .ok_or_else(ApiError::no_profile)?;
    let admin = matches!(caller, Caller::Admin);
    let stream = Stream {
        admin,
        first: Some(quiet(at, &lanes, admin)),
        state,
        workspace: workspace_id,
        rx,
        left,
    };
    let body = futures_util::stream::unfold(stream, |mut stream| async move {
        stream
            .next()
            .await
            .map(|bytes| (Ok::<_, Infallible>(bytes), stream))
    });
    // The stream holds one of its key's request slots until it ends (the gate moves the slot
    // into the body).
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Extension(SlotHeldByBody),
        Body::from_stream(body),
    )
        .into_response())
}
