//! The host's estimate of one attempt (REFERENCE §3), and its validation.
//!
//! [`Estimate`] holds what the host said, as JSON numbers (`f64`), so that a malformed value
//! (negative, fractional, NaN, infinite, beyond 2^53 − 1, or a string that spells one of those)
//! reaches the controller and is refused there as `invalid-estimate` — before any queue slot or
//! budget is touched. [`Estimate::check`] turns it into a [`CheckedEstimate`] of exact integers;
//! the controller only ever computes with the checked form, and evidence only ever copies values
//! from it, so a malformed value can never leak into evidence.

use serde::{Deserialize, Deserializer, Serialize};

use crate::limits::MAX_SAFE_INTEGER;

/// The estimate as given by the host. Absent fields are `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Estimate {
    /// Tokens the call is expected to use.
    #[serde(
        default,
        deserialize_with = "lenient_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub tokens: Option<f64>,
    /// Cost the call is expected to have, in USD.
    #[serde(
        default,
        deserialize_with = "lenient_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_usd: Option<f64>,
    /// Size of the request, in bytes.
    #[serde(
        default,
        deserialize_with = "lenient_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub request_bytes: Option<f64>,
    /// Items the request carries.
    #[serde(
        default,
        deserialize_with = "lenient_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub items: Option<f64>,
    /// Attempts this request spends from the attempt budget; absent means 1.
    #[serde(
        default,
        deserialize_with = "lenient_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub attempts: Option<f64>,
    /// Batch size; absent means a batch of 1.
    #[serde(
        default,
        deserialize_with = "lenient_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub batch_size: Option<f64>,
    /// Work the caller keeps while the call runs, in units of its choosing.
    #[serde(
        default,
        deserialize_with = "lenient_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub retained_work: Option<f64>,
}

/// Reads a JSON number, `null`, or a string spelling `NaN` / `Infinity` / `-Infinity`.
/// Any other value becomes NaN, so it is refused later as `invalid-estimate` with the field named.
fn lenient_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(match value {
        serde_json::Value::Null => None,
        serde_json::Value::Number(number) => Some(number.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(text) => Some(match text.as_str() {
            "Infinity" | "+Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            _ => f64::NAN,
        }),
        _ => Some(f64::NAN),
    })
}

/// A validated estimate: every count an exact integer within 2^53 − 1, the cost finite and ≥ 0.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CheckedEstimate {
    /// Tokens, when estimated.
    pub tokens: Option<u64>,
    /// Cost in USD, when estimated.
    pub cost_usd: Option<f64>,
    /// Request size in bytes, when estimated.
    pub request_bytes: Option<u64>,
    /// Items, when estimated.
    pub items: Option<u64>,
    /// Attempts spent from the attempt budget (1 unless given).
    pub attempts: u64,
    /// Batch size (1 unless given).
    pub batch_size: u64,
    /// Retained work, when estimated.
    pub retained_work: Option<u64>,
}

/// A [`CheckedEstimate`] as a queued waiter keeps it: 56 bytes instead of 96. Every count of a
/// checked estimate is at most 2^53 − 1, so `u64::MAX` stands for "absent"; a checked cost is
/// finite, so NaN stands for "absent". [`PackedEstimate::unpack`] gives back exactly the
/// estimate that was packed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedEstimate {
    tokens: u64,
    cost_usd: f64,
    request_bytes: u64,
    items: u64,
    attempts: u64,
    batch_size: u64,
    retained_work: u64,
}

const ABSENT: u64 = u64::MAX;

fn pack(value: Option<u64>) -> u64 {
    value.unwrap_or(ABSENT)
}

fn unpack(value: u64) -> Option<u64> {
    (value != ABSENT).then_some(value)
}

impl PackedEstimate {
    pub(crate) fn pack(estimate: &CheckedEstimate) -> Self {
        PackedEstimate {
            tokens: pack(estimate.tokens),
            cost_usd: estimate.cost_usd.unwrap_or(f64::NAN),
            request_bytes: pack(estimate.request_bytes),
            items: pack(estimate.items),
            attempts: estimate.attempts,
            batch_size: estimate.batch_size,
            retained_work: pack(estimate.retained_work),
        }
    }

    #[inline]
    pub(crate) fn unpack(&self) -> CheckedEstimate {
        CheckedEstimate {
            tokens: unpack(self.tokens),
            cost_usd: (!self.cost_usd.is_nan()).then_some(self.cost_usd),
            request_bytes: unpack(self.request_bytes),
            items: unpack(self.items),
            attempts: self.attempts,
            batch_size: self.batch_size,
            retained_work: unpack(self.retained_work),
        }
    }
}

/// Why an estimate is malformed. Carries the field name, never the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("estimate field {field} must be {expected}")]
pub struct InvalidEstimate {
    /// The camelCase field name.
    pub field: &'static str,
    /// What the field must be.
    pub expected: &'static str,
}

impl Estimate {
    /// An empty estimate: one attempt, a batch of one, nothing else known.
    pub fn new() -> Self {
        Self::default()
    }

    /// With `tokens`.
    pub fn tokens(mut self, tokens: u64) -> Self {
        self.tokens = Some(tokens as f64);
        self
    }

    /// With `cost_usd`.
    pub fn cost_usd(mut self, cost: f64) -> Self {
        self.cost_usd = Some(cost);
        self
    }

    /// With `request_bytes`.
    pub fn request_bytes(mut self, bytes: u64) -> Self {
        self.request_bytes = Some(bytes as f64);
        self
    }

    /// With `items`.
    pub fn items(mut self, items: u64) -> Self {
        self.items = Some(items as f64);
        self
    }

    /// With `attempts`.
    pub fn attempts(mut self, attempts: u64) -> Self {
        self.attempts = Some(attempts as f64);
        self
    }

    /// With `batch_size`.
    pub fn batch_size(mut self, batch_size: u64) -> Self {
        self.batch_size = Some(batch_size as f64);
        self
    }

    /// With `retained_work`.
    pub fn retained_work(mut self, retained_work: u64) -> Self {
        self.retained_work = Some(retained_work as f64);
        self
    }

    /// Validates every field; the first malformed one (in spec order) is reported.
    pub fn check(&self) -> Result<CheckedEstimate, InvalidEstimate> {
        Ok(CheckedEstimate {
            tokens: count("tokens", self.tokens)?,
            cost_usd: cost(self.cost_usd)?,
            request_bytes: count("requestBytes", self.request_bytes)?,
            items: count("items", self.items)?,
            attempts: count("attempts", self.attempts)?.unwrap_or(1),
            batch_size: count("batchSize", self.batch_size)?.unwrap_or(1),
            retained_work: count("retainedWork", self.retained_work)?,
        })
    }
}

fn count(field: &'static str, value: Option<f64>) -> Result<Option<u64>, InvalidEstimate> {
    match value {
        None => Ok(None),
        Some(v)
            if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= MAX_SAFE_INTEGER as f64 =>
        {
            Ok(Some(v as u64))
        }
        Some(_) => Err(InvalidEstimate {
            field,
            expected: "a non-negative integer at most 2^53-1",
        }),
    }
}

fn cost(value: Option<f64>) -> Result<Option<f64>, InvalidEstimate> {
    match value {
        None => Ok(None),
        Some(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
        Some(_) => Err(InvalidEstimate {
            field: "costUsd",
            expected: "null or a finite number >= 0",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_estimate_unpacks_to_exactly_what_was_packed() {
        let full = CheckedEstimate {
            tokens: Some(MAX_SAFE_INTEGER),
            cost_usd: Some(0.0),
            request_bytes: Some(0),
            items: Some(7),
            attempts: 2,
            batch_size: 3,
            retained_work: Some(1),
        };
        for estimate in [full, CheckedEstimate::default()] {
            assert_eq!(PackedEstimate::pack(&estimate).unpack(), estimate);
        }
        assert_eq!(std::mem::size_of::<PackedEstimate>(), 56);
    }

    #[test]
    fn json_spellings_of_non_numbers_are_invalid_not_parse_errors() {
        for (json, field) in [
            (r#"{"tokens":-1}"#, "tokens"),
            (r#"{"tokens":"NaN"}"#, "tokens"),
            (r#"{"tokens":"Infinity"}"#, "tokens"),
            (r#"{"requestBytes":1.5}"#, "requestBytes"),
            (r#"{"items":9007199254740993}"#, "items"),
            (r#"{"costUsd":"-Infinity"}"#, "costUsd"),
            (r#"{"batchSize":true}"#, "batchSize"),
        ] {
            let estimate: Estimate = serde_json::from_str(json).unwrap();
            assert_eq!(estimate.check().unwrap_err().field, field, "{json}");
        }
    }

    #[test]
    fn defaults_and_limits_of_valid_estimates() {
        let checked: CheckedEstimate =
            serde_json::from_str::<Estimate>(r#"{"tokens":9007199254740991,"costUsd":null}"#)
                .unwrap()
                .check()
                .unwrap();
        assert_eq!(checked.tokens, Some(MAX_SAFE_INTEGER));
        assert_eq!(checked.cost_usd, None);
        assert_eq!(checked.attempts, 1);
        assert_eq!(checked.batch_size, 1);
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(serde_json::from_str::<Estimate>(r#"{"token":1}"#).is_err());
    }
}
