//! The admission estimate of one proxied call, from its request alone.
//!
//! - Prompt tokens: ceil(request body bytes / `prompt_bytes_per_token`). With 1.0 this is a
//!   strict upper bound (every token is at least one byte of the body); the default 3.0 is a
//!   conservative estimate. The body includes the JSON around the prompt, so it only errs high.
//! - Output tokens: `n` × (the request's `max_tokens` / `max_completion_tokens` /
//!   `max_output_tokens`, else the model's default); embeddings produce none.
//! - Cost: the price table applied to both, or unknown without prices (the profile decides
//!   whether an unknown cost is admitted).
//! - Request bytes: the body size (for a profile's request-size limit).
//!
//! Settlement replaces tokens and cost with what the provider reported ([`turnstile_admission::ProviderUsage`]).

use turnstile_admission::Estimate;

use crate::config::Route;
use crate::request::{Endpoint, ProxyRequest};

/// The token split behind an estimate (kept to price the settlement the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenEstimate {
    pub input: u64,
    pub output: u64,
}

impl TokenEstimate {
    pub fn total(self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// Estimates tokens for `request` on `route`.
pub fn tokens(
    endpoint: Endpoint,
    request: &ProxyRequest,
    route: &Route,
    prompt_bytes_per_token: f64,
) -> TokenEstimate {
    let input = (request.body_bytes as f64 / prompt_bytes_per_token).ceil() as u64;
    let output = match endpoint {
        Endpoint::Embeddings => 0,
        _ => request.n.saturating_mul(
            request
                .max_output_tokens
                .unwrap_or(route.default_max_output_tokens),
        ),
    };
    TokenEstimate { input, output }
}

/// The core's estimate for these tokens on `route`.
pub fn estimate(tokens: TokenEstimate, route: &Route, body_bytes: u64) -> Estimate {
    let mut estimate = Estimate::new()
        .tokens(tokens.total())
        .request_bytes(body_bytes);
    if let Some(prices) = route.prices {
        estimate = estimate.cost_usd(prices.cost_usd(tokens.input, tokens.output));
    }
    estimate
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Upstream;
    use crate::format::ApiFormat;
    use std::sync::Arc;
    use turnstile_admission::Prices;

    fn route(prices: Option<Prices>) -> Route {
        Route {
            model: Arc::from("m"),
            format: ApiFormat::Openai,
            deployments: vec![crate::deployment_config::Deployment {
                upstream: Upstream {
                    name: Arc::from("u"),
                    format: ApiFormat::Openai,
                    base_url: Arc::from("http://x"),
                    api_key: None,
                },
                provider: Arc::from("p"),
                weight: 1,
            }],
            upstream_model: None,
            prices,
            default_max_output_tokens: 100,
        }
    }

    fn request(max: Option<u64>, n: u64, bytes: u64) -> ProxyRequest {
        ProxyRequest {
            model: "m".into(),
            stream: false,
            client_wants_usage: false,
            max_output_tokens: max,
            n,
            body_bytes: bytes,
        }
    }

    #[test]
    fn prompt_is_bounded_by_body_bytes_and_output_by_the_cap() {
        let r = route(None);
        let t = tokens(
            Endpoint::ChatCompletions,
            &request(Some(50), 2, 301),
            &r,
            3.0,
        );
        assert_eq!(
            t,
            TokenEstimate {
                input: 101,
                output: 100
            }
        );
        let t = tokens(Endpoint::ChatCompletions, &request(None, 1, 10), &r, 1.0);
        assert_eq!(
            t,
            TokenEstimate {
                input: 10,
                output: 100
            }
        );
        let t = tokens(Endpoint::Embeddings, &request(Some(9), 1, 9), &r, 1.0);
        assert_eq!(t.output, 0);
    }

    #[test]
    fn cost_is_unknown_without_prices() {
        let t = TokenEstimate {
            input: 1_000_000,
            output: 0,
        };
        assert_eq!(estimate(t, &route(None), 5).cost_usd, None);
        let priced = route(Some(Prices {
            input_usd_per_mtok: 2.0,
            output_usd_per_mtok: 8.0,
        }));
        assert_eq!(estimate(t, &priced, 5).cost_usd, Some(2.0));
        assert_eq!(estimate(t, &priced, 5).tokens, Some(1_000_000.0));
    }
}
