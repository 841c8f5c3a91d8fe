//! `turnstile evaluate …`: evaluate a decision ruleset and print the RulesetResult JSON.
//!
//! A thin front end over `turnstile_decision::evaluate`: it reads the artifacts, builds the
//! adapters from an adapters file (scripted or chat-completions), optionally enables admission
//! with a scheduler policy file (in process) or a running service (`--service`, see
//! `evaluate_service.rs`), and prints the result.
//!
//! Exit status (documented in `docs/evaluator.md`): 0 when the printed result's status is
//! `completed`, `defaulted` or `review` (the ruleset decided an outcome); 3 when the result was
//! printed but its status is `error` or `cancelled` (no outcome; `spec.reason` and
//! `spec.detail` say why); 1 when no result could be produced (an input cannot be read or is
//! not the kind of file it should be), with nothing on stdout.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::Value;
use turnstile_admission::Registry;
use turnstile_decision::{
    evaluate, AdapterSet, AdaptersFile, AdmissionDriver, EvaluationRequest, ResultNaming,
    RulesetStatus, SchedulerPolicy, SchedulerRun,
};

use turnstile_cli::{HintExt, ResultFailed};

use super::evaluate_service::{governed, Secret};

#[derive(Debug, Args)]
pub struct EvaluateArgs {
    /// The DecisionRuleset artifact.
    #[arg(long)]
    pub ruleset: PathBuf,
    /// The DecisionBinding artifact.
    #[arg(long)]
    pub binding: PathBuf,
    /// A directory; every `*.json` file of kind DecisionDefinition in it is used.
    #[arg(long)]
    pub definitions: PathBuf,
    /// The input JSON.
    #[arg(long)]
    pub input: PathBuf,
    /// The adapters file (`{"adapters": [...]}`); without it no adapter is available.
    #[arg(long)]
    pub adapters: Option<PathBuf>,
    /// A scheduler policy file (`{enabled, profileVersion, workspace, principal, providers}`):
    /// enables admission before every attempt, in this process.
    #[arg(long)]
    pub scheduler: Option<PathBuf>,
    /// A running turnstile service (base URL) that admits every attempt: the key's workspace
    /// profile governs (limits, budgets, pauses, breakers shared with its other clients); each
    /// adapter of the binding must be a provider lane of it. Not with --scheduler.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "scheduler",
        requires = "key"
    )]
    pub service: Option<String>,
    /// The principal key for --service (or the environment's TURNSTILE_KEY); never printed.
    #[arg(
        long,
        value_name = "KEY",
        env = "TURNSTILE_KEY",
        hide_env_values = true
    )]
    pub key: Option<Secret>,
    #[arg(long, default_value = "cli-run")]
    pub run_id: String,
    /// The idempotency key of the invocation.
    #[arg(long, default_value = "cli-invocation")]
    pub invocation_id: String,
    /// Prefix of the result artifacts' metadata ids.
    #[arg(long, default_value = "")]
    pub result_id_prefix: String,
    /// Prefix of the result artifacts' descriptions.
    #[arg(long, default_value = "decision")]
    pub result_description_prefix: String,
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .hint("check the path; the shipped examples are in examples/fixtures")?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

fn read_definitions(dir: &Path) -> anyhow::Result<Vec<Value>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read directory {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    let mut definitions = Vec::new();
    for path in paths {
        let value = read_json(&path)?;
        if value.get("kind").and_then(Value::as_str) == Some("DecisionDefinition") {
            definitions.push(value);
        }
    }
    Ok(definitions)
}

pub fn run(args: EvaluateArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(evaluate_args(args))?;
    println!("{}", serde_json::to_string_pretty(&result)?);
    match result.spec.status {
        RulesetStatus::Completed | RulesetStatus::Defaulted | RulesetStatus::Review => Ok(()),
        status @ (RulesetStatus::Error | RulesetStatus::Cancelled) => {
            let name = |value: serde_json::Result<Value>| {
                value
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            };
            let mut message = format!(
                "the result's status is {} ({})",
                name(serde_json::to_value(status)),
                name(serde_json::to_value(result.spec.reason)),
            );
            if let Some(detail) = &result.spec.detail {
                message.push_str(&format!(": {detail}"));
            }
            Err(anyhow::Error::new(ResultFailed(message)))
        }
    }
}

async fn evaluate_args(args: EvaluateArgs) -> anyhow::Result<turnstile_decision::RulesetResult> {
    let adapters = match &args.adapters {
        Some(path) => {
            let file: AdaptersFile = serde_json::from_value(read_json(path)?)
                .with_context(|| format!("{} is not an adapters file", path.display()))
                .hint("an adapters file is {\"adapters\": [...]}, e.g. examples/adapters.scripted.json")?;
            file.build()?
        }
        None => AdapterSet::new(),
    };
    let mut request = EvaluationRequest::new(
        read_json(&args.ruleset)?,
        read_json(&args.binding)?,
        read_definitions(&args.definitions)?,
        read_json(&args.input)?,
        adapters,
    )
    .with_ids(args.run_id, args.invocation_id)
    .with_naming(ResultNaming {
        id_prefix: args.result_id_prefix,
        description_prefix: args.result_description_prefix,
        version: "1.0.0".into(),
    });
    if let (Some(service), Some(key)) = (&args.service, &args.key) {
        request = request.with_scheduler(governed(service, key)?);
    } else if let Some(path) = &args.scheduler {
        let policy: SchedulerPolicy = serde_json::from_value(read_json(path)?)
            .with_context(|| format!("{} is not a scheduler policy", path.display()))?;
        request = request.with_scheduler(SchedulerRun {
            policy,
            driver: AdmissionDriver::new(Registry::new()).into(),
            estimate: None,
            on_evidence: None,
        });
    }
    Ok(evaluate(request).await)
}
