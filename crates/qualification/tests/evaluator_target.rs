//! CNC-LOAD-002 for the `evaluator` target: the first `evaluatorSampleSeconds` of manifest v2
//! through the decision evaluator with a fake adapter on paused tokio time, its retained
//! evidence, and determinism.

use std::path::PathBuf;

use turnstile_qualification::evaluator_target::run_evaluator;
use turnstile_qualification::manifest::LoadedManifest;
use turnstile_qualification::qualify::qualify_evaluator;
use turnstile_qualification::record::{BuildProfile, LoadResultRecord, Target};

const V2_DIGEST: &str = "sha256:416a41466dc58063f45b5e5e9a7ad78b011cf6d3be50b081bab6e47c76a28a0c";

fn evidence_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/evidence/load-offline-v2/evaluator.json")
}

#[test]
fn cnc_load_002_evaluator_target_passes_and_matches_retained_evidence() {
    let loaded = LoadedManifest::embedded_v2().unwrap();
    let mut reached = 0;
    let record = qualify_evaluator(&loaded, &mut |now| reached = now).unwrap();
    assert!(
        reached > 89_000,
        "progress followed the arrivals ({reached})"
    );
    assert_eq!(record.target, Target::Evaluator);
    assert_eq!(record.window.seconds, 90);
    for comparison in &record.comparisons {
        assert!(comparison.pass, "{comparison:?}");
    }
    assert!(record.passed);
    let o = &record.observations;
    assert_eq!(o.shed + o.completed + o.failed + o.cancelled, o.arrivals);
    assert!(
        o.arrivals > 1_500,
        "90 s at 20/s with a 4x spike: {}",
        o.arrivals
    );
    assert!(
        o.attempts > o.arrivals,
        "first-attempt failures were retried"
    );
    assert!(o.cancelled > 0, "cancellations reached the evaluator");
    assert!(o.virtual_duration_ms >= 90_000);
    record.verify(V2_DIGEST).unwrap();

    let path = evidence_path();
    if std::env::var("TURNSTILE_LOAD_EVIDENCE").as_deref() == Ok("write") {
        assert_eq!(
            record.build.profile,
            BuildProfile::Release,
            "retained records come from a release build: run `cargo run --release -- qualify \
             --target all --out docs/evidence/load-offline-v2` (or this test with --release)"
        );
        std::fs::write(&path, serde_json::to_string_pretty(&record).unwrap() + "\n").unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (regenerate with `cargo run --release -- qualify --target all --out \
             docs/evidence/load-offline-v2`)",
            path.display()
        )
    });
    let committed: LoadResultRecord = serde_json::from_str(&text).unwrap();
    committed
        .verify(V2_DIGEST)
        .expect("the committed record verifies");
    assert_eq!(committed.target, Target::Evaluator);
    assert!(committed.passed);
    assert_eq!(
        record.observations, committed.observations,
        "deterministic observations"
    );
}

#[test]
fn evaluator_target_is_deterministic() {
    let manifest = LoadedManifest::embedded_v2().unwrap().manifest;
    let sample = manifest.duration.evaluator_sample_seconds;
    let first = run_evaluator(&manifest, sample, &mut |_| {}).unwrap();
    let second = run_evaluator(&manifest, sample, &mut |_| {}).unwrap();
    assert_eq!(first, second);
}

#[test]
fn both_retained_offline_records_pass_offline_and_never_qualify() {
    use turnstile_qualification::gate::{g5_flags, BoundRecord};
    let dir = evidence_path().with_file_name("");
    let records: Vec<LoadResultRecord> = ["admission-controller", "evaluator"]
        .iter()
        .map(|target| {
            let text = std::fs::read_to_string(dir.join(format!("{target}.json"))).unwrap();
            serde_json::from_str(&text).unwrap()
        })
        .collect();
    let bound: Vec<BoundRecord<'_>> = records
        .iter()
        .map(|record| BoundRecord {
            record,
            expected_manifest_digest: V2_DIGEST,
        })
        .collect();
    let flags = g5_flags(&bound);
    assert!(flags.offline_passed);
    assert!(!flags.qualified);
}
