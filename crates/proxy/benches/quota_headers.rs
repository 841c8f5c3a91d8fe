//! The CPU cost of reading the provider's rate-limit headers of one proxied answer (issue 32:
//! at most 2 µs per call): `read_quota_headers` over a full real header set of each provider
//! (`support/quota_header_samples.txt`, shared with the parser's tests), and over an answer that
//! carries none (what every call pays when the provider sends nothing).

use std::hint::black_box;
use std::time::SystemTime;

use criterion::{criterion_group, criterion_main, Criterion};
use turnstile_proxy::read_quota_headers;

include!("support/quota_samples.rs");

fn quota_headers(c: &mut Criterion) {
    let mut group = c.benchmark_group("quota_headers");
    let openai = sample("openai");
    for (name, pairs) in [
        ("openai", &openai[..]),
        ("anthropic", &sample("anthropic")[..]),
        // The same answer without its rate-limit headers: what a call pays when none come.
        ("none", &openai[..6]),
    ] {
        let map = headers(pairs);
        group.bench_function(name, |b| {
            b.iter(|| read_quota_headers(black_box(&map), SystemTime::now()))
        });
    }
    group.finish();
}

criterion_group!(benches, quota_headers);
criterion_main!(benches);
