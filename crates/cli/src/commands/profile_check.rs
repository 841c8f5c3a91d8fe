//! `turnstile profile check`: every problem of a profile document at once, each named by the
//! path of its field (`providers.jev.tokensBurst`), an unknown field with the known field it
//! most likely meant ("did you mean `maxQueueLength`?").
//!
//! # What it decides
//!
//! Exactly what `PUT /v1/workspaces/{w}/profiles/{v}` accepts (only `workspace`, `providers`
//! and `principals` at the top level, every limits position an object, every field known and of
//! its type, then `Limits::validate` per scope and `Profile::validate` across scopes); the
//! service stops at the first problem, this check reports all of them.
//!
//! # Invariants
//!
//! - A document this check accepts is accepted by the service, and the other way round: the
//!   last step deserializes and validates with the core's own types.
//! - [`LIMITS_FIELDS`] is exactly the set of keys of a `Limits` (a test serializes a `Limits`
//!   with every field set and compares), so "unknown field" means what serde means.
//! - The cross-scope rule (reservation sums) is checked only when every scope parsed: a sum
//!   over limits that did not parse would be noise.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use turnstile_admission::{Limits, LimitsError, Profile, ProfileError, ScopeKind};

/// Every key of a limits object.
pub const LIMITS_FIELDS: [&str; 23] = [
    "concurrency",
    "requestsPerMinute",
    "requestsBurst",
    "tokensPerSecond",
    "tokensBurst",
    "maxAttempts",
    "maxCostUsd",
    "allowUnknownCost",
    "maxOpenBudgets",
    "maxTokens",
    "maxBatchSize",
    "maxRequestBytes",
    "maxItems",
    "maxRetainedWork",
    "maxQueueLength",
    "maxQueueWaitMs",
    "circuitBreaker",
    "reservedConcurrency",
    "maxPrincipalShare",
    "fairness",
    "weight",
    "priority",
    "minShare",
];

/// The keys of the nested objects of a limits object.
const NESTED_FIELDS: [(&str, &[&str]); 2] = [
    (
        "circuitBreaker",
        &["failureThreshold", "openMs", "halfOpenMaxCalls"],
    ),
    ("minShare", &["standard", "batch"]),
];

const TOP_LEVEL: [&str; 3] = ["workspace", "providers", "principals"];

/// A profile field that is wrong: its path and the problem.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    /// The field's path (`providers.jev.tokensBurst`; `(document)` for the whole).
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Every problem of a document, in document order (at least one).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl std::fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            all => {
                write!(f, "{} problems: ", all.len())?;
                for (i, problem) in all.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{problem}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for FieldErrors {}

fn problem(field: impl Into<String>, problem: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        problem: problem.into(),
    }
}

/// The known name `given` most likely meant: the same letters in another case or spelling
/// (`max_queue_length`), or within a small edit distance (`maxQueueLenght`).
fn did_you_mean(given: &str, known: &[&str]) -> Option<String> {
    let folded = |s: &str| s.replace(['_', '-'], "").to_ascii_lowercase();
    if let Some(same) = known.iter().find(|k| folded(k) == folded(given)) {
        return Some((*same).to_owned());
    }
    let (best, distance) = known
        .iter()
        .map(|k| (*k, strsim::damerau_levenshtein(&folded(k), &folded(given))))
        .min_by_key(|&(_, d)| d)?;
    (distance <= (given.len() / 4).max(2)).then(|| best.to_owned())
}

fn unknown(path: &str, key: &str, known: &[&str]) -> FieldError {
    let field = if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    };
    let text = match did_you_mean(key, known) {
        Some(meant) => format!("unknown field; did you mean `{meant}`?"),
        None => format!(
            "unknown field; expected one of {}",
            known
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    problem(field, text)
}

/// Checks a profile document; every problem at once.
pub fn check_profile(text: &str) -> Result<Profile, FieldErrors> {
    let document: Value = serde_json::from_str(text)
        .map_err(|e| FieldErrors(vec![problem("(document)", format!("not JSON: {e}"))]))?;
    let Some(root) = document.as_object() else {
        return Err(FieldErrors(vec![problem(
            "(document)",
            "must be a JSON object",
        )]));
    };
    let mut problems = Vec::new();
    for key in root.keys().filter(|k| !TOP_LEVEL.contains(&k.as_str())) {
        problems.push(unknown("", key, &TOP_LEVEL));
    }
    let workspace = match root.get("workspace") {
        Some(value) => limits(value, "workspace", ScopeKind::Workspace, &mut problems),
        None => {
            problems.push(problem("workspace", "missing (the workspace limits)"));
            None
        }
    };
    let providers = match root.get("providers") {
        Some(value) => table(value, "providers", ScopeKind::Provider, &mut problems),
        None => {
            problems.push(problem(
                "providers",
                "missing (an object of provider limits by provider ID)",
            ));
            None
        }
    };
    let principals = match root.get("principals") {
        None | Some(Value::Null) => Some(BTreeMap::new()),
        Some(value) => table(value, "principals", ScopeKind::Principal, &mut problems),
    };
    if let (Some(workspace), Some(providers), Some(principals), true) =
        (workspace, providers, principals, problems.is_empty())
    {
        let profile = Profile {
            workspace,
            providers,
            principals,
        };
        match profile.validate() {
            Ok(()) => return Ok(profile),
            Err(error @ ProfileError::ReservationsExceed { .. }) => problems.push(problem(
                "principals.*.reservedConcurrency",
                error.to_string(),
            )),
            Err(error) => problems.push(problem(error.field(), error.to_string())),
        }
    }
    Err(FieldErrors(problems))
}

/// An object of limits by ID (`None` when any of them is wrong).
fn table(
    value: &Value,
    path: &str,
    scope: ScopeKind,
    problems: &mut Vec<FieldError>,
) -> Option<BTreeMap<String, Limits>> {
    let Some(object) = value.as_object() else {
        problems.push(problem(path, "must be an object of limits by ID"));
        return None;
    };
    let mut table = BTreeMap::new();
    let mut whole = true;
    for (id, value) in object {
        match limits(value, &format!("{path}.{id}"), scope, problems) {
            Some(limits) => {
                table.insert(id.clone(), limits);
            }
            None => whole = false,
        }
    }
    whole.then_some(table)
}

/// One limits object: unknown keys (with suggestions), each field's type, then the scope's
/// rules. `None` when anything is wrong.
fn limits(
    value: &Value,
    path: &str,
    scope: ScopeKind,
    problems: &mut Vec<FieldError>,
) -> Option<Limits> {
    let Some(object) = value.as_object() else {
        problems.push(problem(path, "must be an object of limits"));
        return None;
    };
    let before = problems.len();
    for key in object.keys() {
        if !LIMITS_FIELDS.contains(&key.as_str()) {
            problems.push(unknown(path, key, &LIMITS_FIELDS));
        }
    }
    for (name, fields) in NESTED_FIELDS {
        match object.get(name) {
            Some(Value::Object(nested)) => {
                for key in nested.keys().filter(|k| !fields.contains(&k.as_str())) {
                    problems.push(unknown(&format!("{path}.{name}"), key, fields));
                }
            }
            None | Some(Value::Null) => {}
            Some(_) => problems.push(problem(format!("{path}.{name}"), "must be an object")),
        }
    }
    if !object.contains_key("concurrency") {
        problems.push(problem(
            format!("{path}.concurrency"),
            "missing (every scope has a concurrency)",
        ));
    }
    // Each known field alone, so that every wrong type is reported, not only the first; the
    // well-typed ones are kept for the scope's rules.
    let mut well_typed = Map::new();
    for (key, field) in object
        .iter()
        .filter(|(k, _)| LIMITS_FIELDS.contains(&k.as_str()))
    {
        let mut alone = Map::new();
        alone.insert("concurrency".to_owned(), Value::from(0));
        alone.insert(key.clone(), field.clone());
        let checked = serde_path_to_error::deserialize::<_, Limits>(Value::Object(alone));
        if checked.is_ok() {
            well_typed.insert(key.clone(), field.clone());
        }
        if let Err(error) = checked {
            let inner = error.path().to_string();
            let unknown_inner = error.inner().to_string().starts_with("unknown field");
            if !unknown_inner {
                let at = if inner == "." {
                    format!("{path}.{key}")
                } else {
                    format!("{path}.{inner}")
                };
                problems.push(problem(at, error.into_inner().to_string()));
            }
        }
    }
    if problems.len() > before {
        // Still apply the scope's rules to the fields that are known and well typed, when the
        // concurrency they may depend on is one of them.
        let nested_ok = NESTED_FIELDS.iter().all(|(name, fields)| {
            well_typed
                .get(*name)
                .and_then(Value::as_object)
                .is_none_or(|nested| nested.keys().all(|k| fields.contains(&k.as_str())))
        });
        let partial = (well_typed.contains_key("concurrency") && nested_ok)
            .then(|| serde_json::from_value::<Limits>(Value::Object(well_typed)).ok())
            .flatten();
        if let Some(partial) = partial {
            if let Err(error) = partial.validate(scope) {
                problems.push(rule(path, error));
            }
        }
        return None;
    }
    let limits = match serde_path_to_error::deserialize::<_, Limits>(value) {
        Ok(limits) => limits,
        Err(error) => {
            problems.push(problem(
                format!("{path}.{}", error.path()),
                error.into_inner().to_string(),
            ));
            return None;
        }
    };
    if let Err(error) = limits.validate(scope) {
        problems.push(rule(path, error));
        return None;
    }
    Some(limits)
}

/// A broken rule of the limits at `path`, named by its field.
fn rule(path: &str, error: LimitsError) -> FieldError {
    let field = match error {
        LimitsError::BreakerZero { field } => format!("circuitBreaker.{field}"),
        _ => error.field().to_owned(),
    };
    problem(format!("{path}.{field}"), error.to_string())
}

#[cfg(test)]
mod tests {
    use turnstile_admission::{CircuitBreakerConfig, Fairness, MinShare, Priority};

    use super::*;

    /// [`LIMITS_FIELDS`] is exactly what a `Limits` with every field set serializes.
    #[test]
    fn the_known_fields_are_exactly_the_limits_fields() {
        let all = Limits {
            concurrency: 1,
            requests_per_minute: Some(1),
            requests_burst: Some(1),
            tokens_per_second: Some(1),
            tokens_burst: Some(1),
            max_attempts: Some(1),
            max_cost_usd: Some(1.0),
            allow_unknown_cost: Some(true),
            max_tokens: Some(1),
            max_open_budgets: Some(1),
            max_batch_size: Some(1),
            max_request_bytes: Some(1),
            max_items: Some(1),
            max_retained_work: Some(1),
            max_queue_length: Some(1),
            max_queue_wait_ms: Some(1),
            circuit_breaker: Some(CircuitBreakerConfig {
                failure_threshold: 1,
                open_ms: Some(1),
                half_open_max_calls: Some(1),
            }),
            reserved_concurrency: Some(1),
            max_principal_share: Some(1.0),
            fairness: Some(Fairness::Tokens),
            weight: Some(1.0),
            priority: Some(Priority::Batch),
            min_share: Some(MinShare {
                standard: Some(0.1),
                batch: Some(0.1),
            }),
        };
        let json = serde_json::to_value(&all).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut known = LIMITS_FIELDS.to_vec();
        keys.sort_unstable();
        known.sort_unstable();
        assert_eq!(keys, known);
        for (name, fields) in NESTED_FIELDS {
            let mut nested: Vec<&str> = json[name]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            let mut fields = fields.to_vec();
            nested.sort_unstable();
            fields.sort_unstable();
            assert_eq!(nested, fields, "{name}");
        }
    }

    /// The first problem of a document.
    fn first(json: &str) -> FieldError {
        check_profile(json).unwrap_err().0.remove(0)
    }

    #[test]
    fn every_kind_of_mistake_names_its_field() {
        let cases = [
            (
                r#"{"workspace":{"concurrency":2},"providers":{},"principal":{}}"#,
                "principal",
            ),
            (r#"{"providers":{}}"#, "workspace"),
            (r#"{"workspace":{"concurrency":2}}"#, "providers"),
            (r#"{"workspace":[2],"providers":{}}"#, "workspace"),
            (
                r#"{"workspace":{"concurrency":2},"providers":{"jev":{"concurrency":"4"}}}"#,
                "providers.jev.concurrency",
            ),
            (
                r#"{"workspace":{"concurrency":2},"providers":{"jev":{"concurrency":1,"maxQueueLenght":3}}}"#,
                "providers.jev.maxQueueLenght",
            ),
            (
                r#"{"workspace":{"concurrency":2},"providers":{"jev":{"concurrency":1,"tokensBurst":5}}}"#,
                "providers.jev.tokensBurst",
            ),
            (
                r#"{"workspace":{"concurrency":2,"maxPrincipalShare":1.5},"providers":{}}"#,
                "workspace.maxPrincipalShare",
            ),
            (
                r#"{"workspace":{"concurrency":2},"providers":{},"principals":{"a":{"concurrency":1,"reservedConcurrency":2}}}"#,
                "principals.a.reservedConcurrency",
            ),
            (
                r#"{"workspace":{"concurrency":2},"providers":{"jev":{"concurrency":1,"circuitBreaker":{"failureThreshold":0}}}}"#,
                "providers.jev.circuitBreaker.failureThreshold",
            ),
        ];
        for (json, field) in cases {
            let error = first(json);
            assert_eq!(error.field, field, "{json}: {error}");
            assert!(!error.problem.is_empty());
        }
        let unknown = first(
            r#"{"workspace":{"concurrency":2},"providers":{"jev":{"concurrency":1,"maxQueueLenght":3}}}"#,
        );
        assert_eq!(unknown.field, "providers.jev.maxQueueLenght");
        assert!(
            unknown.problem.contains("did you mean `maxQueueLength`?"),
            "{unknown}"
        );
    }

    #[test]
    fn misspelt_fields_get_a_suggestion() {
        assert_eq!(
            did_you_mean("maxQueueLenght", &LIMITS_FIELDS).as_deref(),
            Some("maxQueueLength")
        );
        assert_eq!(
            did_you_mean("max_queue_length", &LIMITS_FIELDS).as_deref(),
            Some("maxQueueLength")
        );
        assert_eq!(
            did_you_mean("requestPerMinute", &LIMITS_FIELDS).as_deref(),
            Some("requestsPerMinute")
        );
        assert_eq!(
            did_you_mean("principal", &TOP_LEVEL).as_deref(),
            Some("principals")
        );
        assert_eq!(did_you_mean("colour", &LIMITS_FIELDS), None);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = r#"{
            "workspace": {"concurrency": 2, "maxPrincipalShare": 1.5},
            "providers": {
                "jev": {"concurrency": "4", "maxQueueLenght": 3, "tokensBurst": 5},
                "ok": {"concurrency": 1, "tokensBurst": 5, "circuitBreaker": {"failureTreshold": 1}}
            },
            "principals": {"a": {"concurency": 1, "weight": 0}},
            "principal": {}
        }"#;
        let FieldErrors(problems) = check_profile(text).unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        for expected in [
            "principal",
            "workspace.maxPrincipalShare",
            "providers.jev.maxQueueLenght",
            "providers.jev.concurrency",
            "providers.ok.circuitBreaker.failureTreshold",
            "principals.a.concurency",
            "principals.a.concurrency",
            "providers.ok.tokensBurst",
        ] {
            assert!(fields.contains(&expected), "{expected} in {fields:?}");
        }
        let text = FieldErrors(problems.clone()).to_string();
        assert!(text.contains("did you mean `maxQueueLength`?"), "{text}");
        assert!(text.contains("did you mean `failureThreshold`?"), "{text}");
        assert!(text.contains("did you mean `concurrency`?"), "{text}");
        assert!(text.contains("did you mean `principals`?"), "{text}");
        assert!(!text.contains('\n'), "one line: {text}");
    }
}
