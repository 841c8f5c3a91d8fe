//! `turnstile bench-serve`: the load generator runs against an in-process service and reports
//! what it measured; bad arguments are refused with a clear message.

use std::process::{Command, Output};

mod common;

fn bench_serve(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .arg("bench-serve")
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("the turnstile binary runs")
}

#[test]
fn bench_serve_in_process_measures_pairs_without_failures() {
    let output = bench_serve(&[
        "--clients",
        "4",
        "--seconds",
        "1",
        "--warmup-ms",
        "100",
        "--json",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("--json prints one JSON document");
    assert_eq!(report["inProcessService"], true);
    assert_eq!(report["clients"], 4);
    let pairs = report["pairs"].as_u64().unwrap();
    assert!(pairs > 0, "{report}");
    assert_eq!(report["pairsPerSecond"].as_f64().unwrap(), pairs as f64);
    assert_eq!(report["failures"], serde_json::json!({}), "{report}");
    for latency in [
        "pairLatency",
        "requestLatency",
        "acquireLatency",
        "releaseLatency",
    ] {
        let l = &report[latency];
        let (p50, p99, max) = (
            l["p50Ms"].as_f64().unwrap(),
            l["p99Ms"].as_f64().unwrap(),
            l["maxMs"].as_f64().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{latency}: {l}");
    }
    // A pair is two requests: its median cannot be below one request's median.
    assert!(
        report["pairLatency"]["p50Ms"].as_f64().unwrap()
            >= report["requestLatency"]["p50Ms"].as_f64().unwrap()
    );
    assert!(report["processCpuSeconds"].as_f64().unwrap() > 0.0);
}

#[test]
fn bench_serve_open_loop_never_offers_more_than_its_rate() {
    // 4 clients sharing 200 pairs/s: one pair every 20 ms per client. The generator must keep
    // to its schedule (never above the rate); a loopback service sustains this easily.
    let output = bench_serve(&[
        "--clients",
        "4",
        "--rate",
        "200",
        "--seconds",
        "1",
        "--warmup-ms",
        "100",
        "--json",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["targetPairsPerSecond"], 200.0);
    let pairs = report["pairs"].as_u64().unwrap();
    assert!((100..=204).contains(&pairs), "{report}");
    assert_eq!(report["failures"], serde_json::json!({}), "{report}");
}

#[test]
fn bench_serve_timeline_lists_every_measured_pair_in_start_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pairs.csv");
    let output = bench_serve(&[
        "--clients",
        "4",
        "--rate",
        "200",
        "--seconds",
        "1",
        "--warmup-ms",
        "100",
        "--timeline",
        path.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let csv = std::fs::read_to_string(&path).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("start_ms,pair_ms,acquire_ms,release_ms"));
    let rows: Vec<Vec<f64>> = lines
        .map(|line| line.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len() as u64, report["pairs"].as_u64().unwrap());
    for pair in rows.windows(2) {
        assert!(pair[0][0] <= pair[1][0], "in start order: {pair:?}");
    }
    let max_pair_ms = report["pairLatency"]["maxMs"].as_f64().unwrap();
    for row in &rows {
        let [start, pair, acquire, release] = row[..] else {
            panic!("four columns: {row:?}");
        };
        assert!((0.0..1000.0).contains(&start), "after the warm-up: {row:?}");
        assert!(
            acquire > 0.0 && release > 0.0 && pair <= max_pair_ms + 0.001,
            "{row:?}"
        );
        assert!(
            pair + 0.002 >= acquire + release,
            "a pair holds both requests: {row:?}"
        );
    }
}

#[test]
fn bench_serve_timeline_to_an_unwritable_path_is_refused() {
    let output = bench_serve(&[
        "--clients",
        "1",
        "--seconds",
        "1",
        "--warmup-ms",
        "0",
        "--timeline",
        "/nonexistent-dir/pairs.csv",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--timeline /nonexistent-dir/pairs.csv"),
        "{stderr}"
    );
}

#[test]
fn bench_serve_refuses_bad_targets_and_counts() {
    let cases: [(&[&str], &str); 7] = [
        (&["--url", "http://127.0.0.1:1"], "--url needs --key"),
        (
            &["--url", "https://127.0.0.1:1", "--key", "tsk_x"],
            "plain HTTP",
        ),
        (
            &["--url", "http://127.0.0.1:1/base", "--key", "tsk_x"],
            "without a path",
        ),
        (&["--clients", "0"], "at least 1"),
        (&["--rate", "0"], "is not a rate"),
        (&["--rate=-5"], "is not a rate"),
        (&["--rate", "fast"], "is not a rate"),
    ];
    for (args, message) in cases {
        let output = bench_serve(args);
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

#[test]
fn bench_serve_against_an_unreachable_service_fails_with_transport_errors() {
    // Port 1 on loopback refuses connections: every pair fails, and the command says so.
    let output = bench_serve(&[
        "--url",
        "http://127.0.0.1:1",
        "--key",
        "tsk_x",
        "--clients",
        "2",
        "--seconds",
        "1",
        "--warmup-ms",
        "0",
    ]);
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("failed by transport"), "{stdout}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("no acquire + release pair succeeded"));
}

/// A real `turnstile serve` on a fresh data directory; its base URL.
fn start_service(data: &std::path::Path) -> (std::process::Child, String) {
    let mut service = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve starts");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        service.stdout.take().expect("piped"),
    ));
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            line.strip_prefix("turnstile serve: listening on ")
                .map(str::to_owned)
        })
        .expect("the service prints its address");
    std::thread::spawn(move || for _ in lines {});
    (service, url)
}

const UNKNOWN_KEY: &str = "tsk_0000000000000000000000000000000000000000000000000000000000000000";

#[test]
fn bench_serve_counts_refused_requests_by_status() {
    // A real service and a key it does not know: every acquire is answered 401, each answer is
    // framed and counted, and the client reconnects after each (a refused request never
    // poisons the next).
    let data = tempfile::tempdir().unwrap();
    let (mut service, url) = start_service(data.path());
    let output = bench_serve(&[
        "--url",
        &url,
        "--key",
        UNKNOWN_KEY,
        "--clients",
        "2",
        "--seconds",
        "1",
        "--warmup-ms",
        "0",
        "--json",
    ]);
    let _ = service.kill();
    let _ = service.wait();
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no acquire + release pair succeeded"),
        "{stderr}"
    );
    assert!(!stdout.contains("transport"), "{stdout}");
    assert!(stdout.contains("status 401"), "{stdout} {stderr}");
}

#[test]
fn bench_serve_spreads_its_clients_over_several_urls() {
    // Two targets, a live service (401: the key is unknown) and a refused port: with two
    // clients, one goes to each, so both kinds of failure are counted.
    let data = tempfile::tempdir().unwrap();
    let (mut service, url) = start_service(data.path());
    let both = format!("{url},http://127.0.0.1:1");
    let output = bench_serve(&[
        "--url",
        &both,
        "--key",
        UNKNOWN_KEY,
        "--clients",
        "2",
        "--seconds",
        "1",
        "--warmup-ms",
        "0",
        "--json",
    ]);
    let _ = service.kill();
    let _ = service.wait();
    assert!(!output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["target"], both.as_str());
    assert_eq!(report["inProcessService"], false);
    let failures = &report["failures"];
    assert!(failures["status 401"].as_u64().unwrap() > 0, "{report}");
    assert!(failures["transport"].as_u64().unwrap() > 0, "{report}");
}

/// A running service with the bench profile registered and a key of principal `bench`.
fn bench_deployment(dir: &std::path::Path) -> (common::Service, String) {
    let config = dir.join("turnstile.toml");
    std::fs::write(&config, "demo = false\n").unwrap();
    let service = common::start(&dir.join("data"), &config, true);
    let admin = service.admin_key.clone().expect("first start");
    let profile = serde_json::json!({
        "workspace": {"concurrency": 64},
        "providers": {"bench-provider": {"concurrency": 64}},
        "principals": {"bench": {"concurrency": 64}},
    });
    let (status, answer) = common::http(
        &service.addr,
        "PUT",
        "/v1/workspaces/bench/profiles/bench-v1",
        &admin,
        Some(&profile),
    )
    .unwrap();
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = common::http(
        &service.addr,
        "POST",
        "/v1/workspaces/bench/keys",
        &admin,
        Some(&serde_json::json!({"principalId": "bench"})),
    )
    .unwrap();
    assert_eq!(status, 201, "{answer}");
    (service, answer["key"].as_str().unwrap().to_owned())
}

#[test]
fn bench_serve_with_a_key_per_url_reports_each_target_apart() {
    // Two separate deployments, each with its own key: a paired run reports each one's figures
    // (the clients of both ran at the same time), in --url order.
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, a_key) = bench_deployment(a_dir.path());
    let (b, b_key) = bench_deployment(b_dir.path());
    let urls = format!("http://{},http://{}", a.addr, b.addr);
    let keys = format!("{a_key},{b_key}");
    let output = bench_serve(&[
        "--url",
        &urls,
        "--key",
        &keys,
        "--provider",
        "bench-provider",
        "--clients",
        "4",
        "--seconds",
        "1",
        "--warmup-ms",
        "0",
        "--json",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["failures"], serde_json::json!({}), "{report}");
    let targets = report["perTarget"].as_array().expect("perTarget");
    assert_eq!(targets.len(), 2, "{report}");
    let mut total = 0;
    for (target, addr) in targets.iter().zip([&a.addr, &b.addr]) {
        assert_eq!(target["url"], format!("http://{addr}"));
        let pairs = target["pairs"].as_u64().unwrap();
        assert!(pairs > 0, "{report}");
        assert!(target["acquireLatency"]["p99Ms"].as_f64().unwrap() > 0.0);
        total += pairs;
    }
    assert_eq!(total, report["pairs"].as_u64().unwrap());

    // Three keys for two URLs: refused before any load.
    let output = bench_serve(&["--url", &urls, "--key", "k1,k2,k3", "--seconds", "1"]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("one key, or one per --url"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
