//! Receipt-backed evaluation: CNC-ADMIT-RECEIPT-001..003 against the in-memory and the SQLite
//! receipt stores, replay rules, serial execution, the pending slot written before dispatch,
//! and a dead owner's receipt turned `execution-uncertain` without a second call.

mod common;

use std::sync::Arc;

use serde_json::{json, Value};
use turnstile_admission::{Decision, Estimate, Limits, Reason};
use turnstile_decision::adapter::BoxFuture;
use turnstile_decision::{
    evaluate, Adapter, AdapterRequest, AdapterSet, AttemptReason, CallLog, Capabilities,
    DispatchCertainty, EstimateFn, EvaluationRequest, Observation, ReceiptRun, ResultReason,
    RulesetResult, ScriptedAdapter, Status, Step, Termination,
};
use turnstile_store::{
    IntegrityKey, MemoryReceiptStore, Pending, Receipt, ReceiptKey, ReceiptState, ReceiptStore,
    SqliteReceiptOptions, SqliteReceiptStore, RECEIPT_DB_FILE,
};

use common::*;

const ALIASES: [&str; 3] = ["category", "severity", "core_unavailable"];

/// The two stores of every RECEIPT case: memory, and a SQLite file (signed).
fn both_stores() -> Vec<(
    &'static str,
    Arc<dyn ReceiptStore>,
    Option<tempfile::TempDir>,
)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteReceiptStore::open_with(
        dir.path().join(RECEIPT_DB_FILE),
        SqliteReceiptOptions {
            integrity: Some(IntegrityKey::new(b"receipts-test-key".to_vec())),
            ..SqliteReceiptOptions::default()
        },
    )
    .unwrap();
    vec![
        ("memory", Arc::new(MemoryReceiptStore::new()), None),
        ("sqlite", Arc::new(sqlite), Some(dir)),
    ]
}

fn key(invocation: &str) -> ReceiptKey {
    ReceiptKey::new("receipts-test", invocation)
}

fn receipts(store: &Arc<dyn ReceiptStore>) -> ReceiptRun {
    ReceiptRun::new(Arc::clone(store), "receipts-test")
}

fn estimate(e: Estimate) -> Option<EstimateFn> {
    Some(Arc::new(move |_, _, _| e.clone()))
}

struct Case {
    name: &'static str,
    evidence: Reason,
    mapped: AttemptReason,
}

/// Applies one RECEIPT-001 case to the request.
fn setup(case: &str, request: &mut EvaluationRequest) {
    let run = request.scheduler.as_mut().unwrap();
    fn jev(run: &mut turnstile_decision::SchedulerRun) -> &mut Limits {
        run.policy.providers.get_mut("jev").unwrap()
    }
    match case {
        "requests-per-minute" => jev(run).requests_per_minute = Some(0),
        "tokens-per-second" => {
            jev(run).tokens_per_second = Some(1);
            run.estimate = estimate(Estimate::new().tokens(5));
        }
        "attempts" => run.policy.principal.limits.max_attempts = Some(0),
        "cost" => {
            run.policy.principal.limits.max_cost_usd = Some(0.5);
            run.estimate = estimate(Estimate::new().cost_usd(1.0));
        }
        "unknown-cost" => run.policy.principal.limits.max_cost_usd = Some(1.0),
        "batch-size" => jev(run).max_batch_size = Some(0),
        "queue-full" => run.policy.workspace.limits.max_queue_length = Some(0),
        "queue-timeout" => run.policy.principal.limits.max_queue_wait_ms = Some(0),
        // The reference jumps its injected clock by 10,000,000 ms for one reading; our clock is
        // tokio time, so the attempt deadline is made to fall on the admission instant instead
        // (timeoutMs 0): the core refuses it as `deadline-exceeded` at the same place.
        "deadline-exceeded" => {
            for alias in ALIASES {
                request.binding["spec"]["evaluations"][alias]["targets"][0]["timeoutMs"] = json!(0);
            }
        }
        "missing-provider-limits" => {
            run.policy.providers.remove("jev");
        }
        other => panic!("unknown case {other}"),
    }
}

async fn rejection_case(case: Case) {
    for (store_name, store, _dir) in both_stores() {
        let log = CallLog::new();
        let adapters = AdapterSet::new().with(Arc::new(
            succeeding("jev", "1.0.0", 5).with_log(Arc::clone(&log)),
        ));
        let driver = driver();
        let invocation = format!("receipt-001-{}", case.name);
        let mut request = request("binding-jev.json", adapters)
            .with_ids("run", invocation.clone())
            .with_scheduler(scheduled(policy("ws", "principal", "v1"), &driver))
            .with_receipts(receipts(&store));
        setup(case.name, &mut request);
        let result = evaluate(request).await;
        let label = format!("{} / {store_name}", case.name);

        assert_eq!(log.count(), 0, "{label}: the adapter is never called");
        assert_ne!(
            result.spec.reason,
            ResultReason::ExecutionUncertain,
            "{label}"
        );
        let aliases: Vec<&str> = result.spec.evaluations.aliases().collect();
        assert_eq!(aliases, ALIASES, "{label}: evaluation key order");
        for (alias, evaluation) in &result.spec.evaluations.0 {
            assert_eq!(evaluation.spec.reason, case.mapped, "{label} {alias}");
            let attempts = &evaluation.spec.attempts;
            assert_eq!(attempts.len(), 1, "{label} {alias}");
            let admission = attempts[0].admission.as_ref().expect("admission evidence");
            assert_eq!(admission.decision, Decision::Reject, "{label} {alias}");
            assert_eq!(admission.reason, case.evidence, "{label} {alias}");
            assert_eq!(
                attempts[0].dispatch_certainty,
                Some(DispatchCertainty::NotSent),
                "{label} {alias}"
            );
        }

        let receipt = store.read(&key(&invocation)).unwrap().unwrap();
        assert_eq!(receipt.state, ReceiptState::Completed, "{label}");
        assert!(
            receipt.pending.is_none(),
            "{label}: nothing was ever pending"
        );
        let stored = receipt.result.as_ref().unwrap();
        for alias in ALIASES {
            let persisted = &stored["spec"]["evaluations"][alias]["spec"]["attempts"][0];
            assert_eq!(
                persisted["admission"]["reason"],
                json!(case.evidence.as_str()),
                "{label} {alias}"
            );
            assert_eq!(persisted["dispatchCertainty"], json!("not-sent"));
            assert_eq!(
                receipt.evaluations[alias]["spec"]["attempts"][0]["admission"]["reason"],
                json!(case.evidence.as_str())
            );
        }
    }
}

macro_rules! receipt_001 {
    ($($test:ident: $name:literal, $evidence:ident, $mapped:ident;)*) => {$(
        #[tokio::test(start_paused = true)]
        async fn $test() {
            rejection_case(Case {
                name: $name,
                evidence: Reason::$evidence,
                mapped: AttemptReason::$mapped,
            })
            .await;
        }
    )*};
}

receipt_001! {
    cnc_admit_receipt_001_requests_per_minute: "requests-per-minute", RequestsPerMinute, RateLimited;
    cnc_admit_receipt_001_tokens_per_second: "tokens-per-second", TokensPerSecond, RateLimited;
    cnc_admit_receipt_001_attempts: "attempts", Attempts, BudgetExhausted;
    cnc_admit_receipt_001_cost: "cost", Cost, BudgetExhausted;
    cnc_admit_receipt_001_unknown_cost: "unknown-cost", UnknownCost, BudgetExhausted;
    cnc_admit_receipt_001_batch_size: "batch-size", BatchSize, Overloaded;
    cnc_admit_receipt_001_queue_full: "queue-full", QueueFull, Overloaded;
    cnc_admit_receipt_001_queue_timeout: "queue-timeout", QueueTimeout, Timeout;
    cnc_admit_receipt_001_deadline_exceeded: "deadline-exceeded", DeadlineExceeded, Timeout;
    cnc_admit_receipt_001_missing_provider_limits: "missing-provider-limits", UnconfiguredProvider, Overloaded;
}

/// `status error, reason service-error` with no dispatch certainty: sent, outcome unknown.
fn unknown_service_error() -> Observation {
    let mut observation = service_error();
    observation.dispatch_certainty = None;
    observation
}

#[tokio::test(start_paused = true)]
async fn cnc_admit_receipt_002_an_unknown_outcome_is_execution_uncertain() {
    for (store_name, store, _dir) in both_stores() {
        let log = CallLog::new();
        let jev = ScriptedAdapter::new("jev", "1.0.0")
            .with_default(Step::new(5, unknown_service_error()))
            .with_log(Arc::clone(&log));
        let driver = driver();
        let adapters = AdapterSet::new().with(Arc::new(jev));
        let make = || {
            request("binding-jev.json", adapters.clone())
                .with_ids("run", "receipt-002")
                .with_scheduler(scheduled(policy("ws", "principal", "v1"), &driver))
                .with_receipts(receipts(&store))
        };
        let result = evaluate(make()).await;
        assert_eq!(log.count(), 1, "{store_name}: called once (category)");
        assert!(log.calls()[0].ends_with("category"));
        assert_eq!(result.spec.reason, ResultReason::ExecutionUncertain);
        let category = result.spec.evaluations.get("category").unwrap();
        assert_eq!(category.spec.reason, AttemptReason::ExecutionUncertain);
        assert_eq!(category.spec.attempts.len(), 1);
        assert_eq!(
            category.spec.attempts[0].reason,
            AttemptReason::ServiceError
        );
        for alias in ["severity", "core_unavailable"] {
            let evaluation = result.spec.evaluations.get(alias).unwrap();
            assert!(evaluation.spec.attempts.is_empty(), "{alias} never started");
        }
        let receipt = store.read(&key("receipt-002")).unwrap().unwrap();
        assert_eq!(
            receipt.state,
            ReceiptState::ExecutionUncertain,
            "{store_name}"
        );
        assert_eq!(receipt.pending.as_ref().unwrap().alias, "category");

        // A replay never dispatches again.
        let again = evaluate(make()).await;
        assert_eq!(log.count(), 1, "{store_name}: no second call");
        assert_eq!(again.spec.reason, ResultReason::ExecutionUncertain);
    }
}

#[tokio::test(start_paused = true)]
async fn cnc_admit_receipt_003_a_queued_wait_ended_by_the_target_timer_is_a_timeout() {
    for (store_name, store, _dir) in both_stores() {
        let driver = driver();
        let mut limits = policy("ws", "principal", "v1");
        limits.principal.limits.concurrency = 1;

        // The blocker holds the only permit for a long time.
        let blocker_log = CallLog::new();
        let blocker = request(
            "binding-jev.json",
            AdapterSet::new().with(Arc::new(
                succeeding("jev", "1.0.0", 10_000).with_log(Arc::clone(&blocker_log)),
            )),
        )
        .with_ids("run", "blocker")
        .with_scheduler(scheduled(limits.clone(), &driver));
        let blocker = tokio::spawn(evaluate(blocker));
        settle().await;
        assert_eq!(blocker_log.active(), 1);

        let log = CallLog::new();
        let mut waiter = request(
            "binding-jev.json",
            AdapterSet::new().with(Arc::new(
                succeeding("jev", "1.0.0", 1).with_log(Arc::clone(&log)),
            )),
        )
        .with_ids("run", "waiter")
        .with_scheduler(scheduled(limits.clone(), &driver))
        .with_receipts(receipts(&store));
        for alias in ALIASES {
            waiter.binding["spec"]["evaluations"][alias]["targets"][0]["timeoutMs"] = json!(20);
        }
        let result = evaluate(waiter).await;
        assert_eq!(log.count(), 0, "{store_name}: the waiter is never called");
        for (alias, evaluation) in &result.spec.evaluations.0 {
            let attempt = &evaluation.spec.attempts[0];
            assert_eq!(attempt.status, Status::Error, "{alias}");
            assert_eq!(attempt.reason, AttemptReason::Timeout, "{alias}");
            let reason = attempt.admission.as_ref().unwrap().reason;
            assert!(
                matches!(reason, Reason::Cancelled | Reason::DeadlineExceeded),
                "{alias}: {reason}"
            );
            assert_eq!(attempt.termination, Some(Termination::TargetTimeout));
            assert_ne!(attempt.reason, AttemptReason::Cancelled);
        }
        assert_ne!(result.spec.reason, ResultReason::ExecutionUncertain);
        let receipt = store.read(&key("waiter")).unwrap().unwrap();
        assert_eq!(receipt.state, ReceiptState::Completed, "{store_name}");
        blocker.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn a_completed_receipt_replays_its_stored_result_without_a_call() {
    for (store_name, store, _dir) in both_stores() {
        let log = CallLog::new();
        let adapters = AdapterSet::new().with(Arc::new(
            succeeding("jev", "1.0.0", 5).with_log(Arc::clone(&log)),
        ));
        let make = || {
            request("binding-jev.json", adapters.clone())
                .with_ids("run", "replayed")
                .with_receipts(receipts(&store))
        };
        let first = evaluate(make()).await;
        assert_eq!(first.spec.outcome, json!("docs-review"), "{store_name}");
        assert_eq!(log.count(), 3);
        let second = evaluate(make()).await;
        assert_eq!(log.count(), 3, "{store_name}: no dispatch on replay");
        assert_eq!(
            serde_json::to_string(&second).unwrap(),
            serde_json::to_string(&first).unwrap(),
            "{store_name}: the stored result, byte for byte, alias order included"
        );
        let receipt = store.read(&key("replayed")).unwrap().unwrap();
        assert_eq!(receipt.state, ReceiptState::Completed);
        assert_eq!(receipt.evaluations.len(), 3);
        // acquired, then per alias: dispatched, observation, evaluation; composed; completed.
        assert_eq!(receipt.revision, 1 + 3 * 3 + 2, "{store_name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_different_fingerprint_is_a_replay_mismatch_without_a_call() {
    for (store_name, store, _dir) in both_stores() {
        let log = CallLog::new();
        let adapters = AdapterSet::new().with(Arc::new(
            succeeding("jev", "1.0.0", 5).with_log(Arc::clone(&log)),
        ));
        let first = request("binding-jev.json", adapters.clone())
            .with_ids("run", "mismatch")
            .with_receipts(receipts(&store));
        evaluate(first).await;
        let mut second = request("binding-jev.json", adapters.clone())
            .with_ids("run", "mismatch")
            .with_receipts(receipts(&store));
        second.input["message"] = json!("a different question about docs");
        let result = evaluate(second).await;
        assert_eq!(
            result.spec.reason,
            ResultReason::ReplayMismatch,
            "{store_name}"
        );
        assert_eq!(log.count(), 3, "{store_name}: no call for the mismatch");
    }
}

#[tokio::test(start_paused = true)]
async fn receipt_backed_scheduled_runs_are_serial() {
    let store: Arc<dyn ReceiptStore> = Arc::new(MemoryReceiptStore::new());
    let log = CallLog::new();
    let adapters = AdapterSet::new().with(Arc::new(
        succeeding("jev", "1.0.0", 5).with_log(Arc::clone(&log)),
    ));
    let driver = driver();
    let mut request = request("binding-jev.json", adapters)
        .with_ids("run", "serial")
        .with_scheduler(scheduled(policy("ws", "principal", "v1"), &driver))
        .with_receipts(receipts(&store));
    request.binding["spec"]["concurrency"] = json!(4);
    let result = evaluate(request).await;
    assert_eq!(result.spec.outcome, json!("docs-review"));
    assert_eq!(log.count(), 3);
    assert_eq!(log.peak(), 1, "one pending slot: one call at a time");
}

/// An adapter that checks, when called, that the receipt already names this call as pending.
struct PendingChecker {
    store: Arc<dyn ReceiptStore>,
    capabilities: Capabilities,
    seen: std::sync::Mutex<Vec<(String, u32, ReceiptState)>>,
}

impl Adapter for PendingChecker {
    fn id(&self) -> &str {
        "jev"
    }
    fn version(&self) -> &str {
        "1.0.0"
    }
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }
    fn invoke<'a>(&'a self, request: AdapterRequest<'a>) -> BoxFuture<'a, Observation> {
        let receipt = self.store.read(&key("pending-first")).unwrap().unwrap();
        let pending = receipt.pending.clone().unwrap();
        assert_eq!(pending.alias, request.alias);
        self.seen
            .lock()
            .unwrap()
            .push((pending.alias, pending.ordinal, receipt.state));
        let answer = success_for(request.alias);
        Box::pin(async move { answer })
    }
}

#[tokio::test(start_paused = true)]
async fn the_pending_slot_is_durable_before_the_adapter_is_called() {
    for (store_name, store, _dir) in both_stores() {
        let checker = Arc::new(PendingChecker {
            store: Arc::clone(&store),
            capabilities: Capabilities::all_kinds(),
            seen: std::sync::Mutex::new(Vec::new()),
        });
        let adapters = AdapterSet::new().with(checker.clone() as Arc<dyn Adapter>);
        let request = request("binding-jev.json", adapters)
            .with_ids("run", "pending-first")
            .with_receipts(receipts(&store));
        let result = evaluate(request).await;
        assert_eq!(result.spec.outcome, json!("docs-review"), "{store_name}");
        let seen = checker.seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            ALIASES
                .iter()
                .map(|a| (a.to_string(), 1, ReceiptState::Dispatched))
                .collect::<Vec<_>>()
        );
    }
}

/// A store whose receipt was left `dispatched` by an owner that died: fingerprint taken from a
/// scratch run of the same request.
fn dead_owner_store(fingerprint: &str, invocation: &str) -> Arc<dyn ReceiptStore> {
    let store = Arc::new(MemoryReceiptStore::new());
    let k = key(invocation);
    let acquired = store.acquire(&k, fingerprint, 0).unwrap().receipt;
    let mut dispatched: Receipt = acquired.successor(ReceiptState::Dispatched, 1);
    dispatched.pending = Some(Pending {
        alias: "category".into(),
        target_index: 0,
        ordinal: 1,
        attempts: Vec::new(),
    });
    assert!(store.compare_and_swap(&k, 1, &dispatched).unwrap());
    store
}

#[tokio::test(start_paused = true)]
async fn after_the_owner_died_a_dispatched_receipt_becomes_uncertain_and_is_never_redispatched() {
    let short = |adapters: AdapterSet, store: &Arc<dyn ReceiptStore>| {
        let mut request = request("binding-jev.json", adapters)
            .with_ids("run", "dead-owner")
            .with_receipts(receipts(store));
        // The waiter waits totalTimeoutMs + 1 s on real time: keep it short.
        request.binding["spec"]["totalTimeoutMs"] = json!(200);
        request
    };
    let scratch: Arc<dyn ReceiptStore> = Arc::new(MemoryReceiptStore::new());
    let scratch_log = CallLog::new();
    evaluate(short(
        AdapterSet::new().with(Arc::new(
            succeeding("jev", "1.0.0", 0).with_log(Arc::clone(&scratch_log)),
        )),
        &scratch,
    ))
    .await;
    let fingerprint = scratch
        .read(&key("dead-owner"))
        .unwrap()
        .unwrap()
        .fingerprint;

    let store = dead_owner_store(&fingerprint, "dead-owner");
    let log = CallLog::new();
    let started = std::time::Instant::now();
    let result = evaluate(short(
        AdapterSet::new().with(Arc::new(
            succeeding("jev", "1.0.0", 0).with_log(Arc::clone(&log)),
        )),
        &store,
    ))
    .await;
    assert!(started.elapsed() >= std::time::Duration::from_millis(1_200));
    assert_eq!(log.count(), 0, "never re-dispatched");
    assert_eq!(result.spec.reason, ResultReason::ExecutionUncertain);
    let receipt = store.read(&key("dead-owner")).unwrap().unwrap();
    assert_eq!(receipt.state, ReceiptState::ExecutionUncertain);
    assert_eq!(receipt.pending.unwrap().alias, "category");
}

#[tokio::test(start_paused = true)]
async fn an_answered_failure_with_a_store_is_not_uncertain() {
    let store: Arc<dyn ReceiptStore> = Arc::new(MemoryReceiptStore::new());
    let jev = ScriptedAdapter::new("jev", "1.0.0").with_default(Step::new(5, service_error()));
    let request = request("binding-jev.json", AdapterSet::new().with(Arc::new(jev)))
        .with_ids("run", "answered")
        .with_receipts(receipts(&store));
    let result: RulesetResult = evaluate(request).await;
    assert_eq!(result.spec.reason, ResultReason::EvaluationFailed);
    let receipt = store.read(&key("answered")).unwrap().unwrap();
    assert_eq!(receipt.state, ReceiptState::Completed);
    let stored: Value = receipt.result.unwrap();
    assert_eq!(stored["spec"]["reason"], json!("evaluation-failed"));
}

#[tokio::test(start_paused = true)]
async fn a_caller_cancellation_mid_call_is_uncertain_with_a_store_and_plain_cancelled_without() {
    let store: Arc<dyn ReceiptStore> = Arc::new(MemoryReceiptStore::new());
    let log = CallLog::new();
    let adapters = AdapterSet::new().with(Arc::new(
        succeeding("jev", "1.0.0", 1_000).with_log(Arc::clone(&log)),
    ));
    let signal = tokio_util::sync::CancellationToken::new();
    let cancel = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let backed = request("binding-jev.json", adapters.clone())
        .with_ids("run", "cancelled-mid-call")
        .with_signal(signal)
        .with_receipts(receipts(&store));
    let result = evaluate(backed).await;
    assert_eq!(log.count(), 1);
    assert_eq!(result.spec.reason, ResultReason::ExecutionUncertain);
    let receipt = store.read(&key("cancelled-mid-call")).unwrap().unwrap();
    assert_eq!(receipt.state, ReceiptState::ExecutionUncertain);

    // The same cancellation without a store is an ordinary caller cancellation.
    let signal = tokio_util::sync::CancellationToken::new();
    let cancel = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let plain = evaluate(
        request("binding-jev.json", adapters)
            .with_ids("run", "cancelled-plain")
            .with_signal(signal),
    )
    .await;
    assert_eq!(plain.spec.reason, ResultReason::Cancelled);
}
