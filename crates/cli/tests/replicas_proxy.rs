//! Proxied calls through replicas sharing limits in Redis (issue 13), with real processes: one
//! `redis-server` (started here on a free port, stopped by PID), `turnstile serve
//! --redis-url` replicas on their own data directories, and the in-repo fake upstream
//! (`turnstile_proxy::fake`), which records its maximum in-flight count. Every proxied call
//! takes the same shared step as `POST /v1/admissions`. Needs `redis-server` (`.ci/run`
//! installs it; a missing one fails, never skips).
//!
//! - Calls through three replicas never put more calls in flight upstream than the provider's
//!   shared concurrency, every admission counts as shared, and no lease is left in Redis.
//! - An upstream 429 seen through one replica pauses the provider on the others: a call that
//!   will not wait is refused in the provider's format (OpenAI and Anthropic) without reaching
//!   the upstream, and one that waits goes upstream only after the pause.
//! - A shared token budget is charged with the reported usage (so many cheap calls fit) and
//!   with the estimate without one (so the budget, not each replica's view of it, refuses).
#![cfg(unix)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use turnstile_proxy::FakeUpstream;
use turnstile_testkit::{replica, RedisServer};

mod common;
use common::TURNSTILE;
use turnstile_testkit::replica::{
    next, one_at_a_time, start_replica, Deployment, Keys, PerRedis, Replica,
};
use turnstile_testkit::{chat, get_text, post_text};

const WORKSPACE: &str = "replicas";
/// The provider's concurrency, shared by the replicas.
const LIMIT: u64 = 3;
/// The shared token budget of the `metered` lane, per budget ID.
const TOKEN_BUDGET: u64 = 200;

/// The replica's configuration: coordination (a generous Redis timeout: this test looks at
/// shared limits, not failure detection, on a loaded machine) and the proxy's routes to `up`.
fn config_file(dir: &Path, up: &FakeUpstream) -> std::path::PathBuf {
    turnstile_testkit::config_file(dir, &format!(
            "demo = false\n\n[leases]\nttl_ms = 30000\n\n\
             [coordination]\ndegraded_share = \"0.34\"\nlease_liveness_ms = 5000\n\
             renew_every_ms = 500\nprobe_every_ms = 50\ntimeout_ms = 2000\n\n\
             [proxy]\nfallback_retry_after_ms = 1000\n\n\
             [proxy.upstreams.fake-openai]\nformat = \"openai\"\nbase_url = \"{}\"\n\n\
             [proxy.upstreams.fake-anthropic]\nformat = \"anthropic\"\nbase_url = \"{}\"\n\n\
             [proxy.models.\"m\"]\nupstream = \"fake-openai\"\nprovider = \"upstream\"\n\n\
             [proxy.models.\"claude-m\"]\nupstream = \"fake-anthropic\"\nprovider = \"upstream\"\n\n\
             [proxy.models.\"metered-m\"]\nupstream = \"fake-openai\"\nprovider = \"metered\"\n",
            up.openai_base(),
            up.anthropic_base()
        ))
}

/// The client's key of each Redis (the first replica on a Redis creates it, the others adopt it).
static DEPLOYMENTS: PerRedis<Keys> = PerRedis::new();

/// Starts `count` replicas on `redis` routing to `up`. Keys and profiles are shared through
/// Redis: the first replica registers the profile and creates the client's key, the others
/// adopt them (docs/replicas.md).
fn replicas(redis: &RedisServer, up: &FakeUpstream, count: usize) -> Vec<Replica> {
    let deployment = Deployment {
        workspace: WORKSPACE,
        profile: json!({
            "workspace": {"concurrency": 64},
            "providers": {
                "upstream": {"concurrency": LIMIT, "maxQueueLength": 64},
                "metered": {"concurrency": 8, "maxTokens": TOKEN_BUDGET},
            },
            "principals": {"client": {"concurrency": 64, "maxQueueLength": 64}},
        }),
        principals: &["client"],
    };
    (0..count)
        .map(|_| {
            start_replica(
                TURNSTILE,
                redis,
                &DEPLOYMENTS,
                |dir| config_file(dir, up),
                &deployment,
            )
        })
        .collect()
}

/// A proxied call's answer.
struct Answer {
    status: u16,
    head: String,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }
}

/// One proxied call through `replica`: `path` with `body`, extra headers as `(name, value)`.
fn call(replica: &Replica, path: &str, body: &Value, headers: &[(&str, &str)]) -> Answer {
    let bearer = format!("Bearer {}", replica.key("client"));
    let mut with_key = vec![("Authorization", bearer.as_str())];
    with_key.extend_from_slice(headers);
    let text = post_text(&replica.service.addr, path, &with_key, &body.to_string());
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    Answer {
        status,
        head: head.to_owned(),
        body: serde_json::from_str(body).unwrap_or(Value::Null),
    }
}

/// A counter of `/metrics` on the replica.
fn metric(replica: &Replica, name: &str) -> u64 {
    get_text(&replica.service.addr, "/metrics")
        .lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in /metrics"))
}

/// Leases whose liveness has not run out by Redis's clock.
fn live_leases(redis: &RedisServer, provider: &str) -> u64 {
    replica::live_leases(redis, WORKSPACE, provider)
}

#[test]
fn proxied_calls_through_three_replicas_never_exceed_the_shared_concurrency() {
    let _serial = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let up = FakeUpstream::spawn_thread();
    let replicas: Arc<Vec<Replica>> = Arc::new(replicas(&redis, &up, 3));
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    // Nine clients, three times the shared concurrency: each replica alone would let three
    // calls through, so without the shared step the upstream would see up to nine at once.
    let clients: Vec<_> = (0..9u64)
        .map(|i| {
            let (replicas, stop, served) = (replicas.clone(), stop.clone(), served.clone());
            std::thread::spawn(move || {
                let mut seed = 0x9e37_79b9_7f4a_7c15 ^ (i + 1);
                while !stop.load(Ordering::SeqCst) {
                    let replica = &replicas[(next(&mut seed) % 3) as usize];
                    let (path, model) = if next(&mut seed).is_multiple_of(4) {
                        ("/anthropic/v1/messages", "claude-m")
                    } else {
                        ("/openai/v1/chat/completions", "m")
                    };
                    let answer = call(
                        replica,
                        path,
                        &chat(model),
                        &[
                            ("x-fake-script", "first-byte-ms=20"),
                            ("x-turnstile-wait-ms", "20000"),
                        ],
                    );
                    assert_eq!(answer.status, 200, "{}", answer.body);
                    served.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().unwrap();
    }
    let stats = up.stats();
    let total = served.load(Ordering::SeqCst);
    eprintln!(
        "{total} proxied calls through 3 replicas, upstream max in flight {}",
        stats.max_in_flight
    );
    assert!(total > 0);
    assert_eq!(
        stats.requests, total as u64,
        "every call went upstream once"
    );
    assert!(
        stats.max_in_flight <= LIMIT,
        "the upstream served {} at once (shared limit {LIMIT})",
        stats.max_in_flight
    );
    // Every proxied admission went through the shared limits (none degraded).
    let shared: u64 = replicas
        .iter()
        .map(|r| metric(r, "turnstile_coordination_shared_admissions_total"))
        .sum();
    let degraded: u64 = replicas
        .iter()
        .map(|r| metric(r, "turnstile_coordination_degraded_admissions_total"))
        .sum();
    assert_eq!(shared, total as u64, "shared admissions");
    assert_eq!(degraded, 0, "degraded admissions");
    // Every settlement released its shared lease (in the background: allow a moment).
    let start = Instant::now();
    while live_leases(&redis, "upstream") > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{} shared leases left after the calls",
            live_leases(&redis, "upstream")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_upstream_429_through_one_replica_pauses_the_provider_on_the_others() {
    let _serial = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let up = FakeUpstream::spawn_thread();
    let replicas = replicas(&redis, &up, 3);

    // Through replica 0: the upstream answers 429 with a 3 s Retry-After.
    let answer = call(
        &replicas[0],
        "/openai/v1/chat/completions",
        &chat("m"),
        &[("x-fake-script", "status=429,retry-after=3")],
    );
    assert_eq!(answer.status, 429, "{}", answer.body);
    let paused_at = Instant::now();
    assert_eq!(up.stats().requests, 1);

    // Replica 1, OpenAI format, no wait: refused by turnstile (not the upstream), retryable.
    let answer = call(
        &replicas[1],
        "/openai/v1/chat/completions",
        &chat("m"),
        &[("x-turnstile-wait-ms", "0")],
    );
    assert_eq!(answer.status, 429, "{}", answer.body);
    assert_eq!(answer.header("x-turnstile-reason"), Some("retry-after"));
    assert_eq!(
        answer.body["error"]["type"], "rate_limit_error",
        "{}",
        answer.body
    );
    assert_eq!(
        answer.body["error"]["code"], "retry-after",
        "{}",
        answer.body
    );
    let hint: u64 = answer
        .header("retry-after-ms")
        .expect("retry-after-ms")
        .parse()
        .unwrap();
    assert!(hint > 0 && hint <= 3_000, "retry-after-ms {hint}");

    // Replica 2, Anthropic format, no wait: the same refusal in Anthropic's format.
    let answer = call(
        &replicas[2],
        "/anthropic/v1/messages",
        &chat("claude-m"),
        &[("x-turnstile-wait-ms", "0")],
    );
    assert_eq!(answer.status, 429, "{}", answer.body);
    assert_eq!(answer.body["type"], "error", "{}", answer.body);
    assert_eq!(
        answer.body["error"]["type"], "rate_limit_error",
        "{}",
        answer.body
    );
    assert_eq!(answer.header("x-turnstile-reason"), Some("retry-after"));
    assert_eq!(
        up.stats().requests,
        1,
        "refused calls never reach the upstream"
    );

    // Replica 1 again, prepared to wait: it goes upstream only once the pause is over.
    let answer = call(
        &replicas[1],
        "/openai/v1/chat/completions",
        &chat("m"),
        &[("x-turnstile-wait-ms", "20000")],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let waited = paused_at.elapsed();
    assert!(
        waited >= Duration::from_millis(2_500),
        "a waiting call went upstream {waited:?} into a 3 s pause"
    );
    assert_eq!(up.stats().requests, 2);
}

/// The provider's announced quota seen through one replica holds the lane on the others (issue
/// 32): an answer saying "0 requests left, reset in 2 s" through replica 0 pauses the lane for
/// every replica until the reset; a zero-wait call through replica 1 is refused without
/// reaching the upstream, and one that waits goes upstream only after the reset.
#[test]
fn a_spent_quota_seen_through_one_replica_holds_the_lane_on_the_others() {
    let _serial = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let up = FakeUpstream::spawn_thread();
    let replicas = replicas(&redis, &up, 2);

    let answer = call(
        &replicas[0],
        "/openai/v1/chat/completions",
        &chat("m"),
        &[("x-fake-script", "quota-requests=0/2000")],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let seen_at = Instant::now();
    assert_eq!(up.stats().requests, 1);

    // The shared pause is written in the background: replica 1 refuses within moments.
    let deadline = Instant::now() + Duration::from_millis(1_500);
    let refused = loop {
        let answer = call(
            &replicas[1],
            "/openai/v1/chat/completions",
            &chat("m"),
            &[("x-turnstile-wait-ms", "0")],
        );
        if answer.status == 429 || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.header("x-turnstile-reason"), Some("retry-after"));
    let before = up.stats().requests;
    assert!(before <= 2, "at most one call raced the pause: {before}");

    // Prepared to wait: it goes upstream only once the announced reset has passed.
    let answer = call(
        &replicas[1],
        "/openai/v1/chat/completions",
        &chat("m"),
        &[("x-turnstile-wait-ms", "20000")],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let waited = seen_at.elapsed();
    assert!(
        waited >= Duration::from_millis(1_500),
        "a waiting call went upstream {waited:?} into a 2 s announced reset"
    );
    assert_eq!(up.stats().requests, before + 1);
}

#[test]
fn a_shared_token_budget_is_settled_with_the_reported_usage() {
    let _serial = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let up = FakeUpstream::spawn_thread();
    let replicas = replicas(&redis, &up, 2);
    let metered = |replica: &Replica, budget: &str, script: &str| {
        call(
            replica,
            "/openai/v1/chat/completions",
            &chat("metered-m"),
            &[
                ("x-fake-script", script),
                ("x-turnstile-budget-id", budget),
                ("x-turnstile-wait-ms", "0"),
            ],
        )
    };
    // Each call is estimated at about 80 tokens (50 output + the prompt) and reports 2: with
    // the reported usage settled, ten calls fit in the 200-token budget across both replicas
    // (with the estimates standing, the third would not).
    for i in 0..10 {
        let answer = metered(&replicas[i % 2], "cheap", "usage=1/1");
        assert_eq!(answer.status, 200, "call {i}: {}", answer.body);
    }
    // Without reported usage the estimate stays charged. Alone, each replica has seen at most
    // two such calls (about 160 tokens): only the shared budget refuses the third.
    let mut answers = Vec::new();
    for i in 0..3 {
        answers.push(metered(&replicas[i % 2], "dear", "no-usage"));
    }
    assert_eq!(answers[0].status, 200, "{}", answers[0].body);
    assert_eq!(answers[1].status, 200, "{}", answers[1].body);
    assert_eq!(answers[2].status, 429, "{}", answers[2].body);
    assert_eq!(answers[2].header("x-turnstile-reason"), Some("tokens"));
    assert_eq!(answers[2].body["error"]["type"], "insufficient_quota");
    assert_eq!(answers[2].header("x-should-retry"), Some("false"));
    assert_eq!(
        up.stats().requests,
        12,
        "the refused call never reached the upstream"
    );
}
