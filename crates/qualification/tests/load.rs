//! CNC-LOAD-001 … 004: the offline load harness over manifest v2, retained evidence and G5.

use std::collections::BTreeSet;
use std::path::PathBuf;

use turnstile_qualification::arrivals::generate;
use turnstile_qualification::gate::{g5_flags, g5_status, BoundRecord};
use turnstile_qualification::manifest::{LoadedManifest, MANIFEST_V2};
use turnstile_qualification::qualify::qualify_admission_controller;
use turnstile_qualification::record::{BuildProfile, LoadResultRecord, Mode};

const V2_DIGEST: &str = "sha256:416a41466dc58063f45b5e5e9a7ad78b011cf6d3be50b081bab6e47c76a28a0c";

/// The one command that regenerates the retained records (a release build, so that their
/// `resources` are the figures `docs/performance.md` quotes).
const REGENERATE: &str =
    "cargo run --release -- qualify --target all --out docs/evidence/load-offline-v2";

/// Writes `record` over the retained file when `TURNSTILE_LOAD_EVIDENCE=write`, which only a
/// release test build may do (a debug build's resources would not pass
/// `retained_records_carry_release_build_resources_within_the_targets`).
fn write_if_asked(record: &LoadResultRecord, path: &std::path::Path) {
    if std::env::var("TURNSTILE_LOAD_EVIDENCE").as_deref() != Ok("write") {
        return;
    }
    assert_eq!(
        record.build.profile,
        BuildProfile::Release,
        "retained records come from a release build: run `{REGENERATE}` \
         (or this test with `cargo test --release`)"
    );
    std::fs::write(path, serde_json::to_string_pretty(record).unwrap() + "\n").unwrap();
}

fn evidence_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/evidence/load-offline-v2")
}

fn retained(target: &str) -> LoadResultRecord {
    let path = evidence_dir().join(format!("{target}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (regenerate with `{REGENERATE}`)", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn cnc_load_001_manifest_digest_and_deterministic_arrivals() {
    let loaded = LoadedManifest::embedded_v2().unwrap();
    assert_eq!(loaded.digest, V2_DIGEST);
    assert!(!loaded.manifest.pass_fail.live_service_required);
    let first = generate(&loaded.manifest, 990);
    let second = generate(&loaded.manifest, 990);
    assert_eq!(first, second, "two calls give equal output");
    assert!(first.len() > 19_000);
    assert_eq!(first.len(), 20_103, "the reference's count");
    let principals: BTreeSet<&str> = first.iter().map(|a| a.principal_id.as_str()).collect();
    let declared: BTreeSet<&str> = loaded
        .manifest
        .principals
        .iter()
        .map(|p| p.id.as_str())
        .collect();
    assert_eq!(principals, declared);
    let spike = first
        .iter()
        .filter(|a| (60_000..70_000).contains(&a.at_ms))
        .count();
    assert!(spike > 2 * 20 * 10, "spike window held {spike}");
    assert_eq!(spike, 818, "the reference's spike count");
}

#[test]
fn cnc_load_002_admission_controller_target_passes_and_matches_retained_evidence() {
    let loaded = LoadedManifest::embedded_v2().unwrap();
    let record = qualify_admission_controller(&loaded, &mut |_| {}).unwrap();
    for comparison in &record.comparisons {
        assert!(comparison.pass, "{comparison:?}");
    }
    assert!(record.passed);
    let o = &record.observations;
    assert_eq!(o.shed + o.completed + o.failed + o.cancelled, o.arrivals);
    record.verify(V2_DIGEST).unwrap();

    write_if_asked(&record, &evidence_dir().join("admission-controller.json"));
    let committed = retained("admission-controller");
    committed
        .verify(V2_DIGEST)
        .expect("the committed record verifies");
    assert_eq!(
        record.observations, committed.observations,
        "deterministic observations"
    );
}

#[test]
fn cnc_load_003_offline_records_never_qualify_and_tampering_is_caught() {
    let committed = retained("admission-controller");
    fn bound(record: &LoadResultRecord) -> BoundRecord<'_> {
        BoundRecord {
            record,
            expected_manifest_digest: V2_DIGEST,
        }
    }
    let flags = g5_flags(&[bound(&committed)]);
    assert!(flags.offline_passed);
    assert!(!flags.qualified);
    let status = g5_status(flags);
    assert_eq!(status.status, "fail");
    assert_eq!(
        status.missing,
        vec!["evidence:load-manifest-qualified".to_owned()]
    );

    let mut tampered = committed.clone();
    tampered.observations.maximum_active_calls = 1;
    assert!(tampered.verify(V2_DIGEST).is_err());
    assert!(!g5_flags(&[bound(&tampered)]).offline_passed);

    let zeros = format!("sha256:{}", "0".repeat(64));
    let wrong = BoundRecord {
        record: &committed,
        expected_manifest_digest: &zeros,
    };
    assert!(!g5_flags(&[wrong]).offline_passed);
    assert!(!g5_flags(&[]).offline_passed, "no record, no flag");
}

#[test]
fn cnc_load_004_a_passing_staged_provider_record_qualifies() {
    // A staged copy of the manifest is its own manifest, pinned by its own digest.
    let staged_bytes = String::from_utf8(MANIFEST_V2.to_vec()).unwrap().replace(
        "\"mode\": \"offline-fake-provider\"",
        "\"mode\": \"staged-provider\"",
    );
    let staged_digest = turnstile_admission::digest::sha256_digest(staged_bytes.as_bytes());
    let pins = [("decision-load-manifest/v2", staged_digest.as_str())];
    let staged = LoadedManifest::from_bytes_pinned(staged_bytes.as_bytes(), &pins).unwrap();
    let offline = retained("admission-controller");

    let mut record = LoadResultRecord::new(
        &staged,
        Mode::StagedProvider,
        offline.target,
        offline.window.seconds,
        offline.observations.clone(),
        offline.resources.clone(),
    )
    .unwrap();
    assert!(record.passed);
    let records = [
        BoundRecord {
            record: &offline,
            expected_manifest_digest: V2_DIGEST,
        },
        BoundRecord {
            record: &record,
            expected_manifest_digest: &staged_digest,
        },
    ];
    let flags = g5_flags(&records);
    assert!(flags.offline_passed && flags.qualified);
    assert_eq!(g5_status(flags).status, "pass");

    let mut failing = offline.observations.clone();
    failing.maximum_active_calls = 99;
    record = LoadResultRecord::new(
        &staged,
        Mode::StagedProvider,
        offline.target,
        offline.window.seconds,
        failing,
        offline.resources.clone(),
    )
    .unwrap();
    assert!(!record.passed);
    let records = [
        BoundRecord {
            record: &offline,
            expected_manifest_digest: V2_DIGEST,
        },
        BoundRecord {
            record: &record,
            expected_manifest_digest: &staged_digest,
        },
    ];
    assert!(!g5_flags(&records).qualified);
}

#[test]
fn scaling_manifests_are_pinned_and_valid() {
    use turnstile_qualification::manifest::{MANIFEST_V3_X10, MANIFEST_V3_X100};
    for (bytes, factor) in [(MANIFEST_V3_X10, 10.0), (MANIFEST_V3_X100, 100.0)] {
        let loaded = LoadedManifest::from_bytes(bytes).unwrap();
        assert_eq!(loaded.manifest.schema, "decision-load-manifest/v3");
        assert_eq!(
            loaded.manifest.arrival_model.average_requests_per_second,
            20.0 * factor
        );
    }
}

/// The resource targets of `docs/performance.md` are checked against the retained records, not
/// taken from prose: both records come from a release build (`build.profile`, part of the
/// digested body), the controller target's 990 s used at most 0.2 s of CPU and under 64 MiB peak
/// resident memory, the evaluator target's 90 s at most 1 s of CPU and under 64 MiB.
#[test]
fn retained_records_carry_release_build_resources_within_the_targets() {
    for (target, cpu_ms) in [("admission-controller", 200.0), ("evaluator", 1_000.0)] {
        let record = retained(target);
        record
            .verify(V2_DIGEST)
            .expect("the retained record verifies");
        assert_eq!(
            record.build.profile,
            BuildProfile::Release,
            "{target}: regenerate with `{REGENERATE}`"
        );
        let resources = &record.resources;
        assert!(
            resources.source != "wall-clock",
            "{target}: CPU read from /proc ({resources:?})"
        );
        assert!(
            resources.cpu_time_ms > 0.0 && resources.cpu_time_ms <= cpu_ms,
            "{target}: CPU {} ms, target at most {cpu_ms} ms",
            resources.cpu_time_ms
        );
        assert!(
            resources.peak_memory_mib > 0.0 && resources.peak_memory_mib < 64.0,
            "{target}: peak memory {} MiB, target under 64 MiB",
            resources.peak_memory_mib
        );
    }
}
