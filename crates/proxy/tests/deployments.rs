//! Several deployments per model: the proxy's router in process in front of a shell
//! [`Driver`] and two scripted fake upstreams (real loopback HTTP), one per deployment, each
//! deployment on its own provider lane.
//!
//! Free deployments share calls by weight; an upstream 429 or a refused connection fails the
//! call over to the other deployment (the client sees one answer); a paused deployment gets
//! no call during its pause; when none is free the call queues on the one free soonest; an
//! answer that may have been processed (a 5xx) is never sent again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower_service::Service;
use turnstile_admission::{Profile, Registry};
use turnstile_proxy::{
    FakeUpstream, HostLimits, Identity, Proxy, ProxyConfig, PROVIDER_HEADER, REASON_HEADER,
    WAIT_HEADER,
};
use turnstile_shell::{Clock, Driver, DriverConfig, Exposition, LeaseMetrics, Telemetry};

struct Rig {
    proxy: Arc<Proxy>,
    a: FakeUpstream,
    b: FakeUpstream,
}

/// A port nothing listens on (bound, then closed): connecting to it is refused.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A driver with workspace `ws` (lanes `lane-a`, `lane-b`, `lane-c`, whose breaker opens on
/// one failure), and a proxy with model `m` on fakes `a` (weight 2) and `b` (weight 1), model
/// `down` on a closed port (lane-c) then `a`, and model `single` on `a` alone.
async fn rig() -> Rig {
    let (a, b) = (FakeUpstream::spawn_thread(), FakeUpstream::spawn_thread());
    let (driver, _task) = Driver::spawn(
        Registry::new(),
        Clock::system(),
        DriverConfig { lease_ttl_ms: None },
        Box::new(turnstile_shell::NoJournal),
        Arc::new(LeaseMetrics::default()),
    );
    let lane = json!({"concurrency": 4, "maxQueueLength": 64, "maxQueueWaitMs": 60000});
    let profile = json!({
        "workspace": {"concurrency": 64, "maxQueueLength": 64, "maxQueueWaitMs": 60000},
        "providers": {
            "lane-a": lane, "lane-b": lane,
            "lane-c": {"concurrency": 4, "circuitBreaker": {"failureThreshold": 1, "openMs": 60000}},
        },
        "principals": {"alice": {"concurrency": 16, "maxQueueLength": 64, "maxQueueWaitMs": 60000,
                                 "maxCostUsd": 1000, "allowUnknownCost": true}},
    });
    let parsed: Profile = serde_json::from_value(profile.clone()).unwrap();
    driver
        .register("ws", "v1", parsed, profile.to_string())
        .await
        .unwrap();
    let config: ProxyConfig = serde_json::from_value(json!({
        "upstreams": {
            "a": {"format": "openai", "base_url": a.openai_base()},
            "b": {"format": "openai", "base_url": b.openai_base()},
            "dead": {"format": "openai", "base_url": format!("http://127.0.0.1:{}/v1", closed_port())},
        },
        "models": {
            "m": {"deployments": [{"upstream": "a", "provider": "lane-a", "weight": 2},
                                  {"upstream": "b", "provider": "lane-b"}]},
            "down": {"deployments": [{"upstream": "dead", "provider": "lane-c"},
                                     {"upstream": "a", "provider": "lane-a"}]},
            "single": {"upstream": "a", "provider": "lane-a"},
        },
    }))
    .unwrap();
    let proxy = Proxy::new(
        config,
        |_| None,
        driver,
        Telemetry::global(),
        HostLimits {
            body_read_timeout: Duration::from_secs(10),
            body_min_bytes_per_sec: 1,
            max_retry_after_ms: 60_000,
        },
    )
    .unwrap();
    Rig {
        proxy: Arc::new(proxy),
        a,
        b,
    }
}

impl Rig {
    /// A chat call to `model` as `alice` of `ws`, waiting at most `wait_ms` when given.
    async fn chat(&self, model: &str, wait_ms: Option<u64>) -> Response<Body> {
        let body = json!({"model": model, "max_tokens": 20,
                          "messages": [{"role": "user", "content": "hello"}]});
        let mut request = Request::post("/openai/v1/chat/completions")
            .header("content-type", "application/json")
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

    /// The proxy's counter `series` (exactly, labels included); 0 when absent.
    fn metric(&self, series: &str) -> f64 {
        let text = Exposition::new()
            .with(Arc::clone(self.proxy.metrics()))
            .text();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |value| value.parse().unwrap())
    }
}

fn lane(response: &Response<Body>) -> &str {
    response.headers()[PROVIDER_HEADER].to_str().unwrap()
}

async fn json_body(response: Response<Body>) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_deployments_share_calls_by_weight_in_a_fixed_order() {
    let rig = rig().await;
    let mut lanes = Vec::new();
    for _ in 0..6 {
        let response = rig.chat("m", None).await;
        assert_eq!(response.status(), StatusCode::OK);
        lanes.push(lane(&response).to_owned());
        json_body(response).await;
    }
    assert_eq!(
        lanes,
        ["lane-a", "lane-b", "lane-a", "lane-a", "lane-b", "lane-a"]
    );
    assert_eq!((rig.a.stats().requests, rig.b.stats().requests), (4, 2));
    assert_eq!(
        rig.metric("turnstile_proxy_calls_total{lane=\"lane-a\",class=\"2xx\"}"),
        4.0
    );
    assert_eq!(
        rig.metric("turnstile_proxy_calls_total{lane=\"lane-b\",class=\"2xx\"}"),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_fails_over_and_the_paused_deployment_gets_no_call_during_its_pause() {
    let rig = rig().await;
    rig.a.set_script("status=429,retry-after=30");
    let response = rig.chat("m", None).await;
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "the client sees one answer"
    );
    assert_eq!(lane(&response), "lane-b");
    let body = json_body(response).await;
    assert_eq!(body["object"], "chat.completion", "{body}");
    assert_eq!((rig.a.stats().requests, rig.b.stats().requests), (1, 1));
    assert_eq!(
        rig.metric("turnstile_proxy_failovers_total{lane=\"lane-a\",cause=\"429\"}"),
        1.0
    );
    assert_eq!(
        rig.metric("turnstile_proxy_upstream_pauses_total{lane=\"lane-a\"}"),
        1.0
    );
    // During the 30 s pause every call goes to lane-b, none to lane-a (though it weighs more).
    for _ in 0..4 {
        let response = rig.chat("m", Some(0)).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(lane(&response), "lane-b");
    }
    assert_eq!((rig.a.stats().requests, rig.b.stats().requests), (1, 5));
    // A model with one deployment on the paused lane is refused without an upstream call.
    let single = rig.chat("single", Some(0)).await;
    assert_eq!(single.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(single.headers()[REASON_HEADER], "retry-after");
    assert_eq!(
        lane(&single),
        "lane-a",
        "a refusal names the lane that refused"
    );
    assert_eq!(rig.a.stats().requests, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_fails_over_and_counts_a_breaker_failure() {
    let rig = rig().await;
    let response = rig.chat("down", None).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(lane(&response), "lane-a");
    assert_eq!(rig.a.stats().requests, 1);
    assert_eq!(
        rig.metric("turnstile_proxy_failovers_total{lane=\"lane-c\",cause=\"unreachable\"}"),
        1.0
    );
    assert_eq!(
        rig.metric("turnstile_proxy_calls_total{lane=\"lane-c\",class=\"error\"}"),
        1.0
    );
    // That failure opened lane-c's breaker: the next call goes to lane-a without trying it.
    let response = rig.chat("down", None).await;
    assert_eq!(lane(&response), "lane-a");
    assert_eq!(rig.a.stats().requests, 2);
    assert_eq!(
        rig.metric("turnstile_proxy_calls_total{lane=\"lane-c\",class=\"error\"}"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_none_free_the_call_queues_on_the_deployment_free_soonest() {
    let rig = rig().await;
    rig.a.set_script("status=429,retry-after-ms=20000");
    rig.b.set_script("status=429,retry-after-ms=600");
    // Both deployments answer 429: the client sees the last attempt's answer, lane-b's.
    let response = rig.chat("m", None).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(lane(&response), "lane-b");
    assert_eq!(response.headers()["retry-after-ms"], "600");
    assert_eq!((rig.a.stats().requests, rig.b.stats().requests), (1, 1));
    rig.b.set_script("");

    // Without a wait: refused at once, with the soonest deployment's remaining pause.
    let refused = rig.chat("m", Some(0)).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let hint: u64 = refused.headers()["retry-after-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(hint <= 600, "{hint}");

    // With a wait: it queues on lane-b (free in < 600 ms), not on lane-a (20 s).
    let start = Instant::now();
    let response = rig.chat("m", Some(5_000)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(lane(&response), "lane-b");
    assert!(start.elapsed() < Duration::from_millis(3_000));
    assert_eq!((rig.a.stats().requests, rig.b.stats().requests), (1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_may_have_been_processed_is_never_sent_again() {
    let rig = rig().await;
    rig.a.set_script("status=500");
    let response = rig.chat("m", None).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(lane(&response), "lane-a");
    assert_eq!(response.headers()["x-should-retry"], "false");
    assert_eq!((rig.a.stats().requests, rig.b.stats().requests), (1, 0));
}
