//! Band classification: 1 (priority) when the evidence shows explicit attention, an error, a wait,
//! a blocker (any lifecycle state other than `active`) or a terminal transition; otherwise 2.
//!
//! Pure and total: every evidence document has exactly one band.

use crate::{Band, GenerationEvidence, Lifecycle};

/// The band of `evidence`.
pub fn classify(evidence: &GenerationEvidence) -> Band {
    let flagged = evidence.attention
        || evidence.error
        || evidence.waiting
        || evidence.blocker
        || evidence.terminal;
    if flagged || evidence.lifecycle != Lifecycle::Active {
        Band::Priority
    } else {
        Band::Routine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signal_is_priority_and_plain_activity_is_routine() {
        let plain = GenerationEvidence::active("g", "typing");
        assert_eq!(classify(&plain), Band::Routine);
        let flags: [fn(&mut GenerationEvidence); 5] = [
            |e| e.attention = true,
            |e| e.error = true,
            |e| e.waiting = true,
            |e| e.blocker = true,
            |e| e.terminal = true,
        ];
        for set in flags {
            let mut evidence = plain.clone();
            set(&mut evidence);
            assert_eq!(classify(&evidence), Band::Priority);
        }
        for lifecycle in [
            Lifecycle::Waiting,
            Lifecycle::Blocked,
            Lifecycle::Completed,
            Lifecycle::Failed,
            Lifecycle::Cancelled,
        ] {
            let evidence = GenerationEvidence {
                lifecycle,
                ..plain.clone()
            };
            assert_eq!(classify(&evidence), Band::Priority);
        }
    }
}
