//! `turnstile evaluate …`: evaluate a decision ruleset and print the RulesetResult JSON.
//!
//! A thin front end over `turnstile_decision::evaluate`: it reads the artifacts, builds the
//! adapters from an adapters file (scripted or chat-completions) and each attempt's admission
//! estimate from the same file (`AdaptersFile::estimate`: `maxTokens`, `prices`), optionally
//! enables admission with a scheduler policy file (in process) or a running service
//! (`--service`, see `evaluate_service.rs`), keeps durable receipts in `--receipts DIR` (a rerun
//! of the same invocation replays, never calling a provider twice), exports admission spans and
//! metrics with `--otlp-endpoint` (flushed before the process ends, on every path), and prints
//! the result.
//!
//! Invariants: a `--receipts` directory that cannot be used and an OTLP endpoint that cannot be
//! exported to are errors (exit 1) before any artifact is read or any adapter called; the
//! estimate is the same whatever the admission source.
//!
//! Exit status (documented in `docs/evaluator.md`): 0 when the printed result's status is
//! `completed`, `defaulted` or `review` (the ruleset decided an outcome); 3 when the result was
//! printed but its status is `error` or `cancelled` (no outcome; `spec.reason` and
//! `spec.detail` say why); 1 when no result could be produced (an input cannot be read or is
//! not the kind of file it should be), with nothing on stdout.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use serde_json::Value;
use turnstile_admission::Registry;
use turnstile_decision::{
    evaluate, AdapterSet, AdaptersFile, AdmissionDriver, EstimateFn, EvaluationRequest, ReceiptRun,
    ResultNaming, RulesetResult, RulesetStatus, SchedulerPolicy, SchedulerRun,
};
use turnstile_store::{SqliteReceiptStore, RECEIPT_DB_FILE};

use turnstile_cli::{HintExt, OtlpExport, ResultFailed};

/// The receipts' `projectId` in a `--receipts` directory (a label of this command, not a
/// tenant ID): receipts are keyed by it and `--invocation-id`.
pub const RECEIPT_PROJECT: &str = "turnstile-evaluate";

use super::evaluate_service::governed;
use turnstile_client::Secret;

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
    /// The adapters file (`{"adapters": [...]}`); without it no adapter is available. An
    /// adapter's `maxTokens` and `prices` give its attempts' admission estimate.
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
    /// The idempotency key of the invocation (with --receipts: the receipt's key; give each
    /// distinct evaluation its own).
    #[arg(long, default_value = "cli-invocation")]
    pub invocation_id: String,
    /// Keep durable `decision-receipt/v2` receipts in this directory (created if missing; the
    /// SQLite file `receipts.sqlite3`): a rerun of the same invocation prints the stored result
    /// and never calls a provider twice; a run that died during a call answers
    /// `execution-uncertain` (see docs/evaluator.md, "CLI").
    #[arg(long, value_name = "DIR")]
    pub receipts: Option<PathBuf>,
    /// Export the admission spans and metrics over OTLP/HTTP to this collector (e.g.
    /// http://localhost:4318), flushed before the command ends.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
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
    // Built outside the async runtime, flushed after it (turnstile_cli::OtlpExport).
    let export = match &args.otlp_endpoint {
        Some(endpoint) => Some(OtlpExport::start(endpoint, "turnstile evaluate")?),
        None => None,
    };
    let telemetry = export.as_ref().map(OtlpExport::telemetry);
    let evaluated = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|runtime| runtime.block_on(evaluate_args(args, telemetry)));
    if let Some(export) = export {
        export.flush();
    }
    let result = evaluated?;
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

async fn evaluate_args(
    args: EvaluateArgs,
    telemetry: Option<turnstile_decision::Telemetry>,
) -> anyhow::Result<RulesetResult> {
    let receipts = args.receipts.as_deref().map(open_receipts).transpose()?;
    let adapters_file = args.adapters.as_deref().map(read_adapters).transpose()?;
    let estimate = adapters_file.as_ref().map(AdaptersFile::estimate);
    let adapters = match adapters_file {
        Some(file) => file.build()?,
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
        request = request.with_scheduler(with_estimate(governed(service, key)?, estimate));
    } else if let Some(path) = &args.scheduler {
        let policy: SchedulerPolicy = serde_json::from_value(read_json(path)?)
            .with_context(|| format!("{} is not a scheduler policy", path.display()))?;
        let run = SchedulerRun::new(policy, AdmissionDriver::new(Registry::new()));
        request = request.with_scheduler(with_estimate(run, estimate));
    }
    if let Some(receipts) = receipts {
        request = request.with_receipts(receipts);
    }
    if let Some(telemetry) = telemetry {
        request = request.with_telemetry(telemetry);
    }
    Ok(evaluate(request).await)
}

/// The adapters file at `path`.
fn read_adapters(path: &Path) -> anyhow::Result<AdaptersFile> {
    serde_json::from_value(read_json(path)?)
        .with_context(|| format!("{} is not an adapters file", path.display()))
        .hint("an adapters file is {\"adapters\": [...]}, e.g. examples/adapters.scripted.json")
}

/// The adapters file's estimate on the run, whatever its admission source (the estimate of an
/// attempt depends only on its adapter and projection).
fn with_estimate(run: SchedulerRun, estimate: Option<EstimateFn>) -> SchedulerRun {
    match estimate {
        Some(estimate) => run.with_estimate(estimate),
        None => run,
    }
}

/// The receipt store in `dir` (created if missing), opened before anything runs.
fn open_receipts(dir: &Path) -> anyhow::Result<ReceiptRun> {
    let hint =
        "--receipts names a directory this user can create and write (it holds receipts.sqlite3)";
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot use {} as the receipts directory", dir.display()))
        .hint(hint)?;
    let path = dir.join(RECEIPT_DB_FILE);
    let store = SqliteReceiptStore::open(&path)
        .with_context(|| format!("cannot open the receipts file {}", path.display()))
        .hint(hint)?;
    Ok(ReceiptRun::new(Arc::new(store), RECEIPT_PROJECT))
}
