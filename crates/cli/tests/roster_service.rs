//! `turnstile roster run --service`: every read of the roster admitted through a real
//! `turnstile serve` process, against the scripted fake chat-completions upstream
//! (`turnstile_proxy::FakeUpstream`), with a concurrent HTTP client on the same lane.
//!
//! - the reads are the service's decisions (its admission counter) and share the lane's
//!   concurrency limit with the other client (the upstream never sees two calls at once);
//! - a refused read is not made: no receipt (the rolling hour is untouched), no record (not a
//!   failed read), still pending;
//! - a provider 429 with Retry-After pauses the lane for everyone (release `retry-after`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use common::start;
use serde_json::{json, Value};
use turnstile_proxy::FakeUpstream;
use turnstile_testkit::{config_file, http, post_text, ServeProcess};

/// The workspace and the lane of these tests.
const WORKSPACE: &str = "dash";
const LANE: &str = "reader";
/// The principal key's environment variable of `roster run`.
const KEY_ENV: &str = "TURNSTILE_KEY";

/// The service's configuration of most tests.
const CONFIG: &str = "demo = false\n";

/// What each test starts from.
struct Setup {
    /// Holds the service's and the roster's data.
    dir: tempfile::TempDir,
    service: ServeProcess,
    /// Principal `roster`'s key (for `roster run`).
    roster_key: String,
    /// Principal `agent`'s key (the concurrent HTTP client).
    agent_key: String,
    upstream: FakeUpstream,
    /// The roster's data directory.
    data: PathBuf,
}

/// A service ([`service_with`] `config`), the fake upstream with the standing `script`, and a
/// roster with `count` generations enqueued.
fn set_up(config: &str, script: &str, count: usize) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (service, roster_key, agent_key) = service_with(dir.path(), config);
    let upstream = FakeUpstream::spawn_thread();
    if !script.is_empty() {
        upstream.set_script(script);
    }
    let data = dir.path().join("roster");
    enqueue(dir.path(), &data, count);
    Setup {
        dir,
        service,
        roster_key,
        agent_key,
        upstream,
        data,
    }
}

/// A first `turnstile serve` on a fresh directory with the configuration file `config`, the
/// profile (lane `reader`, one call at a time; principal `costly` refuses unknown costs)
/// registered, and keys of principals `roster` and `agent`.
fn service_with(dir: &Path, config: &str) -> (ServeProcess, String, String) {
    let config = config_file(dir, config);
    let service = start(&dir.join("data"), &config, true);
    let admin = service.admin_key.clone().expect("first start");
    let profile = json!({
        "workspace": {"concurrency": 8, "maxQueueLength": 16, "maxQueueWaitMs": 20000},
        "providers": {LANE: {"concurrency": 1, "maxQueueLength": 16, "maxQueueWaitMs": 20000}},
        "principals": {"roster": {"concurrency": 4}, "agent": {"concurrency": 4},
                       "costly": {"concurrency": 4, "maxCostUsd": 1, "allowUnknownCost": false}},
    });
    let path = format!("/v1/workspaces/{WORKSPACE}/profiles/v1");
    let (status, answer) = http(&service.addr, "PUT", &path, &admin, Some(&profile)).unwrap();
    assert_eq!(status, 201, "{answer}");
    let (roster, agent) = (new_key(&service, "roster"), new_key(&service, "agent"));
    (service, roster, agent)
}

/// A new key of `principal` in the workspace, made with the admin key.
fn new_key(service: &ServeProcess, principal: &str) -> String {
    let admin = service.admin_key.as_deref().expect("first start");
    let path = format!("/v1/workspaces/{WORKSPACE}/keys");
    let body = json!({ "principalId": principal });
    let (status, answer) = http(&service.addr, "POST", &path, admin, Some(&body)).unwrap();
    assert_eq!(status, 201, "{answer}");
    answer["key"].as_str().unwrap().to_owned()
}

/// `turnstile roster --data DATA ARGS`.
fn roster(data: &Path, args: &[&str], key: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .arg("roster")
        .args(args)
        .arg("--data")
        .arg(data)
        .env("ROSTER_SERVICE_TEST_API_KEY", "sk-upstream")
        .env_remove(KEY_ENV)
        .env_remove("TURNSTILE_READER_BASE_URL")
        .env_remove("TURNSTILE_READER_MODEL")
        .env_remove("TURNSTILE_READER_API_KEY_ENV");
    if let Some(key) = key {
        command.env(KEY_ENV, key);
    }
    command.output().unwrap()
}

/// `roster run --once --service` against `upstream`, admitted on the lane with `key`.
fn run_once(data: &Path, service: &ServeProcess, upstream: &FakeUpstream, key: &str) -> Output {
    let base = upstream.openai_base();
    let url = format!("http://{}", service.addr);
    let args = [
        "run",
        "--once",
        "--debounce-ms",
        "0",
        "--timeout-secs",
        "10",
        "--base-url",
        &base,
        "--model",
        "fake-model",
        "--api-key-env",
        "ROSTER_SERVICE_TEST_API_KEY",
        "--service",
        &url,
        "--provider",
        LANE,
    ];
    roster(data, &args, Some(key))
}

/// Enqueues `count` band-1 generations `g-0`, `g-1`, … in the roster at `data`.
fn enqueue(dir: &Path, data: &Path, count: usize) {
    let evidence: Vec<Value> = (0..count)
        .map(|i| json!({"generationId": format!("g-{i}"), "lifecycle": "waiting"}))
        .collect();
    let file = dir.join("evidence.json");
    std::fs::write(&file, Value::from(evidence).to_string()).unwrap();
    let output = roster(data, &["enqueue", file.to_str().unwrap()], None);
    assert!(output.status.success(), "{}", text(&output.stderr));
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn roster_status(data: &Path) -> Value {
    let output = roster(data, &["status", "--json"], None);
    assert!(output.status.success(), "{}", text(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The admitted decisions in the service's `/metrics`.
fn admitted(service: &ServeProcess) -> u64 {
    let metrics = turnstile_testkit::get_text(&service.addr, "/metrics");
    metrics
        .lines()
        .filter(|line| {
            line.starts_with("turnstile_admission_decisions_total{")
                && line.contains("decision=\"admit\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Principal `agent`'s admission on the lane (budget `agent`, 10 tokens).
fn agent_acquire(addr: &str, key: &str, deadline_ms: u64) -> (u16, Value) {
    let body = json!({"providerId": LANE, "budgetId": "agent", "estimate": {"tokens": 10},
                      "deadlineMs": deadline_ms});
    http(addr, "POST", "/v1/admissions", key, Some(&body)).unwrap()
}

/// Principal `agent`'s release of `lease` with `outcome` (asserts 200).
fn agent_release(addr: &str, key: &str, lease: &str, outcome: &Value) {
    let path = format!("/v1/leases/{lease}/release");
    let (status, answer) = http(addr, "POST", &path, key, Some(outcome)).unwrap();
    assert_eq!(status, 200, "{answer}");
}

/// The agent's provider asks for `ms` of quiet: a lease on the lane released `retry-after`.
fn pause_lane(service: &ServeProcess, agent_key: &str, ms: u64) {
    let (status, answer) = agent_acquire(&service.addr, agent_key, 5_000);
    assert_eq!(status, 200, "{answer}");
    let lease = answer["leaseId"].as_str().unwrap();
    let pause = json!({"outcome": "retry-after", "retryAfterMs": ms});
    agent_release(&service.addr, agent_key, lease, &pause);
}

#[test]
fn roster_reads_are_admitted_by_the_service_and_share_its_lane_limit() {
    // Every call (the roster's and the agent's) takes 200 ms at the upstream.
    let t = set_up(CONFIG, "first-byte-ms=200", 3);

    let before = admitted(&t.service);
    // The agent: acquire on the same lane, call the upstream, release, until the roster ends.
    let done = Arc::new(AtomicBool::new(false));
    let agent_grants = Arc::new(AtomicUsize::new(0));
    let agent = {
        let (done, grants) = (done.clone(), agent_grants.clone());
        let (addr, upstream_addr, key) = (
            t.service.addr.clone(),
            t.upstream.addr.to_string(),
            t.agent_key.clone(),
        );
        thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let (status, answer) = agent_acquire(&addr, &key, 20_000);
                assert_eq!(status, 200, "{answer}");
                grants.fetch_add(1, Ordering::SeqCst);
                let call = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
                let reply = post_text(&upstream_addr, "/v1/chat/completions", &[], call);
                assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
                let lease = answer["leaseId"].as_str().unwrap();
                agent_release(&addr, &key, lease, &json!({"outcome": "success"}));
            }
        })
    };

    let output = run_once(&t.data, &t.service, &t.upstream, &t.roster_key);
    done.store(true, Ordering::SeqCst);
    agent.join().unwrap();
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    // The fake answers "hello", outside the answer contract: three reads made, each invalid.
    for i in 0..3 {
        assert!(
            stdout.contains(&format!("read g-{i} (band 1): invalid")),
            "{stdout}"
        );
    }
    assert!(!stdout.contains(&t.roster_key) && !stderr.contains(&t.roster_key));

    // The three reads are decisions of the service, next to the agent's.
    let agent_grants = agent_grants.load(Ordering::SeqCst) as u64;
    assert!(agent_grants >= 1);
    assert_eq!(admitted(&t.service) - before, 3 + agent_grants);
    // The lane's one permit held across both: never two calls at the upstream at once.
    let stats = t.upstream.stats();
    assert_eq!(stats.requests, 3 + agent_grants);
    assert_eq!(stats.max_in_flight, 1, "the lane limit is shared");
}

#[test]
fn a_refused_read_is_not_made_not_recorded_and_not_counted_in_the_rolling_hour() {
    let t = set_up(CONFIG, "", 2);

    // The agent's provider asked for 60 s of quiet: the lane is paused past the read's 10 s
    // deadline, so the service refuses the read at once (`retry-after`, retryable).
    pause_lane(&t.service, &t.agent_key, 60_000);

    let output = run_once(&t.data, &t.service, &t.upstream, &t.roster_key);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "a retryable refusal: {stdout}\n{stderr}"
    );
    assert!(stdout.contains("not admitted g-0: retry-after"), "{stdout}");
    assert!(!stdout.contains("read g-"), "{stdout}");
    assert_eq!(t.upstream.stats().requests, 0, "no read was made");

    // Not a failed read, not in the rolling hour, still pending.
    let status = roster_status(&t.data);
    assert_eq!(status["rollingCalls"]["used"], 0, "{status}");
    assert_eq!(status["pending"], 2, "{status}");
    let records = roster(&t.data, &["records"], None);
    let records: Value = serde_json::from_slice(&records.stdout).unwrap();
    assert_eq!(records, json!([]), "no record for a read not made");
}

#[test]
fn a_provider_429_pauses_the_lane_for_everyone_and_a_bad_set_up_is_refused() {
    let t = set_up(CONFIG, "status=429,retry-after=30", 1);

    let output = run_once(&t.data, &t.service, &t.upstream, &t.roster_key);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        stdout.contains("read g-0 (band 1): unavailable"),
        "{stdout}"
    );
    // The read's release paused the lane: the agent is refused at once.
    let (status, answer) = agent_acquire(&t.service.addr, &t.agent_key, 2_000);
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["reason"], "retry-after", "{answer}");
    let pauses = format!("/v1/workspaces/{WORKSPACE}/pauses");
    let admin = t.service.admin_key.clone().unwrap();
    let (_, pauses) = http(&t.service.addr, "GET", &pauses, &admin, None).unwrap();
    assert_eq!(pauses["records"][0]["cause"], "release-outcome", "{pauses}");

    // --service unreachable, without a lane or a key, with an unknown key or lane, a principal
    // whose profile refuses unknown costs, --provider without --service: clear errors, no read.
    let url = format!("http://{}", t.service.addr);
    let base = t.upstream.openai_base();
    let reader = ["--base-url", base.as_str(), "--model", "m"];
    let costly = new_key(&t.service, "costly");
    let cases: [(Vec<&str>, Option<&str>, &str); 7] = [
        (
            vec!["--service", "http://127.0.0.1:9", "--provider", LANE],
            Some(t.roster_key.as_str()),
            "the service could not be asked about the key's workspace",
        ),
        (
            vec!["--service", &url, "--provider", LANE],
            Some(costly.as_str()),
            "unknown-cost; the roster estimates tokens only",
        ),
        (
            vec!["--service", &url, "--provider", "nope"],
            Some(t.roster_key.as_str()),
            "--provider \"nope\" is not a provider lane of the key's workspace profile; its lanes: reader",
        ),
        (
            vec!["--provider", LANE],
            Some(t.roster_key.as_str()),
            "--service",
        ),
        (
            vec!["--service", &url],
            Some(t.roster_key.as_str()),
            "--service needs --provider",
        ),
        (
            vec!["--service", &url, "--provider", LANE],
            None,
            "TURNSTILE_KEY",
        ),
        (
            vec!["--service", &url, "--provider", LANE],
            Some("tsk_unknown"),
            "does not know this key",
        ),
    ];
    let requests = t.upstream.stats().requests;
    // A fresh roster: `g-0` of the first one is in its cool-down after the failed read.
    let fresh = t.dir.path().join("fresh");
    enqueue(t.dir.path(), &fresh, 1);
    for (extra, key, expected) in cases {
        let mut args = vec![
            "run",
            "--once",
            "--debounce-ms",
            "0",
            "--api-key-env",
            "ROSTER_SERVICE_TEST_API_KEY",
        ];
        args.extend(reader);
        args.extend(extra);
        let output = roster(&fresh, &args, key);
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{expected}");
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
    assert_eq!(t.upstream.stats().requests, requests);
}

#[test]
fn a_read_longer_than_the_lease_ttl_is_heartbeated_and_released_with_its_usage() {
    // Leases live 600 ms unless heartbeated; the read takes 1.5 s.
    let t = set_up(
        "demo = false\n\n[leases]\nttl_ms = 600\n",
        "first-byte-ms=1500,usage=700/300",
        1,
    );

    let output = run_once(&t.data, &t.service, &t.upstream, &t.roster_key);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("read g-0 (band 1): invalid"), "{stdout}");
    // Reclaimed at its TTL, the lease's release would be refused (404) and reported.
    assert!(!stderr.contains("warning"), "{stderr}");
    // The release reported the provider's usage: the fairness window counts 1,000 tokens.
    let admin = t.service.admin_key.clone().unwrap();
    let path = format!("/v1/workspaces/{WORKSPACE}/fairness");
    let (status, fairness) = http(&t.service.addr, "GET", &path, &admin, None).unwrap();
    assert_eq!(status, 200, "{fairness}");
    assert_eq!(fairness["totalTokens"], 1000, "{fairness}");
}

#[test]
fn a_looping_run_waits_out_a_retryable_refusal_then_reads() {
    let t = set_up(CONFIG, "", 1);
    // The lane is paused for 2 s; the read's deadline is 1 s: refused at once, Retry-After ~2 s.
    pause_lane(&t.service, &t.agent_key, 2_000);

    let base = t.upstream.openai_base();
    let url = format!("http://{}", t.service.addr);
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["roster", "run", "--debounce-ms", "0", "--timeout-secs", "1"])
        .args(["--poll-ms", "100", "--base-url", &base, "--model", "m"])
        .args(["--api-key-env", "ROSTER_SERVICE_TEST_API_KEY"])
        .args(["--service", &url, "--provider", LANE])
        .arg("--data")
        .arg(&t.data)
        .env("ROSTER_SERVICE_TEST_API_KEY", "sk-upstream")
        .env(KEY_ENV, &t.roster_key)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // A watchdog: a run that never reads is killed after 30 s (its stdout then ends).
    let (pid, reaped) = (child.id().to_string(), Arc::new(AtomicBool::new(false)));
    let watchdog = reaped.clone();
    thread::spawn(move || {
        thread::sleep(std::time::Duration::from_secs(30));
        if !watchdog.load(Ordering::SeqCst) {
            let _ = Command::new("kill").arg(&pid).status();
        }
    });
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for line in std::io::BufRead::lines(stdout) {
        let line = line.unwrap();
        let read = line.starts_with("read g-0");
        lines.push(line);
        if read || lines.len() > 20 {
            break;
        }
    }
    let _ = child.kill();
    child.wait().unwrap();
    reaped.store(true, Ordering::SeqCst);
    // Refused once (the wait was the service's Retry-After, not a spin), then read.
    let refused = lines
        .iter()
        .filter(|l| l.starts_with("not admitted g-0: retry-after"));
    assert_eq!(refused.count(), 1, "{lines:?}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("read g-0 (band 1): invalid")
    );
    assert_eq!(t.upstream.stats().requests, 1);
}

#[test]
fn a_read_whose_timeout_is_above_the_services_max_wait_is_admitted_at_the_max_wait() {
    // The service waits 5 s at most; the read's timeout is 10 s (`run_once`): the client
    // asks again at 5 s instead of stopping `run` with the service's 422.
    let config = "demo = false\n\n[admission]\ndefault_wait_ms = 1000\nmax_wait_ms = 5000\n";
    let t = set_up(config, "", 1);

    let output = run_once(&t.data, &t.service, &t.upstream, &t.roster_key);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("read g-0 (band 1): invalid"), "{stdout}");
    assert_eq!(t.upstream.stats().requests, 1);
}

#[test]
fn with_prices_the_demo_principal_admits_reads_that_it_refuses_without_them() {
    // The shipped profile: principal `demo` has `maxCostUsd: 5` and refuses unknown costs.
    let t = set_up(CONFIG, "", 1);
    let admin = t.service.admin_key.clone().unwrap();
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/profile.json");
    let profile: Value = serde_json::from_str(&std::fs::read_to_string(shipped).unwrap()).unwrap();
    let path = format!("/v1/workspaces/{WORKSPACE}/profiles/demo");
    let (status, answer) = http(&t.service.addr, "PUT", &path, &admin, Some(&profile)).unwrap();
    assert_eq!(status, 201, "{answer}");
    let demo = new_key(&t.service, "demo");

    let (base, url) = (
        t.upstream.openai_base(),
        format!("http://{}", t.service.addr),
    );
    let read = |prices: &[&str]| {
        let mut args = vec!["run", "--once", "--debounce-ms", "0", "--timeout-secs", "5"];
        args.extend(["--base-url", &base, "--model", "m"]);
        args.extend(["--api-key-env", "ROSTER_SERVICE_TEST_API_KEY"]);
        args.extend(["--service", &url, "--provider", "llm-subagent"]);
        args.extend(prices);
        roster(&t.data, &args, Some(&demo))
    };
    let unpriced = read(&[]);
    assert!(!unpriced.status.success());
    assert!(
        text(&unpriced.stderr).contains("unknown-cost"),
        "{}",
        text(&unpriced.stderr)
    );
    assert_eq!(t.upstream.stats().requests, 0);

    let priced = read(&["--input-usd-per-mtok", "3", "--output-usd-per-mtok", "15"]);
    let (stdout, stderr) = (text(&priced.stdout), text(&priced.stderr));
    assert!(priced.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("read g-0 (band 1): invalid"), "{stdout}");
    assert_eq!(t.upstream.stats().requests, 1);

    // A price that is not a price is a clear error, and one without the other a usage error.
    let negative = read(&["--input-usd-per-mtok", "-1", "--output-usd-per-mtok", "15"]);
    assert!(
        text(&negative.stderr).contains("prices must be finite"),
        "{}",
        text(&negative.stderr)
    );
    let half = read(&["--input-usd-per-mtok", "3"]);
    assert_eq!(half.status.code(), Some(2), "{}", text(&half.stderr));
}
