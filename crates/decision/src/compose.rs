//! Composition (EVALUATOR.md step 6): from evaluation results and rules to one outcome.
//!
//! 1. Any evaluation not accepted → `review` / `evaluation-failed` / `failureOutcome`.
//! 2. Matching rules (predicate **true**) sorted by priority descending, then id.
//! 3. None → `defaulted` / `no-match` / `defaultOutcome`.
//! 4. `first-match`: the top-priority matches must agree → `completed` with all their ids;
//!    different outcomes → conflict: `review` + `failureOutcome` (policy `review`) or `error`
//!    (policy `error`), reason `conflicting-outcomes`.
//! 5. `collect`: the array of every matched outcome, in that order.
//! 6. The outcome must validate against `outputSchema` (else `error` / `invalid-output`).

use std::collections::HashMap;

use serde_json::Value;

use crate::conclusion::Conclusion;
use crate::predicate::{Resolve, Truth};
use crate::reason::{ResultReason, RulesetStatus};
use crate::result::Evaluations;
use crate::ruleset::{Composition, ConflictPolicy, RulesetSpec};
use crate::schema::Schema;

struct Context<'a> {
    input: &'a Value,
    results: HashMap<&'a str, Value>,
}

impl Resolve for Context<'_> {
    fn input(&self, pointer: &str) -> Option<&Value> {
        self.input.pointer(pointer)
    }

    fn decision(&self, alias: &str, pointer: &str) -> Option<Value> {
        self.results.get(alias)?.pointer(pointer).cloned()
    }
}

/// Composes the outcome.
pub fn compose(
    spec: &RulesetSpec,
    output_schema: &Schema,
    input: &Value,
    evaluations: &Evaluations,
) -> Conclusion {
    let composed = compose_unchecked(spec, input, evaluations);
    if composed.status == RulesetStatus::Error {
        return composed;
    }
    match output_schema.violation(&composed.outcome) {
        None => composed,
        Some(violation) => Conclusion {
            status: RulesetStatus::Error,
            reason: ResultReason::InvalidOutput,
            outcome: Value::Null,
            matched_rules: composed.matched_rules,
            detail: Some(format!(
                "outcome does not match the outputSchema at {violation}"
            )),
        },
    }
}

fn compose_unchecked(spec: &RulesetSpec, input: &Value, evaluations: &Evaluations) -> Conclusion {
    if evaluations.0.iter().any(|(_, r)| !r.spec.accepted()) {
        return Conclusion {
            status: RulesetStatus::Review,
            reason: ResultReason::EvaluationFailed,
            outcome: spec.failure_outcome.clone(),
            matched_rules: Vec::new(),
            detail: None,
        };
    }
    let context = Context {
        input,
        results: evaluations
            .0
            .iter()
            .map(|(alias, result)| {
                (
                    alias.as_str(),
                    serde_json::to_value(&result.spec).unwrap_or(Value::Null),
                )
            })
            .collect(),
    };
    let mut matched: Vec<_> = spec
        .rules
        .iter()
        .filter(|rule| rule.when.eval(&context) == Truth::True)
        .collect();
    matched.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.id.cmp(&b.id)));
    let Some(first) = matched.first() else {
        return Conclusion {
            status: RulesetStatus::Defaulted,
            reason: ResultReason::NoMatch,
            outcome: spec.default_outcome.clone(),
            matched_rules: Vec::new(),
            detail: None,
        };
    };
    match spec.composition {
        Composition::Collect => Conclusion {
            status: RulesetStatus::Completed,
            reason: ResultReason::None,
            outcome: Value::Array(matched.iter().map(|r| r.outcome.clone()).collect()),
            matched_rules: matched.iter().map(|r| r.id.clone()).collect(),
            detail: None,
        },
        Composition::FirstMatch => {
            let top: Vec<_> = matched
                .iter()
                .filter(|r| r.priority == first.priority)
                .collect();
            let ids: Vec<String> = top.iter().map(|r| r.id.clone()).collect();
            if top.iter().all(|r| r.outcome == first.outcome) {
                Conclusion {
                    status: RulesetStatus::Completed,
                    reason: ResultReason::None,
                    outcome: first.outcome.clone(),
                    matched_rules: ids,
                    detail: None,
                }
            } else {
                match spec.conflict {
                    ConflictPolicy::Review => Conclusion {
                        status: RulesetStatus::Review,
                        reason: ResultReason::ConflictingOutcomes,
                        outcome: spec.failure_outcome.clone(),
                        matched_rules: ids,
                        detail: None,
                    },
                    ConflictPolicy::Error => Conclusion {
                        status: RulesetStatus::Error,
                        reason: ResultReason::ConflictingOutcomes,
                        outcome: Value::Null,
                        matched_rules: ids,
                        detail: None,
                    },
                }
            }
        }
    }
}
