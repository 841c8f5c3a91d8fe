//! Receipt write throughput: one compare-and-swap per transaction versus group commit (many
//! revisions per transaction, one fsync), on SQLite with `synchronous=FULL` and WAL, with and
//! without the HMAC chain; the in-memory store for reference.
//!
//! Run: `cargo bench -p turnstile-store --bench receipts`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use turnstile_store::{
    CasWrite, GroupCommitStore, IntegrityKey, MemoryReceiptStore, Receipt, ReceiptKey,
    ReceiptState, ReceiptStore, SqliteReceiptOptions, SqliteReceiptStore,
};

fn sqlite(dir: &tempfile::TempDir, name: &str, signed: bool) -> SqliteReceiptStore {
    SqliteReceiptStore::open_with(
        dir.path().join(name),
        SqliteReceiptOptions {
            integrity: signed.then(|| IntegrityKey::new(b"bench-key".to_vec())),
            ..SqliteReceiptOptions::default()
        },
    )
    .expect("open")
}

/// Acquires `n` receipts and moves each to `observation-received`.
fn receipts(store: &dyn ReceiptStore, prefix: &str, n: usize) -> Vec<Receipt> {
    (0..n)
        .map(|i| {
            let key = ReceiptKey::new("bench", format!("{prefix}-{i}"));
            let first = store
                .acquire(&key, "sha256:bench", 0)
                .expect("acquire")
                .receipt;
            let next = first.successor(ReceiptState::ObservationReceived, 1);
            assert!(store.compare_and_swap(&key, 1, &next).expect("cas"));
            next
        })
        .collect()
}

fn single_writes(c: &mut Criterion) {
    let mut group = c.benchmark_group("receipt_cas_single");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(4));
    for (name, signed) in [("sqlite_full", false), ("sqlite_full_hmac", true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = sqlite(&dir, "single.sqlite3", signed);
        let mut current = receipts(&store, name, 1).remove(0);
        let key = current.key();
        group.bench_function(name, |b| {
            b.iter(|| {
                let next = current.successor(ReceiptState::ObservationReceived, 2);
                assert!(store
                    .compare_and_swap(&key, current.revision, &next)
                    .expect("cas"));
                current = next;
            })
        });
    }
    let memory = MemoryReceiptStore::new();
    let mut current = receipts(&memory, "memory", 1).remove(0);
    let key = current.key();
    group.bench_function("memory", |b| {
        b.iter(|| {
            let next = current.successor(ReceiptState::ObservationReceived, 2);
            assert!(memory
                .compare_and_swap(&key, current.revision, &next)
                .expect("cas"));
            current = next;
        })
    });
    group.finish();
}

fn batched_writes(c: &mut Criterion) {
    let mut group = c.benchmark_group("receipt_cas_batch");
    group.measurement_time(Duration::from_secs(4));
    for batch in [8usize, 64] {
        group.throughput(Throughput::Elements(batch as u64));
        let dir = tempfile::tempdir().expect("tempdir");
        let store = sqlite(&dir, "batch.sqlite3", false);
        let mut current = receipts(&store, "batch", batch);
        group.bench_with_input(BenchmarkId::new("sqlite_full", batch), &batch, |b, _| {
            b.iter(|| {
                let writes: Vec<CasWrite> = current
                    .iter()
                    .map(|r| CasWrite {
                        key: r.key(),
                        expected_revision: r.revision,
                        next: r.successor(ReceiptState::ObservationReceived, 2),
                    })
                    .collect();
                let answers = store.compare_and_swap_batch(&writes).expect("batch");
                assert!(answers.iter().all(|a| matches!(a, Ok(true))));
                current = writes.into_iter().map(|w| w.next).collect();
            })
        });
    }
    group.finish();
}

/// Eight writer threads, each with its own receipt, through the group committer or straight
/// to SQLite (each write its own transaction).
fn concurrent_writers(c: &mut Criterion) {
    const THREADS: usize = 8;
    const WRITES: usize = 50;
    let mut group = c.benchmark_group("receipt_cas_8_writers");
    group.throughput(Throughput::Elements((THREADS * WRITES) as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(6));
    for grouped in [false, true] {
        let name = if grouped {
            "group_commit"
        } else {
            "per_write_tx"
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let sqlite = Arc::new(sqlite(&dir, "writers.sqlite3", false));
        let store: Arc<dyn ReceiptStore> = if grouped {
            Arc::new(GroupCommitStore::new(Arc::clone(&sqlite), 256).expect("committer"))
        } else {
            sqlite
        };
        let mut round = 0usize;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    round += 1;
                    let starts = receipts(store.as_ref(), &format!("{name}-{round}"), THREADS);
                    let started = Instant::now();
                    let handles: Vec<_> = starts
                        .into_iter()
                        .map(|mut current| {
                            let store = Arc::clone(&store);
                            std::thread::spawn(move || {
                                let key = current.key();
                                for _ in 0..WRITES {
                                    let next =
                                        current.successor(ReceiptState::ObservationReceived, 2);
                                    assert!(store
                                        .compare_and_swap(&key, current.revision, &next)
                                        .expect("cas"));
                                    current = next;
                                }
                            })
                        })
                        .collect();
                    for handle in handles {
                        handle.join().expect("writer");
                    }
                    total += started.elapsed();
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, single_writes, batched_writes, concurrent_writers);
criterion_main!(benches);
