//! A model's deployments as configured: which upstream + provider lane pairs serve it, and with
//! what weight.
//!
//! ```toml
//! [proxy.models."gpt-5.4-mini"]
//! deployments = [
//!   { upstream = "openai", provider = "openai-primary", weight = 2 },
//!   { upstream = "openai-secondary", provider = "openai-secondary" },   # weight 1
//! ]
//! ```
//!
//! The single form (`upstream = …` and `provider = …` on the model) stays valid and means one
//! deployment of weight 1.
//!
//! Invariants of a resolved model ([`resolve`]): it has from 1 to [`MAX_DEPLOYMENTS`]
//! deployments, in the configured order; every deployment's upstream exists and all share one
//! wire format (a model is served on one surface); every provider lane is a valid provider ID
//! and appears once (two deployments on one lane would be one admission lane, which admission
//! cannot tell apart); every weight is positive. Each violation is its own typed error naming
//! the model and the field.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::config::{ModelConfig, ProxyConfigError, Upstream};
use crate::format::ApiFormat;

/// The most deployments one model may have.
pub const MAX_DEPLOYMENTS: usize = 16;

/// One entry of a model's `deployments` list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentConfig {
    /// The upstream (a key of `[proxy.upstreams]`).
    pub upstream: String,
    /// The provider lane of the caller's workspace profile that admits calls sent here.
    pub provider: String,
    /// Its share among the deployments free at once (default 1; positive).
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

/// A deployment ready to use: an upstream and the provider lane that admits its calls.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The upstream that serves the model here.
    pub upstream: Upstream,
    /// The provider lane of the caller's workspace profile that admits calls sent here.
    pub provider: Arc<str>,
    /// Its share among the deployments free at once (positive).
    pub weight: u32,
}

/// A provider ID as the admission API accepts it: 1-128 of `[A-Za-z0-9._:-]`, not starting
/// with `.`.
fn provider_id_ok(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// The deployments of `model` (configured as `entry`) over the resolved `upstreams`, and their
/// common wire format.
pub fn resolve(
    model: &str,
    entry: &ModelConfig,
    upstreams: &BTreeMap<String, Upstream>,
) -> Result<(ApiFormat, Vec<Deployment>), ProxyConfigError> {
    let error_model = || model.to_owned();
    // (field prefix, upstream, provider, weight) of each deployment, in order.
    let listed: Vec<(String, &str, &str, u32)> =
        match (&entry.upstream, &entry.provider, &entry.deployments) {
            (None, None, Some(list)) => list
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    (
                        format!("deployments[{i}]."),
                        d.upstream.as_str(),
                        d.provider.as_str(),
                        d.weight,
                    )
                })
                .collect(),
            (Some(upstream), Some(provider), None) => {
                vec![(String::new(), upstream.as_str(), provider.as_str(), 1)]
            }
            (None, None, None) | (Some(_), None, None) | (None, Some(_), None) => {
                return Err(ProxyConfigError::NoDeployment {
                    model: error_model(),
                })
            }
            _ => {
                return Err(ProxyConfigError::BothForms {
                    model: error_model(),
                })
            }
        };
    if listed.is_empty() || listed.len() > MAX_DEPLOYMENTS {
        return Err(ProxyConfigError::DeploymentCount {
            model: error_model(),
            max: MAX_DEPLOYMENTS,
        });
    }
    let mut format = None;
    let mut deployments = Vec::with_capacity(listed.len());
    for (prefix, upstream_name, provider, weight) in listed {
        let upstream = upstreams.get(upstream_name).cloned().ok_or_else(|| {
            ProxyConfigError::UnknownUpstream {
                model: error_model(),
                field: format!("{prefix}upstream"),
                upstream: upstream_name.to_owned(),
            }
        })?;
        match format {
            None => format = Some(upstream.format),
            Some(first) if first != upstream.format => {
                return Err(ProxyConfigError::MixedFormats {
                    model: error_model(),
                    field: format!("{prefix}upstream"),
                    format: upstream.format.as_str(),
                    first: first.as_str(),
                })
            }
            Some(_) => {}
        }
        if !provider_id_ok(provider) {
            return Err(ProxyConfigError::BadProvider {
                model: error_model(),
                field: format!("{prefix}provider"),
            });
        }
        if deployments
            .iter()
            .any(|d: &Deployment| &*d.provider == provider)
        {
            return Err(ProxyConfigError::DuplicateLane {
                model: error_model(),
                field: format!("{prefix}provider"),
                provider: provider.to_owned(),
            });
        }
        if weight == 0 {
            return Err(ProxyConfigError::BadWeight {
                model: error_model(),
                field: format!("{prefix}weight"),
            });
        }
        deployments.push(Deployment {
            upstream,
            provider: Arc::from(provider),
            weight,
        });
    }
    // At least one deployment was checked above, so the format is known.
    let format = format.ok_or_else(|| ProxyConfigError::NoDeployment {
        model: error_model(),
    })?;
    Ok((format, deployments))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProxyConfig;

    fn config(models: serde_json::Value) -> ProxyConfig {
        serde_json::from_value(serde_json::json!({
            "upstreams": {
                "a": {"format": "openai", "base_url": "http://127.0.0.1:1/v1"},
                "b": {"format": "openai", "base_url": "http://127.0.0.1:2/v1"},
                "c": {"format": "anthropic", "base_url": "http://127.0.0.1:3"},
            },
            "models": models,
        }))
        .unwrap()
    }

    fn error(models: serde_json::Value) -> String {
        match config(models).resolve(|_| None) {
            Ok(_) => panic!("resolved"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn both_forms_resolve_to_deployments_in_order() {
        let routes = config(serde_json::json!({
            "one": {"upstream": "a", "provider": "lane-a"},
            "two": {"deployments": [
                {"upstream": "a", "provider": "lane-a", "weight": 2},
                {"upstream": "b", "provider": "lane-b"},
            ]},
        }))
        .resolve(|_| None)
        .unwrap();
        let one = &routes["one"];
        assert_eq!(one.format, ApiFormat::Openai);
        assert_eq!(one.deployments.len(), 1);
        assert_eq!(one.deployments[0].weight, 1);
        let two = &routes["two"];
        let lanes: Vec<_> = two
            .deployments
            .iter()
            .map(|d| (&*d.upstream.name, &*d.provider, d.weight))
            .collect();
        assert_eq!(lanes, [("a", "lane-a", 2), ("b", "lane-b", 1)]);
    }

    #[test]
    fn every_bad_model_is_a_typed_error_naming_the_model_and_field() {
        use serde_json::json;
        let both = json!({"m": {"upstream": "a", "provider": "p",
                                "deployments": [{"upstream": "b", "provider": "q"}]}});
        assert_eq!(
            error(both),
            "proxy.models.m: give either upstream and provider, or deployments, not both"
        );
        assert!(error(json!({"m": {"upstream": "a"}})).contains("needs upstream and provider"));
        assert!(error(json!({"m": {"deployments": []}})).contains("from 1 to 16 deployments"));
        assert_eq!(
            error(
                json!({"m": {"deployments": [{"upstream": "a", "provider": "p"},
                                               {"upstream": "zz", "provider": "q"}]}})
            ),
            "proxy.models.m.deployments[1].upstream: upstream zz is not in [proxy.upstreams]"
        );
        assert_eq!(
            error(
                json!({"m": {"deployments": [{"upstream": "a", "provider": "p"},
                                               {"upstream": "c", "provider": "q"}]}})
            ),
            "proxy.models.m.deployments[1].upstream: upstream format anthropic differs from \
             the model's first deployment (openai)"
        );
        assert!(error(
            json!({"m": {"deployments": [{"upstream": "a", "provider": "p"},
                                               {"upstream": "b", "provider": "p"}]}})
        )
        .starts_with("proxy.models.m.deployments[1].provider: provider lane p is already"));
        assert!(error(
            json!({"m": {"deployments": [{"upstream": "a", "provider": "p", "weight": 0}]}})
        )
        .starts_with("proxy.models.m.deployments[0].weight: "));
        assert!(
            error(json!({"m": {"deployments": [{"upstream": "a", "provider": "a\"b"}]}}))
                .starts_with("proxy.models.m.deployments[0].provider: ")
        );
        assert!(error(json!({"m": {"upstream": "a", "provider": "a b"}}))
            .starts_with("proxy.models.m.provider: "));
        assert_eq!(
            error(json!({"m": {"upstream": "nope", "provider": "p"}})),
            "proxy.models.m.upstream: upstream nope is not in [proxy.upstreams]"
        );
        // A negative or fractional weight, or an unknown key, is refused when parsed.
        for bad in [
            json!({"m": {"deployments": [{"upstream": "a", "provider": "p", "weight": -1}]}}),
            json!({"m": {"deployments": [{"upstream": "a", "provider": "p", "weight": 1.5}]}}),
            json!({"m": {"deployments": [{"upstream": "a", "provider": "p", "region": "x"}]}}),
        ] {
            let parsed: Result<ProxyConfig, _> =
                serde_json::from_value(json!({"models": bad.clone()}));
            assert!(parsed.is_err(), "{bad}");
        }
    }
}
