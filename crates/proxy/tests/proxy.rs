//! The proxy on its own: its router driven in process (no HTTP server of the service) in front
//! of a shell [`Driver`] and the scripted fake upstream ([`FakeUpstream`], real loopback HTTP).
//!
//! Each test builds its own driver, proxy and fake, so the counters it reads are its own:
//! admitted calls are forwarded and settled with the provider's usage (whole and streamed), a
//! refused call never reaches the upstream, an upstream 429 pauses the lane, and with shared
//! limits the call takes the shell's one admission step (a turn given away queues it again).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower_service::Service;
use turnstile_admission::{
    ActualUsage, BreakerTransition, Coordination, Estimate, Millis, Outcome, Profile, Registry,
};
use turnstile_proxy::{
    ApiFormat, FakeUpstream, HostLimits, Identity, ModelConfig, Proxy, ProxyConfig, UpstreamConfig,
    REASON_HEADER, WAIT_HEADER,
};
use turnstile_shell::{
    Acquire, AcquireReply, Clock, Done, Driver, DriverConfig, DriverHandle, Exposition, Journal,
    LeaseEvent, LeaseMetrics, Registration, SharedFuture, SharedLimits, SharedTry, SharedVerdict,
    Telemetry, Wait,
};

const UPSTREAM_KEY: &str = "sk-test-upstream";

/// Keeps what the driver journals of released leases: the usage each was settled with.
#[derive(Clone, Default)]
struct Releases(Arc<Mutex<Vec<ActualUsage>>>);

impl Journal for Releases {
    fn profile_registered(&mut self, _registration: Registration, done: Done) {
        done(Ok(()));
    }

    fn breaker_transitions(&mut self, _workspace: &str, _transitions: &[BreakerTransition]) {}

    fn lease_events(&mut self, events: Vec<LeaseEvent>, done: Done) {
        let mut released = self.0.lock().unwrap();
        for event in events {
            if let LeaseEvent::Released { usage, .. } = event {
                released.push(usage);
            }
        }
        done(Ok(()));
    }
}

struct Rig {
    proxy: Arc<Proxy>,
    driver: DriverHandle,
    leases: Arc<LeaseMetrics>,
    releases: Releases,
    fake: FakeUpstream,
}

fn model(provider: &str, prices: Option<(f64, f64)>) -> ModelConfig {
    ModelConfig {
        upstream: Some("openai".into()),
        provider: Some(provider.into()),
        deployments: None,
        upstream_model: None,
        input_usd_per_mtok: prices.map(|p| p.0),
        output_usd_per_mtok: prices.map(|p| p.1),
        default_max_output_tokens: None,
    }
}

/// A driver with workspace `ws` registered, and a proxy in front of a fresh fake upstream,
/// with `shared` limits when given.
async fn rig(shared: Option<Arc<dyn SharedLimits>>) -> Rig {
    let fake = FakeUpstream::spawn_thread();
    let releases = Releases::default();
    let leases = Arc::new(LeaseMetrics::default());
    let (driver, _task) = Driver::spawn(
        Registry::new(),
        Clock::system(),
        DriverConfig { lease_ttl_ms: None },
        Box::new(releases.clone()),
        leases.clone(),
    );
    let lane = json!({"concurrency": 8, "maxQueueLength": 64, "maxQueueWaitMs": 60000});
    let profile = json!({
        "workspace": {"concurrency": 64, "maxQueueLength": 64, "maxQueueWaitMs": 60000},
        "providers": {"openai": lane, "tiny": {"concurrency": 1}},
        "principals": {
            "alice": {"concurrency": 16, "maxQueueLength": 64, "maxQueueWaitMs": 60000,
                      "maxCostUsd": 1000, "allowUnknownCost": true},
        }
    });
    let parsed: Profile = serde_json::from_value(profile.clone()).unwrap();
    driver
        .register("ws", "v1", parsed, profile.to_string())
        .await
        .unwrap();

    let mut config = ProxyConfig::default();
    config.upstreams.insert(
        "openai".into(),
        UpstreamConfig {
            format: ApiFormat::Openai,
            base_url: Some(fake.openai_base()),
            base_url_env: None,
            api_key_env: Some("UPSTREAM_KEY".into()),
            required: false,
        },
    );
    config
        .models
        .insert("gpt-test".into(), model("openai", Some((1.0, 2.0))));
    config.models.insert("gpt-tiny".into(), model("tiny", None));
    let mut proxy = Proxy::new(
        config,
        |name| (name == "UPSTREAM_KEY").then(|| UPSTREAM_KEY.to_owned()),
        driver.clone(),
        Telemetry::global(),
        HostLimits {
            body_read_timeout: Duration::from_secs(10),
            body_min_bytes_per_sec: 1,
            max_retry_after_ms: 60_000,
        },
    )
    .unwrap();
    if let Some(shared) = shared {
        proxy = proxy.with_shared(shared);
    }
    Rig {
        proxy: Arc::new(proxy),
        driver,
        leases,
        releases,
        fake,
    }
}

impl Rig {
    /// `POST /openai/v1/chat/completions` as principal `alice` of `ws`, scripted for the fake.
    async fn chat(&self, body: Value, script: &str, wait_ms: Option<u64>) -> Response<Body> {
        let mut request = Request::post("/openai/v1/chat/completions")
            .header("content-type", "application/json")
            .header("x-fake-script", script)
            .extension(Identity::Principal {
                workspace: Arc::from("ws"),
                principal: Arc::from("alice"),
            });
        if let Some(ms) = wait_ms {
            request = request.header(WAIT_HEADER, ms.to_string());
        }
        let request = request.body(Body::from(body.to_string())).unwrap();
        let mut router = turnstile_proxy::router::<()>(self.proxy.clone());
        router.call(request).await.unwrap()
    }

    /// The value of the proxy's counter line that starts with `prefix` (NaN: none).
    fn metric(&self, prefix: &str) -> f64 {
        let text = Exposition::new()
            .with(Arc::clone(self.proxy.metrics()))
            .text();
        text.lines()
            .find(|line| line.starts_with(prefix))
            .and_then(|line| line.rsplit(' ').next())
            .map(|value| value.parse().unwrap())
            .unwrap_or(f64::NAN)
    }

    /// Waits until the driver journaled `count` releases, and answers their usage.
    async fn released(&self, count: usize) -> Vec<ActualUsage> {
        for _ in 0..500 {
            let released = self.releases.0.lock().unwrap().clone();
            if released.len() >= count {
                return released;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the driver did not release {count} lease(s)");
    }
}

fn chat(stream: bool) -> Value {
    json!({"model": "gpt-test", "max_tokens": 50, "stream": stream,
           "messages": [{"role": "user", "content": "hello"}]})
}

async fn text(response: Response<Body>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_call_is_forwarded_and_settled_with_the_providers_usage() {
    let rig = rig(None).await;
    let response = rig.chat(chat(false), "usage=12/34", None).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = serde_json::from_str(&text(response).await).unwrap();
    assert_eq!(body["usage"]["prompt_tokens"], 12, "{body}");

    let stats = rig.fake.stats();
    assert_eq!(stats.requests, 1);
    assert_eq!(
        stats.last_authorization.as_deref(),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
    assert!(!stats.saw_turnstile_key);
    assert_eq!(
        rig.metric("turnstile_proxy_settlements_total{lane=\"openai\",basis=\"reported\"}"),
        1.0
    );
    assert_eq!(
        rig.metric("turnstile_proxy_usage_tokens_total{lane=\"openai\",kind=\"input\"}"),
        12.0
    );
    assert_eq!(
        rig.metric("turnstile_proxy_usage_tokens_total{lane=\"openai\",kind=\"output\"}"),
        34.0
    );
    // The driver released the lease with what the provider reported.
    assert_eq!(rig.released(1).await[0].tokens, Some(46));
    assert_eq!(rig.leases.leases_active.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_is_settled_with_its_usage() {
    let rig = rig(None).await;
    let response = rig.chat(chat(true), "chunks=3,usage=7/9", None).await;
    assert_eq!(response.status(), StatusCode::OK);
    let streamed = text(response).await;
    assert!(streamed.contains("data: [DONE]"), "{streamed}");
    // The client did not ask for the usage chunk: the proxy asked for it and kept it back.
    assert!(!streamed.contains("\"usage\":{"), "{streamed}");

    assert_eq!(rig.fake.stats().arrivals[0].include_usage, Some(true));
    assert_eq!(rig.released(1).await[0].tokens, Some(16));
    assert_eq!(
        rig.metric("turnstile_proxy_settlements_total{lane=\"openai\",basis=\"reported\"}"),
        1.0
    );
    assert_eq!(
        rig.metric("turnstile_proxy_usage_tokens_total{lane=\"openai\",kind=\"output\"}"),
        9.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_never_reaches_the_upstream() {
    let rig = rig(None).await;
    // The tiny lane's one permit is held.
    let held = match rig
        .driver
        .acquire(Acquire {
            workspace: Arc::from("ws"),
            principal: Arc::from("alice"),
            provider_id: "tiny".into(),
            budget_id: "held".into(),
            estimate: Estimate::default(),
            wait: Wait::NoWait,
            span: None,
        })
        .await
        .unwrap()
    {
        AcquireReply::Admitted(grant) => grant,
        _ => panic!("the first permit is free"),
    };
    let mut body = chat(false);
    body["model"] = json!("gpt-tiny");
    let response = rig.chat(body, "", Some(0)).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()[REASON_HEADER], "concurrency");
    assert_eq!(rig.fake.stats().requests, 0, "no upstream request");
    assert_eq!(
        rig.metric("turnstile_proxy_calls_total{lane=\"tiny\",class=\"refused\"}"),
        1.0
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_429_pauses_the_lane() {
    let rig = rig(None).await;
    let response = rig
        .chat(chat(false), "status=429,retry-after=30", None)
        .await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        rig.metric("turnstile_proxy_upstream_pauses_total{lane=\"openai\"}"),
        1.0
    );
    // The lane is paused for every caller: the next call is refused without going upstream.
    let next = rig.chat(chat(false), "", Some(0)).await;
    assert_eq!(next.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(next.headers()[REASON_HEADER], "retry-after");
    assert_eq!(rig.fake.stats().requests, 1);
}

/// Shared limits that give the first try's turn away, then grant (`shared`).
#[derive(Default)]
struct TurnThenGrant {
    /// The local grant's token of each try.
    tries: Mutex<Vec<String>>,
    /// The shared leases released.
    released: Mutex<Vec<String>>,
    /// The per-call budgets forgotten.
    forgotten: Mutex<Vec<String>>,
}

impl SharedLimits for TurnThenGrant {
    fn now_ms(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as Millis
    }

    fn try_admit<'a>(&'a self, attempt: SharedTry<'a>) -> SharedFuture<'a, SharedVerdict> {
        let mut tries = self.tries.lock().unwrap();
        tries.push(attempt.grant.token.to_string());
        let verdict = if tries.len() == 1 {
            SharedVerdict::Turn
        } else {
            SharedVerdict::Granted(Coordination::Shared)
        };
        Box::pin(async move { verdict })
    }

    fn released(&self) -> SharedFuture<'_, ()> {
        Box::pin(std::future::pending())
    }

    fn release(
        &self,
        token: &str,
        _outcome: Outcome,
        _usage: ActualUsage,
    ) -> Option<tokio::task::JoinHandle<()>> {
        self.released.lock().unwrap().push(token.to_owned());
        None
    }

    fn forget_budget(&self, _workspace: &str, budget_id: &str) {
        self.forgotten.lock().unwrap().push(budget_id.to_owned());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_given_away_queues_the_call_again_until_the_shared_limits_grant_it() {
    let shared = Arc::new(TurnThenGrant::default());
    let rig = rig(Some(shared.clone())).await;
    let response = rig.chat(chat(false), "", None).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(rig.fake.stats().requests, 1);

    // Two local grants: the first went back with the turn, the second was admitted.
    let tries = shared.tries.lock().unwrap().clone();
    assert_eq!(tries.len(), 2, "{tries:?}");
    assert_ne!(tries[0], tries[1]);
    assert_eq!(rig.leases.leases_granted.load(Ordering::Relaxed), 2);
    // The call settled the admitted lease in the shared books, then its per-call budget.
    assert_eq!(*shared.released.lock().unwrap(), [tries[1].clone()]);
    let forgotten = shared.forgotten.lock().unwrap().clone();
    assert!(
        forgotten.len() == 1 && forgotten[0].starts_with("~proxy-"),
        "{forgotten:?}"
    );
    rig.released(2).await;

    // The step the proxy took admits with the shared limits' coordination.
    let again = Arc::new(TurnThenGrant::default());
    let reply = rig
        .driver
        .acquire_shared(
            Acquire {
                workspace: Arc::from("ws"),
                principal: Arc::from("alice"),
                provider_id: "openai".into(),
                budget_id: "b".into(),
                estimate: Estimate::default(),
                wait: Wait::For(5_000),
                span: None,
            },
            Some(&*again as &dyn SharedLimits),
        )
        .await
        .unwrap();
    match reply {
        AcquireReply::Admitted(grant) => {
            assert_eq!(grant.evidence.coordination, Some(Coordination::Shared));
        }
        _ => panic!("not admitted"),
    }
    assert_eq!(again.tries.lock().unwrap().len(), 2);
}
