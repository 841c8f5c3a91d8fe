//! Adapter configuration files: build an [`AdapterSet`] from JSON.
//!
//! ```json
//! {"adapters": [
//!   {"kind": "scripted", "id": "jev", "version": "1.0.0-design",
//!    "aliases": {"category": [{"delayMs": 560, "observation": {"status": "success", "value": "documentation"}}]},
//!    "default": {"observation": {"status": "error", "reason": "service-error"}}},
//!   {"kind": "chat-completions", "id": "llm-subagent", "version": "1.0.0",
//!    "baseUrl": "http://127.0.0.1:8080/v1", "apiKeyEnv": "LLM_API_KEY", "maxTokens": 1024,
//!    "prices": {"inputUsdPerMtok": 3.0, "outputUsdPerMtok": 15.0},
//!    "worker": {"metadata": {"id": "example-decision-worker", "version": "1.0.0"}, "task": "…"}}
//! ]}
//! ```
//!
//! `worker` (either kind) is the subagent worker the adapter runs, as deployed; its pin
//! ([`crate::artifact::worker_pin`]) must equal the `subagent` pin of every target it serves.
//! `maxTokens` and `prices` (either kind) are what one call is assumed to use and cost:
//! [`AdaptersFile::estimate`] builds each attempt's admission estimate from them
//! ([`crate::costing`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::adapter::{AdapterSet, Capabilities};
use crate::chat_completions::{ChatCompletionsAdapter, ChatCompletionsConfig, ClientError};
use crate::costing::Costing;
use crate::scripted::{ScriptedAdapter, Step};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdaptersFile {
    pub adapters: Vec<AdapterConfig>,
}

/// One adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum AdapterConfig {
    Scripted(Box<ScriptedConfig>),
    ChatCompletions(ChatCompletionsConfig),
}

/// A scripted adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScriptedConfig {
    pub id: String,
    pub version: String,
    #[serde(default)]
    pub capabilities: Option<Capabilities>,
    #[serde(default)]
    pub aliases: BTreeMap<String, Vec<Step>>,
    #[serde(default)]
    pub default: Option<Step>,
    /// The subagent worker it plays (its JSON as deployed), for targets that pin a `subagent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<serde_json::Value>,
    /// `maxTokens` and `prices`: the attempt's estimate ([`crate::costing`]).
    #[serde(flatten)]
    pub costing: Costing,
}

impl AdaptersFile {
    /// Builds the adapters.
    pub fn build(self) -> Result<AdapterSet, ClientError> {
        let mut set = AdapterSet::new();
        for config in self.adapters {
            match config {
                AdapterConfig::Scripted(config) => {
                    let config = *config;
                    config.costing.check(&config.id)?;
                    let worker = ClientError::worker_pin(&config.id, config.worker.as_ref())?;
                    let mut adapter = ScriptedAdapter::new(config.id, config.version);
                    if let Some(capabilities) = config.capabilities {
                        adapter = adapter.with_capabilities(capabilities);
                    }
                    for (alias, steps) in config.aliases {
                        adapter = adapter.script(&alias, steps);
                    }
                    if let Some(step) = config.default {
                        adapter = adapter.with_default(step);
                    }
                    if let Some(pin) = worker {
                        adapter = adapter.with_worker(pin);
                    }
                    set.insert(Arc::new(adapter));
                }
                AdapterConfig::ChatCompletions(config) => {
                    set.insert(Arc::new(ChatCompletionsAdapter::new(config)?));
                }
            }
        }
        Ok(set)
    }
}
