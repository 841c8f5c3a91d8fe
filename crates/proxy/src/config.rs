//! The `[proxy]` section of the service configuration: upstreams, the model routing table,
//! prices and the proxy's own bounds.
//!
//! ```toml
//! [proxy]
//! default_wait_ms = 30000          # how long a call may wait for a permit (header overrides)
//! max_wait_ms = 300000             # the largest `x-turnstile-wait-ms` accepted
//! max_request_bytes = 8388608      # request body cap of the proxy routes (413 above)
//! default_max_output_tokens = 4096 # output estimate when the body names no max_tokens
//! prompt_bytes_per_token = 3.0     # prompt tokens estimated as ceil(body bytes / this)
//!
//! [proxy.upstreams.openai]
//! format = "openai"                           # or "anthropic"
//! base_url_env = "TURNSTILE_OPENAI_BASE_URL"  # or base_url = "https://api.openai.com/v1"
//! api_key_env = "TURNSTILE_OPENAI_API_KEY"
//! required = false                            # true: refuse to start without the variables
//!
//! [proxy.models."gpt-5.4-mini"]
//! upstream = "openai"
//! provider = "openai"            # the provider lane of the caller's workspace profile
//! input_usd_per_mtok = 0.25      # optional prices, USD per million tokens
//! output_usd_per_mtok = 2.0
//! ```
//!
//! A model may instead list several `deployments` (upstream + provider lane pairs with weights,
//! `deployment_config.rs`); the single form above is one deployment of weight 1.
//!
//! Invariants: an upstream's API key is read from its environment variable when the service
//! starts ([`ProxyConfig::resolve`]); it is held in memory only, never written to the config,
//! a log line, an error message or a response. Every deployment of a model names an upstream
//! that exists, and all of them share one wire format, so a model is served on one surface
//! only.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use turnstile_admission::Prices;

use crate::deployment_config::{self, Deployment, DeploymentConfig};
use crate::format::ApiFormat;

/// The `[proxy]` section. Absent: the proxy routes answer 404 `model_not_found` for every model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyConfig {
    /// How long a call waits for a permit when it sends no `x-turnstile-wait-ms`.
    pub default_wait_ms: u64,
    /// The largest `x-turnstile-wait-ms` accepted (400 above).
    pub max_wait_ms: u64,
    /// Request body cap on the proxy routes (413 above). Prompts with images are large; the
    /// admission API keeps its own, smaller `http.max_body_bytes`.
    pub max_request_bytes: usize,
    /// A non-streamed upstream answer larger than this is a failure (502).
    pub max_response_bytes: usize,
    /// Output tokens assumed when the request names no `max_tokens` / `max_output_tokens`.
    pub default_max_output_tokens: u64,
    /// Prompt tokens are estimated as ceil(request body bytes / this). 1.0 is a strict upper
    /// bound (a token is at least one byte); the default 3.0 is a conservative estimate
    /// (English text averages about 4 bytes per token). Settlement replaces it anyway.
    pub prompt_bytes_per_token: f64,
    /// Connecting to an upstream may take this long (502 after).
    pub connect_timeout_ms: u64,
    /// The upstream's response head must arrive within this (504 after). Reasoning models may
    /// think for minutes before the first byte.
    pub first_byte_timeout_ms: u64,
    /// A streamed or non-streamed upstream body that sends nothing for this long is cut.
    pub idle_timeout_ms: u64,
    /// Pause applied after an upstream 429 that carries no usable retry header.
    pub fallback_retry_after_ms: u64,
    /// Upstreams by name.
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    /// Models by the name clients send.
    pub models: BTreeMap<String, ModelConfig>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            default_wait_ms: 30_000,
            max_wait_ms: 300_000,
            max_request_bytes: 8 * 1024 * 1024,
            max_response_bytes: 32 * 1024 * 1024,
            default_max_output_tokens: 4096,
            prompt_bytes_per_token: 3.0,
            connect_timeout_ms: 10_000,
            first_byte_timeout_ms: 600_000,
            idle_timeout_ms: 120_000,
            fallback_retry_after_ms: 1_000,
            upstreams: BTreeMap::new(),
            models: BTreeMap::new(),
        }
    }
}

/// One upstream provider endpoint.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The upstream's wire format (`openai` or `anthropic`).
    pub format: ApiFormat,
    /// The base URL exactly as the provider's own SDK takes it (`https://api.openai.com/v1`,
    /// `https://api.anthropic.com`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// An environment variable holding the base URL (wins over `base_url` when set).
    #[serde(default)]
    pub base_url_env: Option<String>,
    /// The environment variable holding the upstream API key. Absent: no key is sent.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Whether the service refuses to start when `api_key_env` is not set. Default false: the
    /// upstream is then disabled with a warning naming the variable, and so are the
    /// deployments on it (a model left without one answers as an unknown model).
    #[serde(default)]
    pub required: bool,
}

/// One model clients may call: either `upstream` and `provider` (one deployment) or
/// `deployments` (several), never both.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The upstream (a key of `[proxy.upstreams]`) of the single form.
    #[serde(default)]
    pub upstream: Option<String>,
    /// The provider lane of the caller's workspace profile that admits this model's calls
    /// (single form).
    #[serde(default)]
    pub provider: Option<String>,
    /// Several upstream + provider lane pairs serving the model (instead of the two above).
    #[serde(default)]
    pub deployments: Option<Vec<DeploymentConfig>>,
    /// The model name sent upstream (default: the name the client sent).
    #[serde(default)]
    pub upstream_model: Option<String>,
    /// USD per million input (prompt) tokens. Without both prices the cost is unknown, and the
    /// profile decides whether an unknown cost is admitted.
    #[serde(default)]
    pub input_usd_per_mtok: Option<f64>,
    /// USD per million output (completion) tokens.
    #[serde(default)]
    pub output_usd_per_mtok: Option<f64>,
    /// Output tokens assumed when the request names no maximum (default: the section's).
    #[serde(default)]
    pub default_max_output_tokens: Option<u64>,
}

/// A configuration the proxy cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyConfigError {
    /// A model (or one of its deployments) names an upstream that is not configured.
    #[error("proxy.models.{model}.{field}: upstream {upstream} is not in [proxy.upstreams]")]
    UnknownUpstream {
        /// The model.
        model: String,
        /// The field naming it (`upstream`, `deployments[1].upstream`).
        field: String,
        /// The upstream it names.
        upstream: String,
    },
    /// A model gives both the single form (`upstream`, `provider`) and `deployments`.
    #[error("proxy.models.{model}: give either upstream and provider, or deployments, not both")]
    BothForms {
        /// The model.
        model: String,
    },
    /// A model gives neither a complete single form nor `deployments`.
    #[error("proxy.models.{model}: needs upstream and provider, or deployments")]
    NoDeployment {
        /// The model.
        model: String,
    },
    /// A model's `deployments` list is empty or too long.
    #[error("proxy.models.{model}.deployments: must list from 1 to {max} deployments")]
    DeploymentCount {
        /// The model.
        model: String,
        /// The most deployments a model may have.
        max: usize,
    },
    /// A deployment's upstream has another wire format than the model's first deployment.
    #[error("proxy.models.{model}.{field}: upstream format {format} differs from the model's first deployment ({first})")]
    MixedFormats {
        /// The model.
        model: String,
        /// The field (`deployments[1].upstream`).
        field: String,
        /// That upstream's format.
        format: &'static str,
        /// The format of the model's first deployment.
        first: &'static str,
    },
    /// Two deployments of a model name the same provider lane.
    #[error("proxy.models.{model}.{field}: provider lane {provider} is already a deployment of this model (each deployment needs its own lane)")]
    DuplicateLane {
        /// The model.
        model: String,
        /// The field (`deployments[1].provider`).
        field: String,
        /// The lane named twice.
        provider: String,
    },
    /// A deployment's weight is not positive.
    #[error("proxy.models.{model}.{field}: must be a positive integer")]
    BadWeight {
        /// The model.
        model: String,
        /// The field (`deployments[0].weight`).
        field: String,
    },
    /// An upstream has no base URL (neither `base_url` nor a set `base_url_env`).
    #[error("proxy.upstreams.{upstream}: needs base_url or base_url_env (with the variable set)")]
    NoBaseUrl {
        /// The upstream.
        upstream: String,
    },
    /// An upstream's base URL is not `http://` or `https://`.
    #[error("proxy.upstreams.{upstream}: the base URL must start with http:// or https://")]
    BadBaseUrl {
        /// The upstream.
        upstream: String,
    },
    /// An upstream's key variable is not set (or empty).
    #[error("proxy.upstreams.{upstream}: environment variable {variable} is not set")]
    MissingKey {
        /// The upstream.
        upstream: String,
        /// The environment variable it names.
        variable: String,
    },
    /// A bound of the section is out of range.
    #[error("proxy.{field} must be {expected}")]
    Invalid {
        /// The field of `[proxy]`.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A model's prices are not finite numbers from 0 to 1e6.
    #[error("proxy.models.{model}: prices must be finite numbers from 0 to 1e6")]
    BadPrice {
        /// The model.
        model: String,
    },
    /// A model's (or a deployment's) provider is not a valid provider ID.
    #[error("proxy.models.{model}.{field}: must be a provider ID (1-128 of [A-Za-z0-9._:-], not starting with .)")]
    BadProvider {
        /// The model.
        model: String,
        /// The field (`provider`, `deployments[0].provider`).
        field: String,
    },
}

/// An upstream as configured, its base URL and key resolved from the environment: a plain
/// spec, which the proxy turns into what it sends with (`upstream::Outbound`) when it starts.
#[derive(Clone)]
pub struct Upstream {
    /// The upstream's name (its key in `[proxy.upstreams]`).
    pub name: Arc<str>,
    /// Its wire format.
    pub format: ApiFormat,
    /// Without a trailing slash.
    pub base_url: Arc<str>,
    /// The provider key (never logged; `Debug` hides it).
    pub api_key: Option<Arc<str>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

/// A model route ready to use.
#[derive(Debug, Clone)]
pub struct Route {
    /// The model name clients send.
    pub model: Arc<str>,
    /// The wire format of every deployment's upstream (and so the surface it is served on).
    pub format: ApiFormat,
    /// The upstream + provider lane pairs that serve it, in configured order (at least one).
    pub deployments: Vec<Deployment>,
    /// The model name sent upstream, when it differs from the client's.
    pub upstream_model: Option<Arc<str>>,
    /// Its prices (`None`: the cost is unknown).
    pub prices: Option<Prices>,
    /// Output tokens assumed when the request names no maximum.
    pub default_max_output_tokens: u64,
}

impl ProxyConfig {
    /// Checks bounds and resolves every upstream from the environment (`env` reads one
    /// variable; the service passes `std::env::var`).
    pub fn resolve(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<BTreeMap<String, Route>, ProxyConfigError> {
        let checks: [(&'static str, bool, &'static str); 7] = [
            ("max_wait_ms", self.max_wait_ms >= 1, "at least 1"),
            (
                "default_wait_ms",
                self.default_wait_ms <= self.max_wait_ms,
                "at most proxy.max_wait_ms",
            ),
            (
                "max_request_bytes",
                self.max_request_bytes >= 64,
                "at least 64",
            ),
            (
                "max_response_bytes",
                self.max_response_bytes >= 64,
                "at least 64",
            ),
            (
                "prompt_bytes_per_token",
                self.prompt_bytes_per_token.is_finite() && self.prompt_bytes_per_token >= 0.5,
                "a number of at least 0.5",
            ),
            (
                "first_byte_timeout_ms",
                self.first_byte_timeout_ms >= 1 && self.idle_timeout_ms >= 1,
                "at least 1 (idle_timeout_ms too)",
            ),
            (
                "connect_timeout_ms",
                self.connect_timeout_ms >= 1,
                "at least 1",
            ),
        ];
        for (field, ok, expected) in checks {
            if !ok {
                return Err(ProxyConfigError::Invalid { field, expected });
            }
        }
        let mut upstreams = BTreeMap::new();
        // Upstreams whose key variable is not set (and not `required`), with that variable.
        let mut disabled: BTreeMap<String, String> = BTreeMap::new();
        for (name, upstream) in &self.upstreams {
            let base = upstream
                .base_url_env
                .as_deref()
                .and_then(&env)
                .filter(|v| !v.trim().is_empty())
                .or_else(|| upstream.base_url.clone());
            let base = match (base, &upstream.base_url_env) {
                (Some(base), _) => base,
                // Only a variable names the base URL, and it is not set: disabled unless
                // required (like a key, below).
                (None, Some(variable)) if !upstream.required => {
                    disabled.insert(name.clone(), variable.clone());
                    // Kept (its models' deployments are checked as written), never called.
                    upstreams.insert(
                        name.clone(),
                        Upstream {
                            name: Arc::from(name.as_str()),
                            format: upstream.format,
                            base_url: Arc::from(""),
                            api_key: None,
                        },
                    );
                    continue;
                }
                (None, _) => {
                    return Err(ProxyConfigError::NoBaseUrl {
                        upstream: name.clone(),
                    })
                }
            };
            let base = base.trim().trim_end_matches('/').to_owned();
            if !(base.starts_with("http://") || base.starts_with("https://")) {
                return Err(ProxyConfigError::BadBaseUrl {
                    upstream: name.clone(),
                });
            }
            let api_key = match &upstream.api_key_env {
                None => None,
                Some(variable) => match env(variable).filter(|v| !v.is_empty()) {
                    Some(key) => Some(Arc::<str>::from(key.as_str())),
                    None if upstream.required => {
                        return Err(ProxyConfigError::MissingKey {
                            upstream: name.clone(),
                            variable: variable.clone(),
                        })
                    }
                    None => {
                        disabled.insert(name.clone(), variable.clone());
                        None
                    }
                },
            };
            upstreams.insert(
                name.clone(),
                Upstream {
                    name: Arc::from(name.as_str()),
                    format: upstream.format,
                    base_url: Arc::from(base),
                    api_key,
                },
            );
        }
        let mut routes = BTreeMap::new();
        for (model, entry) in &self.models {
            let (format, mut deployments) = deployment_config::resolve(model, entry, &upstreams)?;
            deployments.retain(|d| !disabled.contains_key(&*d.upstream.name));
            if deployments.is_empty() {
                continue; // every upstream of the model is disabled: answered as unknown
            }
            let prices = match (entry.input_usd_per_mtok, entry.output_usd_per_mtok) {
                (None, None) => None,
                (input, output) => Some(
                    Prices::new(input.unwrap_or(0.0), output.unwrap_or(0.0)).map_err(|_| {
                        ProxyConfigError::BadPrice {
                            model: model.clone(),
                        }
                    })?,
                ),
            };
            routes.insert(
                model.clone(),
                Route {
                    model: Arc::from(model.as_str()),
                    format,
                    deployments,
                    upstream_model: entry.upstream_model.as_deref().map(Arc::from),
                    prices,
                    default_max_output_tokens: entry
                        .default_max_output_tokens
                        .unwrap_or(self.default_max_output_tokens),
                },
            );
        }
        for (upstream, variable) in &disabled {
            let models: Vec<&str> = self
                .models
                .keys()
                .filter(|m| !routes.contains_key(*m))
                .map(String::as_str)
                .collect();
            tracing::warn!(
                target: "turnstile::proxy",
                upstream = upstream.as_str(),
                variable = variable.as_str(),
                models_disabled = %models.join(","),
                "upstream disabled: its key variable is not set"
            );
        }
        Ok(routes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ProxyConfig {
        let mut config = ProxyConfig::default();
        config.upstreams.insert(
            "openai".into(),
            UpstreamConfig {
                format: ApiFormat::Openai,
                base_url: Some("http://127.0.0.1:1/v1/".into()),
                base_url_env: Some("BASE".into()),
                api_key_env: Some("KEY".into()),
                required: false,
            },
        );
        config.models.insert(
            "m".into(),
            ModelConfig {
                upstream: Some("openai".into()),
                provider: Some("lane".into()),
                deployments: None,
                upstream_model: None,
                input_usd_per_mtok: Some(1.0),
                output_usd_per_mtok: Some(2.0),
                default_max_output_tokens: None,
            },
        );
        config
    }

    /// An upstream whose key variable is not set is disabled (its models are not routed),
    /// unless it is `required`: then the service does not start.
    #[test]
    fn an_upstream_without_its_key_is_disabled_unless_required() {
        let routes = config().resolve(|_| None).unwrap();
        assert!(routes.is_empty(), "the model's only upstream is disabled");
        // A base URL only from a variable that is not set disables it too.
        let mut no_base = config();
        no_base.upstreams.get_mut("openai").unwrap().base_url = None;
        let routes = no_base
            .resolve(|v| (v == "KEY").then(|| "k".to_owned()))
            .unwrap();
        assert!(routes.is_empty());
        let mut required = config();
        required.upstreams.get_mut("openai").unwrap().required = true;
        assert!(matches!(
            required.resolve(|_| None),
            Err(ProxyConfigError::MissingKey { .. })
        ));
    }

    #[test]
    fn keys_come_from_the_environment_and_never_show_in_debug() {
        let routes = config()
            .resolve(|v| (v == "KEY").then(|| "sk-secret".to_owned()))
            .unwrap();
        let route = &routes["m"];
        let upstream = &route.deployments[0].upstream;
        assert_eq!(&*upstream.base_url, "http://127.0.0.1:1/v1");
        assert_eq!(upstream.api_key.as_deref(), Some("sk-secret"));
        assert!(!format!("{route:?}").contains("sk-secret"));
        // The variable wins over base_url.
        let routes = config()
            .resolve(|v| Some(if v == "BASE" { "https://x.test" } else { "k" }.to_owned()))
            .unwrap();
        assert_eq!(
            &*routes["m"].deployments[0].upstream.base_url,
            "https://x.test"
        );
    }

    #[test]
    fn a_missing_key_or_upstream_is_a_config_error() {
        let mut bad = config();
        bad.models.get_mut("m").unwrap().provider = Some("a\"b".into());
        assert!(matches!(
            bad.resolve(|v| (v == "KEY").then(|| "k".to_owned())),
            Err(ProxyConfigError::BadProvider { .. })
        ));
        let mut bad = config();
        bad.models.get_mut("m").unwrap().upstream = Some("nope".into());
        assert!(matches!(
            bad.resolve(|v| (v == "KEY").then(|| "k".to_owned())),
            Err(ProxyConfigError::UnknownUpstream { .. })
        ));
        // Prices are checked by turnstile_admission::Prices; one missing price is 0.
        for (input, output) in [(Some(-1.0), Some(2.0)), (Some(1.0), Some(f64::NAN))] {
            let mut bad = config();
            let model = bad.models.get_mut("m").unwrap();
            (model.input_usd_per_mtok, model.output_usd_per_mtok) = (input, output);
            assert!(matches!(
                bad.resolve(|v| (v == "KEY").then(|| "k".to_owned())),
                Err(ProxyConfigError::BadPrice { .. })
            ));
        }
        let mut half = config();
        half.models.get_mut("m").unwrap().input_usd_per_mtok = None;
        let routes = half
            .resolve(|v| (v == "KEY").then(|| "k".to_owned()))
            .unwrap();
        assert_eq!(routes["m"].prices, Prices::new(0.0, 2.0).ok());
    }
}
