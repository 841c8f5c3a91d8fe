//! The band of a pending generation: 1 (priority) or 2 (routine).
//!
//! Serialized as the integers `1` and `2`, exactly as the spec writes them. Lower sorts first.

use serde::{Deserialize, Serialize};

/// Priority band of a generation. `Priority` (1) sorts before `Routine` (2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
pub enum Band {
    /// Band 1: explicit attention, an error, a wait, a blocker or a terminal transition.
    Priority,
    /// Band 2: routine activity.
    Routine,
}

impl Band {
    /// The spec's number for this band.
    pub fn number(self) -> u8 {
        match self {
            Band::Priority => 1,
            Band::Routine => 2,
        }
    }
}

impl From<Band> for u8 {
    fn from(band: Band) -> u8 {
        band.number()
    }
}

impl TryFrom<u8> for Band {
    type Error = String;

    fn try_from(value: u8) -> Result<Self, Self::Error> {
        match value {
            1 => Ok(Band::Priority),
            2 => Ok(Band::Routine),
            other => Err(format!("band must be 1 or 2, got {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_serialize_as_spec_numbers_and_sort_priority_first() {
        assert_eq!(serde_json::to_string(&Band::Priority).unwrap(), "1");
        assert_eq!(serde_json::from_str::<Band>("2").unwrap(), Band::Routine);
        assert!(serde_json::from_str::<Band>("3").is_err());
        assert!(Band::Priority < Band::Routine);
    }
}
