//! Runs the admission-controller target of one manifest file and prints CPU and memory per
//! simulated arrival (each scale in its own process, so peak memory is its own).
//! `cargo run --release -p turnstile-qualification --example scale -- manifests/load-manifest.v3-x10.json`
//! With a second argument `evaluator`, runs the evaluator target (the first
//! `evaluatorSampleSeconds`) instead.

use turnstile_qualification::manifest::LoadedManifest;
use turnstile_qualification::qualify::{qualify_admission_controller, qualify_evaluator};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: scale <manifest.json>")?;
    let loaded = LoadedManifest::from_bytes(&std::fs::read(&path)?)?;
    let record = match std::env::args().nth(2).as_deref() {
        Some("evaluator") => qualify_evaluator(&loaded, &mut |_| {})?,
        _ => qualify_admission_controller(&loaded, &mut |_| {})?,
    };
    let arrivals = record.observations.arrivals.max(1) as f64;
    println!(
        "{} {} arrivals={} cpu_ms={} peak_mib={} cpu_us_per_arrival={:.2} kib_per_arrival={:.3} passed={}",
        loaded.manifest.version,
        record.target.as_str(),
        record.observations.arrivals,
        record.resources.cpu_time_ms,
        record.resources.peak_memory_mib,
        record.resources.cpu_time_ms * 1000.0 / arrivals,
        record.resources.peak_memory_mib * 1024.0 / arrivals,
        record.passed
    );
    Ok(())
}
