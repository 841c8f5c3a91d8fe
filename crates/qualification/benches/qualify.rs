//! The 990 s admission-controller target of manifest v2, end to end (arrival generation, the
//! controller on virtual time, observations). Target: at most 0.2 s of CPU on a 2-core machine.
//! And the evaluator target: the first 90 s through the decision evaluator with a fake adapter
//! on paused tokio time. Target: at most 1 s of CPU. And the v3-tokens controller target (300 s,
//! token mode, bands, the fair-share tally), for its cost against v2's.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use turnstile_qualification::arrivals::ArrivalStream;
use turnstile_qualification::evaluator_target::run_evaluator;
use turnstile_qualification::harness::run_admission_controller;
use turnstile_qualification::manifest::LoadedManifest;

fn controller_target(c: &mut Criterion) {
    let loaded = LoadedManifest::embedded_v2().expect("embedded manifest");
    let manifest = &loaded.manifest;
    let window = manifest.duration.window_seconds();
    c.bench_function("qualify/admission_controller_v2_990s", |b| {
        b.iter(|| {
            let arrivals = ArrivalStream::new(manifest, window);
            black_box(
                run_admission_controller(manifest, arrivals, window * 1000, &mut |_| {})
                    .expect("run"),
            )
        })
    });
    c.bench_function("qualify/arrivals_v2_990s", |b| {
        b.iter(|| black_box(ArrivalStream::new(manifest, window).count()))
    });
    // v3-tokens: one lane in token mode with bands, the fair-share tally on (run B alone).
    let tokens = LoadedManifest::embedded_v3_tokens().expect("embedded manifest");
    let tokens = &tokens.manifest;
    let window = tokens.duration.window_seconds();
    c.bench_function("qualify/admission_controller_v3_tokens_300s", |b| {
        b.iter(|| {
            let arrivals = ArrivalStream::new(tokens, window);
            black_box(
                run_admission_controller(tokens, arrivals, window * 1000, &mut |_| {})
                    .expect("run"),
            )
        })
    });
}

fn evaluator_target(c: &mut Criterion) {
    let loaded = LoadedManifest::embedded_v2().expect("embedded manifest");
    let manifest = &loaded.manifest;
    let sample = manifest.duration.evaluator_sample_seconds;
    c.bench_function("qualify/evaluator_v2_90s", |b| {
        b.iter(|| black_box(run_evaluator(manifest, sample, &mut |_| {}).expect("run")))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = controller_target, evaluator_target
}
criterion_main!(benches);
