//! The scripted adapter: answers from a script, for tests, demos and offline runs.
//!
//! A script lists [`Step`]s per alias, consumed in order; when an alias's steps run out, its
//! last step repeats; an alias with no steps uses the default step (or `executor` errors out as
//! `service-error`). Each step may take `delayMs` of tokio time first, so durations are exact
//! under paused time. A shared [`CallLog`] records every call in start order and the number of
//! calls in flight, across adapters.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::adapter::{Adapter, AdapterRequest, BoxFuture, Capabilities};
use crate::artifact::Pin;
use crate::observation::Observation;
use crate::reason::{AttemptReason, DispatchCertainty};

/// One scripted answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    #[serde(default)]
    pub delay_ms: u64,
    pub observation: Observation,
}

impl Step {
    pub fn new(delay_ms: u64, observation: Observation) -> Self {
        Step {
            delay_ms,
            observation,
        }
    }
}

/// The calls seen by one or more adapters.
#[derive(Debug, Default)]
pub struct CallLog {
    calls: Mutex<Vec<String>>,
    active: AtomicUsize,
    peak: AtomicUsize,
}

impl CallLog {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// `alias` (or `adapter:alias` when several adapters share the log) in start order.
    pub fn calls(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn count(&self) -> usize {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Calls in flight now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// The most calls ever in flight at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    fn start(&self, name: String) -> InFlight<'_> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(name);
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        InFlight { log: self }
    }
}

struct InFlight<'a> {
    log: &'a CallLog,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.log.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An adapter that plays a script.
pub struct ScriptedAdapter {
    id: String,
    version: String,
    capabilities: Capabilities,
    scripts: Mutex<HashMap<String, VecDeque<Step>>>,
    last: Mutex<HashMap<String, Step>>,
    default_step: Option<Step>,
    log: Arc<CallLog>,
    qualify_calls: bool,
    worker: Option<Pin>,
}

impl std::fmt::Debug for ScriptedAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedAdapter")
            .field("id", &self.id)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl ScriptedAdapter {
    /// An adapter for every answer kind with no script yet.
    pub fn new(id: impl Into<String>, version: impl Into<String>) -> Self {
        ScriptedAdapter {
            id: id.into(),
            version: version.into(),
            capabilities: Capabilities::all_kinds(),
            scripts: Mutex::new(HashMap::new()),
            last: Mutex::new(HashMap::new()),
            default_step: None,
            log: CallLog::new(),
            qualify_calls: false,
            worker: None,
        }
    }

    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Reports running the subagent worker `worker` (see [`crate::artifact::worker_pin`]).
    pub fn with_worker(mut self, worker: Pin) -> Self {
        self.worker = Some(worker);
        self
    }

    /// Appends steps for an alias.
    pub fn script(self, alias: &str, steps: impl IntoIterator<Item = Step>) -> Self {
        self.scripts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(alias.to_owned())
            .or_default()
            .extend(steps);
        self
    }

    /// The step for aliases without a script.
    pub fn with_default(mut self, step: Step) -> Self {
        self.default_step = Some(step);
        self
    }

    /// Shares a call log (calls are then recorded as `adapter:alias`).
    pub fn with_log(mut self, log: Arc<CallLog>) -> Self {
        self.log = log;
        self.qualify_calls = true;
        self
    }

    pub fn log(&self) -> &Arc<CallLog> {
        &self.log
    }

    fn next_step(&self, alias: &str) -> Option<Step> {
        let mut scripts = self.scripts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(step) = scripts.get_mut(alias).and_then(VecDeque::pop_front) {
            last.insert(alias.to_owned(), step.clone());
            return Some(step);
        }
        last.get(alias)
            .cloned()
            .or_else(|| self.default_step.clone())
    }
}

impl Adapter for ScriptedAdapter {
    fn id(&self) -> &str {
        &self.id
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn worker(&self) -> Option<&Pin> {
        self.worker.as_ref()
    }

    fn invoke<'a>(&'a self, request: AdapterRequest<'a>) -> BoxFuture<'a, Observation> {
        Box::pin(async move {
            let name = if self.qualify_calls {
                format!("{}:{}", self.id, request.alias)
            } else {
                request.alias.to_owned()
            };
            let _in_flight = self.log.start(name);
            let Some(step) = self.next_step(request.alias) else {
                return Observation::error(
                    AttemptReason::ServiceError,
                    DispatchCertainty::TerminalResponse,
                );
            };
            if step.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(step.delay_ms)).await;
            }
            step.observation
        })
    }
}
