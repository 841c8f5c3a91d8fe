//! The chat-completions adapter against a loopback fake provider: every status mapping.

mod common;

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};
use turnstile_decision::artifact::{load, Loaded};
use turnstile_decision::binding::AliasTarget;
use turnstile_decision::definition::DefinitionSpec;
use turnstile_decision::{
    Adapter, AdapterRequest, AttemptReason, ChatCompletionsAdapter, ChatCompletionsConfig, Costing,
    DispatchCertainty, Observation, Status,
};

/// The fake provider: behaviour chosen by the requested model name.
async fn provider(Json(body): Json<Value>) -> Response {
    let model = body["model"].as_str().unwrap_or("").to_owned();
    let answer = |content: &str| {
        Json(json!({
            "id": "req-1",
            "model": "fake-model-1",
            "choices": [{"message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3}
        }))
        .into_response()
    };
    match model.as_str() {
        "ok" => answer(r#"{"value": "documentation", "confidence": 0.9}"#),
        "bad-answer" => answer(r#"{"value": "not-an-option"}"#),
        // Answers only a request that carries the adapter's `maxTokens` as `max_tokens`.
        "max-tokens-64" if body["max_tokens"] == json!(64) => {
            answer(r#"{"value": "documentation", "confidence": 0.9}"#)
        }
        "max-tokens-64" => answer(r#"{"value": "not-an-option"}"#),
        "slow" => {
            std::future::pending::<()>().await;
            StatusCode::OK.into_response()
        }
        other => {
            let status: u16 = other.trim_start_matches("status-").parse().unwrap_or(500);
            let mut headers = HeaderMap::new();
            if status == 429 {
                headers.insert("retry-after", "2".parse().unwrap());
            }
            (StatusCode::from_u16(status).unwrap(), headers, "error").into_response()
        }
    }
}

async fn fake_provider() -> String {
    let app = axum::Router::new().route("/v1/chat/completions", post(provider));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

fn definition() -> Loaded<DefinitionSpec> {
    load(
        &common::fixture("decision-category.json"),
        "DecisionDefinition",
    )
    .unwrap()
}

fn target() -> AliasTarget {
    let binding = common::fixture("binding-llm-subagent.json");
    serde_json::from_value(binding["spec"]["evaluations"]["category"]["targets"][0].clone())
        .unwrap()
}

async fn ask(base_url: &str, model: &str, timeout: Duration) -> Observation {
    ask_with(base_url, model, timeout, Costing::default()).await
}

async fn ask_with(base_url: &str, model: &str, timeout: Duration, costing: Costing) -> Observation {
    let adapter = ChatCompletionsAdapter::new(ChatCompletionsConfig {
        id: "llm-subagent".into(),
        version: "1.0.0".into(),
        base_url: base_url.into(),
        model: Some(model.into()),
        api_key_env: None,
        worker: None,
        costing,
    })
    .unwrap();
    let definition = definition();
    let target = target();
    let input = json!({"message": "The documentation link is broken."});
    adapter
        .invoke(AdapterRequest {
            alias: "category",
            definition: &definition,
            input: &input,
            target: &target,
            ordinal: 1,
            timeout,
        })
        .await
}

const SECOND: Duration = Duration::from_secs(5);

#[tokio::test]
async fn http_adapter_success_is_validated_and_reported() {
    let url = fake_provider().await;
    let observation = ask(&url, "ok", SECOND).await;
    assert_eq!(observation.status, Status::Success);
    assert_eq!(observation.value, Some(json!("documentation")));
    assert_eq!(observation.actual_model.as_deref(), Some("fake-model-1"));
    assert_eq!(observation.request_id.as_deref(), Some("req-1"));
    assert_eq!(observation.usage.input_tokens, Some(12));
    assert_eq!(observation.usage.cost_usd, None);
    assert_eq!(observation.uncertainty.unwrap().confidence, Some(0.9));
    assert_eq!(
        observation.dispatch_certainty,
        Some(DispatchCertainty::TerminalResponse)
    );

    let invalid = ask(&url, "bad-answer", SECOND).await;
    assert_eq!(
        (invalid.status, invalid.reason),
        (Status::Error, AttemptReason::InvalidOutput)
    );
}

#[tokio::test]
async fn http_adapter_sends_the_configured_max_tokens() {
    let url = fake_provider().await;
    let costing: Costing = serde_json::from_value(json!({"maxTokens": 64})).unwrap();
    let observation = ask_with(&url, "max-tokens-64", SECOND, costing).await;
    assert_eq!(observation.status, Status::Success, "{observation:?}");
    // Without it, no `max_tokens` is sent.
    let without = ask(&url, "max-tokens-64", SECOND).await;
    assert_eq!(without.reason, AttemptReason::InvalidOutput);
}

#[tokio::test]
async fn http_adapter_maps_statuses() {
    let url = fake_provider().await;
    let cases = [
        (429, AttemptReason::RateLimited),
        (408, AttemptReason::Timeout),
        (500, AttemptReason::ServiceError),
        (502, AttemptReason::ServiceError),
        (503, AttemptReason::Overloaded),
        (529, AttemptReason::Overloaded),
        (401, AttemptReason::Authentication),
        (403, AttemptReason::Authentication),
        (400, AttemptReason::InvalidRequest),
        (404, AttemptReason::InvalidRequest),
        (422, AttemptReason::InvalidRequest),
    ];
    for (status, reason) in cases {
        let observation = ask(&url, &format!("status-{status}"), SECOND).await;
        assert_eq!(observation.status, Status::Error, "{status}");
        assert_eq!(observation.reason, reason, "{status}");
        assert_eq!(observation.http_status, Some(status), "{status}");
        assert_eq!(
            observation.dispatch_certainty,
            Some(DispatchCertainty::TerminalResponse),
            "{status}"
        );
        let expected_retry_after = (status == 429).then_some(2000);
        assert_eq!(observation.retry_after_ms, expected_retry_after, "{status}");
        assert_eq!(
            reason.is_retryable(),
            matches!(status, 408 | 429 | 500..=599),
            "{status}"
        );
    }
}

#[tokio::test]
async fn http_adapter_connection_refused_is_not_sent() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let observation = ask(&url, "ok", SECOND).await;
    assert_eq!(observation.reason, AttemptReason::NetworkTransient);
    assert_eq!(
        observation.dispatch_certainty,
        Some(DispatchCertainty::NotSent)
    );
}

#[tokio::test]
async fn http_adapter_timeout_after_sending_is_unknown() {
    let url = fake_provider().await;
    let observation = ask(&url, "slow", Duration::from_millis(30)).await;
    assert_eq!(observation.reason, AttemptReason::Timeout);
    assert_eq!(
        observation.dispatch_certainty,
        Some(DispatchCertainty::Unknown)
    );
}

#[tokio::test]
async fn http_adapter_missing_api_key_is_not_sent() {
    let adapter = ChatCompletionsAdapter::new(ChatCompletionsConfig {
        id: "llm-subagent".into(),
        version: "1.0.0".into(),
        base_url: "http://127.0.0.1:9/v1".into(),
        model: None,
        api_key_env: Some("TURNSTILE_TEST_KEY_THAT_IS_NOT_SET".into()),
        worker: None,
        costing: Default::default(),
    })
    .unwrap();
    let definition = definition();
    let target = target();
    let input = json!({"message": "x"});
    let observation = adapter
        .invoke(AdapterRequest {
            alias: "category",
            definition: &definition,
            input: &input,
            target: &target,
            ordinal: 1,
            timeout: SECOND,
        })
        .await;
    assert_eq!(observation.reason, AttemptReason::Authentication);
    assert_eq!(
        observation.dispatch_certainty,
        Some(DispatchCertainty::NotSent)
    );
}
