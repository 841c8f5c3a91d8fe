//! The async admission driver: one timer, RAII leases, cancellation on drop, and
//! CNC-ADMIT-012 against a real loopback HTTP server.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use turnstile_admission::{
    ActualUsage, AdmissionRequest, Decision, Estimate, Outcome, Profile, Reason, Registry,
};
use turnstile_decision::{AdmissionDriver, AdmissionError, Clock};

use common::limits;

fn profile(concurrency: u32, queue: u64, wait_ms: u64) -> Profile {
    let l = limits(concurrency, queue, wait_ms);
    Profile {
        workspace: l.clone(),
        providers: [("jev".to_owned(), l.clone())].into_iter().collect(),
        principals: [("principal".to_owned(), l)].into_iter().collect(),
    }
}

fn request() -> AdmissionRequest {
    AdmissionRequest::new("principal", "jev", "invocation")
}

fn rejection_reason(error: &AdmissionError) -> Reason {
    error.rejection().expect("a rejection").reason
}

#[tokio::test(start_paused = true)]
async fn queued_waiter_is_admitted_on_release_and_lease_drop_releases() {
    let driver = AdmissionDriver::with_clock(Registry::new(), Clock::starting_at(0));
    driver
        .register("ws", "v1", profile(1, 8, 60_000))
        .await
        .unwrap();
    let first = driver.acquire("ws", request()).await.unwrap();
    assert_eq!(first.evidence().decision, Decision::Admit);
    let waiting = {
        let driver = driver.clone();
        tokio::spawn(async move { driver.acquire("ws", request()).await })
    };
    common::settle().await;
    assert_eq!(driver.snapshot("ws").await.unwrap().queued, 1);
    tokio::time::advance(Duration::from_millis(30)).await;
    first
        .release(Outcome::Success, ActualUsage::none())
        .await
        .unwrap();
    let second = waiting.await.unwrap().unwrap();
    assert_eq!(second.evidence().queue_delay_ms, 30);
    drop(second);
    let snapshot = driver.snapshot("ws").await.unwrap();
    assert_eq!((snapshot.active, snapshot.queued), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn one_timer_fires_the_queue_dwell_expiry_exactly() {
    let driver = AdmissionDriver::with_clock(Registry::new(), Clock::starting_at(0));
    driver
        .register("ws", "v1", profile(1, 8, 40))
        .await
        .unwrap();
    let _held = driver.acquire("ws", request()).await.unwrap();
    let start = tokio::time::Instant::now();
    let waiting = {
        let driver = driver.clone();
        tokio::spawn(async move { driver.acquire("ws", request()).await })
    };
    common::settle().await;
    assert_eq!(driver.armed_timer().await, Some(40));
    let error = waiting.await.unwrap().unwrap_err();
    assert_eq!(rejection_reason(&error), Reason::QueueTimeout);
    assert_eq!(start.elapsed(), Duration::from_millis(40));
    assert_eq!(driver.armed_timer().await, None);
    assert_eq!(driver.snapshot("ws").await.unwrap().queued, 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_pending_acquire_cancels_the_waiter() {
    let driver = AdmissionDriver::with_clock(Registry::new(), Clock::starting_at(0));
    driver
        .register("ws", "v1", profile(1, 8, 60_000))
        .await
        .unwrap();
    let held = driver.acquire("ws", request()).await.unwrap();
    let pending = {
        let driver = driver.clone();
        tokio::spawn(async move { driver.acquire("ws", request()).await })
    };
    common::settle().await;
    assert_eq!(driver.snapshot("ws").await.unwrap().queued, 1);
    pending.abort();
    let _ = pending.await;
    assert_eq!(driver.snapshot("ws").await.unwrap().queued, 0);
    drop(held);
    let snapshot = driver.snapshot("ws").await.unwrap();
    assert_eq!((snapshot.active, snapshot.queued), (0, 0), "no leaked slot");
    // A dropped future that timed out via select also leaves nothing behind.
    let held = driver.acquire("ws", request()).await.unwrap();
    let raced =
        tokio::time::timeout(Duration::from_millis(5), driver.acquire("ws", request())).await;
    assert!(raced.is_err());
    assert_eq!(driver.snapshot("ws").await.unwrap().queued, 0);
    drop(held);
    assert_eq!(driver.snapshot("ws").await.unwrap().active, 0);
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_pending_acquire_returns_the_cancelled_evidence() {
    let driver = AdmissionDriver::with_clock(Registry::new(), Clock::starting_at(0));
    driver
        .register("ws", "v1", profile(1, 8, 60_000))
        .await
        .unwrap();
    let _held = driver.acquire("ws", request()).await.unwrap();
    let token = tokio_util::sync::CancellationToken::new();
    let pending = {
        let driver = driver.clone();
        let token = token.clone();
        tokio::spawn(async move { driver.acquire_or_cancel("ws", request(), &token).await })
    };
    common::settle().await;
    token.cancel();
    let error = pending.await.unwrap().unwrap_err();
    let rejection = error.rejection().unwrap();
    assert_eq!(rejection.reason, Reason::Cancelled);
    assert_eq!(rejection.evidence.decision, Decision::Reject);
    assert_eq!(driver.snapshot("ws").await.unwrap().queued, 0);
}

#[tokio::test(start_paused = true)]
async fn peak_totals_keep_the_high_water_marks_of_active_and_queued() {
    let driver = AdmissionDriver::with_clock(Registry::new(), Clock::starting_at(0));
    assert_eq!(driver.peak_totals("ws").await, None);
    driver
        .register("ws", "v1", profile(2, 8, 60_000))
        .await
        .unwrap();
    assert_eq!(driver.peak_totals("ws").await, Some((0, 0)));
    let first = driver.acquire("ws", request()).await.unwrap();
    let second = driver.acquire("ws", request()).await.unwrap();
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let driver = driver.clone();
            tokio::spawn(async move { driver.acquire("ws", request()).await })
        })
        .collect();
    common::settle().await;
    assert_eq!(driver.peak_totals("ws").await, Some((2, 3)));
    drop(first);
    drop(second);
    for waiter in waiting {
        drop(waiter.await.unwrap().unwrap());
    }
    let snapshot = driver.snapshot("ws").await.unwrap();
    assert_eq!((snapshot.active, snapshot.queued), (0, 0));
    assert_eq!(
        driver.peak_totals("ws").await,
        Some((2, 3)),
        "marks never go down"
    );
    assert_eq!(driver.peak_totals("other").await, None);
}

#[tokio::test(start_paused = true)]
async fn unknown_workspace_is_a_registry_error_without_the_id() {
    let driver = AdmissionDriver::with_clock(Registry::new(), Clock::starting_at(0));
    let error = driver
        .acquire("tenant-secret", request())
        .await
        .unwrap_err();
    assert!(matches!(error, AdmissionError::Registry(_)));
    assert!(!error.to_string().contains("tenant-secret"));
}

/// A loopback server whose first request is held until released.
struct SlowServer {
    url: String,
    served: Arc<AtomicUsize>,
    release: Arc<Notify>,
}

async fn slow_server() -> SlowServer {
    use axum::routing::post;
    let served = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Notify::new());
    let app = {
        let served = Arc::clone(&served);
        let release = Arc::clone(&release);
        axum::Router::new().route(
            "/call",
            post(move || {
                let served = Arc::clone(&served);
                let release = Arc::clone(&release);
                async move {
                    if served.fetch_add(1, Ordering::SeqCst) == 0 {
                        release.notified().await;
                    }
                    "ok"
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/call", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    SlowServer {
        url,
        served,
        release,
    }
}

#[tokio::test]
async fn cnc_admit_012_loopback_slow_client_sheds_overflow_before_dispatch() {
    let server = slow_server().await;
    let driver = AdmissionDriver::new(Registry::new());
    driver
        .register("ws", "v1", profile(1, 1, 2000))
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let peak = Arc::new(AtomicUsize::new(0));
    let active = Arc::new(AtomicUsize::new(0));

    let call = |driver: AdmissionDriver| {
        let client = client.clone();
        let url = server.url.clone();
        let (peak, active) = (Arc::clone(&peak), Arc::clone(&active));
        async move {
            let lease = driver.acquire("ws", request()).await?;
            let now = active.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let body = client
                .post(&url)
                .send()
                .await
                .and_then(|r| r.error_for_status());
            let text = match body {
                Ok(response) => response.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            active.fetch_sub(1, Ordering::SeqCst);
            lease
                .release(Outcome::Success, ActualUsage::none())
                .await
                .unwrap();
            Ok::<String, AdmissionError>(text)
        }
    };

    let first = tokio::spawn(call(driver.clone()));
    while server.served.load(Ordering::SeqCst) < 1 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let second = tokio::spawn(call(driver.clone()));
    while driver.snapshot("ws").await.unwrap().queued < 1 {
        tokio::task::yield_now().await;
    }
    let third = call(driver.clone()).await;
    assert_eq!(rejection_reason(&third.unwrap_err()), Reason::QueueFull);
    assert_eq!(
        server.served.load(Ordering::SeqCst),
        1,
        "shed before any traffic"
    );

    let snapshot = driver.snapshot("ws").await.unwrap();
    assert_eq!((snapshot.active, snapshot.queued), (1, 1));
    server.release.notify_one();
    assert_eq!(first.await.unwrap().unwrap(), "ok");
    assert_eq!(second.await.unwrap().unwrap(), "ok");
    assert_eq!(peak.load(Ordering::SeqCst), 1);
    assert_eq!(server.served.load(Ordering::SeqCst), 2);
    let snapshot = driver.snapshot("ws").await.unwrap();
    assert_eq!((snapshot.active, snapshot.queued), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn releasing_with_actual_usage_charges_the_invocation_what_the_call_used() {
    let driver = AdmissionDriver::with_clock(Registry::new(), Clock::starting_at(0));
    let mut budgeted = profile(4, 8, 60_000);
    if let Some(principal) = budgeted.principals.get_mut("principal") {
        principal.max_tokens = Some(1_000);
    }
    driver.register("ws", "v1", budgeted).await.unwrap();
    let ask = || request().with_estimate(Estimate::new().tokens(100));
    let lease = driver.acquire("ws", ask()).await.unwrap();
    // The model call used 950 tokens, not the 100 estimated.
    lease
        .release(Outcome::Success, ActualUsage::none().tokens(950))
        .await
        .unwrap();
    let refused = driver.acquire("ws", ask()).await.unwrap_err();
    assert_eq!(rejection_reason(&refused), Reason::Tokens);
    // A plain release leaves the estimate charged: another invocation spends 100 of 1,000.
    let other = || {
        AdmissionRequest::new("principal", "jev", "another")
            .with_estimate(Estimate::new().tokens(100))
    };
    for _ in 0..10 {
        driver
            .acquire("ws", other())
            .await
            .unwrap()
            .release(Outcome::Success, ActualUsage::none())
            .await
            .unwrap();
    }
    let refused = driver.acquire("ws", other()).await.unwrap_err();
    assert_eq!(rejection_reason(&refused), Reason::Tokens);
}
