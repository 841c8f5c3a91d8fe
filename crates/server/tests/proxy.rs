//! Proxy mode end to end: a real service with the proxy routes, in front of the scripted fake
//! upstream (`turnstile_proxy::fake`), driven through its OpenAI and Anthropic surfaces.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Once;
use std::time::{Duration, Instant};

use reqwest::blocking::Response;
use serde_json::{json, Value};
use turnstile_proxy::FakeUpstream;
use turnstile_proxy::{ApiFormat, ModelConfig, UpstreamConfig};
use turnstile_testkit::{chat, TestServer};

const OPENAI_KEY: &str = "sk-test-openai-secret";
const ANTHROPIC_KEY: &str = "sk-ant-test-secret";

fn env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::env::set_var("TS_PROXY_TEST_OPENAI_KEY", OPENAI_KEY);
        std::env::set_var("TS_PROXY_TEST_ANTHROPIC_KEY", ANTHROPIC_KEY);
    });
}

fn model(upstream: &str, provider: &str, prices: Option<(f64, f64)>) -> ModelConfig {
    ModelConfig {
        upstream: Some(upstream.into()),
        provider: Some(provider.into()),
        deployments: None,
        upstream_model: None,
        input_usd_per_mtok: prices.map(|p| p.0),
        output_usd_per_mtok: prices.map(|p| p.1),
        default_max_output_tokens: None,
    }
}

fn profile(lane_concurrency: u64) -> Value {
    let lane = json!({"concurrency": lane_concurrency, "maxQueueLength": 512, "maxQueueWaitMs": 60000,
                      "circuitBreaker": {"failureThreshold": 50, "openMs": 60000}});
    json!({
        "workspace": {"concurrency": 256, "maxQueueLength": 1024, "maxQueueWaitMs": 60000},
        "providers": {
            "openai": lane,
            "anthropic": lane,
            "tiny": {"concurrency": 1, "tokensPerSecond": 100},
            "fragile": {"concurrency": 1, "circuitBreaker": {"failureThreshold": 1, "openMs": 60000}},
        },
        "principals": {
            "alice": {"concurrency": 128, "maxQueueLength": 512, "maxQueueWaitMs": 60000, "maxCostUsd": 1000, "allowUnknownCost": true},
            "bob": {"concurrency": 128, "maxQueueLength": 512, "maxQueueWaitMs": 60000, "maxCostUsd": 1000, "allowUnknownCost": true},
            "carol": {"concurrency": 4, "maxCostUsd": 0.5, "allowUnknownCost": false},
        }
    })
}

struct Rig {
    server: TestServer,
    fake: FakeUpstream,
    alice: String,
    bob: String,
    carol: String,
    _dir: tempfile::TempDir,
}

fn rig(lane_concurrency: u64, tweak: impl FnOnce(&mut turnstile_server::Config)) -> Rig {
    rig_with(
        lane_concurrency,
        tweak,
        turnstile_shell::Telemetry::global(),
    )
}

fn rig_with(
    lane_concurrency: u64,
    tweak: impl FnOnce(&mut turnstile_server::Config),
    telemetry: turnstile_shell::Telemetry,
) -> Rig {
    env();
    let fake = FakeUpstream::spawn_thread();
    let dir = tempfile::tempdir().unwrap();
    let (openai_base, anthropic_base) = (fake.openai_base(), fake.anthropic_base());
    let server = TestServer::start_with_telemetry(
        dir.path(),
        |config| {
            let proxy = &mut config.proxy;
            proxy.upstreams.insert(
                "openai".into(),
                UpstreamConfig {
                    format: ApiFormat::Openai,
                    base_url: Some(openai_base),
                    base_url_env: None,
                    api_key_env: Some("TS_PROXY_TEST_OPENAI_KEY".into()),
                    required: false,
                },
            );
            proxy.upstreams.insert(
                "anthropic".into(),
                UpstreamConfig {
                    format: ApiFormat::Anthropic,
                    base_url: Some(anthropic_base),
                    base_url_env: None,
                    api_key_env: Some("TS_PROXY_TEST_ANTHROPIC_KEY".into()),
                    required: false,
                },
            );
            let models = &mut proxy.models;
            models.insert(
                "gpt-test".into(),
                model("openai", "openai", Some((1.0, 2.0))),
            );
            models.insert("gpt-unpriced".into(), model("openai", "openai", None));
            models.insert("gpt-tiny".into(), model("openai", "tiny", None));
            models.insert("gpt-fragile".into(), model("openai", "fragile", None));
            models.insert(
                "embed-test".into(),
                model("openai", "openai", Some((0.1, 0.0))),
            );
            models.insert(
                "claude-test".into(),
                model("anthropic", "anthropic", Some((3.0, 15.0))),
            );
            proxy.default_wait_ms = 20_000;
            tweak(config);
        },
        telemetry,
    );
    let put = server.put_profile(&server.admin(), "ws", "v1", &profile(lane_concurrency));
    assert_eq!(put.status(), 201, "{:?}", put.text());
    let alice = server.new_key("ws", "alice");
    let bob = server.new_key("ws", "bob");
    let carol = server.new_key("ws", "carol");
    Rig {
        server,
        fake,
        alice,
        bob,
        carol,
        _dir: dir,
    }
}

impl Rig {
    fn openai(&self, path: &str, key: &str, body: &Value, script: &str) -> Response {
        self.server
            .post(&format!("/openai/v1{path}"), key)
            .header("x-fake-script", script)
            .json(body)
            .send()
            .unwrap()
    }

    fn anthropic(&self, key: &str, body: &Value, script: &str) -> Response {
        self.server
            .client
            .post(self.server.url("/anthropic/v1/messages"))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .header("x-fake-script", script)
            .json(body)
            .send()
            .unwrap()
    }

    fn metric_line(&self, prefix: &str) -> f64 {
        let text = self.server.metrics_text();
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .map(|v| v.parse().unwrap())
            .unwrap_or(f64::NAN)
    }

    fn calls(&self, lane: &str, class: &str) -> f64 {
        self.metric_line(&format!(
            "turnstile_proxy_calls_total{{lane=\"{lane}\",class=\"{class}\"}}"
        ))
    }

    /// Waits until the workspace holds no lease and no waiter.
    /// After the client left at `left` (the fake upstream's clock): the upstream saw its
    /// request aborted within 100 ms, and the call settled as `client-gone`.
    fn assert_client_gone_aborted_upstream_within_100_ms(&self, left: f64) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.fake.stats().aborted == 0 {
            assert!(
                Instant::now() < deadline,
                "the upstream never saw the abort"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let aborted = self.fake.stats().aborted_at_ms[0] - left;
        assert!(
            aborted <= 100.0,
            "upstream aborted {aborted:.1} ms after the client left"
        );
        self.wait_idle();
        assert_eq!(self.calls("openai", "client-gone"), 1.0);
    }

    fn wait_idle(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let snapshot = self.server.snapshot("ws");
            if snapshot["leases"] == 0 && snapshot["waiters"] == 0 {
                return;
            }
            assert!(Instant::now() < deadline, "leases left: {snapshot}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn header(response: &Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

#[test]
fn plain_chat_is_admitted_forwarded_and_settled_to_the_cent() {
    let rig = rig(4, |_| {});
    for _ in 0..10 {
        let response = rig.openai(
            "/chat/completions",
            &rig.alice,
            &chat("gpt-test"),
            "usage=1000/500",
        );
        assert_eq!(response.status(), 200);
        assert_eq!(
            header(&response, "x-request-id").as_deref(),
            Some("req_fake")
        );
        assert!(header(&response, "x-ratelimit-remaining-requests").is_none());
        let body: Value = response.json().unwrap();
        assert_eq!(body["usage"]["prompt_tokens"], 1000);
    }
    // 10 × (1000 × $1 + 500 × $2) / 1M = $0.02.
    assert_eq!(
        rig.metric_line("turnstile_proxy_settled_cost_micro_usd_total{lane=\"openai\"}"),
        20_000.0
    );
    assert_eq!(
        rig.metric_line("turnstile_proxy_usage_tokens_total{lane=\"openai\",kind=\"input\"}"),
        10_000.0
    );
    assert_eq!(
        rig.metric_line("turnstile_proxy_settlements_total{lane=\"openai\",basis=\"reported\"}"),
        10.0
    );
    assert_eq!(rig.calls("openai", "2xx"), 10.0);
    let stats = rig.fake.stats();
    assert_eq!(stats.requests, 10);
    assert!(!stats.saw_turnstile_key);
    assert_eq!(
        stats.last_authorization.as_deref(),
        Some(&*format!("Bearer {OPENAI_KEY}"))
    );
    rig.wait_idle();
    // No tenant ID in any metric line.
    let text = rig.server.metrics_text();
    assert!(
        !text.contains("alice") && !text.contains("\"ws\""),
        "{text}"
    );
}

#[test]
fn reported_usage_replaces_the_estimate_in_the_budget() {
    let rig = rig(4, |_| {});
    // Estimate: tiny. Actual: 300k output tokens × $2/M = $0.60; carol may spend $0.50.
    let call = || {
        rig.server
            .post("/openai/v1/chat/completions", &rig.carol)
            .header("x-fake-script", "usage=0/300000")
            .header("x-turnstile-budget-id", "inv-7")
            .json(&json!({"model": "gpt-test", "messages": [], "max_tokens": 10}))
            .send()
            .unwrap()
    };
    assert_eq!(call().status(), 200);
    let refused = call();
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "x-should-retry").as_deref(), Some("false"));
    assert_eq!(
        header(&refused, "x-turnstile-reason").as_deref(),
        Some("cost")
    );
    let body: Value = refused.json().unwrap();
    assert_eq!(body["error"]["type"], "insufficient_quota");
    assert!(rig.fake.stats().requests <= 4);
}

#[test]
fn unknown_models_are_404_in_the_provider_format_before_admission() {
    let rig = rig(4, |_| {});
    let response = rig.openai("/chat/completions", &rig.alice, &chat("gpt-nope"), "");
    assert_eq!(response.status(), 404);
    assert_eq!(
        header(&response, "x-should-retry").as_deref(),
        Some("false")
    );
    let body: Value = response.json().unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    assert_eq!(body["error"]["param"], "model");
    // An Anthropic model on the OpenAI surface is unknown there too.
    let response = rig.openai("/chat/completions", &rig.alice, &chat("claude-test"), "");
    assert_eq!(response.status(), 404);
    let response = rig.anthropic(&rig.alice, &chat("gpt-test"), "");
    assert_eq!(response.status(), 404);
    let body: Value = response.json().unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "not_found_error");
    assert_eq!(rig.fake.stats().requests, 0);
    assert_eq!(rig.calls("openai", "refused"), 0.0);
}

#[test]
fn keys_are_checked_in_the_provider_format() {
    let rig = rig(4, |_| {});
    let response = rig
        .server
        .client
        .post(rig.server.url("/openai/v1/chat/completions"))
        .json(&chat("gpt-test"))
        .send()
        .unwrap();
    assert_eq!(response.status(), 401);
    let body: Value = response.json().unwrap();
    assert_eq!(body["error"]["type"], "authentication_error");
    let response = rig.openai(
        "/chat/completions",
        &rig.server.admin(),
        &chat("gpt-test"),
        "",
    );
    assert_eq!(response.status(), 403);
    let models: Value = rig
        .server
        .get("/openai/v1/models", &rig.alice)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"gpt-test") && !ids.contains(&"claude-test"),
        "{ids:?}"
    );
    // The Anthropic SDK's x-api-key works; the provider key goes upstream, ours does not.
    let response = rig.anthropic(
        &rig.alice,
        &json!({"model": "claude-test", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}),
        "usage=100/200",
    );
    assert_eq!(response.status(), 200);
    let stats = rig.fake.stats();
    assert_eq!(stats.last_api_key.as_deref(), Some(ANTHROPIC_KEY));
    assert!(!stats.saw_turnstile_key);
    // 100 × $3 + 200 × $15 per M = $0.0033.
    assert_eq!(
        rig.metric_line("turnstile_proxy_settled_cost_micro_usd_total{lane=\"anthropic\"}"),
        3_300.0
    );
}

/// The client's stream, read to the end, as text.
fn read_all(mut response: Response) -> String {
    let mut text = String::new();
    response.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn streams_settle_with_the_usage_chunk_stripped_unless_asked_for() {
    let rig = rig(4, |_| {});
    let mut body = chat("gpt-test");
    body["stream"] = json!(true);
    let response = rig.openai("/chat/completions", &rig.alice, &body, "usage=100/50");
    assert_eq!(response.status(), 200);
    assert!(header(&response, "content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let text = read_all(response);
    assert!(
        text.contains("tok0") && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    assert!(
        !text.contains("\"usage\":{"),
        "the injected chunk is stripped: {text}"
    );
    assert_eq!(rig.fake.stats().arrivals[0].include_usage, Some(true));

    body["stream_options"] = json!({"include_usage": true});
    let text = read_all(rig.openai("/chat/completions", &rig.alice, &body, "usage=100/50"));
    assert!(text.contains("\"completion_tokens\":50"), "{text}");
    assert_eq!(
        rig.metric_line("turnstile_proxy_settlements_total{lane=\"openai\",basis=\"reported\"}"),
        2.0
    );
    // 2 × (100 + 2 × 50) micro-USD.
    assert_eq!(
        rig.metric_line("turnstile_proxy_settled_cost_micro_usd_total{lane=\"openai\"}"),
        400.0
    );

    // A provider that ignores include_usage: the estimate stays charged, and that is counted.
    let text = read_all(rig.openai("/chat/completions", &rig.alice, &body, "no-usage"));
    assert!(text.ends_with("data: [DONE]\n\n"));
    assert_eq!(
        rig.metric_line("turnstile_proxy_settlements_total{lane=\"openai\",basis=\"estimate\"}"),
        1.0
    );
    rig.wait_idle();
}

#[test]
fn anthropic_responses_embeddings_and_completions_settle_their_usage() {
    let rig = rig(4, |_| {});
    let message = json!({"model": "claude-test", "max_tokens": 64, "stream": true,
                         "messages": [{"role": "user", "content": "hi"}]});
    let text = read_all(rig.anthropic(&rig.bob, &message, "usage=1000/100"));
    assert!(text.contains("event: message_stop"), "{text}");
    // 1000 × $3 + 100 × $15 per M = $0.0045.
    assert_eq!(
        rig.metric_line("turnstile_proxy_settled_cost_micro_usd_total{lane=\"anthropic\"}"),
        4_500.0
    );
    let responses = json!({"model": "gpt-unpriced", "input": "hi", "max_output_tokens": 20});
    let response = rig.openai("/responses", &rig.bob, &responses, "usage=7/3");
    assert_eq!(response.status(), 200);
    let mut streamed = responses.clone();
    streamed["stream"] = json!(true);
    let text = read_all(rig.openai("/responses", &rig.bob, &streamed, "usage=7/3"));
    assert!(text.contains("response.completed"));
    let embed = rig.openai(
        "/embeddings",
        &rig.bob,
        &json!({"model": "embed-test", "input": "hello"}),
        "usage=50/0",
    );
    assert_eq!(embed.status(), 200);
    let completion = rig.openai(
        "/completions",
        &rig.bob,
        &json!({"model": "gpt-unpriced", "prompt": "hi", "max_tokens": 5}),
        "usage=2/5",
    );
    assert_eq!(completion.status(), 200);
    // Input tokens on the openai lane: 7 + 7 + 50 + 2.
    assert_eq!(
        rig.metric_line("turnstile_proxy_usage_tokens_total{lane=\"openai\",kind=\"input\"}"),
        66.0
    );
    assert_eq!(
        rig.metric_line("turnstile_proxy_settlements_total{lane=\"openai\",basis=\"reported\"}"),
        4.0
    );
    rig.wait_idle();
}

#[test]
fn stream_frames_reach_the_client_before_the_upstream_sends_the_next() {
    let rig = rig(4, |_| {});
    let mut body = chat("gpt-test");
    body["stream"] = json!(true);
    let start = Instant::now();
    let mut response = rig.openai(
        "/chat/completions",
        &rig.alice,
        &body,
        "chunks=3,stall-ms=800",
    );
    let mut buf = [0u8; 4096];
    let mut got = String::new();
    while !got.contains("tok0") {
        let n = response.read(&mut buf).unwrap();
        assert!(n > 0);
        got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
    }
    let first = start.elapsed();
    assert!(!got.contains("tok1"), "{got}");
    assert!(
        first < Duration::from_millis(600),
        "first chunk after {first:?}"
    );
    let mut rest = String::new();
    response.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("tok1") && start.elapsed() >= Duration::from_millis(800));
}

/// Another principal's call that will not wait, while the lane is paused: refused at once
/// (429, reason `retry-after`); the remaining pause in ms.
fn refused_while_paused(rig: &Rig, script: &str) -> u64 {
    let refused = rig
        .server
        .post("/openai/v1/chat/completions", &rig.bob)
        .header("x-turnstile-wait-ms", "0")
        .json(&chat("gpt-test"))
        .send()
        .unwrap();
    assert_eq!(refused.status(), 429, "{script}");
    assert_eq!(
        header(&refused, "x-turnstile-reason").as_deref(),
        Some("retry-after")
    );
    header(&refused, "retry-after-ms").unwrap().parse().unwrap()
}

#[test]
fn an_upstream_429_pauses_the_lane_for_everyone_in_every_header_form() {
    for (script, expected_ms) in [
        ("status=429,retry-after=1", 1000),
        ("status=429,retry-after-ms=700", 700),
        ("status=429,retry-after-date=2", 2000),
        ("status=429", 1000), // no header: proxy.fallback_retry_after_ms
    ] {
        let rig = rig(4, |_| {});
        let response = rig.openai("/chat/completions", &rig.alice, &chat("gpt-test"), script);
        assert_eq!(response.status(), 429, "{script}");
        let ms: u64 = header(&response, "retry-after-ms")
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            ms <= expected_ms && ms + 1100 >= expected_ms,
            "{script}: retry-after-ms {ms}"
        );
        let seconds: u64 = header(&response, "retry-after").unwrap().parse().unwrap();
        assert_eq!(seconds, ms.div_ceil(1000).max(1));
        let paused_at = rig.fake.now_ms();
        // Another principal, not willing to wait: refused at once with the remaining time.
        let remaining = refused_while_paused(&rig, script);
        assert!(remaining <= ms && remaining > 0, "{remaining} vs {ms}");
        // Willing to wait: admitted after the pause, and nothing reached the upstream before.
        let waited = rig.openai("/chat/completions", &rig.bob, &chat("gpt-test"), "");
        assert_eq!(waited.status(), 200);
        let stats = rig.fake.stats();
        assert_eq!(stats.requests, 2, "{script}");
        let second = stats.arrivals[1].at_ms;
        assert!(
            second - paused_at >= remaining as f64 - 50.0,
            "{script}: upstream called {} ms into a {remaining} ms pause",
            second - paused_at
        );
        assert_eq!(rig.calls("openai", "429"), 1.0);
        assert_eq!(
            rig.metric_line("turnstile_proxy_upstream_pauses_total{lane=\"openai\"}"),
            1.0
        );
    }
}

/// Issue 34, item 6: a `Retry-After` HTTP-date in a year `SystemTime` cannot hold panicked the
/// handler (no answer, the lane not paused). It is the cap (`admission.max_retry_after_ms`) now.
#[test]
fn an_upstream_429_with_a_far_future_date_pauses_the_lane_for_the_cap() {
    for year in ["300000000000", "99999999999999999999999"] {
        let rig = rig(4, |_| {});
        let script = format!("status=429,retry-after-year={year}");
        let response = rig.openai("/chat/completions", &rig.alice, &chat("gpt-test"), &script);
        assert_eq!(response.status(), 429, "{script}");
        let ms: u64 = header(&response, "retry-after-ms")
            .unwrap()
            .parse()
            .unwrap();
        assert!(ms > 3_590_000 && ms <= 3_600_000, "{script}: {ms}");
        let remaining = refused_while_paused(&rig, &script);
        assert!(
            remaining > 3_590_000 && remaining <= ms,
            "{remaining} vs {ms}"
        );
        assert_eq!(rig.fake.stats().requests, 1, "{script}");
        assert_eq!(
            rig.metric_line("turnstile_proxy_upstream_pauses_total{lane=\"openai\"}"),
            1.0
        );
    }
}

#[test]
fn upstream_5xx_and_timeouts_are_breaker_failures_and_never_resent() {
    let rig = rig(4, |config| config.proxy.first_byte_timeout_ms = 300);
    let response = rig.openai(
        "/chat/completions",
        &rig.alice,
        &chat("gpt-fragile"),
        "status=500",
    );
    assert_eq!(response.status(), 500);
    assert_eq!(
        header(&response, "x-should-retry").as_deref(),
        Some("false")
    );
    assert_eq!(rig.fake.stats().requests, 1, "a 5xx is never re-sent");
    // failureThreshold 1: the breaker is open; the next call is refused without an upstream call.
    let refused = rig.openai("/chat/completions", &rig.alice, &chat("gpt-fragile"), "");
    assert_eq!(refused.status(), 503);
    assert_eq!(
        header(&refused, "x-turnstile-reason").as_deref(),
        Some("circuit-open")
    );
    assert!(header(&refused, "retry-after-ms").is_some());
    assert_eq!(rig.fake.stats().requests, 1);
    // A slow first byte is a 504 and a failure.
    let slow = rig.openai(
        "/chat/completions",
        &rig.alice,
        &chat("gpt-test"),
        "first-byte-ms=1000",
    );
    assert_eq!(slow.status(), 504);
    assert_eq!(header(&slow, "x-should-retry").as_deref(), Some("false"));
    assert_eq!(rig.calls("openai", "error"), 1.0);
    rig.wait_idle();
}

#[test]
fn a_stalled_stream_is_cut_and_released_as_a_failure() {
    let rig = rig(4, |config| config.proxy.idle_timeout_ms = 300);
    let mut body = chat("gpt-test");
    body["stream"] = json!(true);
    let response = rig.openai("/chat/completions", &rig.alice, &body, "stall-ms=2000");
    let mut text = String::new();
    assert!(response.take(1 << 20).read_to_string(&mut text).is_err() || !text.contains("[DONE]"));
    assert!(text.contains("tok0"));
    rig.wait_idle();
    assert_eq!(rig.calls("openai", "error"), 1.0);
}

#[test]
fn a_client_that_disconnects_aborts_the_upstream_within_100_ms() {
    let rig = rig(4, |_| {});
    let mut body = chat("gpt-test");
    body["stream"] = json!(true);
    let mut response = rig.openai(
        "/chat/completions",
        &rig.alice,
        &body,
        "chunks=100000,gap-ms=5,usage=10/10",
    );
    let mut buf = [0u8; 256];
    assert!(response.read(&mut buf).unwrap() > 0);
    let left = rig.fake.now_ms();
    drop(response);
    rig.assert_client_gone_aborted_upstream_within_100_ms(left);
}

#[test]
fn upstream_concurrency_never_exceeds_the_lane_under_64_clients_of_two_principals() {
    let rig = rig(4, |_| {});
    std::thread::scope(|scope| {
        for i in 0..64 {
            let key = if i % 2 == 0 { &rig.alice } else { &rig.bob };
            let rig = &rig;
            scope.spawn(move || {
                for _ in 0..3 {
                    let response = rig.openai(
                        "/chat/completions",
                        key,
                        &chat("gpt-test"),
                        "first-byte-ms=5",
                    );
                    assert_eq!(response.status(), 200);
                }
            });
        }
    });
    let stats = rig.fake.stats();
    assert_eq!(stats.requests, 192);
    assert!(
        stats.max_in_flight <= 4,
        "max in flight {}",
        stats.max_in_flight
    );
    assert!(stats.max_in_flight >= 2);
    rig.wait_idle();
}

#[test]
fn a_quiet_principal_is_interleaved_with_a_flooding_one() {
    let rig = rig(1, |_| {});
    std::thread::scope(|scope| {
        for _ in 0..16 {
            let rig = &rig;
            scope.spawn(move || {
                for _ in 0..6 {
                    let response = rig
                        .server
                        .post("/openai/v1/chat/completions", &rig.alice)
                        .header("x-fake-script", "first-byte-ms=5")
                        .header("x-fake-tag", "flood")
                        .json(&chat("gpt-test"))
                        .send()
                        .unwrap();
                    assert_eq!(response.status(), 200);
                }
            });
        }
        std::thread::sleep(Duration::from_millis(100));
        for _ in 0..2 {
            let rig = &rig;
            scope.spawn(move || {
                for _ in 0..5 {
                    let response = rig
                        .server
                        .post("/openai/v1/chat/completions", &rig.bob)
                        .header("x-fake-script", "first-byte-ms=5")
                        .header("x-fake-tag", "quiet")
                        .json(&chat("gpt-test"))
                        .send()
                        .unwrap();
                    assert_eq!(response.status(), 200);
                }
            });
        }
    });
    let arrivals = rig.fake.stats().arrivals;
    let tags: Vec<&str> = arrivals
        .iter()
        .map(|a| a.tag.as_deref().unwrap_or(""))
        .collect();
    let first = tags.iter().position(|t| *t == "quiet").unwrap();
    let last = tags.iter().rposition(|t| *t == "quiet").unwrap();
    let window = &tags[first..=last];
    let quiet = window.iter().filter(|t| **t == "quiet").count();
    // 10 quiet calls, each waiting behind at most a couple of the flood's: the quiet principal
    // gets about half of the lane while it has work, not 1/17.
    assert_eq!(quiet, 10);
    assert!(
        window.len() <= 2 * quiet + 3,
        "quiet calls spread over {} upstream calls: {window:?}",
        window.len()
    );
    let mut counts = BTreeMap::new();
    for tag in tags {
        *counts.entry(tag).or_insert(0) += 1;
    }
    assert_eq!(counts["flood"], 96);
}

#[test]
fn a_call_that_can_never_fit_is_refused_at_once_and_not_retried() {
    let rig = rig(4, |_| {});
    let mut body = chat("gpt-tiny");
    body["max_tokens"] = json!(100_000);
    let start = Instant::now();
    let response = rig.openai("/chat/completions", &rig.alice, &body, "");
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(response.status(), 400);
    assert_eq!(
        header(&response, "x-should-retry").as_deref(),
        Some("false")
    );
    assert!(header(&response, "retry-after").is_none());
    let body: Value = response.json().unwrap();
    assert_eq!(body["error"]["code"], "tokens-per-second");
    assert_eq!(rig.fake.stats().requests, 0);
    assert_eq!(rig.calls("tiny", "refused"), 1.0);
}

#[test]
fn malformed_oversized_and_unknown_bodies_never_produce_a_5xx() {
    let rig = rig(4, |config| config.proxy.max_request_bytes = 4096);
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"{".to_vec(),
        b"[1,2]".to_vec(),
        b"null".to_vec(),
        b"\"text\"".to_vec(),
        br#"{"model":7}"#.to_vec(),
        br#"{"model":null}"#.to_vec(),
        br#"{"model":"gpt-test","model":"gpt-test"}"#.to_vec(),
        br#"{"model":"gpt-test","stream":"yes"}"#.to_vec(),
        br#"{"model":"gpt-test","max_tokens":-5}"#.to_vec(),
        br#"{"model":"gpt-test","max_tokens":1e30}"#.to_vec(),
        br#"{"model":"gpt-test","max_tokens":18446744073709551616}"#.to_vec(),
        br#"{"model":"gpt-test","n":"2"}"#.to_vec(),
        br#"{"model":"gpt-test","stream_options":[]}"#.to_vec(),
        br#"{"model":"gpt-test","stream_options":{"include_usage":"x"}}"#.to_vec(),
        format!(
            "{{\"model\":\"gpt-test\",\"x\":{}{}}}",
            "[".repeat(200),
            "]".repeat(200)
        )
        .into_bytes(),
        vec![0xff, 0xfe, 0x00],
        format!(
            "{{\"model\":\"gpt-test\",\"pad\":\"{}\"}}",
            "a".repeat(5000)
        )
        .into_bytes(),
    ];
    for path in [
        "/openai/v1/chat/completions",
        "/openai/v1/embeddings",
        "/anthropic/v1/messages",
    ] {
        for body in &bodies {
            let response = rig
                .server
                .post(path, &rig.alice)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .unwrap();
            // Deeply nested unknown fields are valid JSON: forwarded (200). Everything else: 4xx.
            let status = response.status().as_u16();
            assert!(
                status < 500 && status != 201,
                "{path} {:?}: {status}",
                String::from_utf8_lossy(body)
            );
        }
    }
    // Unknown fields are forwarded untouched and answered.
    let mut body = chat("gpt-test");
    body["some_future_field"] = json!({"nested": [1, 2, 3]});
    let response = rig.openai("/chat/completions", &rig.alice, &body, "");
    assert_eq!(response.status(), 200);
    // Bad turnstile headers are 400s too.
    for (name, value) in [
        ("x-turnstile-wait-ms", "-1"),
        ("x-turnstile-wait-ms", "99999999999"),
        ("x-turnstile-budget-id", ".."),
    ] {
        let response = rig
            .server
            .post("/openai/v1/chat/completions", &rig.alice)
            .header(name, value)
            .json(&chat("gpt-test"))
            .send()
            .unwrap();
        assert_eq!(response.status(), 400, "{name}: {value}");
    }
    assert!(rig.fake.stats().requests <= 4);
}

#[test]
fn a_client_that_leaves_a_whole_answer_early_aborts_the_upstream_and_frees_the_lease() {
    let rig = rig(4, |_| {});
    let impatient = reqwest::blocking::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let sent = impatient
        .post(rig.server.url("/openai/v1/chat/completions"))
        .bearer_auth(&rig.alice)
        .header("x-fake-script", "first-byte-ms=3000")
        .json(&chat("gpt-test"))
        .send();
    assert!(sent.is_err(), "the client gave up");
    let left = rig.fake.now_ms();
    rig.assert_client_gone_aborted_upstream_within_100_ms(left);
    // The estimate stays charged for a call whose outcome is unknown.
    assert_eq!(
        rig.metric_line("turnstile_proxy_settlements_total{lane=\"openai\",basis=\"estimate\"}"),
        1.0
    );
}

#[test]
fn one_span_per_proxied_call_names_the_lane_and_never_a_tenant_or_the_prompt() {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let telemetry = turnstile_shell::Telemetry::new(
        provider.tracer(turnstile_shell::telemetry::attributes::DECISION),
        &opentelemetry::global::meter(turnstile_shell::telemetry::attributes::DECISION),
    );
    let rig = rig_with(4, |_| {}, telemetry);
    let prompt = json!({"model": "gpt-test", "max_tokens": 5,
                        "messages": [{"role": "user", "content": "secret-prompt-text"}]});
    assert_eq!(
        rig.openai("/chat/completions", &rig.alice, &prompt, "")
            .status(),
        200
    );
    let mut streamed = prompt.clone();
    streamed["stream"] = json!(true);
    read_all(rig.openai("/chat/completions", &rig.bob, &streamed, ""));
    let mut never = prompt.clone();
    never["model"] = json!("gpt-tiny");
    never["max_tokens"] = json!(100_000);
    assert_eq!(
        rig.openai("/chat/completions", &rig.alice, &never, "")
            .status(),
        400
    );
    rig.wait_idle();
    let spans = exporter.get_finished_spans().unwrap();
    let admits: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "decision.admit")
        .collect();
    assert_eq!(admits.len(), 3, "{spans:#?}");
    let lanes: Vec<String> = admits
        .iter()
        .filter_map(|s| {
            s.attributes
                .iter()
                .find(|kv| kv.key.as_str() == "turnstile.adapter.id")
                .map(|kv| kv.value.to_string())
        })
        .collect();
    assert_eq!(lanes, ["openai", "openai", "tiny"]);
    let text = format!("{spans:?}");
    for secret in [
        "alice",
        "bob",
        "secret-prompt-text",
        &rig.alice,
        &rig.bob,
        OPENAI_KEY,
    ] {
        assert!(!text.contains(secret), "a span names {secret}");
    }
}

/// Issue 34, item 2: per-call budgets count against no cap, so a principal holding its own cap
/// of open budgets (and the workspace nearly full) still has its proxied calls admitted, and so
/// does everyone else; a call naming a new budget of its own is refused for the cap.
#[test]
fn cnc_admit_budget_cap_proxied_calls_are_admitted_while_a_principal_holds_its_cap() {
    let rig = rig(4, |c| {
        c.budgets.max_open_per_workspace = 3;
        c.budgets.max_open_per_principal = Some(2);
    });
    for budget in ["held-0", "held-1"] {
        let body = json!({"providerId": "openai", "budgetId": budget, "estimate": {"tokens": 1}});
        let lease: Value = rig.server.acquire(&rig.bob, &body).json().unwrap();
        rig.server
            .assert_released(&rig.bob, lease["leaseId"].as_str().unwrap(), "success");
    }
    // A third is refused for bob's own cap (with the workspace's cap alone it would fill it).
    let body = json!({"providerId": "openai", "budgetId": "held-2", "estimate": {"tokens": 1}});
    let refused: Value = rig.server.acquire(&rig.bob, &body).json().unwrap();
    assert_eq!(refused["evidence"]["budgetCap"], "principal", "{refused}");
    for key in [&rig.bob, &rig.alice, &rig.bob, &rig.alice] {
        let response = rig.openai("/chat/completions", key, &chat("gpt-test"), "usage=10/5");
        assert_eq!(response.status(), 200, "{}", response.text().unwrap());
    }
    let named = rig
        .server
        .post("/openai/v1/chat/completions", &rig.bob)
        .header("x-fake-script", "usage=10/5")
        .header("x-turnstile-budget-id", "held-2")
        .json(&chat("gpt-test"))
        .send()
        .unwrap();
    assert_eq!(named.status(), 429, "{}", named.text().unwrap());
    rig.wait_idle();
    assert_eq!(rig.server.snapshot("ws")["openBudgets"], 2);
}
