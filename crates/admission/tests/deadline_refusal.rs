//! Deadline-aware refusal (issue 31) on virtual time: a request whose predicted wait surely
//! exceeds its deadline is refused at once (`deadline-unreachable`, retryable, `Retry-After` =
//! the predicted wait); without history, or when it may be served in time, it waits as before.

use std::collections::{BTreeMap, VecDeque};

use proptest::prelude::*;
use turnstile_admission::{
    Acquired, AdmissionRequest, Controller, Decision, LeaseId, Limits, Outcome, Profile, Reason,
};

fn profile(provider: Limits) -> Profile {
    Profile {
        workspace: Limits::with_concurrency(64),
        providers: BTreeMap::from([("p".to_owned(), provider)]),
        principals: ["a", "b"]
            .iter()
            .map(|id| ((*id).to_owned(), Limits::with_concurrency(64)))
            .collect(),
    }
}

fn request(principal: &str, deadline: u64) -> AdmissionRequest {
    AdmissionRequest::new(principal, "p", "budget").with_deadline(deadline)
}

/// A lane of concurrency 1 whose leases are each held `hold` ms, with a backlog of `a`
/// requests (deadline far away), served for `grants` grants: the lane now has history.
fn served_lane(hold: u64, grants: usize, backlog: usize) -> (Controller, u64, VecDeque<LeaseId>) {
    let mut controller = Controller::new(profile(Limits::with_concurrency(1)), 0).unwrap();
    let mut held = VecDeque::new();
    for _ in 0..backlog {
        if let Acquired::Admitted(lease) = controller.acquire(request("a", 10_000_000), 0) {
            held.push_back(lease.id);
        }
    }
    let mut now = 0;
    for _ in 0..grants {
        now += hold;
        let lease = held.pop_front().expect("one lease held");
        controller.release(lease, Outcome::Success, now).unwrap();
        while let Some(resolution) = controller.poll_resolution() {
            held.push_back(resolution.outcome.expect("admitted").id);
        }
    }
    (controller, now, held)
}

#[test]
fn without_history_a_request_waits_as_before() {
    let (mut controller, now, _) = served_lane(100, 5, 100);
    let answer = controller.acquire(request("a", now + 50), now);
    assert!(matches!(answer, Acquired::Queued { .. }), "{answer:?}");
}

#[test]
fn with_history_an_unreachable_deadline_is_refused_at_once_with_the_predicted_wait() {
    let (mut controller, now, _) = served_lane(100, 40, 100);
    // 60 waiters of `a` ahead, one grant every 100 ms: about 6 s; the deadline is 1 s away.
    let Acquired::Rejected(refusal) = controller.acquire(request("a", now + 1_000), now) else {
        panic!("refused");
    };
    assert_eq!(refusal.reason, Reason::DeadlineUnreachable);
    assert!(refusal.retryable);
    let evidence = &refusal.evidence;
    assert_eq!(evidence.decision, Decision::Reject);
    let predicted = evidence.predicted_wait_ms.expect("predicted wait").get();
    assert!((5_000..=6_100).contains(&predicted), "{predicted}");
    assert_eq!(evidence.retry_after_ms, Some(predicted));
    // Nothing of it stayed queued.
    assert_eq!(controller.snapshot().queued, 59);
}

#[test]
fn a_deadline_that_can_be_met_waits() {
    let (mut controller, now, _) = served_lane(100, 40, 100);
    let answer = controller.acquire(request("a", now + 9_000), now);
    assert!(matches!(answer, Acquired::Queued { .. }), "{answer:?}");
    // Another principal's fresh lane is served within a round: not refused either.
    let answer = controller.acquire(request("b", now + 300), now);
    assert!(matches!(answer, Acquired::Queued { .. }), "{answer:?}");
}

#[test]
fn waiters_ahead_that_expire_first_are_not_counted() {
    let (mut controller, now, _) = served_lane(100, 40, 41);
    // The backlog is gone; 30 waiters that expire in 200 ms join, then a request with 1 s.
    for _ in 0..30 {
        let _ = controller.acquire(request("a", now + 200), now);
    }
    let answer = controller.acquire(request("a", now + 1_000), now);
    assert!(matches!(answer, Acquired::Queued { .. }), "{answer:?}");
}

#[test]
fn the_off_switch_restores_waiting() {
    let (mut controller, now, _) = served_lane(100, 40, 100);
    controller.set_deadline_refusals(false);
    let answer = controller.acquire(request("a", now + 1_000), now);
    assert!(matches!(answer, Acquired::Queued { .. }), "{answer:?}");
}

#[test]
fn a_pause_is_a_regime_change_that_forgets_the_history() {
    let (mut controller, now, _) = served_lane(100, 40, 100);
    controller.coordinate_retry_after("p", 1, now).unwrap();
    let answer = controller.acquire(request("a", now + 1_000), now + 1);
    assert!(matches!(answer, Acquired::Queued { .. }), "{answer:?}");
}

#[test]
fn a_request_bucket_floor_refuses_without_history() {
    let mut provider = Limits::with_concurrency(8);
    provider.requests_per_minute = Some(60);
    provider.requests_burst = Some(1);
    let mut controller = Controller::new(profile(provider), 0).unwrap();
    let Acquired::Admitted(_) = controller.acquire(request("a", 100_000), 0) else {
        panic!("the bucket's one request");
    };
    for _ in 0..5 {
        let answer = controller.acquire(request("a", 100_000), 0);
        assert!(matches!(answer, Acquired::Queued { .. }));
    }
    // Six more requests must come out of a bucket refilling one a second: ≥ 6 s.
    let Acquired::Rejected(refusal) = controller.acquire(request("a", 2_000), 0) else {
        panic!("refused");
    };
    assert_eq!(refusal.reason, Reason::DeadlineUnreachable);
    assert_eq!(
        refusal.evidence.predicted_wait_ms.map(|w| w.get()),
        Some(6_000)
    );
    // With 7 s it waits.
    let answer = controller.acquire(request("a", 7_000), 0);
    assert!(matches!(answer, Acquired::Queued { .. }));
}

/// Refusals seen over the cases of the property (it must not hold vacuously).
static REFUSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn the_no_false_refusal_property_sees_refusals() {
    a_refused_request_would_not_have_been_served_in_time();
    assert!(REFUSED.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// No false refusals: with leases held a fixed time, every request refused
    /// `deadline-unreachable` when refusals are on (B) was *not* admitted before its deadline
    /// when they are off (A), on the same arrivals.
    #[test]
    fn a_refused_request_would_not_have_been_served_in_time(
        hold in 20u64..300,
        concurrency in 1u32..=3,
        arrivals in prop::collection::vec((0usize..2, 0u64..400, 100u64..20_000), 50..300),
    ) {
        let run = |refusals: bool| {
            let mut controller =
                Controller::new(profile(Limits::with_concurrency(concurrency)), 0).unwrap();
            controller.set_deadline_refusals(refusals);
            let mut waiting = BTreeMap::new();
            // (release at, lease)
            let mut held: VecDeque<(u64, LeaseId)> = VecDeque::new();
            let mut outcome = vec![None; arrivals.len()];
            let mut now = 0;
            for (i, &(principal, gap, deadline_in)) in arrivals.iter().enumerate() {
                let next = now + gap;
                while let Some(&(at, lease)) = held.front() {
                    if at > next {
                        break;
                    }
                    held.pop_front();
                    controller.release(lease, Outcome::Success, at).unwrap();
                    while let Some(r) = controller.poll_resolution() {
                        let index = waiting.remove(&r.waiter).unwrap();
                        outcome[index] = Some(r.outcome.as_ref().map(|_| at).map_err(|e| e.reason));
                        if let Ok(lease) = r.outcome {
                            held.push_back((at + hold, lease.id));
                        }
                    }
                }
                now = next;
                controller.handle_timeout(now);
                while let Some(r) = controller.poll_resolution() {
                    let index = waiting.remove(&r.waiter).unwrap();
                    outcome[index] = Some(r.outcome.as_ref().map(|_| now).map_err(|e| e.reason));
                }
                let name = ["a", "b"][principal];
                match controller.acquire(request(name, now + deadline_in), now) {
                    Acquired::Admitted(lease) => {
                        outcome[i] = Some(Ok(now));
                        held.push_back((now + hold, lease.id));
                    }
                    Acquired::Queued { waiter, .. } => {
                        waiting.insert(waiter, i);
                    }
                    Acquired::Rejected(r) => outcome[i] = Some(Err(r.reason)),
                }
            }
            outcome
        };
        let (a, b) = (run(false), run(true));
        let refused = b.iter().filter(|o| **o == Some(Err(Reason::DeadlineUnreachable))).count();
        REFUSED.fetch_add(refused, std::sync::atomic::Ordering::Relaxed);
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            if *b == Some(Err(Reason::DeadlineUnreachable)) {
                prop_assert!(
                    !matches!(a, Some(Ok(_))),
                    "request {i} refused in B was admitted in A: {a:?}"
                );
            }
        }
    }
}
