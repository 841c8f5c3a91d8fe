//! `turnstile qualify …`: the offline load harness over the pinned manifests.
//!
//! Invariant: the `decision-load-result/v1` records are written only where `--out DIR` says
//! (never into the service's data directory by default); without it they are printed only.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use turnstile_qualification::arrivals::{generate, write_json_lines};
use turnstile_qualification::manifest::LoadedManifest;
use turnstile_qualification::qualify::{
    qualify_admission_controller, qualify_admission_controller_with_report, qualify_evaluator,
};
use turnstile_qualification::record::{BuildProfile, LoadResultRecord, Target};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct QualifyArgs {
    #[command(subcommand)]
    command: Option<QualifyCommand>,
    /// A v2-shaped load manifest; its sha256 must be pinned. Default: the embedded v2 manifest.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Which path the arrivals go through.
    #[arg(long, value_enum, default_value_t = TargetChoice::AdmissionController)]
    target: TargetChoice,
    /// Write the `decision-load-result/v1` records into this directory (one file per target).
    /// Without it nothing is written: the table (or, with --json, the records) is printed.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the records as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML report with charts of the admission-controller run
    /// (arrivals, active and queued, shed by reason, admission ratio per principal class and
    /// per principal, the bounds table and the digests).
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum QualifyCommand {
    /// Write the manifest's arrivals as JSON Lines to stdout.
    Arrivals {
        #[arg(long)]
        manifest: Option<PathBuf>,
        /// Only the first N seconds of the stream (default: the whole window).
        #[arg(long)]
        window_seconds: Option<u64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TargetChoice {
    AdmissionController,
    Evaluator,
    All,
}

fn load(manifest: Option<&PathBuf>) -> anyhow::Result<LoadedManifest> {
    match manifest {
        None => Ok(LoadedManifest::embedded_v2()?),
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            LoadedManifest::from_bytes(&bytes)
                .with_context(|| format!("{} is not a usable load manifest", path.display()))
        }
    }
}

pub fn run(args: QualifyArgs) -> anyhow::Result<()> {
    if let Some(QualifyCommand::Arrivals {
        manifest,
        window_seconds,
    }) = &args.command
    {
        let loaded = load(manifest.as_ref())?;
        let window = window_seconds.unwrap_or(loaded.manifest.duration.window_seconds());
        let arrivals = generate(&loaded.manifest, window);
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        write_json_lines(&arrivals, &mut out)?;
        out.flush()?;
        return Ok(());
    }

    let loaded = load(args.manifest.as_ref())?;
    let targets: &[Target] = match args.target {
        TargetChoice::AdmissionController => &[Target::AdmissionController],
        TargetChoice::Evaluator => &[Target::Evaluator],
        TargetChoice::All => &[Target::AdmissionController, Target::Evaluator],
    };
    if args.report.is_some() && !targets.contains(&Target::AdmissionController) {
        anyhow::bail!("--report charts the admission-controller target: use --target admission-controller or all");
    }
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    }
    let mut records = Vec::with_capacity(targets.len());
    for &target in targets {
        let report = args
            .report
            .as_deref()
            .filter(|_| target == Target::AdmissionController);
        let record = run_target(&loaded, target, args.json, report)?;
        let path = match &args.out {
            Some(out) => {
                let path = out.join(format!("{}.json", record.target.as_str()));
                std::fs::write(&path, serde_json::to_string_pretty(&record)? + "\n")
                    .with_context(|| format!("cannot write {}", path.display()))?;
                Some(path)
            }
            None => None,
        };
        if !args.json {
            let mut out = std::io::stdout().lock();
            if !records.is_empty() {
                writeln!(out)?;
            }
            print_table(&mut out, &record, path.as_deref())?;
        }
        records.push(record);
    }

    if args.json {
        let json = match records.as_slice() {
            [only] => serde_json::to_string_pretty(only)?,
            all => serde_json::to_string_pretty(all)?,
        };
        writeln!(std::io::stdout().lock(), "{json}")?;
    }
    let failed: Vec<&str> = records
        .iter()
        .filter(|r| !r.passed)
        .map(|r| r.target.as_str())
        .collect();
    if !failed.is_empty() {
        anyhow::bail!(
            "qualification failed ({}): at least one bound did not hold",
            failed.join(", ")
        );
    }
    Ok(())
}

/// Runs one target with a progress bar over its virtual window (hidden off a terminal).
fn run_target(
    loaded: &LoadedManifest,
    target: Target,
    json: bool,
    report: Option<&std::path::Path>,
) -> anyhow::Result<LoadResultRecord> {
    let duration = &loaded.manifest.duration;
    let window_ms = match target {
        Target::AdmissionController => duration.window_seconds(),
        Target::Evaluator => duration.evaluator_sample_seconds,
    } * 1000;
    let bar = indicatif::ProgressBar::new(window_ms);
    if !std::io::stderr().is_terminal() || json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {pos}/{len} virtual ms ({elapsed})",
        )?
        .progress_chars("=> "),
    );
    bar.set_message(target.as_str());
    let mut progress = |now: u64| bar.set_position(now.min(window_ms));
    let record = match (target, report) {
        (Target::AdmissionController, Some(path)) => {
            let (record, html) = qualify_admission_controller_with_report(loaded, &mut progress)?;
            std::fs::write(path, html)
                .with_context(|| format!("cannot write {}", path.display()))?;
            // On stderr: with --json, stdout is the record alone.
            eprintln!("report written to {}", path.display());
            record
        }
        (Target::AdmissionController, None) => qualify_admission_controller(loaded, &mut progress)?,
        (Target::Evaluator, _) => qualify_evaluator(loaded, &mut progress)?,
    };
    bar.finish_and_clear();
    Ok(record)
}

/// The bound table of one record. Written with `?` rather than `println!`, so a reader that
/// goes away (`| head`) ends the command quietly instead of panicking.
fn print_table(
    out: &mut impl Write,
    record: &LoadResultRecord,
    path: Option<&std::path::Path>,
) -> std::io::Result<()> {
    let o = &record.observations;
    writeln!(
        out,
        "manifest {} ({})\ntarget {}  window {} s  virtual {} ms  build {}",
        record.manifest.version,
        record.manifest.digest,
        record.target.as_str(),
        record.window.seconds,
        o.virtual_duration_ms,
        match record.build.profile {
            BuildProfile::Release => "release",
            BuildProfile::Debug => "debug (resources not representative)",
        }
    )?;
    writeln!(
        out,
        "arrivals {}  attempts {}  completed {}  failed {}  shed {}  cancelled {}",
        o.arrivals, o.attempts, o.completed, o.failed, o.shed, o.cancelled
    )?;
    writeln!(
        out,
        "{:<40} {:>12} {:>12}  pass",
        "bound", "limit", "observed"
    )?;
    for comparison in &record.comparisons {
        writeln!(
            out,
            "{:<40} {:>12} {:>12}  {}",
            comparison.bound,
            comparison.limit,
            comparison.observed,
            if comparison.pass { "yes" } else { "NO" }
        )?;
    }
    let verdict = if record.passed { "PASSED" } else { "FAILED" };
    match path {
        Some(path) => writeln!(
            out,
            "{verdict}  record {} written to {}",
            record.digest,
            path.display()
        ),
        None => writeln!(
            out,
            "{verdict}  record {} (not written; --out DIR writes it)",
            record.digest
        ),
    }
}
