//! Admission telemetry at evaluator level with in-memory exporters: CNC-ADMIT-TELEMETRY-001,
//! tenant IDs never reaching any span, event, metric point, log line or the Prometheus text,
//! and telemetry failures never changing a result.

mod common;

use std::sync::{Arc, Mutex};

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{Status as SpanStatus, TracerProvider as _};
use opentelemetry::{KeyValue, Value as OtelValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData, SpanExporter};
use serde_json::json;
use turnstile_admission::{CircuitBreakerConfig, Decision, Reason};
use turnstile_decision::{
    evaluate, AdapterSet, CallLog, EvaluationRequest, LogRecord, LogSink, ReceiptRun,
    RulesetResult, ScriptedAdapter, Step, Telemetry,
};
use turnstile_store::MemoryReceiptStore;

use common::*;

const SECRET_WORKSPACE: &str = "secret-workspace-id";
const SECRET_PRINCIPAL: &str = "secret-principal-id";

struct Exporters {
    spans: InMemorySpanExporter,
    metrics: InMemoryMetricExporter,
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    logs: Arc<Mutex<Vec<LogRecord>>>,
    telemetry: Telemetry,
}

fn exporters() -> Exporters {
    let spans = InMemorySpanExporter::default();
    let metrics = InMemoryMetricExporter::default();
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics.clone()).build())
        .build();
    let logs = Arc::new(Mutex::new(Vec::new()));
    let sink_logs = Arc::clone(&logs);
    let sink: LogSink = Arc::new(move |record: &LogRecord| {
        sink_logs.lock().unwrap().push(record.clone());
    });
    let telemetry = Telemetry::new(
        tracer_provider.tracer("turnstile-decision"),
        &meter_provider.meter("turnstile-decision"),
    )
    .with_log_sink(sink);
    Exporters {
        spans,
        metrics,
        tracer_provider,
        meter_provider,
        logs,
        telemetry,
    }
}

/// TELEMETRY-001's request: breaker threshold 1 / open 60 s on jev, principal wait 20 ms, the
/// adapter fails its first call with service-error.
fn telemetry_request(
    log: &Arc<CallLog>,
    driver: &turnstile_decision::AdmissionDriver,
) -> EvaluationRequest {
    let jev = ScriptedAdapter::new("jev", "1.0.0")
        .script("category", [Step::new(5, service_error())])
        .with_default(Step::new(5, success_for("severity")))
        .with_log(Arc::clone(log));
    let mut policy = policy(SECRET_WORKSPACE, SECRET_PRINCIPAL, "telemetry-v1");
    policy.principal.limits.max_queue_wait_ms = Some(20);
    policy.providers.get_mut("jev").unwrap().circuit_breaker = Some(CircuitBreakerConfig {
        failure_threshold: 1,
        open_ms: Some(60_000),
        half_open_max_calls: Some(1),
    });
    request("binding-jev.json", AdapterSet::new().with(Arc::new(jev)))
        .with_ids("telemetry-run", "telemetry-invocation")
        .with_scheduler(scheduled(policy, driver))
}

fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a OtelValue> {
    attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn string_attr(attributes: &[KeyValue], key: &str) -> String {
    attribute(attributes, key)
        .map(|v| v.as_str().into_owned())
        .unwrap_or_default()
}

/// A u64 counter's total (cumulative temporality: the last export holds the running total of
/// each series) and the attributes of every data point of every export.
fn counter(metrics: &[ResourceMetrics], name: &str) -> (u64, Vec<Vec<KeyValue>>) {
    let mut last_total = 0;
    let mut points = Vec::new();
    for resource in metrics {
        let mut total = 0;
        for scope in resource.scope_metrics() {
            for metric in scope.metrics().filter(|m| m.name() == name) {
                if let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() {
                    for point in sum.data_points() {
                        total += point.value();
                        points.push(point.attributes().cloned().collect());
                    }
                }
            }
        }
        last_total = total;
    }
    (last_total, points)
}

fn finish(exporters: &Exporters) -> (Vec<SpanData>, Vec<ResourceMetrics>) {
    exporters.tracer_provider.force_flush().unwrap();
    exporters.meter_provider.force_flush().unwrap();
    (
        exporters.spans.get_finished_spans().unwrap(),
        exporters.metrics.get_finished_metrics().unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn cnc_admit_telemetry_001_admit_spans_breaker_events_and_metrics() {
    let exporters = exporters();
    let log = CallLog::new();
    let driver = driver();
    let request = telemetry_request(&log, &driver).with_telemetry(exporters.telemetry.clone());
    let result = evaluate(request).await;
    assert_eq!(log.count(), 1, "the adapter is called once");

    let (spans, metrics) = finish(&exporters);
    let admit: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "decision.admit")
        .collect();
    assert_eq!(admit.len(), 3);

    let first = admit[0];
    assert_eq!(first.status, SpanStatus::Ok);
    assert_eq!(
        string_attr(&first.attributes, "turnstile.admission.decision"),
        "admit"
    );
    assert_eq!(
        string_attr(&first.attributes, "turnstile.admission.reason"),
        "admitted"
    );
    assert_eq!(
        string_attr(&first.attributes, "turnstile.breaker.status"),
        "closed"
    );
    assert_eq!(
        string_attr(&first.attributes, "turnstile.adapter.id"),
        "jev"
    );
    for key in [
        "turnstile.admission.queue_delay_ms",
        "turnstile.admission.active",
        "turnstile.admission.queued",
        "turnstile.admission.retry_pressure",
    ] {
        assert!(attribute(&first.attributes, key).is_some(), "{key}");
    }
    let events: Vec<_> = first.events.iter().collect();
    assert_eq!(events.len(), 1, "its only event is the breaker transition");
    assert_eq!(events[0].name, "breaker.transition");
    assert_eq!(
        string_attr(&events[0].attributes, "turnstile.breaker.from"),
        "closed"
    );
    assert_eq!(
        string_attr(&events[0].attributes, "turnstile.breaker.to"),
        "open"
    );

    for span in &admit[1..] {
        assert!(matches!(span.status, SpanStatus::Error { .. }));
        assert_eq!(
            string_attr(&span.attributes, "turnstile.admission.decision"),
            "reject"
        );
        assert_eq!(
            string_attr(&span.attributes, "turnstile.admission.reason"),
            "queue-timeout"
        );
        assert_eq!(
            string_attr(&span.attributes, "turnstile.breaker.status"),
            "open"
        );
    }

    let severity = result.spec.evaluations.get("severity").unwrap();
    let evidence = severity.spec.attempts[0].admission.as_ref().unwrap();
    assert_eq!(
        (evidence.decision, evidence.reason),
        (Decision::Reject, Reason::QueueTimeout)
    );

    // One metrics family, counted once into both sinks: one admit, and for each of the two
    // refused attempts its deferral (it queued behind the open breaker) and its rejection.
    let (decisions, decision_points) = counter(&metrics, "turnstile.admission.decisions");
    let (transitions, _) = counter(&metrics, "turnstile.breaker.transitions");
    assert_eq!((decisions, transitions), (5, 1));
    assert!(decision_points.iter().any(|attributes| {
        string_attr(attributes, "decision") == "reject"
            && string_attr(attributes, "reason") == "queue-timeout"
    }));
    // The specification's instruments (TELEMETRY-001): 3 final decisions, 2 of them throttles
    // (queue-timeout with the breaker open), 1 transition (into open).
    let (admission, _) = counter(&metrics, "decision.admission");
    let (throttles, throttle_points) = counter(&metrics, "decision.throttles");
    let (spec_transitions, transition_points) = counter(&metrics, "decision.breaker_transitions");
    assert_eq!((admission, throttles, spec_transitions), (3, 2, 1));
    assert!(throttle_points.iter().any(|attributes| {
        string_attr(attributes, "reason") == "queue-timeout"
            && string_attr(attributes, "breaker_status") == "open"
            && string_attr(attributes, "decision") == "reject"
    }));
    assert!(transition_points
        .iter()
        .all(
            |attributes| string_attr(attributes, "breaker_status") == "open"
                && attributes.len() == 1
        ));
    // The only dimensions are decision, reason, the breaker status and the state entered.
    for resource in &metrics {
        for scope in resource.scope_metrics() {
            for metric in scope.metrics() {
                if let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() {
                    for point in sum.data_points() {
                        for kv in point.attributes() {
                            assert!(
                                ["decision", "reason", "state", "breaker_status"]
                                    .contains(&kv.key.as_str()),
                                "{}",
                                kv.key
                            );
                        }
                    }
                }
            }
        }
    }

    let text = exporters.telemetry.prometheus_text();
    assert!(text.contains(
        "turnstile_admission_decisions_total{decision=\"reject\",reason=\"queue-timeout\"} 2"
    ));
    assert!(text
        .contains("turnstile_admission_decisions_total{decision=\"admit\",reason=\"admitted\"} 1"));
    assert!(text.contains("turnstile_breaker_transitions_total{state=\"open\"} 1"));
}

#[tokio::test(start_paused = true)]
async fn no_principal_or_workspace_id_reaches_any_span_event_metric_or_log_line() {
    let exporters = exporters();
    let log = CallLog::new();
    let driver = driver();
    let store = Arc::new(MemoryReceiptStore::new());
    // A receipt-backed run too, so receipt writes are exercised alongside telemetry.
    let request = telemetry_request(&log, &driver)
        .with_telemetry(exporters.telemetry.clone())
        .with_receipts(ReceiptRun::new(store, "project"));
    let result = evaluate(request).await;

    let (spans, metrics) = finish(&exporters);
    assert!(!spans.is_empty());
    let mut everything = String::new();
    for span in &spans {
        everything.push_str(&format!("{span:?}\n"));
        for event in span.events.iter() {
            everything.push_str(&format!("{event:?}\n"));
        }
    }
    for resource in &metrics {
        everything.push_str(&format!("{resource:?}\n"));
    }
    let logs = exporters.logs.lock().unwrap().clone();
    assert!(!logs.is_empty(), "the run logged its throttles");
    for record in &logs {
        everything.push_str(&serde_json::to_string(record).unwrap());
        everything.push('\n');
    }
    everything.push_str(&exporters.telemetry.prometheus_text());
    everything.push_str(&serde_json::to_string(&result).unwrap());

    assert!(everything.contains("decision.admit"));
    assert!(everything.contains("queue-timeout"));
    for secret in [SECRET_WORKSPACE, SECRET_PRINCIPAL, "secret-"] {
        assert!(!everything.contains(secret), "{secret} leaked");
    }
}

/// A span exporter that always fails.
#[derive(Debug)]
struct FailingExporter;

impl SpanExporter for FailingExporter {
    async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
        Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
            "collector down".into(),
        ))
    }
}

#[tokio::test(start_paused = true)]
async fn telemetry_failures_never_change_a_result() {
    let plain = {
        let log = CallLog::new();
        let driver = driver();
        evaluate(telemetry_request(&log, &driver)).await
    };
    let broken = {
        let log = CallLog::new();
        let driver = driver();
        let tracer_provider = SdkTracerProvider::builder()
            .with_simple_exporter(FailingExporter)
            .build();
        let meter_provider = SdkMeterProvider::builder().build();
        let sink: LogSink = Arc::new(|_: &LogRecord| panic!("log sink down"));
        let telemetry = Telemetry::new(tracer_provider.tracer("t"), &meter_provider.meter("t"))
            .with_log_sink(sink);
        evaluate(telemetry_request(&log, &driver).with_telemetry(telemetry)).await
    };
    let json = |r: &RulesetResult| serde_json::to_value(r).unwrap();
    assert_eq!(json(&broken), json(&plain));
    assert_eq!(json(&plain)["spec"]["reason"], json!("evaluation-failed"));
}
