//! `/metrics` of a real `turnstile serve`, parsed: a single process with proxy lanes, and a
//! replica on Redis (which adds coordination and the identity mirror). Every family appears
//! once, with its HELP line, then its TYPE line, then only its own series; and the families
//! (name, type, label keys, in order) are exactly those `/metrics` served before its writers
//! became one registry, so dashboards keep working. Needs `redis-server` for the replica.
#![cfg(unix)]

use std::path::{Path, PathBuf};

use turnstile_testkit::RedisServer;

mod common;
use common::start_with;
use turnstile_testkit::replica::one_at_a_time;

/// Every family of a single process with proxy lanes: (name, type, label keys).
const SINGLE: &[(&str, &str, &[&str])] = &[
    (
        "turnstile_admission_decisions_total",
        "counter",
        &["decision", "reason"],
    ),
    ("turnstile_breaker_transitions_total", "counter", &["state"]),
    ("turnstile_leases_active", "gauge", &[]),
    ("turnstile_waiters_queued", "gauge", &[]),
    ("turnstile_leases_granted_total", "counter", &[]),
    ("turnstile_leases_released_total", "counter", &[]),
    ("turnstile_leases_expired_total", "counter", &[]),
    ("turnstile_leases_undeliverable_total", "counter", &[]),
    ("turnstile_waiters_disconnected_total", "counter", &[]),
    (
        "turnstile_breaker_transitions_dropped_total",
        "counter",
        &[],
    ),
    ("turnstile_budgets_evicted_total", "counter", &[]),
    ("turnstile_leases_reinstated_total", "counter", &[]),
    ("turnstile_lease_journal_failures_total", "counter", &[]),
    ("turnstile_http_connections_open", "gauge", &[]),
    ("turnstile_http_connections_total", "counter", &[]),
    ("turnstile_store_errors_total", "counter", &[]),
    ("turnstile_actual_tokens_total", "counter", &[]),
    ("turnstile_actual_cost_micro_usd_total", "counter", &[]),
    ("turnstile_bucket_checkpoints_ignored_total", "counter", &[]),
    ("turnstile_http_handler_panics_total", "counter", &[]),
    ("turnstile_http_cuts_total", "counter", &["kind"]),
    ("turnstile_proxy_calls_total", "counter", &["lane", "class"]),
    (
        "turnstile_proxy_usage_tokens_total",
        "counter",
        &["lane", "kind"],
    ),
    (
        "turnstile_proxy_settled_cost_micro_usd_total",
        "counter",
        &["lane"],
    ),
    (
        "turnstile_proxy_settlements_total",
        "counter",
        &["lane", "basis"],
    ),
    (
        "turnstile_proxy_upstream_pauses_total",
        "counter",
        &["lane"],
    ),
    (
        "turnstile_proxy_failovers_total",
        "counter",
        &["lane", "cause"],
    ),
    (
        "turnstile_proxy_quota_observations_total",
        "counter",
        &["lane"],
    ),
    (
        "turnstile_proxy_quota_headers_malformed_total",
        "counter",
        &["lane"],
    ),
];

/// What a replica adds after [`SINGLE`].
const REPLICA: &[(&str, &str, &[&str])] = &[
    ("turnstile_coordination_state", "gauge", &["state"]),
    ("turnstile_coordination_errors_total", "counter", &[]),
    (
        "turnstile_coordination_shared_admissions_total",
        "counter",
        &[],
    ),
    (
        "turnstile_coordination_degraded_admissions_total",
        "counter",
        &[],
    ),
    ("turnstile_coordination_turns_total", "counter", &[]),
    (
        "turnstile_coordination_reconciliations_total",
        "counter",
        &[],
    ),
    ("turnstile_coordination_books_lost_total", "counter", &[]),
    ("turnstile_identity_events_applied_total", "counter", &[]),
    ("turnstile_identity_follow_errors_total", "counter", &[]),
    ("turnstile_identity_apply_errors_total", "counter", &[]),
    ("turnstile_identity_reseeds_total", "counter", &[]),
    ("turnstile_identity_following", "gauge", &[]),
];

/// One family as the body declares it.
#[derive(Debug, PartialEq)]
struct Family {
    name: String,
    kind: String,
    labels: Vec<String>,
}

/// Parses a text exposition (format 0.0.4) and checks its shape: each family has one HELP
/// line, followed at once by its TYPE line, then only series named like it with one set of
/// label keys; no family appears twice. Answers the families in order.
fn families(body: &str) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    let mut lines = body.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(help) = line.strip_prefix("# HELP ") {
            let (name, text) = help.split_once(' ').expect("HELP has a name and a text");
            assert!(!text.trim().is_empty(), "{name}: empty HELP");
            assert!(
                families.iter().all(|f| f.name != name),
                "{name} appears twice in\n{body}"
            );
            let kind = lines
                .next()
                .and_then(|l| l.strip_prefix("# TYPE "))
                .and_then(|t| t.strip_prefix(name))
                .and_then(|t| t.strip_prefix(' '))
                .unwrap_or_else(|| panic!("{name}: HELP not followed by its TYPE"));
            assert!(["counter", "gauge"].contains(&kind), "{name}: {kind}");
            families.push(Family {
                name: name.to_owned(),
                kind: kind.to_owned(),
                labels: Vec::new(),
            });
            continue;
        }
        assert!(!line.starts_with('#'), "a comment that is no HELP: {line}");
        let family = families
            .last_mut()
            .unwrap_or_else(|| panic!("a series before any HELP/TYPE: {line}"));
        let (series, value) = line.rsplit_once(' ').expect("a series has a value");
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("{line}: value"));
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.strip_suffix('}').expect("labels close")),
            None => (series, ""),
        };
        assert_eq!(name, family.name, "a series outside its family: {line}");
        let keys: Vec<String> = labels
            .split(',')
            .filter(|pair| !pair.is_empty())
            .map(|pair| pair.split_once('=').expect("key=value").0.to_owned())
            .collect();
        if family.labels.is_empty() {
            family.labels = keys;
        } else {
            assert_eq!(
                family.labels, keys,
                "{line}: label keys differ in the family"
            );
        }
    }
    families
}

fn expected(sets: &[&[(&str, &str, &[&str])]]) -> Vec<Family> {
    sets.iter()
        .flat_map(|set| set.iter())
        .map(|(name, kind, labels)| Family {
            name: (*name).to_owned(),
            kind: (*kind).to_owned(),
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        })
        .collect()
}

/// A configuration with one proxy upstream and one lane (`llm-subagent`, the demo profile's).
fn proxy_config(dir: &Path) -> PathBuf {
    std::env::set_var("TS_METRICS_TEST_KEY", "sk-test");
    turnstile_testkit::config_file(
        dir,
        "[proxy.upstreams.openai]\nformat = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         api_key_env = \"TS_METRICS_TEST_KEY\"\n\n[proxy.models.\"gpt-test\"]\n\
         upstream = \"openai\"\nprovider = \"llm-subagent\"\ninput_usd_per_mtok = 1.0\n\
         output_usd_per_mtok = 2.0\n",
    )
}

/// `GET /metrics`: the content type and the body.
fn scrape(addr: &str) -> (String, String) {
    let response = reqwest::blocking::get(format!("http://{addr}/metrics")).unwrap();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (content_type, response.text().unwrap())
}

#[test]
fn a_single_process_serves_each_family_once_with_help_and_type() {
    let data = tempfile::tempdir().unwrap();
    let service = start_with(data.path(), &proxy_config(data.path()), true, &[]);
    let (content_type, body) = scrape(&service.addr);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert_eq!(families(&body), expected(&[SINGLE]), "{body}");
}

#[test]
fn a_replica_adds_coordination_and_the_identity_mirror_once_each() {
    let _one = one_at_a_time();
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let data = tempfile::tempdir().unwrap();
    let url = redis.url();
    let config = proxy_config(data.path());
    let service = start_with(data.path(), &config, true, &["--redis-url", &url]);
    let (_, body) = scrape(&service.addr);
    assert_eq!(families(&body), expected(&[SINGLE, REPLICA]), "{body}");
}

#[test]
fn the_parser_refuses_a_family_twice_or_without_help_or_type() {
    let once = "# HELP a_total A.\n# TYPE a_total counter\na_total{k=\"v\"} 1\n";
    assert_eq!(families(once).len(), 1);
    for broken in [
        format!("{once}{once}"),
        "# TYPE a_total counter\na_total 1\n".to_owned(),
        "# HELP a_total A.\na_total 1\n".to_owned(),
        "a_total 1\n".to_owned(),
        format!("{once}b_total 1\n"),
    ] {
        let refused = std::panic::catch_unwind(|| families(&broken)).is_err();
        assert!(refused, "accepted:\n{broken}");
    }
}
