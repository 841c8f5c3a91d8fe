//! One qualification run: generate the arrivals, drive a target (the admission controller over
//! the whole window, or the evaluator over `evaluatorSampleSeconds`), sample resources, seal a
//! record.
//!
//! The admission-controller target adds the deadline-refusal A/B ([`crate::deadline_ab`]) for
//! a manifest that shapes the order, or when its run refused any attempt
//! `deadline-unreachable`: run A goes after the resources are sampled, so they are run B's
//! alone.

use crate::arrivals::ArrivalStream;
use crate::deadline_ab::RefusalWatch;
use crate::evaluator_target::{run_evaluator, EvaluatorTargetError};
use crate::harness::{self, Run, RunOptions};
use crate::manifest::LoadedManifest;
use crate::record::{LoadResultRecord, Mode, Target};
use crate::resources::CpuStopwatch;
use crate::resources::Resources;

/// A run that could not produce a record.
#[derive(Debug, thiserror::Error)]
pub enum QualifyError {
    #[error("the manifest profile was refused: {0}")]
    Profile(#[from] turnstile_admission::RegistryError),
    #[error("the record cannot be sealed: {0}")]
    Seal(#[from] turnstile_admission::digest::CanonicalJsonError),
    #[error("the evaluator target failed: {0}")]
    Evaluator(#[from] EvaluatorTargetError),
}

/// Run B (the record's run, as `options` say) and its resources, then run A of the A/B when
/// it is due, its figures put into B's observations.
fn run_controller(
    manifest: &LoadedManifest,
    options: RunOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<(Run, Resources), QualifyError> {
    let manifest = &manifest.manifest;
    let window_seconds = manifest.duration.window_seconds();
    let window_ms = window_seconds * 1000;
    let stopwatch = CpuStopwatch::start();
    let arrivals = ArrivalStream::new(manifest, window_seconds);
    let mut b = harness::run(manifest, arrivals, window_ms, options, progress)?;
    let resources = stopwatch.finish(b.observations.virtual_duration_ms);
    if manifest.shapes_order() || !b.deadline_refused.is_empty() {
        let options = RunOptions {
            deadline_refusals: false,
            fair_share: false,
            trace: false,
            sample: false,
            watch: Some(RefusalWatch::new(&b.deadline_refused)),
            cancel_delay_ms: 0,
        };
        let arrivals = ArrivalStream::new(manifest, window_seconds);
        let a = harness::run(manifest, arrivals, window_ms, options, &mut |_| {})?;
        let refused = b.deadline_refused.len() as u64;
        b.observations.deadline_refusals = Some(a.watch.unwrap_or_default().finish(
            refused,
            a.observations.completed,
            a.observations.shed,
        ));
    }
    Ok((b, resources))
}

/// Runs the admission-controller target over the manifest's whole window.
/// `progress` receives the virtual instant reached (ms) now and then.
pub fn qualify_admission_controller(
    manifest: &LoadedManifest,
    progress: &mut dyn FnMut(u64),
) -> Result<LoadResultRecord, QualifyError> {
    let options = RunOptions::new(&manifest.manifest);
    let (run, resources) = run_controller(manifest, options, progress)?;
    Ok(LoadResultRecord::new(
        manifest,
        Mode::OfflineFakeProvider,
        Target::AdmissionController,
        manifest.manifest.duration.window_seconds(),
        run.observations,
        resources,
    )?)
}

/// [`qualify_admission_controller`], also rendering the run as a self-contained HTML report
/// ([`crate::report::html_report`]). The record is the same as the plain run's (the harness is
/// deterministic; the report keeps per-arrival outcomes in memory while it is built).
pub fn qualify_admission_controller_with_report(
    manifest: &LoadedManifest,
    progress: &mut dyn FnMut(u64),
) -> Result<(LoadResultRecord, String), QualifyError> {
    let options = RunOptions {
        trace: true,
        sample: true,
        ..RunOptions::new(&manifest.manifest)
    };
    let (run, resources) = run_controller(manifest, options, progress)?;
    let record = LoadResultRecord::new(
        manifest,
        Mode::OfflineFakeProvider,
        Target::AdmissionController,
        manifest.manifest.duration.window_seconds(),
        run.observations,
        resources,
    )?;
    let html = crate::report::html_report(&record, &run.outcomes, &run.samples);
    Ok((record, html))
}

/// Runs the evaluator target over the manifest's first `evaluatorSampleSeconds`.
/// `progress` receives the virtual instant reached (ms) at every arrival.
pub fn qualify_evaluator(
    manifest: &LoadedManifest,
    progress: &mut dyn FnMut(u64),
) -> Result<LoadResultRecord, QualifyError> {
    let window_seconds = manifest.manifest.duration.evaluator_sample_seconds;
    let stopwatch = CpuStopwatch::start();
    let observations = run_evaluator(&manifest.manifest, window_seconds, progress)?;
    let resources = stopwatch.finish(observations.virtual_duration_ms);
    Ok(LoadResultRecord::new(
        manifest,
        Mode::OfflineFakeProvider,
        Target::Evaluator,
        window_seconds,
        observations,
        resources,
    )?)
}
