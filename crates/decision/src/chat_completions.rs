//! The HTTP adapter for OpenAI-compatible chat-completions endpoints.
//!
//! It asks for a JSON object `{"value": …, "confidence": …}` of the definition's answer kind,
//! validates the value, and maps every transport outcome to an observation:
//!
//! | outcome | status / reason | dispatchCertainty |
//! |---|---|---|
//! | 2xx with a valid answer | success | terminal-response |
//! | 2xx without a valid answer | error / invalid-output | terminal-response |
//! | 429 (+ Retry-After seconds → `retryAfterMs`) | error / rate-limited | terminal-response |
//! | 408 | error / timeout | terminal-response |
//! | 503, 529 | error / overloaded | terminal-response |
//! | other 5xx | error / service-error | terminal-response |
//! | 401, 403 | error / authentication | terminal-response |
//! | 400, 404, 422 and other 4xx | error / invalid-request | terminal-response |
//! | connection refused / not established | error / network-transient | not-sent |
//! | timeout after sending | error / timeout | unknown |
//! | other transport error after sending | error / network-transient | unknown |
//!
//! Usage is what the answer's `usage` reports, read by [`ProviderUsage`] (input and output
//! tokens; the cost is not reported).
//!
//! The API key is read from the environment variable named in the configuration at call time;
//! it never appears in an observation, an error or a log line.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use turnstile_admission::ProviderUsage;

use crate::adapter::{Adapter, AdapterRequest, BoxFuture, Capabilities};
use crate::artifact::{worker_pin, ArtifactError, Pin};
use crate::costing::Costing;
use crate::definition::Answer;
use crate::observation::{Observation, ObservedUsage, Uncertainty};
use crate::reason::{AttemptReason, DispatchCertainty, Status};

/// Configuration of one chat-completions adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatCompletionsConfig {
    /// The provider id this adapter serves.
    pub id: String,
    pub version: String,
    /// E.g. `https://api.example.com/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// Overrides the target's `model`.
    #[serde(default)]
    pub model: Option<String>,
    /// The environment variable holding the API key (sent as a bearer token).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The subagent worker this endpoint runs (its JSON as deployed), for targets that pin a
    /// `subagent`; see [`crate::artifact::worker_pin`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<Value>,
    /// `maxTokens` (sent as the request's `max_tokens`) and `prices`: the attempt's estimate.
    #[serde(flatten)]
    pub costing: Costing,
}

/// The chat-completions adapter.
pub struct ChatCompletionsAdapter {
    config: ChatCompletionsConfig,
    client: reqwest::Client,
    capabilities: Capabilities,
    worker: Option<Pin>,
}

impl std::fmt::Debug for ChatCompletionsAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatCompletionsAdapter")
            .field("id", &self.config.id)
            .field("base_url", &self.config.base_url)
            .finish_non_exhaustive()
    }
}

/// The adapter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot build the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    /// The configured subagent worker has no `metadata.id` / `metadata.version` or cannot be
    /// digested.
    #[error("adapter {adapter}: {source}")]
    Worker {
        adapter: String,
        #[source]
        source: ArtifactError,
    },
    /// A price table without `maxTokens`: the cost of a call could not be bounded.
    #[error(
        "adapter {adapter}: prices need maxTokens (the output tokens a call's cost estimate \
         assumes)"
    )]
    PricesWithoutMaxTokens { adapter: String },
}

impl ClientError {
    /// The pin of an adapter's configured worker, if any.
    pub(crate) fn worker_pin(adapter: &str, worker: Option<&Value>) -> Result<Option<Pin>, Self> {
        worker
            .map(|worker| {
                worker_pin(worker).map_err(|source| ClientError::Worker {
                    adapter: adapter.to_owned(),
                    source,
                })
            })
            .transpose()
    }
}

/// The confidence profile of a model's own report.
pub const SELF_REPORT_PROFILE: &str = "llm-self-report-v1";

impl ChatCompletionsAdapter {
    pub fn new(config: ChatCompletionsConfig) -> Result<Self, ClientError> {
        config.costing.check(&config.id)?;
        let client = reqwest::Client::builder().build()?;
        let mut capabilities = Capabilities::all_kinds();
        capabilities.confidence_profiles = vec![SELF_REPORT_PROFILE.to_owned()];
        let worker = ClientError::worker_pin(&config.id, config.worker.as_ref())?;
        Ok(ChatCompletionsAdapter {
            config,
            client,
            capabilities,
            worker,
        })
    }

    fn endpoint(&self) -> String {
        format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        )
    }

    async fn call(&self, request: AdapterRequest<'_>) -> Observation {
        let model = self
            .config
            .model
            .clone()
            .unwrap_or_else(|| request.target.model.clone());
        let spec = request.definition.spec();
        let mut body = json!({
            "model": model,
            "messages": [
                {"role": "system", "content": instructions(&spec.answer)},
                {"role": "user", "content": format!(
                    "Purpose: {}\nQuestion: {}\nInput (JSON): {}",
                    spec.purpose, spec.question, request.input
                )},
            ],
            "response_format": {"type": "json_object"},
            "temperature": 0,
        });
        if let Some(max_tokens) = self.config.costing.max_tokens {
            body["max_tokens"] = json!(max_tokens.get());
        }
        let mut builder = self
            .client
            .post(self.endpoint())
            .timeout(request.timeout.max(Duration::from_millis(1)))
            .json(&body);
        if let Some(variable) = &self.config.api_key_env {
            match std::env::var(variable) {
                Ok(key) => builder = builder.bearer_auth(key),
                Err(_) => {
                    return Observation::error(
                        AttemptReason::Authentication,
                        DispatchCertainty::NotSent,
                    )
                }
            }
        }
        let response = match builder.send().await {
            Ok(response) => response,
            Err(error) => return transport_error(&error),
        };
        let status = response.status().as_u16();
        let header_request_id = response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let retry_after_ms = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|seconds| seconds.saturating_mul(1000));
        if !(200..300).contains(&status) {
            let mut observation =
                Observation::error(status_reason(status), DispatchCertainty::TerminalResponse);
            observation.http_status = Some(status);
            observation.request_id = header_request_id;
            if status == 429 {
                observation.retry_after_ms = retry_after_ms;
            }
            return observation;
        }
        let body: Value = match response.json().await {
            Ok(body) => body,
            Err(error) if error.is_timeout() => {
                return Observation::error(AttemptReason::Timeout, DispatchCertainty::Unknown)
            }
            Err(_) => {
                let mut observation = Observation::error(
                    AttemptReason::InvalidOutput,
                    DispatchCertainty::TerminalResponse,
                );
                observation.http_status = Some(status);
                return observation;
            }
        };
        let mut observation = read_answer(&spec.answer, &body);
        observation.http_status = Some(status);
        observation.request_id = body
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(header_request_id);
        observation.actual_model = body.get("model").and_then(Value::as_str).map(str::to_owned);
        let reported = ProviderUsage::from_answer(&body);
        observation.usage = ObservedUsage {
            input_tokens: reported.input,
            output_tokens: reported.output,
            cost_usd: None,
        };
        observation
    }
}

impl Adapter for ChatCompletionsAdapter {
    fn id(&self) -> &str {
        &self.config.id
    }

    fn version(&self) -> &str {
        &self.config.version
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn worker(&self) -> Option<&Pin> {
        self.worker.as_ref()
    }

    fn invoke<'a>(&'a self, request: AdapterRequest<'a>) -> BoxFuture<'a, Observation> {
        Box::pin(self.call(request))
    }
}

/// The reason for a non-2xx status.
pub fn status_reason(status: u16) -> AttemptReason {
    match status {
        429 => AttemptReason::RateLimited,
        408 => AttemptReason::Timeout,
        503 | 529 => AttemptReason::Overloaded,
        500..=599 => AttemptReason::ServiceError,
        401 | 403 => AttemptReason::Authentication,
        _ => AttemptReason::InvalidRequest,
    }
}

fn transport_error(error: &reqwest::Error) -> Observation {
    if error.is_connect() {
        Observation::error(AttemptReason::NetworkTransient, DispatchCertainty::NotSent)
    } else if error.is_timeout() {
        Observation::error(AttemptReason::Timeout, DispatchCertainty::Unknown)
    } else {
        Observation::error(AttemptReason::NetworkTransient, DispatchCertainty::Unknown)
    }
}

fn instructions(answer: &Answer) -> String {
    let domain = match answer {
        Answer::Choice { options } => {
            let list: Vec<String> = options
                .iter()
                .map(|o| format!("\"{}\" ({})", o.id, o.description))
                .collect();
            format!("\"value\" must be exactly one of these option ids: {}.", list.join(", "))
        }
        Answer::OrdinalScore { levels } => {
            let list: Vec<String> = levels
                .iter()
                .enumerate()
                .map(|(i, l)| format!("{i}: {l}"))
                .collect();
            format!(
                "\"value\" must be a number from 0 to {} on this scale: {}.",
                levels.len().saturating_sub(1),
                list.join("; ")
            )
        }
        Answer::TruthProbability {
            true_description,
            false_description,
        } => format!(
            "\"value\" must be the probability in [0, 1] that the statement is true (true: {}; false: {}).",
            true_description.as_deref().unwrap_or("yes"),
            false_description.as_deref().unwrap_or("no")
        ),
    };
    format!(
        "You answer one decision question about the given input. You take no actions. Reply with \
         only a JSON object {{\"value\": ..., \"confidence\": ...}} where {domain} \"confidence\" \
         is your confidence in [0, 1], or null."
    )
}

/// Reads `choices[0].message.content` as the answer object and validates it.
fn read_answer(answer: &Answer, body: &Value) -> Observation {
    let invalid = || {
        Observation::error(
            AttemptReason::InvalidOutput,
            DispatchCertainty::TerminalResponse,
        )
    };
    let Some(content) = body
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
    else {
        return invalid();
    };
    let text = content
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim();
    let Ok(parsed) = serde_json::from_str::<Value>(text) else {
        return invalid();
    };
    let Some(value) = parsed.get("value").filter(|v| answer.accepts(v)) else {
        return invalid();
    };
    let confidence = parsed
        .get("confidence")
        .and_then(Value::as_f64)
        .filter(|c| c.is_finite() && (0.0..=1.0).contains(c));
    let mut observation = Observation::success(value.clone()).with_uncertainty(Uncertainty {
        source: "model-self-report".into(),
        profile: SELF_REPORT_PROFILE.into(),
        calibration: "uncalibrated".into(),
        confidence,
        distribution: None,
        calibration_ref: None,
    });
    observation.status = Status::Success;
    observation.dispatch_certainty = Some(DispatchCertainty::TerminalResponse);
    observation
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_as_specified() {
        assert_eq!(status_reason(429), AttemptReason::RateLimited);
        assert_eq!(status_reason(408), AttemptReason::Timeout);
        assert_eq!(status_reason(529), AttemptReason::Overloaded);
        assert_eq!(status_reason(500), AttemptReason::ServiceError);
        assert_eq!(status_reason(502), AttemptReason::ServiceError);
        assert_eq!(status_reason(401), AttemptReason::Authentication);
        assert_eq!(status_reason(403), AttemptReason::Authentication);
        for status in [400, 404, 422] {
            assert_eq!(status_reason(status), AttemptReason::InvalidRequest);
        }
        for status in [408, 429, 500, 503, 529] {
            assert!(status_reason(status).is_retryable());
        }
    }
}
