//! The caller's own rate-limit headers end to end (issue 32, item 3): a real service with the
//! proxy routes in front of the fake upstream, and `POST /v1/admissions`, over real sockets.
//! The figures are the principal's own buckets (here 10 requests refilling at 1 a minute and
//! 100,000 tokens refilling at 1 a second, so nothing refills noticeably during the test),
//! never the workspace's or the provider's (the fake upstream sends its own
//! `x-ratelimit-remaining-requests: 4999`, which must not reach the client).

use std::time::{SystemTime, UNIX_EPOCH};

use reqwest::blocking::Response;
use serde_json::{json, Value};
use turnstile_proxy::{ApiFormat, FakeUpstream, ModelConfig, UpstreamConfig};
use turnstile_testkit::{chat, TestServer};

fn model(upstream: &str) -> ModelConfig {
    ModelConfig {
        upstream: Some(upstream.into()),
        provider: Some(upstream.into()),
        deployments: None,
        upstream_model: None,
        input_usd_per_mtok: None,
        output_usd_per_mtok: None,
        default_max_output_tokens: None,
    }
}

struct Rig {
    server: TestServer,
    _fake: FakeUpstream,
    /// 10 requests (1 a minute) and 100,000 tokens (1 a second) of her own.
    dave: String,
    /// No rate limit of her own (the workspace and the lane have some).
    erin: String,
    _dir: tempfile::TempDir,
}

fn rig() -> Rig {
    let fake = FakeUpstream::spawn_thread();
    let dir = tempfile::tempdir().unwrap();
    let (openai_base, anthropic_base) = (fake.openai_base(), fake.anthropic_base());
    let server = TestServer::start(dir.path(), |config| {
        let proxy = &mut config.proxy;
        for (name, format, base) in [
            ("openai", ApiFormat::Openai, openai_base),
            ("anthropic", ApiFormat::Anthropic, anthropic_base),
        ] {
            proxy.upstreams.insert(
                name.into(),
                UpstreamConfig {
                    format,
                    base_url: Some(base),
                    base_url_env: None,
                    api_key_env: None,
                    required: false,
                },
            );
        }
        proxy.models.insert("gpt-test".into(), model("openai"));
        proxy
            .models
            .insert("claude-test".into(), model("anthropic"));
    });
    let account =
        json!({"concurrency": 64, "requestsPerMinute": 100000, "tokensPerSecond": 10000000});
    let profile = json!({
        "workspace": account,
        "providers": {"openai": account, "anthropic": account},
        "principals": {
            "dave": {"concurrency": 16, "requestsPerMinute": 1, "requestsBurst": 10,
                     "tokensPerSecond": 1, "tokensBurst": 100000, "allowUnknownCost": true},
            "erin": {"concurrency": 16, "allowUnknownCost": true},
        }
    });
    let put = server.put_profile(&server.admin(), "ws", "v1", &profile);
    assert_eq!(put.status(), 201, "{:?}", put.text());
    let dave = server.new_key("ws", "dave");
    let erin = server.new_key("ws", "erin");
    Rig {
        server,
        _fake: fake,
        dave,
        erin,
        _dir: dir,
    }
}

impl Rig {
    fn openai(&self, key: &str, body: &Value, wait_ms: u64) -> Response {
        self.server
            .post("/openai/v1/chat/completions", key)
            .header("x-turnstile-wait-ms", wait_ms)
            .json(body)
            .send()
            .unwrap()
    }

    fn anthropic(&self, key: &str, wait_ms: u64) -> Response {
        self.server
            .client
            .post(self.server.url("/anthropic/v1/messages"))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .header("x-turnstile-wait-ms", wait_ms)
            .json(&chat("claude-test"))
            .send()
            .unwrap()
    }

    fn admit(&self, key: &str, deadline_ms: u64) -> Response {
        let body = json!({"providerId": "openai", "budgetId": "inv-1",
                          "estimate": {"tokens": 1000}, "deadlineMs": deadline_ms});
        self.server.acquire(key, &body)
    }
}

fn header(response: &Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

fn number(response: &Response, name: &str) -> u64 {
    header(response, name)
        .unwrap_or_else(|| panic!("no {name}: {:?}", response.headers()))
        .parse()
        .unwrap()
}

/// Every rate-limit header of an answer, whatever its spelling.
fn rate_limit_headers(response: &Response) -> Vec<String> {
    response
        .headers()
        .keys()
        .map(|name| name.as_str().to_owned())
        .filter(|n| n.starts_with("x-ratelimit-") || n.starts_with("anthropic-ratelimit-"))
        .collect()
}

/// A Go duration (`1m0s`, `59.5s`, `20ms`) in milliseconds.
fn go_duration_ms(text: &str) -> u64 {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse().unwrap();
    }
    let mut total = 0.0;
    let mut digits = String::new();
    for c in text.chars() {
        let unit = match c {
            'h' => 3_600_000.0,
            'm' => 60_000.0,
            's' => 1_000.0,
            _ => {
                digits.push(c);
                continue;
            }
        };
        total += digits.parse::<f64>().unwrap() * unit;
        digits.clear();
    }
    total.round() as u64
}

/// The OpenAI-spelled figures: (limit, remaining, reset ms) of requests, then of tokens.
fn openai_figures(response: &Response) -> [(u64, u64, u64); 2] {
    ["requests", "tokens"].map(|kind| {
        (
            number(response, &format!("x-ratelimit-limit-{kind}")),
            number(response, &format!("x-ratelimit-remaining-{kind}")),
            go_duration_ms(&header(response, &format!("x-ratelimit-reset-{kind}")).unwrap()),
        )
    })
}

#[test]
fn proxied_answers_carry_the_callers_own_figures_decreasing_as_it_spends() {
    let rig = rig();
    let mut last_tokens = u64::MAX;
    // Two whole answers and a stream: one request each from the caller's 10.
    for (i, stream) in [false, false, true].into_iter().enumerate() {
        let mut body = chat("gpt-test");
        body["stream"] = json!(stream);
        let response = rig.openai(&rig.dave, &body, 20_000);
        assert_eq!(response.status(), 200);
        let [requests, tokens] = openai_figures(&response);
        assert_eq!(
            requests.0, 10,
            "the caller's burst, not the account's 100000"
        );
        assert_eq!(requests.1, 9 - i as u64, "never the provider's 4999");
        // (10 - remaining) requests to refill at 1 a minute.
        assert!(
            requests.2 > (9 - requests.1) * 60_000 && requests.2 <= (10 - requests.1) * 60_000,
            "{requests:?}"
        );
        assert_eq!(tokens.0, 100_000);
        assert!(tokens.1 < last_tokens, "{tokens:?} after {last_tokens}");
        // At one token a second, the reset is the spent tokens in seconds.
        assert!(
            (tokens.2 / 1000).abs_diff(100_000 - tokens.1) <= 1,
            "{tokens:?}"
        );
        last_tokens = tokens.1;
        assert_eq!(rate_limit_headers(&response).len(), 6);
        response.bytes().unwrap();
    }

    // The Anthropic surface: the same principal's buckets, in Anthropic's spelling.
    let before = SystemTime::now();
    let response = rig.anthropic(&rig.dave, 20_000);
    assert_eq!(response.status(), 200);
    assert_eq!(number(&response, "anthropic-ratelimit-requests-limit"), 10);
    assert_eq!(
        number(&response, "anthropic-ratelimit-requests-remaining"),
        6
    );
    assert_eq!(
        number(&response, "anthropic-ratelimit-tokens-limit"),
        100_000
    );
    assert!(number(&response, "anthropic-ratelimit-tokens-remaining") < last_tokens);
    let reset = header(&response, "anthropic-ratelimit-requests-reset").unwrap();
    // RFC 3339 UTC to the second: 4 requests to refill at 1 a minute.
    let at = rfc3339_epoch_s(&reset);
    let from = before.duration_since(UNIX_EPOCH).unwrap().as_secs();
    assert!(
        (from + 180..=from + 242).contains(&at),
        "{reset} from {from}"
    );
    assert!(header(&response, "anthropic-ratelimit-tokens-reset").is_some());
    assert_eq!(rate_limit_headers(&response).len(), 6, "no OpenAI spelling");

    // The admission API, in OpenAI's spelling: a grant charges the same bucket.
    let granted = rig.admit(&rig.dave, 1_000);
    assert_eq!(granted.status(), 200);
    let [requests, tokens] = openai_figures(&granted);
    assert_eq!((requests.0, requests.1), (10, 5));
    assert_eq!(tokens.0, 100_000);
    for remaining in (0..5).rev() {
        let granted = rig.admit(&rig.dave, 1_000);
        assert_eq!(granted.status(), 200);
        assert_eq!(
            number(&granted, "x-ratelimit-remaining-requests"),
            remaining
        );
    }

    // Refusals carry them too: the bucket is empty, and a unit is a minute away at most.
    let refused = rig.admit(&rig.dave, 0);
    assert_eq!(refused.status(), 429);
    let [requests, _] = openai_figures(&refused);
    assert_eq!((requests.0, requests.1), (10, 0));
    assert!(requests.2 > 9 * 60_000, "{requests:?}");
    let body: Value = refused.json().unwrap();
    assert_eq!(body["reason"], "requests-per-minute");

    let refused = rig.openai(&rig.dave, &chat("gpt-test"), 0);
    assert_eq!(refused.status(), 429);
    assert_eq!(number(&refused, "x-ratelimit-remaining-requests"), 0);
    assert_eq!(number(&refused, "x-ratelimit-limit-requests"), 10);
    let refused = rig.anthropic(&rig.dave, 0);
    assert_eq!(refused.status(), 429);
    assert_eq!(
        number(&refused, "anthropic-ratelimit-requests-remaining"),
        0
    );
    assert!(rate_limit_headers(&refused)
        .iter()
        .all(|name| name.starts_with("anthropic-ratelimit-")));
}

#[test]
fn a_caller_without_a_rate_limit_of_its_own_sees_none_and_never_the_providers() {
    let rig = rig();
    let response = rig.openai(&rig.erin, &chat("gpt-test"), 20_000);
    assert_eq!(response.status(), 200);
    // The fake upstream sent `x-ratelimit-remaining-requests: 4999`: the account's, dropped.
    assert_eq!(rate_limit_headers(&response), Vec::<String>::new());
    let response = rig.anthropic(&rig.erin, 20_000);
    assert_eq!(response.status(), 200);
    assert_eq!(rate_limit_headers(&response), Vec::<String>::new());
    let granted = rig.admit(&rig.erin, 1_000);
    assert_eq!(granted.status(), 200);
    assert_eq!(rate_limit_headers(&granted), Vec::<String>::new());
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339_epoch_s(text: &str) -> u64 {
    let text = text.strip_suffix('Z').expect("UTC");
    let (date, time) = text.split_once('T').expect("a T");
    let d: Vec<i64> = date.split('-').map(|p| p.parse().unwrap()).collect();
    let t: Vec<u64> = time.split(':').map(|p| p.parse().unwrap()).collect();
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    u64::try_from(days).unwrap() * 86_400 + t[0] * 3_600 + t[1] * 60 + t[2]
}

#[test]
fn the_test_date_reader_is_right() {
    assert_eq!(rfc3339_epoch_s("1970-01-01T00:00:00Z"), 0);
    assert_eq!(rfc3339_epoch_s("2000-02-29T00:00:00Z"), 951_782_400);
    assert_eq!(rfc3339_epoch_s("2026-02-25T20:02:32Z"), 1_772_049_752);
    assert_eq!(go_duration_ms("1m0s"), 60_000);
    assert_eq!(go_duration_ms("4m12.172s"), 252_172);
    assert_eq!(go_duration_ms("20ms"), 20);
}
