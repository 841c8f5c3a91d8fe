//! Rollouts through the driver (issue 33) on paused tokio time: start, read, promote (journaled
//! as a registration of the candidate), abort and the history; a canary slice's waiter is
//! delivered by the driver like any other.

use std::sync::{Arc, Mutex};

use turnstile_admission::{
    ActualUsage, BreakerTransition, Estimate, Limits, Outcome, Profile, ProfileChangeKind, Reason,
    Registry, RegistryError, RolloutError, RolloutMode, RolloutOutcome,
};
use turnstile_shell::{
    Acquire, AcquireReply, Approval, Clock, Done, Driver, DriverConfig, DriverError, DriverHandle,
    Grant, Journal, LeaseMetrics, Registration, Wait,
};

type Registrations = Arc<Mutex<Vec<Registration>>>;

/// Keeps every registration the driver journals.
struct RegistrationJournal(Registrations);

impl Journal for RegistrationJournal {
    fn profile_registered(&mut self, registration: Registration, done: Done) {
        self.0.lock().unwrap().push(registration);
        done(Ok(()));
    }

    fn breaker_transitions(&mut self, _workspace: &str, _transitions: &[BreakerTransition]) {}

    fn lease_events(&mut self, _events: Vec<turnstile_shell::LeaseEvent>, done: Done) {
        done(Ok(()));
    }
}

fn driver() -> (DriverHandle, Registrations) {
    let journaled = Registrations::default();
    let (driver, _task) = Driver::spawn(
        Registry::new(),
        Clock::starting_at(0),
        DriverConfig { lease_ttl_ms: None },
        Box::new(RegistrationJournal(journaled.clone())),
        Arc::new(LeaseMetrics::default()),
    );
    (driver, journaled)
}

fn profile(concurrency: u32) -> Profile {
    let mut lane = Limits::with_concurrency(concurrency);
    lane.max_queue_length = Some(8);
    Profile {
        workspace: lane.clone(),
        providers: [("jev".to_owned(), lane.clone())].into_iter().collect(),
        principals: [("p".to_owned(), lane)].into_iter().collect(),
    }
}

fn ask(wait: Wait) -> Acquire {
    Acquire {
        workspace: Arc::from("ws"),
        principal: Arc::from("p"),
        provider_id: "jev".to_owned(),
        budget_id: "invocation".to_owned(),
        estimate: Estimate::default(),
        wait,
        span: None,
    }
}

async fn grant(driver: &DriverHandle, wait: Wait) -> Grant {
    match driver.acquire(ask(wait)).await.unwrap() {
        AcquireReply::Admitted(grant) => grant,
        AcquireReply::Rejected(rejection) => panic!("refused: {:?}", rejection.reason),
        _ => panic!("no answer"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_shadow_is_compared_then_promoted_and_journaled_as_a_registration_of_the_candidate() {
    let (driver, journaled) = driver();
    driver
        .register("ws", "v1", profile(2), "{}".into())
        .await
        .unwrap();
    let started = driver
        .start_rollout(
            "ws",
            "v2",
            (profile(1), "v2-as-sent".into()),
            RolloutMode::Shadow,
        )
        .await
        .unwrap();
    assert_eq!(started.revision, "v2");
    let first = grant(&driver, Wait::NoWait).await;
    let second = grant(&driver, Wait::NoWait).await;
    let view = driver.rollout("ws").await.unwrap().expect("running");
    assert_eq!((view.decisions.compared, view.decisions.differ), (2, 1));
    assert_eq!(view.decisions.by_reason.get("concurrency"), Some(&1));

    assert_eq!(
        driver
            .start_rollout("ws", "v3", (profile(1), "{}".into()), RolloutMode::Shadow)
            .await
            .unwrap_err(),
        DriverError::Rollout(RolloutError::AlreadyRunning)
    );
    assert_eq!(
        driver
            .register("ws", "v3", profile(1), "{}".into())
            .await
            .unwrap_err(),
        DriverError::Registry(RegistryError::RolloutRunning)
    );

    let (finished, change) = driver
        .promote_rollout(
            "ws",
            Approval {
                actor: Some("key-1".into()),
                note: Some("clean".into()),
                approved_by: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(finished.outcome, RolloutOutcome::Promoted);
    let change = change.expect("v2 became current");
    assert_eq!(change.kind, ProfileChangeKind::Change);
    {
        let journaled = journaled.lock().unwrap();
        let promoted = journaled.last().expect("journaled");
        assert_eq!(promoted.profile_version, "v2");
        assert_eq!(promoted.profile_json, "v2-as-sent");
        assert_eq!(promoted.approval.actor.as_deref(), Some("key-1"));
        assert_eq!(promoted.approval.note.as_deref(), Some("clean"));
        assert_eq!(promoted.change.as_ref(), Some(&change));
    }
    assert_eq!(driver.rollout("ws").await.unwrap(), None);
    assert_eq!(driver.rollouts("ws").await.unwrap(), vec![finished]);
    assert_eq!(
        driver.abort_rollout("ws").await.unwrap_err(),
        DriverError::Rollout(RolloutError::NoRollout)
    );

    // v2's concurrency of 1 binds now.
    first
        .release(Outcome::Success, ActualUsage::none())
        .await
        .unwrap();
    second
        .release(Outcome::Success, ActualUsage::none())
        .await
        .unwrap();
    let _held = grant(&driver, Wait::NoWait).await;
    match driver.acquire(ask(Wait::NoWait)).await.unwrap() {
        AcquireReply::Rejected(rejection) => assert_eq!(rejection.reason, Reason::Concurrency),
        _ => panic!("v2 admits one at a time"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_canary_waiter_is_delivered_by_the_driver_and_an_abort_journals_nothing() {
    let (driver, journaled) = driver();
    driver
        .register("ws", "v1", profile(1), "{}".into())
        .await
        .unwrap();
    driver
        .start_rollout(
            "ws",
            "v2",
            (profile(1), "{}".into()),
            RolloutMode::Canary { share: 1.0 },
        )
        .await
        .unwrap();
    let first = grant(&driver, Wait::NoWait).await;
    assert!(first.evidence().candidate, "the candidate decided");
    let waiting = tokio::spawn({
        let driver = driver.clone();
        async move { grant(&driver, Wait::Unbounded).await }
    });
    tokio::task::yield_now().await;
    first
        .release(Outcome::Success, ActualUsage::none())
        .await
        .unwrap();
    let second = waiting.await.unwrap();
    assert!(second.evidence().candidate);
    assert_eq!(
        driver
            .revision_of("ws", second.evidence())
            .await
            .unwrap()
            .as_deref(),
        Some("v2")
    );
    let aborted = driver.abort_rollout("ws").await.unwrap();
    assert_eq!(aborted.outcome, RolloutOutcome::Aborted);
    assert_eq!(aborted.decisions.compared, 2);
    assert_eq!(journaled.lock().unwrap().len(), 1, "only v1's registration");
    second
        .release(Outcome::Success, ActualUsage::none())
        .await
        .unwrap();
    let after = grant(&driver, Wait::NoWait).await;
    assert!(!after.evidence().candidate, "v1 decides again");
    assert_eq!(
        driver
            .revision_of("ws", after.evidence())
            .await
            .unwrap()
            .as_deref(),
        Some("v1")
    );
}
