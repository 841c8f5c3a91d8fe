//! The shell's driver on paused tokio time: its one timer, lease TTLs and heartbeats, grants
//! given back on drop, the core's refusals carried unchanged, and breaker transitions
//! journaled under their own workspace.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use turnstile_admission::{
    ActualUsage, BreakerState, BreakerTransition, CircuitBreakerConfig, Estimate, Limits, Outcome,
    Profile, Reason, Registry,
};
use turnstile_shell::Done;
use turnstile_shell::{
    Acquire, AcquireReply, Clock, Command, Driver, DriverConfig, DriverHandle, Grant, Journal,
    LeaseMetrics, Registration, Standing, Wait,
};

type Journaled = Arc<Mutex<Vec<(String, BreakerTransition)>>>;

/// Records what the driver journals: breaker transitions as history, and as lease events.
struct RecordingJournal(Journaled, Journaled);

impl Journal for RecordingJournal {
    fn profile_registered(&mut self, _registration: Registration, done: Done) {
        done(Ok(()));
    }

    fn breaker_transitions(&mut self, workspace: &str, transitions: &[BreakerTransition]) {
        let mut journaled = self.0.lock().unwrap();
        for transition in transitions {
            journaled.push((workspace.to_owned(), transition.clone()));
        }
    }

    fn lease_events(&mut self, events: Vec<turnstile_shell::LeaseEvent>, done: Done) {
        let mut journaled = self.1.lock().unwrap();
        for event in events {
            if let turnstile_shell::LeaseEvent::Breaker {
                workspace,
                transition,
            } = event
            {
                journaled.push((workspace.to_string(), transition));
            }
        }
        done(Ok(()));
    }
}

struct Harness {
    driver: DriverHandle,
    metrics: Arc<LeaseMetrics>,
    journaled: Journaled,
    /// The `Breaker` lease events (what a restart reopens breakers from).
    lease_breakers: Journaled,
}

fn harness(ttl: Option<u64>) -> Harness {
    let journaled = Journaled::default();
    let lease_breakers = Journaled::default();
    let metrics = Arc::new(LeaseMetrics::default());
    let (driver, _task) = Driver::spawn(
        Registry::new(),
        Clock::starting_at(0),
        DriverConfig { lease_ttl_ms: ttl },
        Box::new(RecordingJournal(journaled.clone(), lease_breakers.clone())),
        metrics.clone(),
    );
    Harness {
        driver,
        metrics,
        journaled,
        lease_breakers,
    }
}

fn profile(provider: &str, concurrency: u32, breaker: bool) -> Profile {
    let mut lane = Limits::with_concurrency(concurrency);
    lane.max_queue_length = Some(8);
    if breaker {
        lane.circuit_breaker = Some(CircuitBreakerConfig {
            failure_threshold: 1,
            open_ms: Some(100),
            half_open_max_calls: Some(1),
        });
    }
    Profile {
        workspace: lane.clone(),
        providers: [(provider.to_owned(), lane.clone())].into_iter().collect(),
        principals: [("p".to_owned(), lane)].into_iter().collect(),
    }
}

fn ask(workspace: &str, provider: &str, wait: Wait) -> Acquire {
    Acquire {
        workspace: Arc::from(workspace),
        principal: Arc::from("p"),
        provider_id: provider.to_owned(),
        budget_id: "invocation".to_owned(),
        estimate: Estimate::default(),
        wait,
        span: None,
    }
}

async fn grant(driver: &DriverHandle, request: Acquire) -> Grant {
    match driver.acquire(request).await.unwrap() {
        AcquireReply::Admitted(grant) => grant,
        AcquireReply::Rejected(rejection) => panic!("refused: {:?}", rejection.reason),
        _ => panic!("no answer"),
    }
}

async fn refusal(driver: &DriverHandle, request: Acquire) -> turnstile_admission::Rejection {
    match driver.acquire(request).await.unwrap() {
        AcquireReply::Rejected(rejection) => rejection,
        AcquireReply::Admitted(_) => panic!("admitted"),
        _ => panic!("no answer"),
    }
}

async fn heartbeat(
    driver: &DriverHandle,
    lease: &Grant,
) -> Result<u64, turnstile_shell::DriverError> {
    driver
        .ask(|reply| Command::Heartbeat {
            token: lease.token,
            workspace: Arc::from("ws"),
            principal: Arc::from("p"),
            reply,
        })
        .await
        .unwrap()
}

async fn active(driver: &DriverHandle, workspace: &str) -> u64 {
    driver
        .snapshot(workspace)
        .await
        .unwrap()
        .unwrap()
        .core
        .active
}

/// Lets spawned tasks and the driver run without moving paused time.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_unheartbeated_lease_is_reclaimed_exactly_at_its_ttl() {
    let h = harness(Some(1_000));
    h.driver
        .register("ws", "v1", profile("llm", 1, false), String::new())
        .await
        .unwrap();
    let mut lease = grant(&h.driver, ask("ws", "llm", Wait::For(10))).await;
    assert_eq!(lease.expires_at, Some(1_000));
    lease.accept(); // a remote holder has it now
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(active(&h.driver, "ws").await, 1);
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert_eq!(active(&h.driver, "ws").await, 0);
    assert_eq!(
        h.metrics
            .leases_expired
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_moves_the_expiry_and_the_timer_follows() {
    let h = harness(Some(1_000));
    h.driver
        .register("ws", "v1", profile("llm", 1, false), String::new())
        .await
        .unwrap();
    let mut lease = grant(&h.driver, ask("ws", "llm", Wait::For(10))).await;
    lease.accept();
    tokio::time::advance(Duration::from_millis(800)).await;
    let expires = heartbeat(&h.driver, &lease).await.unwrap();
    assert_eq!(expires, 1_800);
    assert_eq!(h.driver.timer().await.unwrap(), (800, Some(1_800)));
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(active(&h.driver, "ws").await, 1);
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert_eq!(active(&h.driver, "ws").await, 0);
    let expired = heartbeat(&h.driver, &lease).await;
    assert!(expired.is_err(), "an expired lease cannot be extended");
}

#[tokio::test(start_paused = true)]
async fn a_queued_request_is_refused_by_the_one_timer_exactly_at_its_deadline() {
    let h = harness(None);
    h.driver
        .register("ws", "v1", profile("llm", 1, false), String::new())
        .await
        .unwrap();
    let _held = grant(&h.driver, ask("ws", "llm", Wait::For(10))).await;
    let start = tokio::time::Instant::now();
    let rejection = refusal(&h.driver, ask("ws", "llm", Wait::For(40))).await;
    assert_eq!(rejection.reason, Reason::DeadlineExceeded);
    assert_eq!(start.elapsed(), Duration::from_millis(40));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_grant_and_an_abandoned_wait_give_everything_back() {
    let h = harness(None);
    h.driver
        .register("ws", "v1", profile("llm", 1, false), String::new())
        .await
        .unwrap();
    let held = grant(&h.driver, ask("ws", "llm", Wait::For(10))).await;
    let waiting = {
        let driver = h.driver.clone();
        tokio::spawn(async move { driver.acquire(ask("ws", "llm", Wait::Unbounded)).await })
    };
    settle().await;
    assert_eq!(h.driver.snapshot("ws").await.unwrap().unwrap().waiters, 1);
    waiting.abort();
    let _ = waiting.await;
    settle().await;
    let snapshot = h.driver.snapshot("ws").await.unwrap().unwrap();
    assert_eq!((snapshot.waiters, snapshot.core.queued), (0, 0));
    drop(held);
    assert_eq!(active(&h.driver, "ws").await, 0);
    assert_eq!(h.driver.snapshot("ws").await.unwrap().unwrap().leases, 0);
}

#[tokio::test(start_paused = true)]
async fn zero_wait_admits_when_free_and_refuses_at_once_with_the_real_reason_when_busy() {
    let h = harness(None);
    h.driver
        .register("ws", "v1", profile("llm", 1, false), String::new())
        .await
        .unwrap();
    let held = grant(&h.driver, ask("ws", "llm", Wait::For(0))).await;
    let start = tokio::time::Instant::now();
    let rejection = refusal(&h.driver, ask("ws", "llm", Wait::For(0))).await;
    assert_eq!(rejection.reason, Reason::Concurrency);
    assert!(rejection.retryable);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(
        h.driver.snapshot("ws").await.unwrap().unwrap().core.queued,
        0
    );
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_principals_standing_follows_the_current_profile() {
    let h = harness(None);
    assert_eq!(
        h.driver.standing("ws", "p").await.unwrap(),
        Standing::NoProfile
    );
    h.driver
        .register("ws", "v1", profile("llm", 1, false), String::new())
        .await
        .unwrap();
    assert_eq!(h.driver.standing("ws", "p").await.unwrap(), Standing::Named);
    assert_eq!(
        h.driver.standing("ws", "q").await.unwrap(),
        Standing::NotNamed
    );
    // Principal limits are merged across revisions (the registry keeps every principal ever
    // registered), so only a principal no revision named is `NotNamed`.
}

#[tokio::test(start_paused = true)]
async fn a_pause_that_outlasts_the_deadline_is_refused_at_once() {
    let h = harness(None);
    h.driver
        .register("ws", "v1", profile("llm", 1, false), String::new())
        .await
        .unwrap();
    let until = h.driver.retry_after("ws", "llm", 5_000).await.unwrap();
    assert_eq!(until, 5_000);
    let start = tokio::time::Instant::now();
    let rejection = refusal(&h.driver, ask("ws", "llm", Wait::For(1_000))).await;
    assert_eq!(rejection.reason, Reason::RetryAfter);
    assert_eq!(rejection.evidence.retry_after_ms, Some(5_000));
    assert_eq!(start.elapsed(), Duration::ZERO);
    // An unknown pause target is the core's typed error, not a silent no-op.
    assert!(h.driver.retry_after("ws", "nope", 10).await.is_err());
}

/// Records the ends of the pauses the driver journals (as history, and as lease events).
struct PauseJournal(Arc<Mutex<Vec<u64>>>, Arc<Mutex<Vec<u64>>>);

impl Journal for PauseJournal {
    fn profile_registered(&mut self, _registration: Registration, done: Done) {
        done(Ok(()));
    }

    fn breaker_transitions(&mut self, _workspace: &str, _transitions: &[BreakerTransition]) {}

    fn provider_paused(&mut self, _workspace: &str, pause: &turnstile_shell::Pause) {
        self.0.lock().unwrap().push(pause.until_epoch_ms);
    }

    fn lease_events(&mut self, events: Vec<turnstile_shell::LeaseEvent>, done: Done) {
        for event in events {
            if let turnstile_shell::LeaseEvent::Paused { until_epoch_ms, .. } = event {
                self.1.lock().unwrap().push(until_epoch_ms);
            }
        }
        done(Ok(()));
    }
}

/// A restart pauses a lane again from the journal, so small extensions must not add up: the
/// journaled end stays within `JOURNAL_EXTENSION_MS` of the real one.
#[tokio::test(start_paused = true)]
async fn pause_extensions_too_small_to_journal_one_by_one_are_journaled_once_they_add_up_to_a_second(
) {
    let ends = Arc::new(Mutex::new(Vec::new()));
    let lease_ends = Arc::new(Mutex::new(Vec::new()));
    let (driver, _task) = Driver::spawn(
        Registry::new(),
        Clock::starting_at(0),
        DriverConfig { lease_ttl_ms: None },
        Box::new(PauseJournal(ends.clone(), lease_ends.clone())),
        Arc::new(LeaseMetrics::default()),
    );
    driver
        .register("ws", "v1", profile("llm", 1, false), String::new())
        .await
        .unwrap();
    let mut real_ends = Vec::new();
    for _ in 0..4 {
        real_ends.push(driver.retry_after("ws", "llm", 5_000).await.unwrap());
        tokio::time::advance(Duration::from_millis(600)).await;
    }
    assert_eq!(real_ends, [5_000, 5_600, 6_200, 6_800]);
    // 5,600 and 6,800 are within a second of the last journaled end; 6,200 is not.
    assert_eq!(*ends.lock().unwrap(), [5_000, 6_200]);
    assert_eq!(
        *lease_ends.lock().unwrap(),
        [5_000, 6_200],
        "the same in the lease log"
    );
}

#[tokio::test(start_paused = true)]
async fn breakers_of_two_workspaces_tripping_at_the_same_tick_are_journaled_each_under_its_own() {
    let h = harness(None);
    for (workspace, provider) in [("ws-a", "provider-a"), ("ws-b", "provider-b")] {
        h.driver
            .register(workspace, "v1", profile(provider, 1, true), String::new())
            .await
            .unwrap();
        let lease = grant(&h.driver, ask(workspace, provider, Wait::For(10))).await;
        lease
            .release(Outcome::Failure, ActualUsage::none())
            .await
            .unwrap();
    }
    // Both breakers are open until t=100; one waiter each makes both half-open at that tick.
    let waiters: Vec<_> = [("ws-a", "provider-a"), ("ws-b", "provider-b")]
        .into_iter()
        .map(|(workspace, provider)| {
            let driver = h.driver.clone();
            tokio::spawn(
                async move { grant(&driver, ask(workspace, provider, Wait::Unbounded)).await },
            )
        })
        .collect();
    settle().await;
    tokio::time::advance(Duration::from_millis(100)).await;
    for waiter in waiters {
        let lease = waiter.await.unwrap();
        assert_eq!(lease.evidence().breaker_state, BreakerState::HalfOpen);
    }
    let journaled = h.journaled.lock().unwrap().clone();
    let half_open: Vec<_> = journaled
        .iter()
        .filter(|(_, t)| t.to == BreakerState::HalfOpen)
        .collect();
    assert_eq!(half_open.len(), 2, "{journaled:?}");
    assert_eq!(
        half_open[0].1.at_epoch_ms, half_open[1].1.at_epoch_ms,
        "same tick"
    );
    for (workspace, transition) in &journaled {
        let expected = match transition.provider_id.as_str() {
            "provider-a" => "ws-a",
            "provider-b" => "ws-b",
            other => panic!("unexpected provider {other}"),
        };
        assert_eq!(workspace, expected, "{transition:?}");
    }
    assert_eq!(
        *h.lease_breakers.lock().unwrap(),
        journaled,
        "every transition is a lease event too, in the same order"
    );
}

#[tokio::test(start_paused = true)]
async fn bucket_levels_are_read_only_once_the_driver_drained_and_then_nothing_is_granted() {
    let h = harness(None);
    let mut rated = profile("llm", 4, false);
    if let Some(lane) = rated.providers.get_mut("llm") {
        lane.requests_per_minute = Some(60);
    }
    h.driver
        .register("ws", "v1", rated, String::new())
        .await
        .unwrap();
    let held = grant(&h.driver, ask("ws", "llm", Wait::For(0))).await;
    assert_eq!(
        h.driver.bucket_levels().await.unwrap(),
        None,
        "still admitting"
    );
    h.driver.drain().await.unwrap();
    let levels = h.driver.bucket_levels().await.unwrap().expect("drained");
    // 59 of 60 requests left, in fixed-point units (× 60,000 ms).
    assert_eq!(levels["ws"].providers["llm"].requests, Some(59 * 60_000));
    assert!(matches!(
        h.driver
            .acquire(ask("ws", "llm", Wait::For(0)))
            .await
            .unwrap(),
        AcquireReply::ShuttingDown
    ));
    drop(held);
}

/// Every decision is observed exactly once, whether the core decided at once or from the
/// queue: its span counts it once in the metrics family (a queued request once more, as
/// `defer`), the feed's tally counts it once, and each admission enters the principal's
/// fairness window once.
#[tokio::test(start_paused = true)]
async fn every_decision_is_observed_exactly_once() {
    use std::collections::BTreeMap;
    use turnstile_admission::Decision;

    let telemetry = turnstile_shell::Telemetry::global();
    let feed = turnstile_shell::Feed::new();
    let mut events = feed.subscribe();
    let (driver, handle) = Driver::new(
        Registry::new(),
        Clock::starting_at(0),
        DriverConfig { lease_ttl_ms: None },
        Box::new(turnstile_shell::NoJournal),
        Arc::new(LeaseMetrics::default()),
    );
    let task = tokio::spawn(driver.with_feed(feed).run());
    handle
        .register("ws", "v1", profile("llm", 1, false), String::new())
        .await
        .unwrap();
    let traced = |wait| Acquire {
        span: Some(telemetry.admission_requested("llm")),
        ..ask("ws", "llm", wait)
    };
    // Keyed by name: the vocabularies are not ordered.
    let mut expected: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut expect = |decision: Decision, reason: Reason| {
        *expected
            .entry((decision.as_str(), reason.as_str()))
            .or_default() += 1;
    };

    // Admitted at once, then refused at once (the lane is busy and the caller does not wait).
    let first = grant(&handle, traced(Wait::Unbounded)).await;
    expect(Decision::Admit, Reason::Admitted);
    let busy = refusal(&handle, traced(Wait::NoWait)).await.reason;
    expect(Decision::Reject, busy);

    // Queued, then admitted from the queue once the first lease comes back.
    let queued = tokio::spawn({
        let handle = handle.clone();
        let request = traced(Wait::Unbounded);
        async move { grant(&handle, request).await }
    });
    settle().await;
    drop(first);
    let second = queued.await.unwrap();
    expect(Decision::Admit, Reason::Admitted);

    // Queued, then refused from the queue when its wait ends.
    let timed_out = refusal(&handle, traced(Wait::For(50))).await.reason;
    expect(Decision::Reject, timed_out);
    drop(second);
    settle().await;

    // The metrics family: one count per decision, plus one `defer` per queued request.
    let mut counted = BTreeMap::new();
    for decision in [Decision::Admit, Decision::Defer, Decision::Reject] {
        for reason in [Reason::Admitted, busy, timed_out] {
            let count = telemetry.decision_count(decision, reason);
            if count > 0 {
                counted.insert((decision.as_str(), reason.as_str()), count);
            }
        }
    }
    let defers: u64 = counted
        .iter()
        .filter(|((decision, _), _)| *decision == Decision::Defer.as_str())
        .map(|(_, count)| count)
        .sum();
    counted.retain(|(decision, _), _| *decision != Decision::Defer.as_str());
    assert_eq!(counted, expected, "the spans' counts");
    assert_eq!(defers, 2, "one defer per queued request");

    // The fairness window: one grant per admission.
    let fairness = handle
        .ask(|reply| Command::Fairness {
            workspace: "ws".to_owned(),
            reply,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fairness.total_grants, 2);
    assert_eq!(fairness.principals.len(), 1);
    assert_eq!(fairness.principals[0].grants, 2);

    // The feed's tally: one count per decision (published at its next flush).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut tallied: BTreeMap<&str, u64> = BTreeMap::new();
    let mut principal_grants = 0;
    while let Ok(event) = events.try_recv() {
        for count in &event.decisions {
            *tallied.entry(count.reason.as_str()).or_default() += count.count;
        }
        principal_grants += event.principals.iter().map(|p| p.grants).sum::<u64>();
    }
    let mut by_reason: BTreeMap<&str, u64> = BTreeMap::new();
    for ((_, reason), count) in &expected {
        *by_reason.entry(*reason).or_default() += count;
    }
    assert_eq!(tallied, by_reason, "the feed's tally");
    assert_eq!(principal_grants, 2);

    handle.stop();
    task.await.unwrap();
}

/// A release with outcome `retry-after` reports the pause the core applied, with the instant
/// the lane's pause ends; a zero Retry-After with no pause in force applies none and reports
/// none.
#[tokio::test(start_paused = true)]
async fn a_retry_after_release_reports_the_pause_the_core_applied_and_a_zero_one_none() {
    type Paused = Arc<Mutex<Vec<(String, turnstile_shell::Pause)>>>;
    struct PauseJournal(Paused);
    impl Journal for PauseJournal {
        fn profile_registered(&mut self, _registration: Registration, done: Done) {
            done(Ok(()));
        }
        fn breaker_transitions(&mut self, _workspace: &str, _transitions: &[BreakerTransition]) {}
        fn provider_paused(&mut self, workspace: &str, pause: &turnstile_shell::Pause) {
            self.0
                .lock()
                .unwrap()
                .push((workspace.to_owned(), pause.clone()));
        }
        fn lease_events(&mut self, _events: Vec<turnstile_shell::LeaseEvent>, done: Done) {
            done(Ok(()));
        }
    }

    let paused = Paused::default();
    let (driver, _task) = Driver::spawn(
        Registry::new(),
        Clock::starting_at(1_000),
        DriverConfig { lease_ttl_ms: None },
        Box::new(PauseJournal(paused.clone())),
        Arc::new(LeaseMetrics::default()),
    );
    driver
        .register("ws", "v1", profile("llm", 1, false), String::new())
        .await
        .unwrap();
    let retry_after = |retry_after_ms| Outcome::RetryAfter { retry_after_ms };

    let lease = grant(&driver, ask("ws", "llm", Wait::NoWait)).await;
    lease
        .release(retry_after(0), ActualUsage::none())
        .await
        .unwrap();
    assert!(
        paused.lock().unwrap().is_empty(),
        "a zero Retry-After pauses nothing"
    );

    let lease = grant(&driver, ask("ws", "llm", Wait::NoWait)).await;
    lease
        .release(retry_after(300), ActualUsage::none())
        .await
        .unwrap();
    let journaled = paused.lock().unwrap().clone();
    assert_eq!(journaled.len(), 1);
    let (workspace, pause) = &journaled[0];
    assert_eq!(workspace, "ws");
    assert_eq!(pause.provider_id, "llm");
    assert_eq!(pause.retry_after_ms, 300);
    assert_eq!(pause.at_epoch_ms, 1_000);
    assert_eq!(pause.until_epoch_ms, 1_300);
    assert_eq!(pause.cause, turnstile_shell::PauseCause::ReleaseOutcome);
}
