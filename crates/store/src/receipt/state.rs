//! The receipt state machine (EVALUATOR.md): a closed vocabulary with the spec's names.
//!
//! ```text
//! acquired             → dispatched | observation-received | composed | failed | execution-uncertain
//! dispatched           → remote-handle-known | observation-received | execution-uncertain
//! remote-handle-known  → observation-received | execution-uncertain
//! observation-received → observation-received | dispatched | composed | failed | execution-uncertain
//! composed             → completed | failed | execution-uncertain
//! completed, failed, execution-uncertain: terminal
//! ```
//!
//! Every other pair, including a terminal state to anything, is illegal.

use serde::{Deserialize, Serialize};

/// Where the execution of one invocation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReceiptState {
    /// Revision 1: the owner holds the invocation, nothing sent yet.
    Acquired,
    /// The pending slot names a call that may have reached the provider.
    Dispatched,
    /// The provider gave a handle for the pending call.
    RemoteHandleKnown,
    /// The pending call (or an admission rejection) was observed.
    ObservationReceived,
    /// Every evaluation is in; the result is being composed.
    Composed,
    /// Terminal: the stored `result` is the answer for every replay.
    Completed,
    /// Terminal: the run failed without an uncertain dispatch.
    Failed,
    /// Terminal: a call may or may not have reached the provider.
    ExecutionUncertain,
}

impl ReceiptState {
    /// The spec's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptState::Acquired => "acquired",
            ReceiptState::Dispatched => "dispatched",
            ReceiptState::RemoteHandleKnown => "remote-handle-known",
            ReceiptState::ObservationReceived => "observation-received",
            ReceiptState::Composed => "composed",
            ReceiptState::Completed => "completed",
            ReceiptState::Failed => "failed",
            ReceiptState::ExecutionUncertain => "execution-uncertain",
        }
    }

    /// No write may follow a terminal state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ReceiptState::Completed | ReceiptState::Failed | ReceiptState::ExecutionUncertain
        )
    }

    /// Whether `self → next` is a legal transition.
    pub fn can_become(self, next: ReceiptState) -> bool {
        use ReceiptState::*;
        match self {
            Acquired => matches!(
                next,
                Dispatched | ObservationReceived | Composed | Failed | ExecutionUncertain
            ),
            Dispatched => matches!(
                next,
                RemoteHandleKnown | ObservationReceived | ExecutionUncertain
            ),
            RemoteHandleKnown => matches!(next, ObservationReceived | ExecutionUncertain),
            ObservationReceived => matches!(
                next,
                ObservationReceived | Dispatched | Composed | Failed | ExecutionUncertain
            ),
            Composed => matches!(next, Completed | Failed | ExecutionUncertain),
            Completed | Failed | ExecutionUncertain => false,
        }
    }
}

impl std::fmt::Display for ReceiptState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::ReceiptState::{self, *};

    const ALL: [ReceiptState; 8] = [
        Acquired,
        Dispatched,
        RemoteHandleKnown,
        ObservationReceived,
        Composed,
        Completed,
        Failed,
        ExecutionUncertain,
    ];

    #[test]
    fn the_transition_table_is_the_specs() {
        let legal: Vec<(ReceiptState, ReceiptState)> = ALL
            .iter()
            .flat_map(|&a| ALL.iter().map(move |&b| (a, b)))
            .filter(|(a, b)| a.can_become(*b))
            .collect();
        assert_eq!(legal.len(), 5 + 3 + 2 + 5 + 3);
        for terminal in [Completed, Failed, ExecutionUncertain] {
            assert!(ALL.iter().all(|&s| !terminal.can_become(s)));
        }
        assert!(!Dispatched.can_become(Dispatched));
        assert!(!Dispatched.can_become(Composed));
        assert!(ObservationReceived.can_become(ObservationReceived));
    }

    #[test]
    fn serde_names_are_the_specs() {
        for state in ALL {
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(json, format!("\"{}\"", state.as_str()));
        }
    }
}
