//! `turnstile profile …`: admission profiles from the command line.
//!
//! `check FILE` validates a profile document exactly as `PUT /v1/workspaces/{w}/profiles/{v}`
//! would (only `workspace`, `providers` and `principals` at the top level, every limits position
//! an object, every field known and of its type, then the rules of `Profile::validate`) and
//! names the offending field by its path (`providers.jev.tokensBurst`). `digest FILE` prints the
//! profile digest of a profile or load-manifest file. Neither writes anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;
use serde_json::Value;
use turnstile_admission::{Limits, LimitsError, Profile, ProfileError, ScopeKind};

use turnstile_cli::HintExt;

const PROFILE_HINT: &str = "every field is described in docs/profiles.md";

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Validate a profile file as the service would, naming the field and the problem.
    Check {
        /// The profile: `{"workspace": {...}, "providers": {...}, "principals": {...}}`.
        file: PathBuf,
    },
    /// Print the canonical profile digest ("sha256:…") of a profile or load-manifest file:
    /// the sha256 of the canonical JSON of its `{providers, workspace}` limits.
    Digest {
        /// A JSON file with `workspace` and `providers` (a profile or a v2 load manifest).
        file: PathBuf,
    },
}

pub fn run(command: ProfileCommand) -> anyhow::Result<()> {
    match command {
        ProfileCommand::Check { file } => {
            let text = read(&file)?;
            let profile = check_profile(&text)
                .with_context(|| format!("{} is not a valid profile", file.display()))
                .hint(PROFILE_HINT)?;
            let digest = profile.digest()?;
            println!(
                "ok: {} is a valid profile ({} provider{}, {} principal{}); digest {digest}",
                file.display(),
                profile.providers.len(),
                plural(profile.providers.len()),
                profile.principals.len(),
                plural(profile.principals.len()),
            );
            Ok(())
        }
        ProfileCommand::Digest { file } => {
            let text = read(&file)?;
            println!("{}", profile_digest(&text, &file.display().to_string())?);
            Ok(())
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn read(file: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(file)
        .with_context(|| format!("cannot read {}", file.display()))
        .hint("give the path of a JSON profile file, e.g. examples/profile.json")
}

/// A profile field that is wrong: its path and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    pub field: String,
    pub problem: String,
}

fn field_error(field: impl Into<String>, problem: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        problem: problem.into(),
    }
}

/// Parses and validates a profile document strictly; the error names the field's path.
pub fn check_profile(text: &str) -> Result<Profile, FieldError> {
    let document: Value = serde_json::from_str(text)
        .map_err(|e| field_error("(document)", format!("not JSON: {e}")))?;
    let Some(root) = document.as_object() else {
        return Err(field_error("(document)", "must be a JSON object"));
    };
    if let Some(unknown) = root
        .keys()
        .find(|k| !matches!(k.as_str(), "workspace" | "providers" | "principals"))
    {
        return Err(field_error(
            unknown.clone(),
            "unknown top-level field; expected `workspace`, `providers` and `principals`",
        ));
    }
    let workspace = match root.get("workspace") {
        Some(value) => limits(value, "workspace")?,
        None => return Err(field_error("workspace", "missing (the workspace limits)")),
    };
    let providers = match root.get("providers") {
        Some(value) => table(value, "providers")?,
        None => {
            return Err(field_error(
                "providers",
                "missing (an object of provider limits by provider ID)",
            ))
        }
    };
    let principals = match root.get("principals") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(value) => table(value, "principals")?,
    };
    let invalid = |path: String, error: LimitsError| {
        let field = match error {
            LimitsError::BreakerZero { field } => format!("circuitBreaker.{field}"),
            _ => error.field().to_owned(),
        };
        field_error(format!("{path}.{field}"), error.to_string())
    };
    workspace
        .validate(ScopeKind::Workspace)
        .map_err(|e| invalid("workspace".into(), e))?;
    for (id, l) in &providers {
        l.validate(ScopeKind::Provider)
            .map_err(|e| invalid(format!("providers.{id}"), e))?;
    }
    for (id, l) in &principals {
        l.validate(ScopeKind::Principal)
            .map_err(|e| invalid(format!("principals.{id}"), e))?;
    }
    let profile = Profile {
        workspace,
        providers,
        principals,
    };
    match profile.validate() {
        Ok(()) => Ok(profile),
        Err(error @ ProfileError::ReservationsExceed { .. }) => Err(field_error(
            "principals.*.reservedConcurrency",
            error.to_string(),
        )),
        Err(error) => Err(field_error(error.field(), error.to_string())),
    }
}

/// An object of limits by ID.
fn table(value: &Value, path: &str) -> Result<BTreeMap<String, Limits>, FieldError> {
    let Some(object) = value.as_object() else {
        return Err(field_error(path, "must be an object of limits by ID"));
    };
    object
        .iter()
        .map(|(id, value)| Ok((id.clone(), limits(value, &format!("{path}.{id}"))?)))
        .collect()
}

/// One limits object; serde's error names the field inside it.
fn limits(value: &Value, path: &str) -> Result<Limits, FieldError> {
    if !value.is_object() {
        return Err(field_error(path, "must be an object of limits"));
    }
    if let Some(breaker) = value.get("circuitBreaker") {
        if !breaker.is_object() && !breaker.is_null() {
            return Err(field_error(
                format!("{path}.circuitBreaker"),
                "must be an object",
            ));
        }
    }
    serde_path_to_error::deserialize::<_, Limits>(value).map_err(|error| {
        let inner = error.path().to_string();
        let field = if inner == "." {
            path.to_owned()
        } else {
            format!("{path}.{inner}")
        };
        field_error(field, error.into_inner().to_string())
    })
}

/// Validates the limits of a profile or manifest document and returns its profile digest.
/// `source` names the document in error messages.
pub fn profile_digest(text: &str, source: &str) -> anyhow::Result<String> {
    let document: serde_json::Value =
        serde_json::from_str(text).with_context(|| format!("{source} is not JSON"))?;
    let part = |key: &str| {
        document
            .get(key)
            .cloned()
            .with_context(|| format!("{source} has no `{key}` object"))
    };
    let profile: Profile = serde_json::from_value(serde_json::json!({
        "workspace": part("workspace")?,
        "providers": part("providers")?,
    }))
    .with_context(|| format!("{source} has invalid limits"))
    .hint(format!(
        "`turnstile profile check {source}` names the field"
    ))?;
    profile
        .validate()
        .with_context(|| format!("{source} has invalid limits"))
        .hint(PROFILE_HINT)?;
    Ok(profile.digest()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(json: &str) -> FieldError {
        check_profile(json).unwrap_err()
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
            let error = problem(json);
            assert_eq!(error.field, field, "{json}: {error}");
            assert!(!error.problem.is_empty());
        }
        let unknown = problem(
            r#"{"workspace":{"concurrency":2},"providers":{"jev":{"concurrency":1,"maxQueueLenght":3}}}"#,
        );
        assert!(unknown.problem.contains("maxQueueLenght"), "{unknown}");
    }

    #[test]
    fn the_example_profile_is_valid() {
        let text = include_str!("../../../../examples/profile.json");
        check_profile(text).unwrap();
    }
}
