//! The service's OpenTelemetry: one `decision.admit` span per admission request, kept open while
//! the lease is held and ended by release or reclaim; breaker transitions as span events; the
//! counters on `/metrics`; and never a workspace or principal ID anywhere.

use std::time::Duration;

use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{json, Value};
use turnstile_shell::Telemetry;

use turnstile_testkit::{test_profile, TestServer};

/// IDs chosen so that any leak into telemetry is unmistakable.
const WORKSPACE: &str = "ws-secret-7f3a";
const PRINCIPAL: &str = "alice";

fn finished(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
    exporter
        .get_finished_spans()
        .expect("the exporter is readable")
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a opentelemetry::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

#[test]
fn admission_spans_follow_each_request_and_lease_and_never_name_a_tenant() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let telemetry = Telemetry::new(
        provider.tracer(turnstile_shell::telemetry::attributes::DECISION),
        &opentelemetry::global::meter(turnstile_shell::telemetry::attributes::DECISION),
    );
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_telemetry(
        dir.path(),
        |config| config.leases.ttl_ms = 300,
        telemetry,
    );
    let admin = server.admin();
    assert_eq!(
        server
            .put_profile(&admin, WORKSPACE, "v1", &test_profile())
            .status(),
        201
    );
    let alice = server.new_key(WORKSPACE, PRINCIPAL);
    let ask = |provider: &str| {
        json!({"providerId": provider, "budgetId": "inv-secret-budget",
               "estimate": {"tokens": 10}, "deadlineMs": 1000})
    };

    // 1. Admitted: the span stays open while the lease is held.
    let granted: Value = server.acquire(&alice, &ask("p")).json().unwrap();
    let lease = granted["leaseId"].as_str().unwrap().to_owned();
    assert!(finished(&exporter).is_empty(), "the lease is still held");
    // The release fails the call: provider p's breaker (threshold 1) opens.
    let released = server.release(&alice, &lease, &json!({"outcome": "failure"}));
    assert_eq!(released.status(), 200);
    let spans = finished(&exporter);
    assert_eq!(spans.len(), 1);
    let admitted = &spans[0];
    assert_eq!(admitted.name, "decision.admit");
    assert_eq!(admitted.status, Status::Ok);
    assert_eq!(
        attribute(admitted, turnstile_shell::telemetry::attributes::DECISION)
            .map(|v| v.as_str().into_owned()),
        Some("admit".to_owned())
    );
    let event = admitted
        .events
        .iter()
        .find(|e| e.name == "breaker.transition")
        .expect("the release opened the breaker: an event on the lease's span");
    assert!(event.attributes.iter().any(|kv| kv.key.as_str()
        == turnstile_shell::telemetry::attributes::BREAKER_TO
        && kv.value.as_str() == "open"));

    // 2. Rejected (the breaker is open; and a provider that can never admit): ended at once,
    //    status error with the reason.
    assert_eq!(server.acquire(&alice, &ask("p")).status(), 503);
    assert_eq!(server.acquire(&alice, &ask("zero")).status(), 422);
    let spans = finished(&exporter);
    assert_eq!(spans.len(), 3);
    for span in &spans[1..] {
        assert!(
            matches!(span.status, Status::Error { .. }),
            "{:?}",
            span.status
        );
        assert_eq!(
            attribute(span, turnstile_shell::telemetry::attributes::DECISION)
                .map(|v| v.as_str().into_owned()),
            Some("reject".to_owned())
        );
    }

    // 3. A lease nobody releases: its span ends when the TTL reclaims it.
    assert_eq!(server.acquire(&alice, &ask("wide")).status(), 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while finished(&exporter).len() < 4 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let spans = finished(&exporter);
    assert_eq!(spans.len(), 4, "the reclaimed lease's span ended");
    assert_eq!(server.metric("turnstile_leases_expired_total"), 1.0);

    // No tenant ID anywhere: names, attributes, events, status texts.
    for span in &spans {
        let text = format!("{span:?}");
        for secret in [WORKSPACE, PRINCIPAL, "inv-secret-budget"] {
            assert!(!text.contains(secret), "{secret} leaked into {text}");
        }
    }

    // One metrics family: each decision is counted once, in one series family that also
    // feeds OpenTelemetry; no second copy of the counters, no IDs.
    let metrics = server.metrics_text();
    assert_eq!(
        metrics
            .matches("# TYPE turnstile_admission_decisions_total counter")
            .count(),
        1,
        "{metrics}"
    );
    assert!(!metrics.contains("decision_admission_total"), "{metrics}");
    assert!(!metrics.contains("decision_breaker_transitions_total"));
    assert!(metrics.contains("turnstile_breaker_transitions_total{state=\"open\"}"));
    assert!(!metrics.contains(WORKSPACE) && !metrics.contains(PRINCIPAL));
}
