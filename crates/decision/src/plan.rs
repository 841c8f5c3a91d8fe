//! Validation before any call (EVALUATOR.md step 1): artifacts, pins, alias coverage, input and
//! projections against their schemas, rule references.
//!
//! The result is a [`Plan`]: everything the execution needs, already checked. Failures map to
//! the result reasons `invalid-definition`, `digest-mismatch` and `invalid-input`; no adapter
//! is called for a plan that fails.
//!
//! [`verify_subagents`] then checks every target's `subagent` pin against the worker its adapter
//! reports, also before any call and before the scheduler policy is registered (so a mismatch
//! asks for no admission and charges no budget).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use crate::adapter::{version_serves, AdapterSet};
use crate::artifact::{load, Loaded, Pin, PinError};
use crate::binding::{AliasBinding, BindingSpec};
use crate::definition::DefinitionSpec;
use crate::reason::ResultReason;
use crate::ruleset::RulesetSpec;
use crate::schema::Schema;
use crate::{binding, definition, ruleset};

/// One alias, ready to run.
#[derive(Debug)]
pub struct AliasPlan {
    pub alias: String,
    pub definition: Arc<Loaded<DefinitionSpec>>,
    /// The alias's projection of the input.
    pub projection: Value,
    pub binding: AliasBinding,
}

/// A validated invocation.
#[derive(Debug)]
pub struct Plan {
    pub ruleset: Loaded<RulesetSpec>,
    pub binding: Loaded<BindingSpec>,
    /// In ruleset order.
    pub aliases: Vec<AliasPlan>,
    pub output_schema: Schema,
}

/// Why validation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("invalid-definition: {0}")]
    InvalidDefinition(String),
    #[error("digest-mismatch: {0}")]
    DigestMismatch(String),
    #[error("invalid-input: {0}")]
    InvalidInput(String),
}

impl PlanError {
    pub fn reason(&self) -> ResultReason {
        match self {
            PlanError::InvalidDefinition(_) => ResultReason::InvalidDefinition,
            PlanError::DigestMismatch(_) => ResultReason::DigestMismatch,
            PlanError::InvalidInput(_) => ResultReason::InvalidInput,
        }
    }

    pub fn detail(&self) -> String {
        match self {
            PlanError::InvalidDefinition(d)
            | PlanError::DigestMismatch(d)
            | PlanError::InvalidInput(d) => d.clone(),
        }
    }
}

impl From<PinError> for PlanError {
    fn from(error: PinError) -> Self {
        match error {
            PinError::Missing { .. } => PlanError::InvalidDefinition(error.to_string()),
            PinError::DigestMismatch { .. } => PlanError::DigestMismatch(error.to_string()),
        }
    }
}

/// A failed validation, with whatever pins could be established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub error: PlanError,
    pub ruleset: Option<Pin>,
    pub binding: Option<Pin>,
}

/// Validates an invocation.
pub fn plan(
    ruleset_json: &Value,
    binding_json: &Value,
    definitions_json: &[Value],
    input: &Value,
) -> Result<Plan, Box<Refused>> {
    let refuse = |error: PlanError, ruleset: Option<Pin>, binding: Option<Pin>| {
        Box::new(Refused {
            error,
            ruleset,
            binding,
        })
    };
    let ruleset: Loaded<RulesetSpec> = load(ruleset_json, ruleset::KIND)
        .map_err(|e| refuse(PlanError::InvalidDefinition(e.to_string()), None, None))?;
    let ruleset_pin = Some(ruleset.pin());
    let binding: Loaded<BindingSpec> = load(binding_json, binding::KIND).map_err(|e| {
        refuse(
            PlanError::InvalidDefinition(e.to_string()),
            ruleset_pin.clone(),
            None,
        )
    })?;
    let binding_pin = Some(binding.pin());
    let fail = |error: PlanError| refuse(error, ruleset_pin.clone(), binding_pin.clone());

    binding
        .spec()
        .ruleset
        .check(&ruleset)
        .map_err(|e| fail(e.into()))?;

    let mut definitions = Vec::with_capacity(definitions_json.len());
    for json in definitions_json {
        let loaded: Loaded<DefinitionSpec> = load(json, definition::KIND)
            .map_err(|e| fail(PlanError::InvalidDefinition(e.to_string())))?;
        definitions.push(Arc::new(loaded));
    }

    let spec = ruleset.spec();
    let input_schema = Schema::compile(&spec.input_schema).map_err(|e| {
        fail(PlanError::InvalidDefinition(format!(
            "ruleset inputSchema: {e}"
        )))
    })?;
    let output_schema = Schema::compile(&spec.output_schema).map_err(|e| {
        fail(PlanError::InvalidDefinition(format!(
            "ruleset outputSchema: {e}"
        )))
    })?;

    let mut seen = BTreeSet::new();
    for evaluation in &spec.evaluations {
        if !seen.insert(evaluation.alias.as_str()) {
            return Err(fail(PlanError::InvalidDefinition(format!(
                "alias {} appears twice in the ruleset",
                evaluation.alias
            ))));
        }
    }
    let bound: BTreeSet<&str> = binding
        .spec()
        .evaluations
        .keys()
        .map(String::as_str)
        .collect();
    if bound != seen {
        let missing: Vec<&&str> = seen.difference(&bound).collect();
        let extra: Vec<&&str> = bound.difference(&seen).collect();
        return Err(fail(PlanError::InvalidDefinition(format!(
            "binding must cover every alias exactly once (unbound: {missing:?}, unknown: {extra:?})"
        ))));
    }
    for rule in &spec.rules {
        for alias in rule.when.aliases() {
            if !seen.contains(alias) {
                return Err(fail(PlanError::InvalidDefinition(format!(
                    "rule {} reads unknown alias {alias}",
                    rule.id
                ))));
            }
        }
    }

    if let Some(violation) = input_schema.violation(input) {
        return Err(fail(PlanError::InvalidInput(format!(
            "input does not match the ruleset inputSchema at {violation}"
        ))));
    }

    let mut aliases = Vec::with_capacity(spec.evaluations.len());
    for evaluation in &spec.evaluations {
        let pin = &evaluation.decision;
        let definition = definitions.iter().find(|d| pin.names(d)).ok_or_else(|| {
            fail(PlanError::InvalidDefinition(format!(
                "no definition {}@{} for alias {}",
                pin.id, pin.version, evaluation.alias
            )))
        })?;
        pin.check(definition).map_err(|e| fail(e.into()))?;
        let projection = input
            .pointer(&evaluation.input_pointer)
            .cloned()
            .ok_or_else(|| {
                fail(PlanError::InvalidInput(format!(
                    "inputPointer {:?} of alias {} does not resolve",
                    evaluation.input_pointer, evaluation.alias
                )))
            })?;
        let schema = Schema::compile(&definition.spec().input_schema).map_err(|e| {
            fail(PlanError::InvalidDefinition(format!(
                "definition {} inputSchema: {e}",
                pin.id
            )))
        })?;
        if let Some(violation) = schema.violation(&projection) {
            return Err(fail(PlanError::InvalidInput(format!(
                "projection of alias {} does not match its definition at {violation}",
                evaluation.alias
            ))));
        }
        let alias_binding = binding
            .spec()
            .evaluations
            .get(&evaluation.alias)
            .cloned()
            .ok_or_else(|| fail(PlanError::InvalidDefinition("unbound alias".into())))?;
        if alias_binding.targets.is_empty() {
            return Err(fail(PlanError::InvalidDefinition(format!(
                "alias {} has no targets",
                evaluation.alias
            ))));
        }
        aliases.push(AliasPlan {
            alias: evaluation.alias.clone(),
            definition: Arc::clone(definition),
            projection,
            binding: alias_binding,
        });
    }

    Ok(Plan {
        ruleset,
        binding,
        aliases,
        output_schema,
    })
}

/// Verifies every target's `subagent` pin against the worker its adapter reports.
///
/// A pinned target whose adapter reports no worker, or a worker with another id, version or
/// digest, is `digest-mismatch`: the binding pins content that is not what would run. Targets
/// whose adapter is absent or does not serve the pinned `adapterVersion` are not checked here:
/// they can never be dispatched, and the capability check reports them as
/// `executor-unavailable` when they are reached (fallback stays possible).
pub fn verify_subagents(plan: &Plan, adapters: &AdapterSet) -> Result<(), PlanError> {
    for alias in &plan.aliases {
        for (index, target) in alias.binding.targets.iter().enumerate() {
            let Some(pin) = &target.subagent else {
                continue;
            };
            let Some(adapter) = adapters
                .get(&target.adapter)
                .filter(|a| version_serves(a.version(), &target.adapter_version))
            else {
                continue;
            };
            let place = format!(
                "alias {} target {index} ({}) pins subagent {}@{} {}",
                alias.alias, target.adapter, pin.id, pin.version, pin.digest
            );
            match adapter.worker() {
                Some(worker) if worker == pin => {}
                Some(worker) => {
                    return Err(PlanError::DigestMismatch(format!(
                        "{place}, but the adapter runs {}@{} {}",
                        worker.id, worker.version, worker.digest
                    )))
                }
                None => {
                    return Err(PlanError::DigestMismatch(format!(
                        "{place}, but the adapter reports no subagent worker"
                    )))
                }
            }
        }
    }
    Ok(())
}
