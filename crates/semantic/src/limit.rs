//! The call limit: `limit = min(hard, max(1, floor(configured)))`.
//!
//! A configured value can lower the hard ceiling, never raise it. The library applies the spec's
//! clamp to any value ([`CallLimit::from_configured`]); the command line is stricter and refuses a
//! value above the ceiling, below 1, or not a number ([`parse_calls_per_hour`]), so an operator
//! never believes a limit is in force that is not.

use crate::Policy;

/// The effective calls-per-rolling-hour limit, always in `1..=policy.hard_calls_per_hour`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CallLimit(u32);

impl CallLimit {
    /// The policy's hard ceiling.
    pub fn hard(policy: &Policy) -> Self {
        CallLimit(policy.hard_calls_per_hour.max(1))
    }

    /// `min(hard, max(1, floor(configured)))`; `None` means the hard ceiling. A NaN is treated as
    /// the most conservative value, 1.
    pub fn from_configured(configured: Option<f64>, policy: &Policy) -> Self {
        let hard = Self::hard(policy);
        let Some(configured) = configured else {
            return hard;
        };
        if configured.is_nan() {
            return CallLimit(1);
        }
        let floored = configured.floor().max(1.0);
        if floored >= f64::from(hard.0) {
            hard
        } else {
            // 1 <= floored < hard <= u32::MAX, so the conversion is exact.
            CallLimit(floored as u32)
        }
    }

    /// The limit as a number of calls.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// Why a `--calls-per-hour` value was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallsPerHourError {
    /// The text is not a finite number.
    #[error("'{0}' is not a number; give a whole number of calls per hour from 1 to {ceiling}", ceiling = Policy::ADR_0119.hard_calls_per_hour)]
    NotANumber(String),
    /// The value would raise the hard ceiling.
    #[error("{value} calls per hour is above the hard ceiling of {ceiling} calls per rolling hour; a configured value may lower the ceiling but never raise it")]
    AboveHardCeiling {
        /// The value given.
        value: String,
        /// The hard ceiling.
        ceiling: u32,
    },
    /// The value allows no calls at all.
    #[error(
        "{0} calls per hour allows no calls; give at least 1 (stop `roster run` to pause reading)"
    )]
    BelowOne(String),
}

/// Parses a `--calls-per-hour` value against the ADR 0119 hard ceiling. Fractions are floored
/// (`7.9` → 7); anything above 120, below 1 or not a number is refused.
pub fn parse_calls_per_hour(text: &str) -> Result<u32, CallsPerHourError> {
    let ceiling = Policy::ADR_0119.hard_calls_per_hour;
    let trimmed = text.trim();
    let value: f64 = trimmed
        .parse()
        .ok()
        .filter(|value: &f64| value.is_finite())
        .ok_or_else(|| CallsPerHourError::NotANumber(text.to_owned()))?;
    if value > f64::from(ceiling) {
        return Err(CallsPerHourError::AboveHardCeiling {
            value: trimmed.to_owned(),
            ceiling,
        });
    }
    if value < 1.0 {
        return Err(CallsPerHourError::BelowOne(trimmed.to_owned()));
    }
    Ok(CallLimit::from_configured(Some(value), &Policy::ADR_0119).get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_value_only_lowers_the_ceiling() {
        let policy = Policy::ADR_0119;
        let limit = |value| CallLimit::from_configured(value, &policy).get();
        assert_eq!(limit(None), 120);
        assert_eq!(limit(Some(10_000.0)), 120);
        assert_eq!(limit(Some(120.0)), 120);
        assert_eq!(limit(Some(60.9)), 60);
        assert_eq!(limit(Some(0.0)), 1);
        assert_eq!(limit(Some(-5.0)), 1);
        assert_eq!(limit(Some(f64::NAN)), 1);
        assert_eq!(limit(Some(f64::INFINITY)), 120);
    }

    #[test]
    fn command_line_values_are_refused_outside_one_to_ceiling() {
        assert_eq!(parse_calls_per_hour("60"), Ok(60));
        assert_eq!(parse_calls_per_hour("120"), Ok(120));
        assert_eq!(parse_calls_per_hour("7.9"), Ok(7));
        assert!(matches!(
            parse_calls_per_hour("121"),
            Err(CallsPerHourError::AboveHardCeiling { .. })
        ));
        assert!(matches!(
            parse_calls_per_hour("0"),
            Err(CallsPerHourError::BelowOne(_))
        ));
        assert!(matches!(
            parse_calls_per_hour("lots"),
            Err(CallsPerHourError::NotANumber(_))
        ));
        assert!(matches!(
            parse_calls_per_hour("inf"),
            Err(CallsPerHourError::NotANumber(_))
        ));
        let message = parse_calls_per_hour("500").unwrap_err().to_string();
        assert!(message.contains("never raise"), "{message}");
    }
}
