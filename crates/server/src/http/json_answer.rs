//! JSON answers of the hot routes (admission, release, heartbeat), encoded into one buffer
//! sized for them.
//!
//! `axum::Json` starts from 128 bytes and grows through a `BytesMut` writer, so an admission
//! answer (about 300 bytes) is reallocated and copied twice, and its `content-type` goes in
//! through the generic header-tuple path. [`JsonAnswer`] writes into a `Vec` that already holds
//! a typical answer and hands it to the body without a copy.
//!
//! Invariant: the same status, `content-type` and body bytes as `axum::Json` for every value
//! (tested below); an encoding failure is the same `500` with a plain-text message.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Room for a typical hot-route answer; a larger one grows the buffer as usual.
const TYPICAL_ANSWER_BYTES: usize = 512;

/// A `200` JSON answer, like `axum::Json`.
pub struct JsonAnswer<T>(pub T);

impl<T: Serialize> IntoResponse for JsonAnswer<T> {
    fn into_response(self) -> Response {
        let mut buf = Vec::with_capacity(TYPICAL_ANSWER_BYTES);
        let written = serde_json::to_writer(&mut buf, &self.0);
        json_response(written.map(|()| buf))
    }
}

/// A `200` answer with an encoded JSON body, or the `500` of an encoding failure, exactly as
/// `axum::Json` answers them.
pub fn json_response(encoded: Result<impl Into<Body>, serde_json::Error>) -> Response {
    match encoded {
        Ok(buf) => {
            let mut response = Response::new(buf.into());
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            )],
            error.to_string(),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;
    use std::collections::BTreeMap;

    async fn parts(response: Response) -> (StatusCode, Vec<(String, Vec<u8>)>, Vec<u8>) {
        let status = response.status();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
            .collect();
        let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, headers, body.to_vec())
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Sample {
        lease_id: String,
        cost_usd: f64,
        nothing: Option<u64>,
        text: String,
    }

    #[tokio::test]
    async fn answers_exactly_as_axum_json() {
        let long = "x".repeat(3 * TYPICAL_ANSWER_BYTES);
        for text in ["", "quote \" and \u{e9} and \n", long.as_str()] {
            let sample = || Sample {
                lease_id: "c4a67ef66556068145bb1d18b3730879".into(),
                cost_usd: 0.0001,
                nothing: None,
                text: text.to_owned(),
            };
            assert_eq!(
                parts(JsonAnswer(sample()).into_response()).await,
                parts(axum::Json(sample()).into_response()).await
            );
        }
        let map: BTreeMap<String, u8> = [("a".to_owned(), 1)].into();
        assert_eq!(
            parts(JsonAnswer(&map).into_response()).await,
            parts(axum::Json(&map).into_response()).await
        );
    }

    #[tokio::test]
    async fn an_encoding_failure_is_the_same_500() {
        // A map with a non-string key cannot be JSON.
        let bad: BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let ours = parts(JsonAnswer(&bad).into_response()).await;
        assert_eq!(ours.0, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(ours, parts(axum::Json(&bad).into_response()).await);
    }
}
