//! The cost a rollout adds to one admission (issue 33): an immediate admit plus its release
//! through the [`Registry`], without a rollout, with a shadow candidate, and with a canary of
//! half the principals; each with 10 and with 10,000 other leases held, to show the cost per
//! arrival does not grow with the leases (the candidate follows each grant and release in
//! O(1)).
//!
//! - `rollout/none/held/N`: the registry as every host runs it.
//! - `rollout/shadow/held/N`: every arrival also decided read-only by the candidate, every
//!   grant and release applied to it.
//! - `rollout/canary/held/N`: half the principals decided by the candidate, the other side
//!   answering read-only and taking the grant as a fact.
//!
//! Allocator: mimalloc, as in `admission.rs`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use turnstile_admission::{Acquired, Fairness, Outcome, Registry, RolloutMode};

mod common;
use common::{profile_in, request};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PRINCIPALS: usize = 64;

/// A registry of one workspace with `held` leases held, and the rollout of `mode` if any.
fn registry(mode: Option<RolloutMode>, held: usize) -> Registry {
    let mut registry = Registry::new();
    let concurrency = u32::try_from(held + 64).expect("small");
    let mut profile = profile_in(Fairness::Requests, concurrency, PRINCIPALS);
    for limits in profile.principals.values_mut() {
        limits.concurrency = concurrency;
    }
    registry
        .register("ws", "v1", profile.clone(), 0)
        .expect("v1");
    for i in 0..held {
        let principal = format!("p{}", i % PRINCIPALS);
        let acquired = registry.acquire("ws", request(&principal), 0).expect("ws");
        assert!(matches!(acquired, Acquired::Admitted(_)), "{acquired:?}");
    }
    if let Some(mode) = mode {
        profile.workspace.concurrency -= 1;
        registry
            .start_rollout("ws", "v2", profile, mode, 0)
            .expect("rollout");
    }
    registry
}

fn admit_release(c: &mut Criterion) {
    let mut group = c.benchmark_group("rollout");
    let modes = [
        ("none", None),
        ("shadow", Some(RolloutMode::Shadow)),
        ("canary", Some(RolloutMode::Canary { share: 0.5 })),
    ];
    for (name, mode) in modes {
        for held in [10usize, 10_000] {
            let mut registry = registry(mode, held);
            let templates: Vec<_> = (0..PRINCIPALS).map(|i| request(&format!("p{i}"))).collect();
            let mut now = 0;
            group.bench_with_input(
                BenchmarkId::new(format!("{name}/held"), held),
                &held,
                |b, _| {
                    b.iter(|| {
                        now += 1;
                        let template = &templates[(now as usize) % PRINCIPALS];
                        match registry.acquire("ws", black_box(template.clone()), now) {
                            Ok(Acquired::Admitted(lease)) => {
                                registry
                                    .release("ws", lease.id, Outcome::Success, now)
                                    .expect("ws");
                            }
                            other => panic!("unexpected {other:?}"),
                        }
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50);
    targets = admit_release
}
criterion_main!(benches);
