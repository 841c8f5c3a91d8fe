//! The qualification's cancellation-latency bound can fail: manifest v2 bounds
//! `maximumCancellationLatencyMs` at 100 ms. The records' runs handle a cancellation at the
//! instant it is requested (latency 0); a run whose cancellations reach the controller later
//! than the bound must fail that comparison, and with it the record.

use turnstile_qualification::arrivals::ArrivalStream;
use turnstile_qualification::harness::{run, RunOptions};
use turnstile_qualification::manifest::LoadedManifest;
use turnstile_qualification::record::{LoadResultRecord, Mode, Target};
use turnstile_qualification::resources::CpuStopwatch;

const BOUND: &str = "maximumCancellationLatencyMs";

/// The load phase and the spike (the evaluator sample's window), cancellations delayed by
/// `delay_ms`: the sealed record.
fn record_with_cancel_delay(delay_ms: u64) -> LoadResultRecord {
    let loaded = LoadedManifest::embedded_v2().unwrap();
    let manifest = &loaded.manifest;
    let seconds = manifest.duration.evaluator_sample_seconds;
    let options = RunOptions {
        cancel_delay_ms: delay_ms,
        ..RunOptions::new(manifest)
    };
    let stopwatch = CpuStopwatch::start();
    let arrivals = ArrivalStream::new(manifest, seconds);
    let observations = run(manifest, arrivals, seconds * 1000, options, &mut |_| {})
        .unwrap()
        .observations;
    assert!(observations.cancelled > 0, "the window has cancellations");
    let resources = stopwatch.finish(observations.virtual_duration_ms);
    LoadResultRecord::new(
        &loaded,
        Mode::OfflineFakeProvider,
        Target::AdmissionController,
        seconds,
        observations,
        resources,
    )
    .unwrap()
}

fn latency_comparison(record: &LoadResultRecord) -> (f64, f64, bool) {
    let comparison = record
        .comparisons
        .iter()
        .find(|c| c.bound == BOUND)
        .expect("manifest v2 bounds the cancellation latency");
    (comparison.limit, comparison.observed, comparison.pass)
}

#[test]
fn cnc_load_cancellation_latency_bound_fails_on_a_slow_cancel() {
    // Handled when requested: latency 0, the bound passes.
    let prompt = record_with_cancel_delay(0);
    assert_eq!(latency_comparison(&prompt), (100.0, 0.0, true));

    // At the bound: still passes.
    let at_bound = record_with_cancel_delay(100);
    assert_eq!(latency_comparison(&at_bound), (100.0, 100.0, true));

    // One millisecond slower than the bound: the comparison and the record fail, and the
    // record still verifies (it is an honest failing record, not a broken one).
    let slow = record_with_cancel_delay(101);
    assert_eq!(latency_comparison(&slow), (100.0, 101.0, false));
    assert!(!slow.passed);
    slow.verify(&LoadedManifest::embedded_v2().unwrap().digest)
        .unwrap();
    assert_eq!(
        slow.observations.shed
            + slow.observations.completed
            + slow.observations.failed
            + slow.observations.cancelled,
        slow.observations.arrivals,
        "every arrival still ends exactly once"
    );
}
