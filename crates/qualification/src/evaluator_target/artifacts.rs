//! The load harness's decision artifacts: one definition, a 1-evaluation ruleset and, per
//! arrival, a binding whose single target is the arrival's provider.
//!
//! # Invariants
//!
//! - The definition and ruleset are built once per run; the ruleset pins the definition's digest
//!   and every binding pins the ruleset's, so each evaluation validates like any host's would.
//! - Schemas are deliberately minimal (`{"type": "object"}` and a two-value output `enum`): the
//!   target measures admission and retries inside the evaluator, not JSON Schema throughput.
//! - The binding's target carries the arrival's whole attempt shape: `timeoutMs = 2000 +
//!   serviceMs` (the evaluator's attempt deadline, which is also the admission deadline),
//!   `retry = {maxRetries, initialDelayMs = maxDelayMs = retryBackoffMs}`, and `maxAttempts =
//!   maxRetries + 1`. `totalTimeoutMs` is larger than any arrival's worst case, so the total
//!   deadline never binds.

use serde_json::{json, Value};
use turnstile_decision::artifact::{artifact_digest, API_VERSION};

use crate::arrivals::Arrival;
use crate::manifest::{ArrivalModel, DEADLINE_SLACK_MS};

/// The ruleset's only alias.
pub const ALIAS: &str = "load";
/// The version every load target pins and every fake adapter reports.
pub const ADAPTER_VERSION: &str = "1.0.0";
/// The answer a served request gets (the definition's only choice).
pub const SERVED: &str = "served";

/// An artifact that cannot be digested (a non-finite number; unreachable for these literals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a load harness artifact cannot be digested")]
pub struct Undigestable;

/// The constant artifacts of a run.
#[derive(Debug, Clone)]
pub struct LoadArtifacts {
    pub definition: Value,
    pub ruleset: Value,
    ruleset_digest: String,
    max_retries: u32,
    retry_backoff_ms: u64,
    total_timeout_ms: u64,
}

impl LoadArtifacts {
    pub fn new(model: &ArrivalModel) -> Result<Self, Undigestable> {
        let definition = json!({
            "apiVersion": API_VERSION,
            "kind": "DecisionDefinition",
            "metadata": {"id": "load-request", "version": "1.0.0", "description": "load harness request"},
            "spec": {
                "purpose": "Stand in for one provider call of the offline load harness.",
                "inputSchema": {"type": "object"},
                "question": "Serve the request?",
                "answer": {"kind": "choice", "options": [{"id": SERVED, "description": "served"}]},
                "requiredCapabilities": []
            }
        });
        let definition_digest = artifact_digest(&definition).ok_or(Undigestable)?;
        let ruleset = json!({
            "apiVersion": API_VERSION,
            "kind": "DecisionRuleset",
            "metadata": {"id": "load-harness", "version": "1.0.0", "description": "load harness"},
            "spec": {
                "purpose": "One admitted provider call per arrival.",
                "inputSchema": {"type": "object"},
                "evaluations": [{
                    "alias": ALIAS,
                    "decision": {"id": "load-request", "version": "1.0.0", "digest": definition_digest},
                    "inputPointer": ""
                }],
                "rules": [{
                    "id": "served",
                    "priority": 1,
                    "when": {
                        "op": "eq",
                        "left": {"source": "decision", "alias": ALIAS, "pointer": "/value"},
                        "right": SERVED
                    },
                    "outcome": SERVED
                }],
                "composition": "first-match",
                "conflict": "review",
                "defaultOutcome": "unserved",
                "failureOutcome": "unserved",
                "outputSchema": {"enum": [SERVED, "unserved"]}
            }
        });
        let ruleset_digest = artifact_digest(&ruleset).ok_or(Undigestable)?;
        let attempts = u64::from(model.max_retries) + 1;
        let worst_attempt = DEADLINE_SLACK_MS + model.service_time_ms.maximum;
        let total_timeout_ms =
            attempts * (worst_attempt + model.retry_backoff_ms) + DEADLINE_SLACK_MS;
        Ok(LoadArtifacts {
            definition,
            ruleset,
            ruleset_digest,
            max_retries: model.max_retries,
            retry_backoff_ms: model.retry_backoff_ms,
            total_timeout_ms,
        })
    }

    /// The binding of one arrival: its provider as the only target.
    pub fn binding(&self, arrival: &Arrival) -> Value {
        json!({
            "apiVersion": API_VERSION,
            "kind": "DecisionBinding",
            "metadata": {"id": "load-binding", "version": "1.0.0", "description": "load harness binding"},
            "spec": {
                "ruleset": {"id": "load-harness", "version": "1.0.0", "digest": self.ruleset_digest},
                "totalTimeoutMs": self.total_timeout_ms,
                "maxAttempts": u64::from(self.max_retries) + 1,
                "concurrency": 1,
                "evaluations": {
                    ALIAS: {
                        "targets": [{
                            "adapter": arrival.provider_id,
                            "adapterVersion": ADAPTER_VERSION,
                            "model": "fake",
                            "requiredCapabilities": [],
                            "acceptance": {"mode": "typed-value"},
                            "timeoutMs": DEADLINE_SLACK_MS + arrival.service_ms,
                            "retry": {
                                "maxRetries": self.max_retries,
                                "initialDelayMs": self.retry_backoff_ms,
                                "maxDelayMs": self.retry_backoff_ms
                            }
                        }],
                        "fallbackOn": []
                    }
                }
            }
        })
    }
}
