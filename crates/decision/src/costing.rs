//! What one call of an adapter is assumed to use and cost, stated in the adapters file
//! (`maxTokens`, `prices`), and the evaluation's [`EstimateFn`] built from it.
//!
//! Decides each attempt's admission estimate from the configuration alone:
//!
//! - prompt tokens: ceil(the projection's JSON bytes / [`PROMPT_BYTES_PER_TOKEN`]) (the
//!   proxy's default rule for a request body);
//! - output tokens: the adapter's `maxTokens` (a chat-completions adapter also sends it as the
//!   request's `max_tokens`, so the provider cannot exceed it);
//! - cost: the adapter's `prices` applied to both.
//!
//! # Invariants
//!
//! - Without `maxTokens` an adapter's calls have unknown tokens and unknown cost (the estimate
//!   is empty, as without an adapters file): an estimate is never a guess below what the
//!   provider may produce. A `prices` table therefore needs `maxTokens`
//!   ([`Costing::check`], called when the adapters are built).
//! - Targets whose adapter the file does not configure get the empty estimate.
//! - The estimate reads only the adapter id and the projection: no principal or workspace ID.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use turnstile_admission::{Estimate, Prices};

use crate::adapter_config::{AdapterConfig, AdaptersFile};
use crate::chat_completions::ClientError;
use crate::request::EstimateFn;

/// Prompt bytes counted as one token (the proxy's default `prompt_bytes_per_token`).
pub const PROMPT_BYTES_PER_TOKEN: f64 = 3.0;

/// An adapter's `maxTokens` and `prices` (both optional, camelCase in the adapters file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Costing {
    /// The most output tokens one call produces (chat-completions: sent as `max_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<NonZeroU64>,
    /// USD per million input and output tokens (`{"inputUsdPerMtok", "outputUsdPerMtok"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<Prices>,
}

impl Costing {
    /// Refuses a price table without `maxTokens` (its cost could not be bounded).
    pub fn check(&self, adapter: &str) -> Result<(), ClientError> {
        if self.prices.is_some() && self.max_tokens.is_none() {
            return Err(ClientError::PricesWithoutMaxTokens {
                adapter: adapter.to_owned(),
            });
        }
        Ok(())
    }

    /// The estimate of one call whose projection is `projection`.
    pub fn estimate(&self, projection: &Value) -> Estimate {
        let Some(output) = self.max_tokens.map(NonZeroU64::get) else {
            return Estimate::new();
        };
        let bytes = serde_json::to_vec(projection).map_or(0, |b| b.len());
        let input = (bytes as f64 / PROMPT_BYTES_PER_TOKEN).ceil() as u64;
        let mut estimate = Estimate::new().tokens(input.saturating_add(output));
        if let Some(prices) = self.prices {
            estimate = estimate.cost_usd(prices.cost_usd(input, output));
        }
        estimate
    }
}

impl AdapterConfig {
    /// The adapter's id.
    pub fn id(&self) -> &str {
        match self {
            AdapterConfig::Scripted(config) => &config.id,
            AdapterConfig::ChatCompletions(config) => &config.id,
        }
    }

    /// The adapter's `maxTokens` and `prices`.
    pub fn costing(&self) -> Costing {
        match self {
            AdapterConfig::Scripted(config) => config.costing,
            AdapterConfig::ChatCompletions(config) => config.costing,
        }
    }
}

impl AdaptersFile {
    /// The evaluation's estimate (`SchedulerRun::estimate`): each attempt's from its target's
    /// adapter (see the module docs).
    pub fn estimate(&self) -> EstimateFn {
        let table: HashMap<String, Costing> = self
            .adapters
            .iter()
            .map(|config| (config.id().to_owned(), config.costing()))
            .collect();
        Arc::new(move |_alias, target, projection| {
            table
                .get(&target.adapter)
                .map_or_else(Estimate::new, |costing| costing.estimate(projection))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn costing(max_tokens: Option<u64>, prices: Option<(f64, f64)>) -> Costing {
        Costing {
            max_tokens: max_tokens.and_then(NonZeroU64::new),
            prices: prices.map(|(i, o)| Prices::new(i, o).unwrap()),
        }
    }

    #[test]
    fn prompt_from_the_projection_output_from_max_tokens_cost_from_both() {
        // 29 bytes of JSON → 10 prompt tokens.
        let projection = json!({"message": "abcdefghijklmno"});
        assert_eq!(serde_json::to_vec(&projection).unwrap().len(), 29);
        let estimate = costing(Some(100), Some((3.0, 15.0))).estimate(&projection);
        assert_eq!(estimate.tokens, Some(110.0));
        let cost = estimate.cost_usd.unwrap();
        assert!(
            (cost - (10.0 * 3.0 + 100.0 * 15.0) / 1e6).abs() < 1e-15,
            "{cost}"
        );
    }

    #[test]
    fn without_max_tokens_tokens_and_cost_stay_unknown() {
        let estimate = costing(None, None).estimate(&json!({"m": 1}));
        assert_eq!(estimate, Estimate::new());
        let tokens_only = costing(Some(5), None).estimate(&json!(1));
        assert_eq!(tokens_only.tokens, Some(6.0));
        assert_eq!(tokens_only.cost_usd, None);
    }

    #[test]
    fn prices_without_max_tokens_are_refused() {
        assert!(matches!(
            costing(None, Some((1.0, 1.0))).check("a"),
            Err(ClientError::PricesWithoutMaxTokens { adapter }) if adapter == "a"
        ));
        assert!(costing(Some(1), Some((1.0, 1.0))).check("a").is_ok());
        assert!(serde_json::from_value::<Costing>(json!({"maxTokens": 0})).is_err());
    }
}
