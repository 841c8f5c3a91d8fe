//! The real reader: one `POST {baseUrl}/chat/completions` per read against an OpenAI-compatible
//! endpoint, over rustls.
//!
//! - Request: `{"model", "messages": [system prompt, canonical evidence JSON], "temperature": 0}`
//!   (and `max_tokens` when set with [`ChatCompletionsReader::with_max_tokens`])
//!   with `Authorization: Bearer <key>`; the key is read from the environment variable *named*
//!   in the settings and is never logged, printed, or part of any error or configuration digest.
//! - Outcome: transport errors, timeouts and non-2xx statuses → *unavailable* (reason: the
//!   status or error kind only), a 429 as [`ReadOutcome::RateLimited`] with the wait its
//!   `retry-after-ms` / `Retry-After` asks for ([`provider_retry_after_ms`]); a 2xx body that is not a chat completion, or whose message
//!   content breaks the answer contract ([`crate::answer`]) → *invalid*; otherwise *accepted*.
//! - Usage: the answer's `usage`, read by [`ProviderUsage`] (input, cached input, output and
//!   reasoning tokens; a count not reported is 0, and no `usage` object is no usage).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use turnstile_admission::{provider_retry_after_ms, Prices, ProviderUsage};
use turnstile_shell::Clock;

use crate::answer::{parse_answer, CONTRACT_VERSION, SYSTEM_PROMPT};
use crate::{CallUsage, ReadOutcome, ReadRequest, Reader, ReaderConfiguration};

/// An API key. Its `Debug` and `Display` never show the value.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(value: impl Into<String>) -> Self {
        ApiKey(value.into())
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// How to reach the endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatReaderSettings {
    /// Base URL, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// Name of the environment variable that holds the API key.
    pub api_key_env: String,
    /// Whole-request timeout.
    pub timeout: Duration,
}

/// Why a reader could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ReaderSetupError {
    /// The base URL is empty or not http(s).
    #[error("reader base URL must start with http:// or https:// (got {0:?})")]
    BadBaseUrl(String),
    /// The model name is empty.
    #[error("reader model name must not be empty")]
    EmptyModel,
    /// The named environment variable is unset or empty.
    #[error("environment variable {0} (named as the API key variable) is not set or empty")]
    MissingApiKey(String),
    /// The HTTP client could not be built.
    #[error("HTTP client could not be built: {0}")]
    Client(#[from] reqwest::Error),
}

/// The OpenAI-compatible chat-completions reader.
#[derive(Debug)]
pub struct ChatCompletionsReader {
    client: reqwest::blocking::Client,
    url: String,
    api_key: ApiKey,
    configuration: ReaderConfiguration,
    max_tokens: Option<u32>,
    prices: Option<Prices>,
}

/// The longest provider Retry-After a read reports (one hour).
const MAX_RETRY_AFTER_MS: u64 = 3_600_000;

impl ChatCompletionsReader {
    /// Builds a reader, reading the API key from the environment variable named in `settings`.
    pub fn from_env(settings: &ChatReaderSettings) -> Result<Self, ReaderSetupError> {
        let key = std::env::var(&settings.api_key_env)
            .ok()
            .filter(|key| !key.trim().is_empty())
            .ok_or_else(|| ReaderSetupError::MissingApiKey(settings.api_key_env.clone()))?;
        Self::new(settings, ApiKey::new(key))
    }

    /// Builds a reader with an explicit key.
    pub fn new(settings: &ChatReaderSettings, api_key: ApiKey) -> Result<Self, ReaderSetupError> {
        let base = settings.base_url.trim().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ReaderSetupError::BadBaseUrl(settings.base_url.clone()));
        }
        if settings.model.trim().is_empty() {
            return Err(ReaderSetupError::EmptyModel);
        }
        let client = reqwest::blocking::Client::builder()
            .timeout(settings.timeout)
            .use_rustls_tls()
            .build()?;
        Ok(ChatCompletionsReader {
            client,
            url: format!("{base}/chat/completions"),
            api_key,
            configuration: ReaderConfiguration {
                endpoint: base,
                model: settings.model.trim().to_owned(),
                contract_version: CONTRACT_VERSION,
            },
            max_tokens: None,
            prices: None,
        })
    }

    /// Sends `max_tokens` with every read (and reports it as the read's output bound).
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// The model's prices, for the cost of each read's admission estimate.
    pub fn with_prices(mut self, prices: Prices) -> Self {
        self.prices = Some(prices);
        self
    }
}

#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
    /// Read by the one reader of provider usage; anything but an object (or null) is not a
    /// chat completion.
    #[serde(default)]
    usage: Option<ProviderUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<String>,
}

fn transport_reason(error: &reqwest::Error) -> String {
    // Only the kind of failure: reqwest errors can carry the URL, which is not secret, but we
    // keep records terse and free of anything request-specific.
    if error.is_timeout() {
        "endpoint timed out".to_owned()
    } else if error.is_connect() {
        "endpoint refused or unreachable".to_owned()
    } else {
        "transport error talking to endpoint".to_owned()
    }
}

impl Reader for ChatCompletionsReader {
    fn configuration(&self) -> &ReaderConfiguration {
        &self.configuration
    }

    fn max_output_tokens(&self) -> Option<u32> {
        self.max_tokens
    }

    fn prices(&self) -> Option<Prices> {
        self.prices
    }

    fn read(&mut self, request: &ReadRequest<'_>) -> ReadOutcome {
        let mut body = json!({
            "model": self.configuration.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": request.evidence_json},
            ],
        });
        if let Some(max_tokens) = self.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        let response = match self
            .client
            .post(&self.url)
            .bearer_auth(&self.api_key.0)
            .json(&body)
            .send()
        {
            Ok(response) => response,
            Err(error) => {
                return ReadOutcome::Unavailable {
                    reason: transport_reason(&error),
                }
            }
        };
        let status = response.status();
        if status.as_u16() == 429 {
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|value| value.to_str().ok())
            };
            return ReadOutcome::RateLimited {
                reason: "endpoint answered HTTP 429".to_owned(),
                retry_after_ms: provider_retry_after_ms(
                    header("retry-after-ms"),
                    header("retry-after"),
                    Clock::system().now_ms(),
                    MAX_RETRY_AFTER_MS,
                ),
            };
        }
        if !status.is_success() {
            return ReadOutcome::Unavailable {
                reason: format!("endpoint answered HTTP {}", status.as_u16()),
            };
        }
        let completion: Completion = match response.json() {
            Ok(completion) => completion,
            Err(error) if error.is_decode() => {
                return ReadOutcome::Invalid {
                    reason: "response is not a chat completion".to_owned(),
                    usage: None,
                }
            }
            Err(error) => {
                return ReadOutcome::Unavailable {
                    reason: transport_reason(&error),
                }
            }
        };
        let usage = completion.usage.map(CallUsage::from);
        let content = completion
            .choices
            .into_iter()
            .next()
            .and_then(|choice| choice.message.content);
        let Some(content) = content else {
            return ReadOutcome::Invalid {
                reason: "completion has no message content".to_owned(),
                usage,
            };
        };
        match parse_answer(&content) {
            Ok(reading) => ReadOutcome::Accepted { reading, usage },
            Err(error) => ReadOutcome::Invalid {
                reason: error.to_string(),
                usage,
            },
        }
    }
}
