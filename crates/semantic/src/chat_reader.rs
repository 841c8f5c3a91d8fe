//! The real reader: one `POST {baseUrl}/chat/completions` per read against an OpenAI-compatible
//! endpoint, over rustls.
//!
//! - Request: `{"model", "messages": [system prompt, canonical evidence JSON], "temperature": 0}`
//!   with `Authorization: Bearer <key>`; the key is read from the environment variable *named*
//!   in the settings and is never logged, printed, or part of any error or configuration digest.
//! - Outcome: transport errors, timeouts and non-2xx statuses → *unavailable* (reason: the
//!   status or error kind only); a 2xx body that is not a chat completion, or whose message
//!   content breaks the answer contract ([`crate::answer`]) → *invalid*; otherwise *accepted*.
//! - Usage: the answer's `usage`, read by [`ProviderUsage`] (input, cached input, output and
//!   reasoning tokens; a count not reported is 0, and no `usage` object is no usage).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use turnstile_admission::ProviderUsage;

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
}

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
        })
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

    fn read(&mut self, request: &ReadRequest<'_>) -> ReadOutcome {
        let body = json!({
            "model": self.configuration.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": request.evidence_json},
            ],
        });
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
