//! The [`Reader`] trait: one model call per [`Reader::read`].
//!
//! A reader turns one evidence document into a [`ReadOutcome`]. It never touches the store: the
//! pass loop commits the call receipt before invoking it and writes the record afterwards. The
//! [`ReaderConfiguration`] names everything that shapes the reading (endpoint, model, prompt
//! contract version); its digest is the configuration half of the cache key. Secrets are not part
//! of it.

use serde::Serialize;

use crate::digest::{canonical_json_of, sha256_digest};
use crate::{Band, CallUsage};

/// What shapes a reading; the configuration half of the (evidence, configuration) cache key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReaderConfiguration {
    /// Endpoint base URL (no credentials).
    pub endpoint: String,
    /// Model name.
    pub model: String,
    /// Version of the prompt and answer contract ([`crate::answer::CONTRACT_VERSION`]).
    pub contract_version: u32,
}

impl ReaderConfiguration {
    /// `sha256:` digest of the canonical JSON of this configuration.
    pub fn digest(&self) -> String {
        match canonical_json_of(self) {
            Ok(json) => sha256_digest(json.as_bytes()),
            // Serializing three plain fields cannot fail; keep a distinct, stable fallback.
            Err(_) => sha256_digest(
                format!(
                    "{}\n{}\n{}",
                    self.endpoint, self.model, self.contract_version
                )
                .as_bytes(),
            ),
        }
    }
}

/// One read: the evidence of one generation.
#[derive(Debug, Clone, Copy)]
pub struct ReadRequest<'a> {
    /// The generation.
    pub generation_id: &'a str,
    /// Its band.
    pub band: Band,
    /// Digest of the evidence.
    pub evidence_digest: &'a str,
    /// Canonical JSON of the evidence.
    pub evidence_json: &'a str,
}

/// A valid reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// One line: what the generation is doing.
    pub headline: String,
    /// Optional longer explanation.
    pub detail: Option<String>,
}

/// How one read ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The model answered within the contract.
    Accepted {
        /// The reading.
        reading: Reading,
        /// Token usage, if reported.
        usage: Option<CallUsage>,
    },
    /// The model answered outside the contract.
    Invalid {
        /// Short, non-secret reason.
        reason: String,
        /// Token usage, if reported (the call still cost tokens).
        usage: Option<CallUsage>,
    },
    /// The endpoint failed or refused the call.
    Unavailable {
        /// Short, non-secret reason.
        reason: String,
    },
    /// The endpoint refused the call for its rate limit (HTTP 429). Recorded like
    /// [`ReadOutcome::Unavailable`]; an admission gate pauses the provider lane with it.
    RateLimited {
        /// Short, non-secret reason.
        reason: String,
        /// The wait the endpoint asked for (`retry-after-ms` / `Retry-After`), if it said.
        retry_after_ms: Option<u64>,
    },
}

/// Something that can read evidence with one model call.
pub trait Reader {
    /// What shapes this reader's readings.
    fn configuration(&self) -> &ReaderConfiguration;

    /// Makes exactly one model call for `request`.
    fn read(&mut self, request: &ReadRequest<'_>) -> ReadOutcome;

    /// The most output tokens one read may produce, when the reader caps them (its
    /// `max_tokens`); the estimate of an admitted read ([`crate::estimate`]) uses it.
    fn max_output_tokens(&self) -> Option<u32> {
        None
    }

    /// The model's prices, when the reader knows them; the estimate of an admitted read
    /// ([`crate::estimate`]) then carries a cost.
    fn prices(&self) -> Option<turnstile_admission::Prices> {
        None
    }
}
