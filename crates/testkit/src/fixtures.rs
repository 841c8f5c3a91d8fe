//! The set-up most service tests share: [`test_profile`] registered in workspace
//! [`WORKSPACE`], an [`admission`] body, a [`chat`] request for the proxy routes, and a
//! service's configuration file ([`config_file`]).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The workspace the tests register [`test_profile`] in.
pub const WORKSPACE: &str = "t";

/// A small profile for workspace tests: provider `p` with one permit and a breaker, provider
/// `zero` that can never admit, a short queue.
pub fn test_profile() -> Value {
    json!({
        "workspace": {"concurrency": 4, "maxQueueLength": 1, "maxQueueWaitMs": 2000},
        "providers": {
            "p": {"concurrency": 1, "circuitBreaker": {"failureThreshold": 1, "openMs": 60000}},
            "zero": {"concurrency": 0},
            "wide": {"concurrency": 4, "tokensPerSecond": 1000}
        },
        "principals": {
            "alice": {"concurrency": 4, "maxCostUsd": 1, "allowUnknownCost": true, "maxBatchSize": 4},
            "bob": {"concurrency": 4}
        }
    })
}

/// An admission of 10 tokens to `provider` (budget `inv-1`, deadline 1 s).
pub fn admission(provider: &str) -> Value {
    json!({"providerId": provider, "budgetId": "inv-1", "estimate": {"tokens": 10}, "deadlineMs": 1000})
}

/// A chat request to `model` (one user message, at most 50 tokens), as the OpenAI and Anthropic
/// routes of the proxy take it.
pub fn chat(model: &str) -> Value {
    json!({"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]})
}

/// Writes `toml` as the configuration file `turnstile.toml` in `dir`; its path.
pub fn config_file(dir: &Path, toml: &str) -> PathBuf {
    let path = dir.join("turnstile.toml");
    std::fs::write(&path, toml).expect("the configuration file is written");
    path
}
