//! Shared helpers: fixtures, scripted adapters and scheduler policies.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use turnstile_admission::{Limits, Registry};
use turnstile_decision::{
    AdapterSet, AdaptersFile, AdmissionDriver, AttemptReason, Clock, DispatchCertainty,
    EvaluationRequest, Observation, SchedulerPolicy, SchedulerRun, ScopeLimits, ScriptedAdapter,
    Step,
};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn fixture(name: &str) -> Value {
    let path = repo_root().join("examples/fixtures").join(name);
    let text = std::fs::read_to_string(&path).expect("fixture readable");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// The pin of the example subagent worker (`worker-fixture.json`), which the fixture bindings'
/// `llm-subagent` targets pin.
pub fn example_worker() -> turnstile_decision::artifact::Pin {
    turnstile_decision::artifact::worker_pin(&fixture("worker-fixture.json")).expect("a worker")
}

pub fn definitions() -> Vec<Value> {
    [
        "decision-category.json",
        "decision-severity.json",
        "decision-core_unavailable.json",
    ]
    .iter()
    .map(|f| fixture(f))
    .collect()
}

/// The shipped scripted adapter configuration, with every step's delay set to `delay_ms`.
pub fn shipped_adapters(jev_delay_ms: u64, llm_delay_ms: u64) -> AdapterSet {
    let path = repo_root().join("examples/adapters.scripted.json");
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("readable")).expect("json");
    for adapter in doc["adapters"].as_array_mut().expect("adapters") {
        let delay = if adapter["id"] == "jev" {
            jev_delay_ms
        } else {
            llm_delay_ms
        };
        for steps in adapter["aliases"]
            .as_object_mut()
            .expect("aliases")
            .values_mut()
        {
            for step in steps.as_array_mut().expect("steps") {
                step["delayMs"] = json!(delay);
            }
        }
    }
    let file: AdaptersFile = serde_json::from_value(doc).expect("adapters file");
    file.build().expect("adapters build")
}

pub fn request(binding: &str, adapters: AdapterSet) -> EvaluationRequest {
    EvaluationRequest::new(
        fixture("ruleset.json"),
        fixture(binding),
        definitions(),
        fixture("input.json"),
        adapters,
    )
}

pub fn success_for(alias: &str) -> Observation {
    match alias {
        "category" => Observation::success(json!("documentation")),
        "severity" => Observation::success(json!(0.01)),
        _ => Observation::success(json!(0.05)),
    }
}

/// A scripted adapter answering every alias successfully after `delay_ms`.
pub fn succeeding(id: &str, version: &str, delay_ms: u64) -> ScriptedAdapter {
    let mut adapter = ScriptedAdapter::new(id, version);
    for alias in ["category", "severity", "core_unavailable"] {
        adapter = adapter.script(alias, [Step::new(delay_ms, success_for(alias))]);
    }
    adapter
}

pub fn service_error() -> Observation {
    Observation::error(
        AttemptReason::ServiceError,
        DispatchCertainty::TerminalResponse,
    )
}

pub fn limits(concurrency: u32, queue: u64, wait_ms: u64) -> Limits {
    let mut limits = Limits::with_concurrency(concurrency);
    limits.max_queue_length = Some(queue);
    limits.max_queue_wait_ms = Some(wait_ms);
    limits
}

/// `base()` of the receipts tests: concurrency 4, queue 8, wait 1000.
pub fn base() -> Limits {
    limits(4, 8, 1000)
}

pub fn policy(workspace: &str, principal: &str, version: &str) -> SchedulerPolicy {
    SchedulerPolicy {
        enabled: true,
        profile_version: version.into(),
        caller_concurrency: None,
        graph_concurrency: None,
        workspace: ScopeLimits {
            id: workspace.into(),
            limits: base(),
        },
        principal: ScopeLimits {
            id: principal.into(),
            limits: base(),
        },
        providers: [
            ("jev".to_owned(), base()),
            ("llm-subagent".to_owned(), base()),
        ]
        .into_iter()
        .collect(),
    }
}

pub fn driver() -> AdmissionDriver {
    AdmissionDriver::with_clock(Registry::new(), Clock::starting_at(0))
}

pub fn scheduled(policy: SchedulerPolicy, driver: &AdmissionDriver) -> SchedulerRun {
    SchedulerRun {
        policy,
        driver: driver.clone().into(),
        estimate: None,
        on_evidence: None,
    }
}

pub fn half() -> turnstile_decision::RandomFn {
    Arc::new(|| 0.5)
}

/// Lets spawned tasks run without advancing paused time.
pub async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}
