//! CNC-SCHED-*: the bounded fair scheduler.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use turnstile_decision::{run_bounded_fair, FairOptions, Interrupt, Scheduled, WorkItem};

#[derive(Default)]
struct Tracker {
    active: AtomicUsize,
    peak: AtomicUsize,
    starts: Mutex<Vec<String>>,
}

impl Tracker {
    fn start(&self, name: impl Into<String>) {
        self.starts.lock().unwrap().push(name.into());
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }
    fn end(&self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
    }
    fn starts(&self) -> Vec<String> {
        self.starts.lock().unwrap().clone()
    }
    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

fn completed<T: std::fmt::Debug, R: Clone + std::fmt::Debug>(
    results: Vec<Scheduled<T, R>>,
) -> Vec<R> {
    results
        .into_iter()
        .map(|r| match r {
            Scheduled::Completed(r) => r,
            other => panic!("not completed: {other:?}"),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn cnc_sched_001_results_in_input_order_with_ceiling() {
    let tracker = Tracker::default();
    let work: Vec<_> = (0..4u64)
        .map(|v| WorkItem::new(v, if v % 2 == 0 { "a" } else { "b" }))
        .collect();
    let results = run_bounded_fair(
        work,
        2,
        |v, _slot| {
            let tracker = &tracker;
            async move {
                tracker.start(format!("{v}"));
                tokio::time::sleep(Duration::from_millis((4 - v) * 2)).await;
                tracker.end();
                format!("result-{v}")
            }
        },
        FairOptions::default(),
    )
    .await;
    assert_eq!(
        completed(results),
        vec!["result-0", "result-1", "result-2", "result-3"]
    );
    assert!(tracker.peak() <= 2);
}

#[tokio::test(start_paused = true)]
async fn cnc_sched_002_starts_up_to_the_ceiling_at_once() {
    for (items, expected) in [(1usize, 1usize), (2, 2), (4, 4), (5, 4)] {
        let tracker = Arc::new(Tracker::default());
        let gate = Arc::new(Notify::new());
        let work: Vec<_> = (0..items)
            .map(|i| WorkItem::new(i, format!("lane-{i}")))
            .collect();
        let run = {
            let tracker = Arc::clone(&tracker);
            let gate = Arc::clone(&gate);
            tokio::spawn(async move {
                run_bounded_fair(
                    work,
                    4,
                    move |i, _slot| {
                        let tracker = Arc::clone(&tracker);
                        let gate = Arc::clone(&gate);
                        async move {
                            tracker.start(format!("{i}"));
                            gate.notified().await;
                            tracker.end();
                            i
                        }
                    },
                    FairOptions::default(),
                )
                .await
            })
        };
        common::settle().await;
        assert_eq!(tracker.starts().len(), expected, "{items} items");
        // Release the held items one by one; the fifth starts once a permit frees up.
        for _ in 0..items {
            gate.notify_one();
            common::settle().await;
        }
        gate.notify_waiters();
        let results = completed(run.await.unwrap());
        assert_eq!(results, (0..items).collect::<Vec<_>>());
        assert_eq!(tracker.starts().len(), items);
        assert_eq!(tracker.peak(), expected);
    }
}

#[tokio::test(start_paused = true)]
async fn cnc_sched_003_output_is_identical_across_seeds() {
    let mut outputs = Vec::new();
    for seed in [1u32, 2, 17, 2601, 0xFFFF_FFFF] {
        let mut state = seed;
        let work: Vec<_> = (0..64u32)
            .map(|i| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                WorkItem::new((i, u64::from(state % 7)), format!("lane-{}", i % 7))
            })
            .collect();
        let tracker = Tracker::default();
        let results = run_bounded_fair(
            work,
            8,
            |(i, delay), _slot| {
                let tracker = &tracker;
                async move {
                    tracker.start(i.to_string());
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    tracker.end();
                    serde_json::json!({"item": i, "value": i * 3})
                }
            },
            FairOptions::default(),
        )
        .await;
        assert!(tracker.peak() <= 8);
        outputs.push(serde_json::to_string(&completed(results)).unwrap());
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
}

#[tokio::test(start_paused = true)]
async fn cnc_sched_004_lanes_are_served_round_robin() {
    let mut work: Vec<_> = (0..32)
        .map(|i| WorkItem::new(format!("noisy-{i}"), "noisy"))
        .collect();
    work.push(WorkItem::new("quiet-0".to_owned(), "quiet"));
    work.push(WorkItem::new("third-0".to_owned(), "third"));
    let expected: Vec<String> = work.iter().map(|w| w.value.clone()).collect();
    let tracker = Tracker::default();
    let results = run_bounded_fair(
        work,
        1,
        |name, _slot| {
            let tracker = &tracker;
            async move {
                tracker.start(name.clone());
                tokio::time::sleep(Duration::from_millis(1)).await;
                tracker.end();
                name
            }
        },
        FairOptions::default(),
    )
    .await;
    assert_eq!(tracker.starts()[..3], ["noisy-0", "quiet-0", "third-0"]);
    assert_eq!(completed(results), expected);
    assert_eq!(tracker.peak(), 1);
}

#[tokio::test(start_paused = true)]
async fn cnc_sched_005_load_manifest_v1_over_37_lanes() {
    let path = common::repo_root().join("manifests/load-manifest.v1.json");
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(
        hex::encode(Sha256::digest(&bytes)),
        "9c6db981b0e1d124e317651ed15e8972fbf27b7a7596b15aa23ea3baac4bb03f"
    );
    let manifest: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let rps = manifest["arrivalModel"]["averageRequestsPerSecond"]
        .as_u64()
        .unwrap();
    let spike = manifest["arrivalModel"]["spikeMultiplier"]
        .as_u64()
        .unwrap();
    let spike_seconds = manifest["arrivalModel"]["spikeDurationSeconds"]
        .as_u64()
        .unwrap();
    let d = &manifest["duration"];
    let seconds = d["loadSeconds"].as_u64().unwrap()
        + d["spikeSeconds"].as_u64().unwrap()
        + d["soakSeconds"].as_u64().unwrap();
    let total = rps * seconds + rps * (spike - 1) * spike_seconds;
    assert_eq!(total, 20_400);
    let ceiling = manifest["bounds"]["maximumActiveCalls"].as_u64().unwrap() as usize;
    assert_eq!(ceiling, 3);
    const LANES: usize = 37;

    let work: Vec<_> = (0..total as usize)
        .map(|i| WorkItem::new(i, format!("principal-{}", i % LANES)))
        .collect();
    let active = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let dispatch = AtomicUsize::new(0);
    let first_dispatch: Mutex<Vec<Option<usize>>> = Mutex::new(vec![None; LANES]);
    let results = run_bounded_fair(
        work,
        ceiling,
        |i, _slot| {
            let (active, peak, dispatch, first_dispatch) =
                (&active, &peak, &dispatch, &first_dispatch);
            async move {
                let ordinal = dispatch.fetch_add(1, Ordering::SeqCst);
                first_dispatch.lock().unwrap()[i % LANES].get_or_insert(ordinal);
                let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                active.fetch_sub(1, Ordering::SeqCst);
                i
            }
        },
        FairOptions::default(),
    )
    .await;
    assert!(peak.load(Ordering::SeqCst) <= ceiling);
    let results = completed(results);
    assert_eq!(results.len(), 20_400);
    assert!(results.iter().enumerate().all(|(i, &r)| i == r));
    let worst_ms = first_dispatch
        .lock()
        .unwrap()
        .iter()
        .map(|o| o.unwrap() as f64 / rps as f64 * 1000.0)
        .fold(0.0, f64::max);
    assert!(worst_ms < 2000.0, "eligible-lane wait {worst_ms} ms");
}

#[tokio::test(start_paused = true)]
async fn cnc_sched_backoff_001_suspend_gives_the_permit_back() {
    let tracker = Arc::new(Tracker::default());
    let work = vec![
        WorkItem::new("retrying", "a"),
        WorkItem::new("other", "b"),
        WorkItem::new("later", "a"),
    ];
    let run = {
        let tracker = Arc::clone(&tracker);
        tokio::spawn(async move {
            run_bounded_fair(
                work,
                1,
                move |name, slot| {
                    let tracker = Arc::clone(&tracker);
                    async move {
                        tracker.start(format!("{name}#1"));
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        tracker.end();
                        if name == "retrying" {
                            slot.suspend(tokio::time::sleep(Duration::from_millis(1000)))
                                .await;
                            tracker.start(format!("{name}#2"));
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            tracker.end();
                        }
                        name
                    }
                },
                FairOptions::default(),
            )
            .await
        })
    };
    common::settle().await;
    tokio::time::advance(Duration::from_millis(10)).await;
    common::settle().await;
    assert_eq!(tracker.starts(), ["retrying#1", "other#1"]);
    tokio::time::advance(Duration::from_millis(10)).await;
    common::settle().await;
    assert_eq!(tracker.starts(), ["retrying#1", "other#1", "later#1"]);
    tokio::time::advance(Duration::from_millis(1000)).await;
    common::settle().await;
    assert_eq!(
        tracker.starts(),
        ["retrying#1", "other#1", "later#1", "retrying#2"]
    );
    let results = completed(run.await.unwrap());
    assert_eq!(results, ["retrying", "other", "later"]);
    assert_eq!(tracker.peak(), 1);
}

#[tokio::test(start_paused = true)]
async fn cnc_sched_backoff_002_suspended_work_regains_ahead_of_unstarted() {
    let tracker = Tracker::default();
    let work = vec![
        WorkItem::new("retrying", "a"),
        WorkItem::new("held", "b"),
        WorkItem::new("queued", "c"),
    ];
    let results = run_bounded_fair(
        work,
        1,
        |name, slot| {
            let tracker = &tracker;
            async move {
                tracker.start(name);
                match name {
                    "retrying" => {
                        tracker.end();
                        slot.suspend(tokio::time::sleep(Duration::from_millis(5)))
                            .await;
                        tracker.start("retrying#2");
                    }
                    "held" => tokio::time::sleep(Duration::from_millis(20)).await,
                    _ => {}
                }
                tracker.end();
                name
            }
        },
        FairOptions::default(),
    )
    .await;
    assert_eq!(
        tracker.starts(),
        ["retrying", "held", "retrying#2", "queued"]
    );
    assert_eq!(completed(results), ["retrying", "held", "queued"]);
    assert_eq!(tracker.peak(), 1);
}

#[tokio::test(start_paused = true)]
async fn interruption_resolves_unstarted_items() {
    let cancel = tokio_util::sync::CancellationToken::new();
    let work: Vec<_> = (0..4).map(|i| WorkItem::new(i, "one")).collect();
    let token = cancel.clone();
    let results = run_bounded_fair(
        work,
        1,
        |i, _slot| {
            let token = token.clone();
            async move {
                if i == 1 {
                    token.cancel();
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                i
            }
        },
        FairOptions {
            cancel: Some(cancel),
            deadline: None,
        },
    )
    .await;
    assert_eq!(results[0], Scheduled::Completed(0));
    assert_eq!(results[1], Scheduled::Completed(1));
    assert_eq!(
        results[2],
        Scheduled::Unstarted {
            value: 2,
            cause: Interrupt::Cancelled
        }
    );
    assert!(matches!(
        results[3],
        Scheduled::Unstarted {
            cause: Interrupt::Cancelled,
            ..
        }
    ));

    let deadline = tokio::time::Instant::now() + Duration::from_millis(25);
    let work: Vec<_> = (0..4).map(|i| WorkItem::new(i, "one")).collect();
    let results = run_bounded_fair(
        work,
        1,
        |i, _slot| async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            i
        },
        FairOptions {
            cancel: None,
            deadline: Some(deadline),
        },
    )
    .await;
    let unstarted = results
        .iter()
        .filter(|r| {
            matches!(
                r,
                Scheduled::Unstarted {
                    cause: Interrupt::Deadline,
                    ..
                }
            )
        })
        .count();
    assert_eq!(unstarted, 1);
}
