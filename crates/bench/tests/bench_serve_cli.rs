//! `turnstile-bench serve` (formerly `turnstile bench-serve`): the load generator runs against
//! an in-process service and reports what it measured; bad arguments are refused with a clear
//! message.

use std::process::Output;

mod common;
use turnstile_testkit::TestServer;

fn bench_serve(args: &[&str]) -> Output {
    let mut command = vec!["serve"];
    command.extend_from_slice(args);
    common::bench(&command)
}

/// An in-process run of 4 clients for one second after a 100 ms warm-up, with `more` flags;
/// its JSON report.
fn four_clients_for_a_second(more: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "--clients",
        "4",
        "--seconds",
        "1",
        "--warmup-ms",
        "100",
        "--json",
    ];
    args.extend_from_slice(more);
    common::json_report(&bench_serve(&args))
}

#[test]
fn bench_serve_in_process_measures_pairs_without_failures() {
    let report = four_clients_for_a_second(&[]);
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
    let report = four_clients_for_a_second(&["--rate", "200"]);
    assert_eq!(report["targetPairsPerSecond"], 200.0);
    let pairs = report["pairs"].as_u64().unwrap();
    assert!((100..=204).contains(&pairs), "{report}");
    assert_eq!(report["failures"], serde_json::json!({}), "{report}");
}

#[test]
fn bench_serve_timeline_lists_every_measured_pair_in_start_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pairs.csv");
    let report =
        four_clients_for_a_second(&["--rate", "200", "--timeline", path.to_str().unwrap()]);
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

const UNKNOWN_KEY: &str = "tsk_0000000000000000000000000000000000000000000000000000000000000000";

/// Two clients for one second, no warm-up, acting with a key no service knows, on `url`; JSON.
fn bench_serve_with_an_unknown_key(url: &str) -> Output {
    bench_serve(&[
        "--url",
        url,
        "--key",
        UNKNOWN_KEY,
        "--clients",
        "2",
        "--seconds",
        "1",
        "--warmup-ms",
        "0",
        "--json",
    ])
}

#[test]
fn bench_serve_counts_refused_requests_by_status() {
    // A real service and a key it does not know: every acquire is answered 401, each answer is
    // framed and counted, and the client reconnects after each (a refused request never
    // poisons the next).
    let service = common::service();
    let output = bench_serve_with_an_unknown_key(&service.base);
    drop(service);
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
    let service = common::service();
    let both = format!("{},http://127.0.0.1:1", service.base);
    let output = bench_serve_with_an_unknown_key(&both);
    drop(service);
    assert!(!output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["target"], both.as_str());
    assert_eq!(report["inProcessService"], false);
    let failures = &report["failures"];
    assert!(failures["status 401"].as_u64().unwrap() > 0, "{report}");
    assert!(failures["transport"].as_u64().unwrap() > 0, "{report}");
}

/// A running service with the bench profile registered and a key of principal `bench`.
fn bench_deployment() -> (TestServer, String) {
    let service = common::service();
    let key = common::bench_key(
        &service,
        &serde_json::json!({
            "workspace": {"concurrency": 64},
            "providers": {"bench-provider": {"concurrency": 64}},
            "principals": {"bench": {"concurrency": 64}},
        }),
    );
    (service, key)
}

#[test]
fn bench_serve_with_a_key_per_url_reports_each_target_apart() {
    // Two separate deployments, each with its own key: a paired run reports each one's figures
    // (the clients of both ran at the same time), in --url order.
    let (a, a_key) = bench_deployment();
    let (b, b_key) = bench_deployment();
    let urls = format!("{},{}", a.base, b.base);
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
    let report = common::json_report(&output);
    assert_eq!(report["failures"], serde_json::json!({}), "{report}");
    let targets = report["perTarget"].as_array().expect("perTarget");
    assert_eq!(targets.len(), 2, "{report}");
    let mut total = 0;
    for (target, url) in targets.iter().zip([&a.base, &b.base]) {
        assert_eq!(target["url"], url.as_str());
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
