//! One qualification run: generate the arrivals, drive a target (the admission controller over
//! the whole window, or the evaluator over `evaluatorSampleSeconds`), sample resources, seal a
//! record.

use crate::arrivals::ArrivalStream;
use crate::evaluator_target::{run_evaluator, EvaluatorTargetError};
use crate::harness::{run_admission_controller, run_admission_controller_sampled};
use crate::manifest::LoadedManifest;
use crate::record::{LoadResultRecord, Mode, Target};
use crate::resources::CpuStopwatch;

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

/// Runs the admission-controller target over the manifest's whole window.
/// `progress` receives the virtual instant reached (ms) now and then.
pub fn qualify_admission_controller(
    manifest: &LoadedManifest,
    progress: &mut dyn FnMut(u64),
) -> Result<LoadResultRecord, QualifyError> {
    let window_seconds = manifest.manifest.duration.window_seconds();
    let stopwatch = CpuStopwatch::start();
    let arrivals = ArrivalStream::new(&manifest.manifest, window_seconds);
    let observations = run_admission_controller(
        &manifest.manifest,
        arrivals,
        window_seconds * 1000,
        progress,
    )?;
    let resources = stopwatch.finish(observations.virtual_duration_ms);
    Ok(LoadResultRecord::new(
        manifest,
        Mode::OfflineFakeProvider,
        Target::AdmissionController,
        window_seconds,
        observations,
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
    let window_seconds = manifest.manifest.duration.window_seconds();
    let stopwatch = CpuStopwatch::start();
    let arrivals = ArrivalStream::new(&manifest.manifest, window_seconds);
    let (observations, outcomes, samples) = run_admission_controller_sampled(
        &manifest.manifest,
        arrivals,
        window_seconds * 1000,
        progress,
    )?;
    let resources = stopwatch.finish(observations.virtual_duration_ms);
    let record = LoadResultRecord::new(
        manifest,
        Mode::OfflineFakeProvider,
        Target::AdmissionController,
        window_seconds,
        observations,
        resources,
    )?;
    let html = crate::report::html_report(&record, &outcomes, &samples);
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
