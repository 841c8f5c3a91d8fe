//! Issue 31, item 6: the manifests without a `fairness` field run in requests mode, and their
//! results do not change with token-fair scheduling in the core. The figures below were
//! recorded on main at ad9d4ef (the vocabulary only, before any scheduling behaviour) and are
//! pinned here: shed (with its reasons), completed, failed, cancelled, attempts and the ratios
//! must stay identical, not merely pass their bounds.

use std::collections::BTreeMap;

use turnstile_qualification::manifest::{LoadedManifest, MANIFEST_V2, MANIFEST_V3_X10};
use turnstile_qualification::observations::Observations;
use turnstile_qualification::qualify::{qualify_admission_controller, qualify_evaluator};

/// What main produced for one manifest and target.
struct MainFigures {
    arrivals: u64,
    attempts: u64,
    completed: u64,
    failed: u64,
    shed: u64,
    cancelled: u64,
    queue_full: u64,
    queue_timeout: u64,
    retry_amplification_ratio: f64,
    quiet_principal_admission_ratio: f64,
    noisy_principal_admission_ratio: f64,
}

fn assert_unchanged(what: &str, observed: &Observations, main: &MainFigures) {
    let reasons: BTreeMap<String, u64> = [
        ("queue-full".to_owned(), main.queue_full),
        ("queue-timeout".to_owned(), main.queue_timeout),
    ]
    .into_iter()
    .collect();
    let pairs = [
        ("arrivals", observed.arrivals, main.arrivals),
        ("attempts", observed.attempts, main.attempts),
        ("completed", observed.completed, main.completed),
        ("failed", observed.failed, main.failed),
        ("shed", observed.shed, main.shed),
        ("cancelled", observed.cancelled, main.cancelled),
    ];
    for (field, now, before) in pairs {
        assert_eq!(now, before, "{what}: {field} changed from main's");
    }
    assert_eq!(
        observed.shed_reasons, reasons,
        "{what}: shed reasons changed from main's"
    );
    let ratios = [
        (
            "retryAmplificationRatio",
            observed.retry_amplification_ratio,
            main.retry_amplification_ratio,
        ),
        (
            "quietPrincipalAdmissionRatio",
            observed.quiet_principal_admission_ratio,
            main.quiet_principal_admission_ratio,
        ),
        (
            "noisyPrincipalAdmissionRatio",
            observed.noisy_principal_admission_ratio,
            main.noisy_principal_admission_ratio,
        ),
    ];
    for (field, now, before) in ratios {
        assert_eq!(now, before, "{what}: {field} changed from main's");
    }
}

#[test]
fn cnc_load_002_v2_admission_controller_results_are_mains_in_requests_mode() {
    let loaded = LoadedManifest::embedded_v2().unwrap();
    assert!(loaded
        .manifest
        .providers
        .values()
        .all(|limits| limits.fairness.is_none()));
    let record = qualify_admission_controller(&loaded, &mut |_| {}).unwrap();
    assert_unchanged(
        "v2 admission-controller",
        &record.observations,
        &MainFigures {
            arrivals: 20_103,
            attempts: 21_068,
            completed: 19_535,
            failed: 0,
            shed: 388,
            cancelled: 180,
            queue_full: 154,
            queue_timeout: 234,
            retry_amplification_ratio: 1.048003,
            quiet_principal_admission_ratio: 0.996355,
            noisy_principal_admission_ratio: 0.96682,
        },
    );
}

#[test]
fn cnc_load_002_v2_evaluator_results_are_mains_in_requests_mode() {
    let loaded = LoadedManifest::from_bytes(MANIFEST_V2).unwrap();
    let record = qualify_evaluator(&loaded, &mut |_| {}).unwrap();
    assert_unchanged(
        "v2 evaluator",
        &record.observations,
        &MainFigures {
            arrivals: 2_378,
            attempts: 2_929,
            completed: 1_996,
            failed: 0,
            shed: 363,
            cancelled: 19,
            queue_full: 255,
            queue_timeout: 108,
            retry_amplification_ratio: 1.231707,
            quiet_principal_admission_ratio: 0.982273,
            noisy_principal_admission_ratio: 0.751233,
        },
    );
}

#[test]
fn v3_x10_admission_controller_results_are_mains_in_requests_mode() {
    let loaded = LoadedManifest::from_bytes(MANIFEST_V3_X10).unwrap();
    let record = qualify_admission_controller(&loaded, &mut |_| {}).unwrap();
    assert_unchanged(
        "v3-x10 admission-controller",
        &record.observations,
        &MainFigures {
            arrivals: 203_901,
            attempts: 213_888,
            completed: 198_212,
            failed: 0,
            shed: 3_767,
            cancelled: 1_922,
            queue_full: 1_400,
            queue_timeout: 2_367,
            retry_amplification_ratio: 1.04898,
            quiet_principal_admission_ratio: 0.999803,
            noisy_principal_admission_ratio: 0.969272,
        },
    );
}
