//! Leases through a journal that keeps them (issue 14), on paused tokio time: a grant is
//! answered only once its batch is durable, a grant that cannot be made durable is given back,
//! every lease that leaves the table is journaled once, and a lease reinstated in a fresh
//! driver keeps its token, counts, and expires a full TTL after the restart at the earliest.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use turnstile_admission::{ActualUsage, Estimate, Limits, Outcome, Profile, Reason, Registry};
use turnstile_shell::Done;
use turnstile_shell::{
    Acquire, AcquireReply, Clock, Command, Driver, DriverConfig, DriverHandle, Grant, HeldLease,
    Journal, LeaseEvent, LeaseMetrics, LeaseToken, Registration, Wait,
};

/// How the test journal answers a batch.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Durable,
    Fail,
    /// Keeps `done` until the test calls it.
    Hold,
}

#[derive(Clone)]
struct Shared {
    events: Arc<Mutex<Vec<LeaseEvent>>>,
    held: Arc<Mutex<Vec<Done>>>,
    mode: Arc<Mutex<Mode>>,
}

impl Shared {
    fn new(mode: Mode) -> Self {
        Shared {
            events: Arc::default(),
            held: Arc::default(),
            mode: Arc::new(Mutex::new(mode)),
        }
    }

    fn events(&self) -> Vec<LeaseEvent> {
        self.events.lock().unwrap().clone()
    }

    fn granted(&self) -> Vec<HeldLease> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                LeaseEvent::Granted(held) => Some(held),
                _ => None,
            })
            .collect()
    }

    fn released(&self) -> Vec<(LeaseToken, ActualUsage)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                LeaseEvent::Released { token, usage } => Some((token, usage)),
                _ => None,
            })
            .collect()
    }

    fn complete_held(&self) {
        let held: Vec<Done> = std::mem::take(&mut *self.held.lock().unwrap());
        for done in held {
            done(Ok(()));
        }
    }
}

struct TestJournal(Shared);

impl Journal for TestJournal {
    fn profile_registered(&mut self, _registration: Registration, done: Done) {
        done(Ok(()));
    }

    fn breaker_transitions(
        &mut self,
        _workspace: &str,
        _transitions: &[turnstile_admission::BreakerTransition],
    ) {
    }

    fn lease_events(&mut self, events: Vec<LeaseEvent>, done: Done) {
        self.0.events.lock().unwrap().extend(events);
        let mode = *self.0.mode.lock().unwrap();
        match mode {
            Mode::Durable => done(Ok(())),
            Mode::Fail => done(Err("disk full".into())),
            Mode::Hold => self.0.held.lock().unwrap().push(done),
        }
    }
}

fn profile() -> Profile {
    let lane = Limits::with_concurrency(1);
    Profile {
        workspace: Limits::with_concurrency(8),
        providers: [("llm".to_owned(), lane.clone())].into_iter().collect(),
        principals: [("p".to_owned(), Limits::with_concurrency(8))]
            .into_iter()
            .collect(),
    }
}

/// A driver whose registry already holds the profile (as after a replay), not yet running.
fn driver(shared: &Shared, start_ms: u64, ttl: u64) -> (Driver, DriverHandle) {
    let mut registry = Registry::new();
    registry.register("ws", "v1", profile(), start_ms).unwrap();
    Driver::new(
        registry,
        Clock::starting_at(start_ms),
        DriverConfig {
            lease_ttl_ms: Some(ttl),
        },
        Box::new(TestJournal(shared.clone())),
        Arc::new(LeaseMetrics::default()),
    )
}

fn ask(wait: Wait) -> Acquire {
    Acquire {
        workspace: Arc::from("ws"),
        principal: Arc::from("p"),
        provider_id: "llm".to_owned(),
        budget_id: "invocation".to_owned(),
        estimate: Estimate::new().tokens(40),
        wait,
        span: None,
    }
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// One request admitted at once and accepted by its caller.
async fn admitted(handle: &DriverHandle) -> Grant {
    let AcquireReply::Admitted(mut grant) = handle.acquire(ask(Wait::For(10))).await.unwrap()
    else {
        panic!("not admitted");
    };
    grant.accept();
    grant
}

async fn active(driver: &DriverHandle) -> u64 {
    driver.snapshot("ws").await.unwrap().unwrap().core.active
}

async fn release(
    driver: &DriverHandle,
    token: LeaseToken,
    usage: ActualUsage,
) -> Result<Vec<turnstile_admission::BreakerTransition>, turnstile_shell::DriverError> {
    driver
        .ask(|reply| Command::Release {
            token,
            workspace: Arc::from("ws"),
            principal: Arc::from("p"),
            outcome: Outcome::Success,
            usage,
            forget_budget: None,
            reply,
        })
        .await
        .unwrap()
}

async fn heartbeat(
    driver: &DriverHandle,
    token: LeaseToken,
) -> Result<u64, turnstile_shell::DriverError> {
    driver
        .ask(|reply| Command::Heartbeat {
            token,
            workspace: Arc::from("ws"),
            principal: Arc::from("p"),
            reply,
        })
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_grant_is_answered_only_once_its_batch_is_durable() {
    let shared = Shared::new(Mode::Hold);
    let (driver, handle) = driver(&shared, 0, 1_000);
    tokio::spawn(driver.run());
    let asking = {
        let handle = handle.clone();
        tokio::spawn(async move { handle.acquire(ask(Wait::For(10))).await })
    };
    settle().await;
    assert!(
        !asking.is_finished(),
        "answered before the grant was durable"
    );
    let granted = shared.granted();
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].lease.provider_id, "llm");
    assert_eq!(granted[0].lease.budget_id.as_deref(), Some("invocation"));
    assert_eq!(granted[0].lease.charge.tokens, Some(40));
    assert_eq!(granted[0].expires_at, Some(1_000));

    shared.complete_held();
    let AcquireReply::Admitted(mut grant) = asking.await.unwrap().unwrap() else {
        panic!("not admitted");
    };
    assert_eq!(grant.token, granted[0].token);
    grant.accept();

    // A release is answered once durable too.
    let releasing = {
        let handle = handle.clone();
        let token = grant.token;
        tokio::spawn(async move { release(&handle, token, ActualUsage::none().tokens(7)).await })
    };
    settle().await;
    assert!(!releasing.is_finished());
    shared.complete_held();
    assert!(releasing.await.unwrap().is_ok());
    assert_eq!(
        shared.released(),
        vec![(grant.token, ActualUsage::none().tokens(7))]
    );
}

#[tokio::test(start_paused = true)]
async fn a_grant_that_cannot_be_made_durable_is_given_back() {
    let shared = Shared::new(Mode::Fail);
    let (driver, handle) = driver(&shared, 0, 1_000);
    tokio::spawn(driver.run());
    let answer = handle.acquire(ask(Wait::For(10))).await.unwrap();
    assert!(matches!(answer, AcquireReply::Internal));
    settle().await;
    assert_eq!(active(&handle).await, 0, "the permit came back");
    let token = shared.granted()[0].token;
    assert_eq!(shared.released(), vec![(token, ActualUsage::none())]);
}

#[tokio::test(start_paused = true)]
async fn expiries_and_budget_releases_are_journaled() {
    let shared = Shared::new(Mode::Durable);
    let (driver, handle) = driver(&shared, 0, 1_000);
    tokio::spawn(driver.run());
    let grant = admitted(&handle).await;
    tokio::time::advance(Duration::from_millis(1_000)).await;
    settle().await;
    assert_eq!(shared.released(), vec![(grant.token, ActualUsage::none())]);
    let released = handle
        .ask(|reply| Command::ReleaseBudget {
            workspace: Arc::from("ws"),
            budget: "invocation".into(),
            reply,
        })
        .await
        .unwrap()
        .unwrap();
    assert!(released);
    assert!(matches!(
        shared.events().last(),
        Some(LeaseEvent::BudgetReleased { budget, .. }) if budget == "invocation"
    ));
}

#[tokio::test(start_paused = true)]
async fn a_release_that_forgets_its_budget_is_answered_once_both_are_durable() {
    let shared = Shared::new(Mode::Durable);
    let (driver, handle) = driver(&shared, 0, 1_000);
    tokio::spawn(driver.run());
    let grant = admitted(&handle).await;
    *shared.mode.lock().unwrap() = Mode::Hold;
    let token = grant.token;
    let releasing = {
        let handle = handle.clone();
        tokio::spawn(async move {
            handle
                .ask(|reply| Command::Release {
                    token,
                    workspace: Arc::from("ws"),
                    principal: Arc::from("p"),
                    outcome: Outcome::Success,
                    usage: ActualUsage::none().tokens(7),
                    forget_budget: Some("invocation".into()),
                    reply,
                })
                .await
                .unwrap()
        })
    };
    settle().await;
    assert!(!releasing.is_finished(), "answered before it was durable");
    let events = shared.events();
    assert!(matches!(
        &events[events.len() - 2..],
        [
            LeaseEvent::Released { token: released, .. },
            LeaseEvent::BudgetReleased { budget, .. },
        ] if *released == token && budget == "invocation"
    ));
    shared.complete_held();
    assert!(releasing.await.unwrap().is_ok());
    assert_eq!(active(&handle).await, 0);
    // The budget is gone: releasing it again finds nothing.
    *shared.mode.lock().unwrap() = Mode::Durable;
    let again = handle
        .ask(|reply| Command::ReleaseBudget {
            workspace: Arc::from("ws"),
            budget: "invocation".into(),
            reply,
        })
        .await
        .unwrap()
        .unwrap();
    assert!(!again);
}

#[tokio::test(start_paused = true)]
async fn a_reinstated_lease_keeps_its_token_counts_and_gets_a_full_ttl_from_the_restart() {
    // Before the crash: one lease of the provider's one slot, heartbeated once.
    let before = Shared::new(Mode::Durable);
    let (driver_before, handle_before) = driver(&before, 0, 1_000);
    let task = tokio::spawn(driver_before.run());
    let AcquireReply::Admitted(mut grant) =
        handle_before.acquire(ask(Wait::For(10))).await.unwrap()
    else {
        panic!("not admitted");
    };
    grant.accept();
    let token = grant.token;
    drop(grant);
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(heartbeat(&handle_before, token).await, Ok(1_500));
    task.abort(); // the crash: nothing more is journaled
    let held = before.granted().remove(0);
    assert_eq!(held.expires_at, Some(1_000), "heartbeats are not journaled");

    // The restart, 300 ms later on the wall clock.
    let after = Shared::new(Mode::Durable);
    let (mut driver_after, handle) = driver(&after, 800, 1_000);
    driver_after.reinstate(held.clone()).unwrap();
    assert!(
        driver_after.reinstate(held).is_err(),
        "a token is held once"
    );
    tokio::spawn(driver_after.run());
    assert_eq!(active(&handle).await, 1);
    let refused = match handle.acquire(ask(Wait::NoWait)).await.unwrap() {
        AcquireReply::Rejected(rejection) => rejection,
        _ => panic!("the reinstated lease does not count"),
    };
    assert_eq!(refused.reason, Reason::Concurrency);

    // Not freed early: a full TTL from the restart (1,800), later than any promised expiry.
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(active(&handle).await, 1);
    // The holder heartbeats and releases with its pre-crash token.
    assert_eq!(heartbeat(&handle, token).await, Ok(2_799));
    assert!(release(&handle, token, ActualUsage::none()).await.is_ok());
    assert_eq!(active(&handle).await, 0);
    assert_eq!(after.released(), vec![(token, ActualUsage::none())]);
    assert!(
        after.granted().is_empty(),
        "a reinstated lease is not granted again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reinstated_lease_whose_holder_is_gone_is_reclaimed_at_its_ttl() {
    let before = Shared::new(Mode::Durable);
    let (driver_before, handle_before) = driver(&before, 0, 1_000);
    let task = tokio::spawn(driver_before.run());
    let AcquireReply::Admitted(mut grant) =
        handle_before.acquire(ask(Wait::For(10))).await.unwrap()
    else {
        panic!("not admitted");
    };
    grant.accept();
    task.abort();
    let held = before.granted().remove(0);

    let after = Shared::new(Mode::Durable);
    let (mut driver_after, handle) = driver(&after, 10_000, 1_000);
    driver_after.reinstate(held).unwrap();
    tokio::spawn(driver_after.run());
    assert_eq!(active(&handle).await, 1);
    tokio::time::advance(Duration::from_millis(1_000)).await;
    settle().await;
    assert_eq!(active(&handle).await, 0);
    assert_eq!(after.released(), vec![(grant.token, ActualUsage::none())]);
    assert!(matches!(
        handle.acquire(ask(Wait::NoWait)).await.unwrap(),
        AcquireReply::Admitted(_)
    ));
}

/// The pause a release with outcome `retry-after` (or a relayed Retry-After) applies goes into
/// the same batch as the release, and the answer waits until that batch is durable: a crash
/// after the answer cannot lose the pause a restart puts back.
#[tokio::test(start_paused = true)]
async fn a_pause_is_durable_before_the_answer_that_caused_it() {
    let shared = Shared::new(Mode::Durable);
    let (driver, handle) = driver(&shared, 0, 1_000);
    tokio::spawn(driver.run());
    let grant = admitted(&handle).await;
    *shared.mode.lock().unwrap() = Mode::Hold;
    let releasing = {
        let handle = handle.clone();
        let token = grant.token;
        tokio::spawn(async move {
            handle
                .ask(|reply| Command::Release {
                    token,
                    workspace: Arc::from("ws"),
                    principal: Arc::from("p"),
                    outcome: Outcome::RetryAfter {
                        retry_after_ms: 5_000,
                    },
                    usage: ActualUsage::none(),
                    forget_budget: None,
                    reply,
                })
                .await
                .unwrap()
        })
    };
    settle().await;
    assert!(
        !releasing.is_finished(),
        "answered before the pause was durable"
    );
    let events = shared.events();
    assert_eq!(
        events[events.len() - 2..],
        [
            LeaseEvent::Released {
                token: grant.token,
                usage: ActualUsage::none(),
            },
            LeaseEvent::Paused {
                workspace: Arc::from("ws"),
                provider: "llm".into(),
                until_epoch_ms: 5_000,
            },
        ],
        "one batch: the release, then its pause"
    );
    shared.complete_held();
    assert!(releasing.await.unwrap().is_ok());

    // A relayed Retry-After that moves the end by a second or more: held the same way.
    let relaying = {
        let handle = handle.clone();
        tokio::spawn(async move { handle.retry_after("ws", "llm", 20_000).await })
    };
    settle().await;
    assert!(!relaying.is_finished());
    assert_eq!(
        shared.events().last(),
        Some(&LeaseEvent::Paused {
            workspace: Arc::from("ws"),
            provider: "llm".into(),
            until_epoch_ms: 20_000,
        })
    );
    shared.complete_held();
    assert_eq!(relaying.await.unwrap().unwrap(), 20_000);
}
