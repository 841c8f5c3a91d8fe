//! The wire format of an upstream, and of the surface its models are served on.
//!
//! A closed vocabulary, shared by the configuration (each upstream names its format), the
//! request reader (each endpoint belongs to one surface) and the outbound side (the credential
//! header depends on it). It depends on nothing else in the crate, so none of those three
//! depends on another through it.

use serde::Deserialize;

/// The wire format of an upstream (and of the surface its models are served on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiFormat {
    /// `/openai/v1/...`: chat completions, responses, embeddings, completions.
    Openai,
    /// `/anthropic/v1/messages`.
    Anthropic,
}

impl ApiFormat {
    /// The format's name, as the configuration spells it (`openai`, `anthropic`).
    pub fn as_str(self) -> &'static str {
        match self {
            ApiFormat::Openai => "openai",
            ApiFormat::Anthropic => "anthropic",
        }
    }
}
