//! The group commit: durable before the reply.
//!
//! While the driver handles one batch of commands, every grant, release, budget release,
//! journaled pause and breaker transition becomes a [`LeaseEvent`] ([`GroupCommit::record`]),
//! and every reply that depends on them is held back ([`GroupCommit::hold`]). After the batch,
//! [`GroupCommit::flush`] hands the events to the [`Journal`] in one call; the held replies go
//! out from the journal's `done` callback, with whether the batch is durable. The driver never
//! waits: it takes the next batch while the journal commits this one.
//!
//! # Invariants
//!
//! - **No reply leaves before its batch is durable**: a held reply is called only from the
//!   `done` of the journal write that carries its batch's events (after that write returned),
//!   or at the flush when its batch has no event at all.
//! - Events reach the journal in the order they were recorded, each once.
//! - With a journal that keeps no leases, nothing is recorded and every reply goes out at once.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::journal::{Journal, LeaseEvent};
use crate::lease_metrics::LeaseMetrics;

use super::Driver;

/// A reply held back until its batch's lease events are durable; called with whether they are.
pub(super) type HeldReply = Box<dyn FnOnce(bool) + Send>;

/// One batch's lease events and the replies waiting for them.
pub(super) struct GroupCommit {
    /// Whether the journal keeps leases (then grants and releases are journaled).
    keeps_leases: bool,
    /// Lease events of the current batch, not yet handed to the journal.
    events: Vec<LeaseEvent>,
    /// Replies of the current batch waiting for its lease events to be durable.
    held: Vec<HeldReply>,
}

impl GroupCommit {
    pub(super) fn new(keeps_leases: bool) -> Self {
        GroupCommit {
            keeps_leases,
            events: Vec::new(),
            held: Vec::new(),
        }
    }

    /// Whether the journal keeps leases (else nothing is recorded or held).
    pub(super) fn keeps_leases(&self) -> bool {
        self.keeps_leases
    }

    /// Adds a lease event to the current batch, when the journal keeps leases (`event` is not
    /// built otherwise).
    pub(super) fn record(&mut self, event: impl FnOnce() -> LeaseEvent) {
        if self.keeps_leases {
            self.events.push(event());
        }
    }

    /// Holds a reply until the current batch's lease events are durable; answers at once when
    /// the journal keeps no leases.
    pub(super) fn hold(&mut self, reply: HeldReply) {
        if self.keeps_leases {
            self.held.push(reply);
        } else {
            reply(true);
        }
    }

    /// Hands the batch's lease events to the journal; its held replies go out when the journal
    /// reports them durable (on the journal's thread, in order). A failed write is counted.
    pub(super) fn flush(&mut self, journal: &mut dyn Journal, metrics: &Arc<LeaseMetrics>) {
        if self.held.is_empty() && self.events.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        if self.events.is_empty() {
            for reply in held {
                reply(true);
            }
            return;
        }
        let events = std::mem::take(&mut self.events);
        let metrics = metrics.clone();
        journal.lease_events(
            events,
            Box::new(move |result| {
                let durable = result.is_ok();
                if let Err(error) = &result {
                    metrics.journal_failures.fetch_add(1, Ordering::Relaxed);
                    crate::log::journal_failure(error);
                }
                for reply in held {
                    reply(durable);
                }
            }),
        );
    }
}

impl Driver {
    /// Adds a lease event to the current batch, when the journal keeps leases.
    pub(super) fn journal_lease(&mut self, event: impl FnOnce() -> LeaseEvent) {
        // Evictions of the same core operation came first (the core evicts before it charges).
        self.journal_evicted_budgets();
        self.commit.record(event);
    }

    /// Budgets the core forgot for idleness are forgotten by the journal too (their spend lines
    /// would otherwise stay stored, and come back at every restart). Called before any other
    /// lease event is recorded, so an eviction is journaled before the grant that re-opened the
    /// same budget ID in the same operation.
    pub(super) fn journal_evicted_budgets(&mut self) {
        while let Some((workspace, budget)) = self.registry.poll_evicted_budget() {
            self.commit.record(|| LeaseEvent::BudgetReleased {
                workspace: Arc::from(workspace.as_str()),
                budget,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use turnstile_admission::ActualUsage;

    use super::*;
    use crate::journal::{Done, Registration};
    use crate::lease_table::LeaseToken;

    /// What happened, in order: the journal's write returning, its `done`, a reply leaving.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Step {
        Written(usize),
        Durable(bool),
        Replied(&'static str, bool),
    }

    type Log = Arc<Mutex<Vec<Step>>>;

    fn push(log: &Log, step: Step) {
        log.lock().expect("log").push(step);
    }

    /// A journal that records its writes and keeps each batch's `done` until the test makes
    /// the batch durable (or fails it).
    struct OrderJournal {
        log: Log,
        pending: Arc<Mutex<Vec<Done>>>,
    }

    impl Journal for OrderJournal {
        fn profile_registered(&mut self, _registration: Registration, done: Done) {
            done(Ok(()));
        }

        fn breaker_transitions(
            &mut self,
            _workspace: &str,
            _transitions: &[turnstile_admission::BreakerTransition],
        ) {
        }

        fn lease_events(&mut self, events: Vec<LeaseEvent>, done: Done) {
            push(&self.log, Step::Written(events.len()));
            self.pending.lock().expect("pending").push(done);
        }
    }

    fn released() -> LeaseEvent {
        LeaseEvent::Released {
            token: LeaseToken::parse(&"07".repeat(16)).expect("a token"),
            usage: ActualUsage::none(),
        }
    }

    fn reply(log: &Log, name: &'static str) -> HeldReply {
        let log = log.clone();
        Box::new(move |durable| push(&log, Step::Replied(name, durable)))
    }

    /// Makes the oldest written batch durable (`Ok`) or failed, logging it first.
    fn complete(journal: &OrderJournal, result: Result<(), String>) {
        let done = journal.pending.lock().expect("pending").remove(0);
        push(&journal.log, Step::Durable(result.is_ok()));
        done(result);
    }

    /// A log writer into a shared buffer.
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("captured").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn journal() -> OrderJournal {
        OrderJournal {
            log: Log::default(),
            pending: Arc::default(),
        }
    }

    #[test]
    fn no_reply_leaves_before_its_batch_is_durable() {
        let mut journal = journal();
        let log = journal.log.clone();
        let metrics = Arc::new(LeaseMetrics::default());
        let mut commit = GroupCommit::new(true);

        commit.record(released);
        commit.hold(reply(&log, "first"));
        commit.record(released);
        commit.hold(reply(&log, "second"));
        assert!(log.lock().expect("log").is_empty(), "held, not sent");
        commit.flush(&mut journal, &metrics);
        assert_eq!(*log.lock().expect("log"), [Step::Written(2)]);

        // The next batch is taken while the first one commits; its reply waits for its own.
        commit.record(released);
        commit.hold(reply(&log, "third"));
        commit.flush(&mut journal, &metrics);
        assert_eq!(
            *log.lock().expect("log"),
            [Step::Written(2), Step::Written(1)]
        );

        complete(&journal, Ok(()));
        // The failed batch is logged at `error` (captured here with a subscriber of the test's).
        let captured = Arc::new(Mutex::new(Vec::<u8>::new()));
        let writer = {
            let captured = captured.clone();
            move || Capture(captured.clone())
        };
        let subscriber = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            complete(&journal, Err("disk full".to_owned()));
        });
        let logged = String::from_utf8(captured.lock().expect("captured").clone()).unwrap();
        assert!(
            logged.contains("ERROR") && logged.contains("lease log write failed"),
            "{logged}"
        );
        assert!(logged.contains("disk full"), "{logged}");
        assert_eq!(
            *log.lock().expect("log"),
            [
                Step::Written(2),
                Step::Written(1),
                Step::Durable(true),
                Step::Replied("first", true),
                Step::Replied("second", true),
                Step::Durable(false),
                Step::Replied("third", false),
            ]
        );
        assert_eq!(metrics.journal_failures.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_batch_without_events_answers_at_its_flush_and_a_journal_without_leases_at_once() {
        let mut journal = journal();
        let log = journal.log.clone();
        let metrics = Arc::new(LeaseMetrics::default());

        let mut commit = GroupCommit::new(true);
        commit.hold(reply(&log, "nothing to write"));
        assert!(log.lock().expect("log").is_empty());
        commit.flush(&mut journal, &metrics);
        assert_eq!(
            *log.lock().expect("log"),
            [Step::Replied("nothing to write", true)]
        );

        let mut commit = GroupCommit::new(false);
        commit.record(|| unreachable!("no event is built for a journal without leases"));
        commit.hold(reply(&log, "no lease log"));
        commit.flush(&mut journal, &metrics);
        assert_eq!(
            *log.lock().expect("log"),
            [
                Step::Replied("nothing to write", true),
                Step::Replied("no lease log", true),
            ]
        );
        assert!(journal.pending.lock().expect("pending").is_empty());
    }
}
