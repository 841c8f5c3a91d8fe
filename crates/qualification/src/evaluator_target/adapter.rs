//! The fake provider of the evaluator target.
//!
//! One adapter per arrival, registered under the arrival's provider id. A call sleeps
//! `serviceMs` on tokio time (paused in the harness, so the sleep is exact and costs nothing),
//! then answers `served` — except the first attempt of an arrival with `failsFirstAttempt`,
//! which answers the retryable `service-error` (a terminal response, so the lease is released
//! as a failure and counts toward the provider's breaker, as in the controller target).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde_json::Value;
use turnstile_decision::adapter::BoxFuture;
use turnstile_decision::definition::AnswerKind;
use turnstile_decision::{
    Adapter, AdapterRequest, AttemptReason, Capabilities, DispatchCertainty, Observation,
};

use super::artifacts::{ADAPTER_VERSION, SERVED};

static CAPABILITIES: LazyLock<Capabilities> = LazyLock::new(|| Capabilities {
    answer_kinds: vec![AnswerKind::Choice],
    capabilities: vec![AnswerKind::Choice.as_str().to_owned()],
    confidence_profiles: Vec::new(),
});

/// The fake provider of one arrival.
#[derive(Debug, Clone)]
pub struct LoadAdapter {
    id: Arc<str>,
    service_ms: u64,
    fails_first_attempt: bool,
}

impl LoadAdapter {
    pub fn new(id: Arc<str>, service_ms: u64, fails_first_attempt: bool) -> Self {
        LoadAdapter {
            id,
            service_ms,
            fails_first_attempt,
        }
    }
}

impl Adapter for LoadAdapter {
    fn id(&self) -> &str {
        &self.id
    }

    fn version(&self) -> &str {
        ADAPTER_VERSION
    }

    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn invoke<'a>(&'a self, request: AdapterRequest<'a>) -> BoxFuture<'a, Observation> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(self.service_ms)).await;
            if self.fails_first_attempt && request.ordinal == 1 {
                Observation::error(
                    AttemptReason::ServiceError,
                    DispatchCertainty::TerminalResponse,
                )
            } else {
                Observation::success(Value::from(SERVED))
            }
        })
    }
}
