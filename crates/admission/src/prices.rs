//! A model's price table (USD per million input and output tokens): the one price type of the
//! workspace, shared by the proxy's routes and the evaluator's adapters files.
//!
//! Decides what a call of known token counts costs, and which price tables are valid.
//!
//! # Invariants
//!
//! - A [`Prices`] only ever holds finite prices from 0 to [`MAX_USD_PER_MTOK`]: [`Prices::new`]
//!   is the one check, and deserializing goes through it (JSON `{"inputUsdPerMtok",
//!   "outputUsdPerMtok"}`), so a cost computed from it is finite and never negative.

use serde::{Deserialize, Serialize};

/// The highest price accepted, in USD per million tokens.
pub const MAX_USD_PER_MTOK: f64 = 1e6;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "RawPrices")]
pub struct Prices {
    /// USD per million input (prompt) tokens.
    pub input_usd_per_mtok: f64,
    /// USD per million output (completion) tokens.
    pub output_usd_per_mtok: f64,
}

/// A price is not a finite number from 0 to [`MAX_USD_PER_MTOK`].
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("prices must be finite numbers from 0 to 1e6 (USD per million tokens)")]
pub struct InvalidPrices;

impl Prices {
    /// A price table, if both prices are finite numbers from 0 to [`MAX_USD_PER_MTOK`].
    pub fn new(input_usd_per_mtok: f64, output_usd_per_mtok: f64) -> Result<Self, InvalidPrices> {
        let ok = |p: f64| p.is_finite() && (0.0..=MAX_USD_PER_MTOK).contains(&p);
        if ok(input_usd_per_mtok) && ok(output_usd_per_mtok) {
            Ok(Prices {
                input_usd_per_mtok,
                output_usd_per_mtok,
            })
        } else {
            Err(InvalidPrices)
        }
    }

    /// The cost of these token counts in USD.
    pub fn cost_usd(&self, input_tokens: u64, output_tokens: u64) -> f64 {
        (input_tokens as f64 * self.input_usd_per_mtok
            + output_tokens as f64 * self.output_usd_per_mtok)
            / 1_000_000.0
    }
}

/// The serialized form, checked by [`Prices::new`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPrices {
    input_usd_per_mtok: f64,
    output_usd_per_mtok: f64,
}

impl TryFrom<RawPrices> for Prices {
    type Error = InvalidPrices;

    fn try_from(raw: RawPrices) -> Result<Self, InvalidPrices> {
        Prices::new(raw.input_usd_per_mtok, raw.output_usd_per_mtok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_are_per_million_tokens() {
        let prices = Prices::new(2.5, 10.0).unwrap();
        assert!((prices.cost_usd(1_000_000, 100_000) - 3.5).abs() < 1e-12);
    }

    #[test]
    fn only_finite_prices_from_zero_to_a_million_are_valid() {
        for bad in [-0.1, f64::NAN, f64::INFINITY, 1e6 + 1.0] {
            assert_eq!(Prices::new(bad, 1.0), Err(InvalidPrices));
            assert_eq!(Prices::new(1.0, bad), Err(InvalidPrices));
        }
        assert!(Prices::new(0.0, 1e6).is_ok());
    }

    #[test]
    fn json_prices_are_checked_when_read() {
        let read: Prices =
            serde_json::from_str(r#"{"inputUsdPerMtok": 3, "outputUsdPerMtok": 15}"#).unwrap();
        assert_eq!(read, Prices::new(3.0, 15.0).unwrap());
        for bad in [
            r#"{"inputUsdPerMtok": -3, "outputUsdPerMtok": 15}"#,
            r#"{"inputUsdPerMtok": 3}"#,
            r#"{"inputUsdPerMtok": 3, "outputUsdPerMtok": 15, "currency": "EUR"}"#,
        ] {
            assert!(serde_json::from_str::<Prices>(bad).is_err(), "{bad}");
        }
    }
}
