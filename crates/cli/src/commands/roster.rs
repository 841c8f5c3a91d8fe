//! `turnstile roster …`: the semantic roster scheduler (ADR 0119) over a SQLite data directory.
//!
//! Invariant: only `enqueue`, `run` and `reset` write; `status` and `records` on a directory
//! without `roster.sqlite3` report an empty roster and create nothing. The default directory
//! is `./turnstile-roster`, not the admission service's `./turnstile-data`.
//!
//! Thin: every subcommand is one call into `turnstile-semantic`. The only clock read is
//! the shell's [`Clock`](turnstile_shell::Clock); the secrets are the API key, read from the environment variable *named*
//! by `--api-key-env`, and the service key of `run --service` (`--key` or `TURNSTILE_KEY`,
//! held as a [`Secret`]); neither is ever printed.
//!
//! `run --service URL --provider LANE` admits every read through that running service
//! ([`ServiceGate`]): a refused read is not made; a retryable refusal ends the pass and the
//! loop waits the service's Retry-After (or `--poll-ms`) before the next one; a refusal that
//! cannot succeed later (unknown key, no profile, a budget or bound that can never fit) stops
//! `run` with an error. The run's budget is released when `run` ends.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use turnstile_admission::Prices;
use turnstile_client::Secret;
use turnstile_semantic::time::format_utc;
use turnstile_semantic::{
    parse_calls_per_hour, CallLimit, ChatCompletionsReader, ChatReaderSettings, GenerationEvidence,
    NeverStop, PassReport, PassSettings, PassStep, Policy, Roster, RosterStatus, ServiceGate,
    ServiceGateSettings,
};
use turnstile_shell::Clock;
use turnstile_store::meta_keys;
use turnstile_store::{RosterStore, SqliteRosterStore};

/// Environment variable for the reader's base URL.
pub const ENV_BASE_URL: &str = "TURNSTILE_READER_BASE_URL";
/// Environment variable for the reader's model.
pub const ENV_MODEL: &str = "TURNSTILE_READER_MODEL";
/// Environment variable naming the variable that holds the API key.
pub const ENV_API_KEY_ENV: &str = "TURNSTILE_READER_API_KEY_ENV";
/// Default name of the variable that holds the API key.
pub const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// Arguments of `turnstile roster`.
#[derive(Debug, Args)]
pub struct RosterArgs {
    /// Directory holding the roster database (roster.sqlite3); `enqueue` and `run` create it
    /// if missing, `status` and `records` never do.
    #[arg(long, global = true, default_value = "./turnstile-roster")]
    data: PathBuf,
    #[command(subcommand)]
    command: RosterCommand,
}

/// Accepted --calls-per-hour values: whole numbers 1..=120 (fractions are floored).
fn calls_per_hour(text: &str) -> Result<u32, turnstile_semantic::CallsPerHourError> {
    parse_calls_per_hour(text)
}

#[derive(Debug, Subcommand)]
enum RosterCommand {
    /// Calls in the last rolling hour against the limit (e.g. "2/120": 2 calls in the last 60
    /// minutes, at most 120 per rolling hour), pending count and next eligible time.
    Status {
        /// Report against this limit instead of the one last used by `run` (1..=120).
        #[arg(long, value_name = "N", value_parser = calls_per_hour, allow_negative_numbers = true)]
        calls_per_hour: Option<u32>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Enqueue evidence: a JSON file with one evidence object or an array ("-" reads stdin).
    Enqueue {
        /// The evidence file (see docs/semantic.md for the format).
        file: PathBuf,
    },
    /// Read pending generations through an OpenAI-compatible chat-completions endpoint.
    Run(RunArgs),
    /// Print the latest record of every generation as JSON.
    Records,
    /// Clear pending items, evidence, records and cache. The call history (the rolling cap) is
    /// kept.
    Reset,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Lower the hard ceiling of 120 calls per rolling hour (1..=120; never above 120).
    #[arg(long, value_name = "N", value_parser = calls_per_hour, allow_negative_numbers = true)]
    calls_per_hour: Option<u32>,
    /// Run one pass and exit.
    #[arg(long)]
    once: bool,
    /// Evidence must be pending this long before it is read.
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    debounce_ms: u64,
    /// Endpoint base URL, e.g. https://api.openai.com/v1 [env: TURNSTILE_READER_BASE_URL].
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Model name [env: TURNSTILE_READER_MODEL].
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// NAME of the environment variable holding the API key
    /// [env: TURNSTILE_READER_API_KEY_ENV; default OPENAI_API_KEY].
    #[arg(long, value_name = "NAME")]
    api_key_env: Option<String>,
    /// Per-call timeout in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    timeout_secs: u64,
    /// Longest sleep between checks for new evidence, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2_000)]
    poll_ms: u64,
    /// Send `max_tokens` with every read (also the output part of its admission estimate).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: Option<u32>,
    /// The model's price of input tokens, in USD per million (with --output-usd-per-mtok): each
    /// read's admission estimate then carries its cost.
    #[arg(
        long,
        value_name = "USD",
        requires = "output_usd_per_mtok",
        allow_negative_numbers = true
    )]
    input_usd_per_mtok: Option<f64>,
    /// The model's price of output tokens, in USD per million (with --input-usd-per-mtok).
    #[arg(
        long,
        value_name = "USD",
        requires = "input_usd_per_mtok",
        allow_negative_numbers = true
    )]
    output_usd_per_mtok: Option<f64>,
    /// Admit every read through this running `turnstile serve` (e.g. http://127.0.0.1:8686);
    /// needs --provider and a key.
    #[arg(long, value_name = "URL")]
    service: Option<String>,
    /// The service key (a principal key of the workspace) [env: TURNSTILE_KEY]; never printed.
    #[arg(
        long,
        value_name = "KEY",
        env = "TURNSTILE_KEY",
        hide_env_values = true
    )]
    key: Option<Secret>,
    /// The provider lane of the key's workspace profile the reads are admitted on (with
    /// --service).
    #[arg(long, value_name = "LANE", requires = "service")]
    provider: Option<String>,
}

/// Runs `turnstile roster …`.
pub fn run(args: RosterArgs) -> anyhow::Result<()> {
    match args.command {
        RosterCommand::Status {
            calls_per_hour,
            json,
        } => status(open_existing(&args.data)?, calls_per_hour, json),
        RosterCommand::Enqueue { file } => enqueue(open(&args.data)?, &file),
        RosterCommand::Run(run_args) => run_passes(open(&args.data)?, run_args),
        RosterCommand::Records => {
            let records = open_existing(&args.data)?
                .records()
                .context("reading records")?;
            println!("{}", serde_json::to_string_pretty(&records)?);
            Ok(())
        }
        RosterCommand::Reset => {
            if !has_database(&args.data) {
                println!(
                    "nothing to reset: no roster database in {}",
                    args.data.display()
                );
                return Ok(());
            }
            let mut roster = Roster::new(open(&args.data)?, PassSettings::default());
            roster.reset().context("resetting the roster")?;
            println!("roster reset; the rolling call history is kept");
            Ok(())
        }
    }
}

/// The database file inside a roster data directory.
const ROSTER_DB_FILE: &str = "roster.sqlite3";

fn has_database(data: &Path) -> bool {
    data.join(ROSTER_DB_FILE).is_file()
}

/// Opens (creating if needed) the roster database: for the commands that write.
fn open(data: &Path) -> anyhow::Result<SqliteRosterStore> {
    SqliteRosterStore::open_dir(data)
        .with_context(|| format!("opening the roster database in {}", data.display()))
}

/// Opens the roster database if there is one, else an empty roster in memory: for the commands
/// that only read, so looking never creates a file.
fn open_existing(data: &Path) -> anyhow::Result<SqliteRosterStore> {
    if has_database(data) {
        open(data)
    } else {
        SqliteRosterStore::open_in_memory().context("opening an empty roster in memory")
    }
}

fn settings(limit: CallLimit, debounce_ms: u64) -> PassSettings {
    PassSettings {
        policy: Policy::ADR_0119,
        limit,
        debounce_ms,
    }
}

/// Where the limit in force comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LimitSource {
    Flag,
    LastRun,
    Ceiling,
}

impl LimitSource {
    fn describe(self) -> &'static str {
        match self {
            LimitSource::Flag => "--calls-per-hour",
            LimitSource::LastRun => "the limit last used by `roster run`",
            LimitSource::Ceiling => "the hard ceiling",
        }
    }
}

/// The limit in force: the flag, else the value last used by `run`, else the hard ceiling.
fn effective_limit(
    store: &SqliteRosterStore,
    flag: Option<u32>,
) -> anyhow::Result<(CallLimit, LimitSource)> {
    let stored = store
        .meta(meta_keys::CONFIGURED_CALLS_PER_HOUR)?
        .and_then(|text| text.parse::<u32>().ok());
    let (configured, source) = match (flag, stored) {
        (Some(flag), _) => (Some(flag), LimitSource::Flag),
        (None, Some(stored)) => (Some(stored), LimitSource::LastRun),
        (None, None) => (None, LimitSource::Ceiling),
    };
    let limit = CallLimit::from_configured(configured.map(f64::from), &Policy::ADR_0119);
    Ok((limit, source))
}

fn status(store: SqliteRosterStore, flag: Option<u32>, json: bool) -> anyhow::Result<()> {
    let (limit, source) = effective_limit(&store, flag)?;
    let roster = Roster::new(store, settings(limit, 5_000));
    let status = roster.status(Clock::system().now_ms())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", render_status(&status, source));
    }
    Ok(())
}

fn render_status(status: &RosterStatus, source: LimitSource) -> String {
    let calls = &status.rolling_calls;
    let mut out = format!(
        "rolling calls: {}/{} used, {} available ({} reader calls in the last 60 minutes; limit \
         {} calls per rolling hour: {})",
        calls.used,
        calls.limit,
        calls.available,
        calls.used,
        calls.limit,
        source.describe()
    );
    if let Some(at) = calls.eligible_after {
        out.push_str(&format!(
            " (cap reached; capacity returns {})",
            format_utc(at)
        ));
    }
    out.push_str(&format!("\npending: {}\nnext eligible: ", status.pending));
    match status.next_eligible_at {
        None => out.push_str("- (nothing pending)"),
        Some(at) if at <= status.now => out.push_str("now"),
        Some(at) => out.push_str(&format_utc(at)),
    }
    out.push('\n');
    out
}

fn enqueue(store: SqliteRosterStore, file: &Path) -> anyhow::Result<()> {
    let text = if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        text
    } else {
        std::fs::read_to_string(file)
            .with_context(|| format!("reading evidence file {}", file.display()))?
    };
    let documents = GenerationEvidence::parse_documents(&text)
        .with_context(|| format!("parsing evidence file {}", file.display()))?;
    let mut roster = Roster::new(store, PassSettings::default());
    let now = Clock::system().now_ms();
    for evidence in &documents {
        let entry = roster.enqueue(evidence, now)?;
        println!(
            "enqueued {} band {} {} pending since {}",
            entry.generation_id,
            entry.band.number(),
            entry.evidence_digest,
            format_utc(entry.pending_since)
        );
    }
    Ok(())
}

fn reader_settings(args: &RunArgs) -> anyhow::Result<ChatReaderSettings> {
    let from_env = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|value| !value.trim().is_empty())
    };
    let base_url = args.base_url.clone().or_else(|| from_env(ENV_BASE_URL));
    let model = args.model.clone().or_else(|| from_env(ENV_MODEL));
    let (Some(base_url), Some(model)) = (base_url, model) else {
        bail!(
            "no reader endpoint is configured; `turnstile roster run` reads through an \
             OpenAI-compatible chat-completions endpoint. Configure it with:\n  \
             --base-url URL       or {ENV_BASE_URL}   (e.g. https://api.openai.com/v1 or http://127.0.0.1:8080/v1)\n  \
             --model NAME         or {ENV_MODEL}\n  \
             --api-key-env NAME   or {ENV_API_KEY_ENV}   (the NAME of the variable that holds the key; default {DEFAULT_API_KEY_ENV})"
        );
    };
    let api_key_env = args
        .api_key_env
        .clone()
        .or_else(|| from_env(ENV_API_KEY_ENV))
        .unwrap_or_else(|| DEFAULT_API_KEY_ENV.to_owned());
    Ok(ChatReaderSettings {
        base_url,
        model,
        api_key_env,
        timeout: Duration::from_secs(args.timeout_secs.max(1)),
    })
}

fn describe(step: &PassStep) -> String {
    match step {
        PassStep::Called {
            generation_id,
            band,
            outcome,
            ..
        } => format!(
            "read {generation_id} (band {}): {}",
            band.number(),
            outcome.as_str()
        ),
        PassStep::CacheHit { generation_id } => format!("cached {generation_id}: record reused"),
        PassStep::Deferred {
            generation_id,
            eligible_after,
        } => format!(
            "deferred {generation_id}: rate cap, eligible after {}",
            format_utc(*eligible_after)
        ),
        PassStep::Held { generation_id } => format!("held {generation_id}: within its interval"),
        PassStep::Dropped { generation_id } => {
            format!("dropped {generation_id}: evidence changed")
        }
        PassStep::NoReader { generation_id } => format!("unavailable {generation_id}: no reader"),
    }
}

/// The gate of `--service`, or `None` without it.
fn service_gate(args: &RunArgs) -> anyhow::Result<Option<ServiceGate>> {
    let Some(service) = args.service.clone() else {
        return Ok(None);
    };
    let Some(provider) = args.provider.clone() else {
        bail!(
            "--service needs --provider LANE: the provider lane of the key's workspace profile \
             that the reads are admitted on"
        );
    };
    let Some(key) = args.key.as_ref().filter(|key| !key.is_blank()) else {
        bail!("--service needs a key: --key KEY or the environment variable TURNSTILE_KEY");
    };
    let clock = Clock::system();
    let settings = ServiceGateSettings {
        service_url: service,
        provider_id: provider,
        budget_id: format!("roster-run-{}-{}", clock.now_ms(), std::process::id()),
        deadline_ms: args.timeout_secs.max(1).saturating_mul(1_000),
    };
    let gate = ServiceGate::new(settings, key.expose()).context("setting up --service")?;
    gate.check().context("checking --service")?;
    Ok(Some(gate))
}

/// Prints what a pass did; an error when the service refused a read for good.
fn report_pass(report: &PassReport) -> anyhow::Result<()> {
    for step in &report.steps {
        println!("{}", describe(step));
    }
    for error in &report.settle_errors {
        eprintln!("roster run: warning: {error}");
    }
    if let Some((generation_id, refusal)) = &report.not_admitted {
        let hint = refusal
            .retry_after_ms
            .map(|ms| format!(", retry after {ms} ms"))
            .unwrap_or_default();
        println!(
            "not admitted {generation_id}: {}{hint}; the pass ends, nothing is recorded",
            refusal.reason
        );
        if !refusal.retryable {
            let hint = match refusal.reason.as_str() {
                "unknown-cost" => {
                    "; the roster estimates tokens only (without --input-usd-per-mtok and \
                     --output-usd-per-mtok), so its principal needs allowUnknownCost: true (or \
                     no maxCostUsd) in the workspace profile, or the roster the model's prices"
                }
                "unconfigured-provider" => {
                    "; --provider must name a provider lane of the key's workspace profile"
                }
                _ => "",
            };
            bail!(
                "the service refused a read and asking again cannot succeed: {}{hint}",
                refusal.reason
            );
        }
    }
    Ok(())
}

fn run_passes(store: SqliteRosterStore, args: RunArgs) -> anyhow::Result<()> {
    let mut gate = service_gate(&args)?;
    let passes = run_loop(store, &args, gate.as_mut());
    if let Some(gate) = &gate {
        if let Err(error) = gate.finish() {
            eprintln!("roster run: warning: releasing the run's budget failed: {error}");
        }
    }
    passes
}

fn run_loop(
    mut store: SqliteRosterStore,
    args: &RunArgs,
    mut gate: Option<&mut ServiceGate>,
) -> anyhow::Result<()> {
    let reader_settings = reader_settings(args)?;
    let mut reader = ChatCompletionsReader::from_env(&reader_settings)
        .context("setting up the chat-completions reader")?;
    if let Some(max_tokens) = args.max_tokens {
        reader = reader.with_max_tokens(max_tokens);
    }
    if let (Some(input), Some(output)) = (args.input_usd_per_mtok, args.output_usd_per_mtok) {
        let prices =
            Prices::new(input, output).context("--input-usd-per-mtok / --output-usd-per-mtok")?;
        reader = reader.with_prices(prices);
    }
    let limit = CallLimit::from_configured(args.calls_per_hour.map(f64::from), &Policy::ADR_0119);
    store.set_meta(
        meta_keys::CONFIGURED_CALLS_PER_HOUR,
        &limit.get().to_string(),
    )?;
    let mut roster = Roster::new(store, settings(limit, args.debounce_ms));
    let clock = Clock::system();
    eprintln!(
        "roster run: model {} at {}, limit {} calls per rolling hour{}",
        reader_settings.model,
        reader_settings.base_url,
        limit.get(),
        match (&args.service, &args.provider) {
            (Some(service), Some(lane)) =>
                format!(", each read admitted by {service} on lane {lane}"),
            _ => String::new(),
        }
    );
    loop {
        let now = clock.now_ms();
        let mut refused_wait = None;
        if args.once || roster.pass_due(now)? {
            let report = match gate.as_deref_mut() {
                Some(gate) => roster.run_gated_pass(Some(&mut reader), gate, &clock, &NeverStop)?,
                None => roster.run_pass(Some(&mut reader), &clock, &NeverStop)?,
            };
            report_pass(&report)?;
            refused_wait = report
                .not_admitted
                .map(|(_, refusal)| refusal.retry_after_ms.unwrap_or(args.poll_ms));
        }
        if args.once {
            return Ok(());
        }
        let now = clock.now_ms();
        let wait = match refused_wait {
            // The service said when to ask again.
            Some(wait) => wait.max(100),
            None => roster
                .next_wake(now)?
                .map_or(args.poll_ms, |wake| wake.saturating_sub(now))
                .clamp(100, args.poll_ms.max(100)),
        };
        std::thread::sleep(Duration::from_millis(wait));
    }
}
