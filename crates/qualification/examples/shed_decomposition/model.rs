//! The independent model of the reference's rules and host, and the decomposition it drives
//! (see `main.rs`). Shared with `tests/shed_decomposition.rs`, which runs it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

use turnstile_admission::Limits;
use turnstile_qualification::arrivals::Arrival;
use turnstile_qualification::harness::{run_admission_controller_traced, Ending};
use turnstile_qualification::manifest::{Manifest, PrincipalClass};

/// How one arrival ended, comparably across the model and the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum End {
    Completed,
    Failed,
    Cancelled,
    QueueFull,
    QueueTimeout,
    OtherShed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub end: End,
    pub admitted: bool,
}

/// Which of turnstile's rules the model uses instead of the reference's.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rules {
    /// Every waiter expires at its own dwell bound, exactly, wherever it is in its lane
    /// (reference: a lane head is checked when the pump runs; a waiter behind it waits, still
    /// counted against queue bounds, until it becomes head).
    pub expire_every_waiter: bool,
    /// The pump runs at the exact instant a bucket has refilled enough or a waiter expires
    /// (reference: one timer at the retry hint, 9 ms after a concurrency deferral, 88 ms after a
    /// bucket deferral).
    pub exact_wakes: bool,
    /// At one instant, arrivals (and their cancellations) come before call ends and retries,
    /// as in turnstile's harness (reference: timers first, arrivals last).
    pub arrivals_first: bool,
    /// A call aborted by a cancellation is released with no outcome (reference: as a failure,
    /// which counts towards the breaker).
    pub abort_is_no_outcome: bool,
    /// Round robin over a ring of lanes: a lane that was served goes to the back, lanes looked
    /// at without being served stay in front (reference: a cursor index into the list of
    /// non-empty lanes taken at each pump, whose order shifts as lanes empty and come back).
    pub ring_round_robin: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Cancel(u64),
    CallEnd(u64),
    Retry(u64),
    Pump,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued(u64),
    Calling(u64),
    BackingOff,
    Done,
}

#[derive(Debug, Clone, Copy)]
enum Micro {
    Admitted { ordinal: u64 },
    CallDone { ordinal: u64, aborted: bool },
}

struct Waiter {
    uid: u64,
    ordinal: u64,
    principal: usize,
    provider: usize,
    tokens: u64,
    enqueued_at: u64,
    deadline: u64,
}

struct Live {
    arrival: Arrival,
    principal: usize,
    provider: usize,
    attempts: u32,
    admitted: bool,
    aborted: bool,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Scope {
    Principal(usize),
    Workspace,
    Provider(usize),
}

#[derive(Default, Clone, Copy)]
struct Breaker {
    open: bool,
    half_open: bool,
    failures: u32,
    opened_at: u64,
    probes: u32,
}

pub struct Model<'a> {
    rules: Rules,
    manifest: &'a Manifest,
    principal_limits: Vec<&'a Limits>,
    provider_limits: Vec<&'a Limits>,
    now: u64,
    timers: BinaryHeap<Reverse<(u64, u64, Timer)>>,
    next_timer: u64,
    cleared: std::collections::HashSet<u64>,
    pump_timer: Option<u64>,
    micro: VecDeque<Micro>,
    /// Lanes (provider, principal) in JavaScript `Map` insertion order, or the ring's order.
    lanes: Vec<(usize, usize)>,
    queues: HashMap<(usize, usize), VecDeque<Waiter>>,
    cursor: usize,
    next_uid: u64,
    active_principal: Vec<u32>,
    active_workspace: u32,
    active_provider: Vec<u32>,
    active_lane: HashMap<(usize, usize), u32>,
    buckets: HashMap<(Scope, bool), (f64, u64)>,
    holders: HashMap<Scope, (u64, u64)>,
    breakers: Vec<Breaker>,
    live: BTreeMap<u64, Live>,
    outcomes: BTreeMap<u64, Outcome>,
    /// Largest queue delay of an admitted attempt.
    max_wait: u64,
}

const CONCURRENCY_HINT: u64 = 9; // jitterHint(10) = round(8.75)
const BUCKET_HINT: u64 = 88; // jitterHint(100) = round(87.5)

impl<'a> Model<'a> {
    pub fn new(manifest: &'a Manifest, rules: Rules) -> Self {
        let providers: Vec<&Limits> = manifest.providers.values().collect();
        Model {
            rules,
            manifest,
            principal_limits: manifest.principals.iter().map(|p| &p.limits).collect(),
            provider_limits: providers.clone(),
            now: 0,
            timers: BinaryHeap::new(),
            next_timer: 0,
            cleared: Default::default(),
            pump_timer: None,
            micro: VecDeque::new(),
            lanes: Vec::new(),
            queues: HashMap::new(),
            cursor: 0,
            next_uid: 0,
            active_principal: vec![0; manifest.principals.len()],
            active_workspace: 0,
            active_provider: vec![0; providers.len()],
            active_lane: HashMap::new(),
            buckets: HashMap::new(),
            holders: HashMap::new(),
            breakers: vec![Breaker::default(); providers.len()],
            live: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            max_wait: 0,
        }
    }

    fn set_timer(&mut self, at: u64, timer: Timer) -> u64 {
        self.next_timer += 1;
        self.timers.push(Reverse((at, self.next_timer, timer)));
        self.next_timer
    }

    fn limits(&self, scope: Scope) -> &'a Limits {
        match scope {
            Scope::Principal(p) => self.principal_limits[p],
            Scope::Workspace => &self.manifest.workspace,
            Scope::Provider(v) => self.provider_limits[v],
        }
    }

    fn wait_limit(&self, principal: usize, provider: usize) -> u64 {
        [
            Scope::Principal(principal),
            Scope::Workspace,
            Scope::Provider(provider),
        ]
        .iter()
        .filter_map(|&s| self.limits(s).max_queue_wait_ms)
        .min()
        .unwrap_or(u64::MAX)
    }

    fn queued(&self, filter: impl Fn(&Waiter) -> bool) -> u64 {
        self.queues
            .values()
            .flat_map(|q| q.iter())
            .filter(|w| filter(w))
            .count() as u64
    }

    fn finish(&mut self, ordinal: u64, end: End) {
        if let Some(live) = self.live.get_mut(&ordinal) {
            live.phase = Phase::Done;
            self.outcomes.insert(
                ordinal,
                Outcome {
                    end,
                    admitted: live.admitted,
                },
            );
        }
    }

    // ----- the host (reference §7 harness) ---------------------------------------------------

    pub fn run(self, arrivals: &[Arrival]) -> BTreeMap<u64, Outcome> {
        self.run_with_wait(arrivals).0
    }

    /// The outcomes and the largest queue delay of an admitted attempt.
    pub fn run_with_wait(mut self, arrivals: &[Arrival]) -> (BTreeMap<u64, Outcome>, u64) {
        let principal_index: HashMap<&str, usize> = self
            .manifest
            .principals
            .iter()
            .enumerate()
            .map(|(i, p)| (p.id.as_str(), i))
            .collect();
        let provider_index: HashMap<&str, usize> = self
            .manifest
            .providers
            .keys()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        for arrival in arrivals {
            if arrival.at_ms > self.now || self.rules.arrivals_first {
                self.flush();
                let until = if self.rules.arrivals_first {
                    arrival.at_ms.saturating_sub(1)
                } else {
                    arrival.at_ms
                };
                self.fire_until(until);
                self.now = arrival.at_ms;
            }
            let ordinal = arrival.ordinal;
            self.live.insert(
                ordinal,
                Live {
                    arrival: arrival.clone(),
                    principal: principal_index[arrival.principal_id.as_str()],
                    provider: provider_index[arrival.provider_id.as_str()],
                    attempts: 0,
                    admitted: false,
                    aborted: false,
                    phase: Phase::BackingOff,
                },
            );
            if let Some(at) = arrival.cancel_at_ms {
                self.set_timer(at, Timer::Cancel(ordinal));
            }
            self.attempt(ordinal);
        }
        self.flush();
        self.fire_until(u64::MAX);
        (self.outcomes, self.max_wait)
    }

    fn flush(&mut self) {
        while let Some(micro) = self.micro.pop_front() {
            match micro {
                Micro::Admitted { ordinal } => self.dispatch(ordinal),
                Micro::CallDone { ordinal, aborted } => self.call_done(ordinal, aborted),
            }
        }
    }

    fn fire_until(&mut self, until: u64) {
        while let Some(&Reverse((at, id, timer))) = self.timers.peek() {
            if at > until {
                break;
            }
            self.timers.pop();
            if self.cleared.remove(&id) {
                continue;
            }
            self.now = self.now.max(at);
            match timer {
                Timer::Cancel(ordinal) => self.cancel(ordinal),
                Timer::CallEnd(ordinal) => self.micro.push_back(Micro::CallDone {
                    ordinal,
                    aborted: false,
                }),
                Timer::Retry(ordinal) => self.attempt(ordinal),
                Timer::Pump => {
                    self.pump_timer = None;
                    self.pump();
                }
            }
            self.flush();
        }
    }

    fn attempt(&mut self, ordinal: u64) {
        let Some(live) = self.live.get_mut(&ordinal) else {
            return;
        };
        live.attempts += 1;
        if live.aborted {
            return self.finish(ordinal, End::Cancelled);
        }
        let (principal, provider) = (live.principal, live.provider);
        let tokens = live.arrival.tokens;
        let deadline = self.now + 2000 + live.arrival.service_ms;
        if self.rules.expire_every_waiter {
            self.expire_all();
        }
        // Queue bounds: principal, workspace and provider lengths, then the queue share caps.
        let counts = [
            (
                Scope::Principal(principal),
                self.queued(|w| w.principal == principal),
            ),
            (Scope::Workspace, self.queued(|_| true)),
            (
                Scope::Provider(provider),
                self.queued(|w| w.provider == provider),
            ),
        ];
        let full = counts.iter().any(|&(scope, count)| {
            self.limits(scope)
                .max_queue_length
                .is_some_and(|l| count >= l)
        });
        let own = [
            (Scope::Workspace, self.queued(|w| w.principal == principal)),
            (
                Scope::Provider(provider),
                self.queued(|w| w.principal == principal && w.provider == provider),
            ),
        ];
        let over_share = own.iter().any(|&(scope, count)| {
            let limits = self.limits(scope);
            match (limits.max_principal_share, limits.max_queue_length) {
                (Some(share), Some(length)) => count >= share_cap(share, length),
                _ => false,
            }
        });
        if full || over_share {
            return self.finish(ordinal, End::QueueFull);
        }
        self.next_uid += 1;
        let uid = self.next_uid;
        let lane = (provider, principal);
        if !self.lanes.contains(&lane) {
            self.lanes.push(lane);
        }
        self.queues.entry(lane).or_default().push_back(Waiter {
            uid,
            ordinal,
            principal,
            provider,
            tokens,
            enqueued_at: self.now,
            deadline,
        });
        if let Some(live) = self.live.get_mut(&ordinal) {
            live.phase = Phase::Queued(uid);
        }
        self.pump();
    }

    fn dispatch(&mut self, ordinal: u64) {
        let Some(live) = self.live.get(&ordinal) else {
            return;
        };
        if live.aborted {
            self.micro.push_back(Micro::CallDone {
                ordinal,
                aborted: true,
            });
            return;
        }
        let at = self.now + live.arrival.service_ms;
        let id = self.set_timer(at, Timer::CallEnd(ordinal));
        if let Some(live) = self.live.get_mut(&ordinal) {
            live.phase = Phase::Calling(id);
        }
    }

    fn call_done(&mut self, ordinal: u64, aborted: bool) {
        let Some(live) = self.live.get(&ordinal) else {
            return;
        };
        let failed = live.arrival.fails_first_attempt && live.attempts == 1;
        let (principal, provider) = (live.principal, live.provider);
        let success = !aborted && !failed;
        let outcome_given = !(aborted && self.rules.abort_is_no_outcome);
        self.release(principal, provider, success, outcome_given);
        if aborted {
            return self.finish(ordinal, End::Cancelled);
        }
        if !failed {
            return self.finish(ordinal, End::Completed);
        }
        let attempts = self.live[&ordinal].attempts;
        if attempts <= self.manifest.arrival_model.max_retries {
            let at = self.now + self.manifest.arrival_model.retry_backoff_ms;
            self.set_timer(at, Timer::Retry(ordinal));
            if let Some(live) = self.live.get_mut(&ordinal) {
                live.phase = Phase::BackingOff;
            }
        } else {
            self.finish(ordinal, End::Failed);
        }
    }

    fn cancel(&mut self, ordinal: u64) {
        let Some(live) = self.live.get_mut(&ordinal) else {
            return;
        };
        live.aborted = true;
        match live.phase {
            Phase::Queued(uid) => {
                let lane = (live.provider, live.principal);
                if let Some(queue) = self.queues.get_mut(&lane) {
                    queue.retain(|w| w.uid != uid);
                }
                self.holders.retain(|_, (holder, _)| *holder != uid);
                self.finish(ordinal, End::Cancelled);
                self.pump();
            }
            Phase::Calling(id) => {
                self.cleared.insert(id);
                self.micro.push_back(Micro::CallDone {
                    ordinal,
                    aborted: true,
                });
            }
            Phase::BackingOff | Phase::Done => {}
        }
    }

    // ----- the controller (reference §4 rules) -----------------------------------------------

    fn release(&mut self, principal: usize, provider: usize, success: bool, outcome: bool) {
        self.active_principal[principal] -= 1;
        self.active_workspace -= 1;
        self.active_provider[provider] -= 1;
        *self.active_lane.entry((provider, principal)).or_default() -= 1;
        let config = self.provider_limits[provider].circuit_breaker.clone();
        let breaker = &mut self.breakers[provider];
        if breaker.half_open {
            breaker.probes = breaker.probes.saturating_sub(1);
        }
        if outcome {
            if success {
                breaker.failures = 0;
                breaker.open = false;
                breaker.half_open = false;
            } else if let Some(config) = config {
                breaker.failures += 1;
                if breaker.failures >= config.failure_threshold && !breaker.open {
                    breaker.open = true;
                    breaker.half_open = false;
                    breaker.opened_at = self.now;
                }
            }
        }
        self.pump();
    }

    fn expire_all(&mut self) {
        let now = self.now;
        let mut expired = Vec::new();
        for queue in self.queues.values_mut() {
            queue.retain(|w| {
                let keep = now < w.deadline && now - w.enqueued_at < 2000;
                if !keep {
                    expired.push((w.uid, w.ordinal, now >= w.deadline));
                }
                keep
            });
        }
        expired.sort_unstable();
        for (uid, ordinal, deadline) in expired {
            self.holders.retain(|_, (holder, _)| *holder != uid);
            self.finish(
                ordinal,
                if deadline {
                    End::OtherShed
                } else {
                    End::QueueTimeout
                },
            );
        }
    }

    fn refill(&mut self, scope: Scope, tokens: bool) -> Option<(f64, f64)> {
        let limits = self.limits(scope);
        let (capacity, rate) = if tokens {
            let c = limits.tokens_per_second? as f64;
            (c, c / 1000.0)
        } else {
            let c = limits.requests_per_minute? as f64;
            (c, c / 60_000.0)
        };
        let now = self.now;
        let bucket = self
            .buckets
            .entry((scope, tokens))
            .or_insert((capacity, now));
        bucket.0 = capacity.min(bucket.0 + (now - bucket.1) as f64 * rate);
        bucket.1 = now;
        Some((bucket.0, rate))
    }

    /// `Ok(())` admits; `Err(Some(wake))` defers until about `wake`; `Err(None)` defers with
    /// no timer of its own.
    fn try_admit(&mut self, w: &Waiter) -> Result<(), u64> {
        let (p, v) = (w.principal, w.provider);
        let principal = self.principal_limits[p];
        let workspace = &self.manifest.workspace;
        let provider = self.provider_limits[v];
        let lane_active = self.active_lane.get(&(v, p)).copied().unwrap_or(0);
        let concurrency_hint = if self.rules.exact_wakes {
            u64::MAX
        } else {
            self.now + CONCURRENCY_HINT
        };
        if self.active_principal[p] >= principal.concurrency
            || self.active_workspace >= workspace.concurrency
            || self.active_provider[v] >= provider.concurrency
        {
            return Err(concurrency_hint);
        }
        let ws_share = workspace.max_principal_share.is_some_and(|s| {
            u64::from(self.active_principal[p]) >= share_cap(s, workspace.concurrency.into())
        });
        let pv_share = provider
            .max_principal_share
            .is_some_and(|s| u64::from(lane_active) >= share_cap(s, provider.concurrency.into()));
        let reserved =
            |limits: &Limits, capacity: u32| limits.reserved_concurrency.unwrap_or(0).min(capacity);
        let within = |capacity: u32, active: u32, own: u32, active_of: &dyn Fn(usize) -> u32| {
            let free = capacity.saturating_sub(active);
            if own < reserved(principal, capacity) {
                return free >= 1;
            }
            let held: u32 = (0..self.principal_limits.len())
                .filter(|&o| o != p)
                .map(|o| reserved(self.principal_limits[o], capacity).saturating_sub(active_of(o)))
                .sum();
            free.saturating_sub(held) >= 1
        };
        let ws_ok = within(
            workspace.concurrency,
            self.active_workspace,
            self.active_principal[p],
            &|o| self.active_principal[o],
        );
        let pv_ok = within(
            provider.concurrency,
            self.active_provider[v],
            lane_active,
            &|o| self.active_lane.get(&(v, o)).copied().unwrap_or(0),
        );
        if ws_share || pv_share || !ws_ok || !pv_ok {
            return Err(concurrency_hint);
        }
        let breaker = self.breakers[v];
        if breaker.open {
            let open_ms = provider
                .circuit_breaker
                .as_ref()
                .map_or(30_000, |c| c.open_ms_or_default());
            if self.now < breaker.opened_at + open_ms {
                return Err(breaker.opened_at + open_ms);
            }
            self.breakers[v].open = false;
            self.breakers[v].half_open = true;
            self.breakers[v].probes = 0;
        }
        if self.breakers[v].half_open && self.breakers[v].probes >= 1 {
            return Err(self.now + 25);
        }
        for scope in [Scope::Principal(p), Scope::Workspace, Scope::Provider(v)] {
            if let Some((value, rate)) = self.refill(scope, false) {
                if value < 1.0 {
                    let exact = self.now + ((1.0 - value) / rate).ceil() as u64;
                    return Err(if self.rules.exact_wakes {
                        exact
                    } else {
                        self.now + BUCKET_HINT
                    });
                }
            }
            if let Some((value, rate)) = self.refill(scope, true) {
                let reserved = match self.holders.get(&scope) {
                    Some(&(holder, tokens)) if holder != w.uid => tokens,
                    _ => 0,
                };
                let need = (w.tokens + reserved) as f64;
                if value < need {
                    self.holders.entry(scope).or_insert((w.uid, w.tokens));
                    let exact = self.now + ((need - value) / rate).ceil() as u64;
                    return Err(if self.rules.exact_wakes {
                        exact
                    } else {
                        self.now + BUCKET_HINT
                    });
                }
            }
        }
        for scope in [Scope::Principal(p), Scope::Workspace, Scope::Provider(v)] {
            if let Some(bucket) = self.buckets.get_mut(&(scope, false)) {
                bucket.0 -= 1.0;
            }
            if let Some(bucket) = self.buckets.get_mut(&(scope, true)) {
                bucket.0 -= w.tokens as f64;
            }
        }
        self.active_principal[p] += 1;
        self.active_workspace += 1;
        self.active_provider[v] += 1;
        *self.active_lane.entry((v, p)).or_default() += 1;
        self.holders.retain(|_, (holder, _)| *holder != w.uid);
        if self.breakers[v].half_open {
            self.breakers[v].probes += 1;
        }
        Ok(())
    }

    fn pump(&mut self) {
        if let Some(id) = self.pump_timer.take() {
            self.cleared.insert(id);
        }
        if self.rules.expire_every_waiter {
            self.expire_all();
        }
        if self.rules.ring_round_robin {
            return self.pump_ring();
        }
        let lanes: Vec<(usize, usize)> = self
            .lanes
            .iter()
            .copied()
            .filter(|l| self.queues.get(l).is_some_and(|q| !q.is_empty()))
            .collect();
        if lanes.is_empty() {
            self.lanes
                .retain(|l| self.queues.get(l).is_some_and(|q| !q.is_empty()));
            return;
        }
        let mut nearest = u64::MAX;
        let mut progressed = true;
        while progressed {
            progressed = false;
            for offset in 0..lanes.len() {
                let position = (self.cursor + offset) % lanes.len();
                let lane = lanes[position];
                let Some(head) = self.queues.get_mut(&lane).and_then(|q| q.pop_front()) else {
                    continue;
                };
                let wait_limit = self.wait_limit(head.principal, head.provider);
                if self.now >= head.deadline || self.now - head.enqueued_at >= wait_limit {
                    self.holders.retain(|_, (holder, _)| *holder != head.uid);
                    let end = if self.now >= head.deadline {
                        End::OtherShed
                    } else {
                        End::QueueTimeout
                    };
                    self.finish(head.ordinal, end);
                    progressed = true;
                    continue;
                }
                match self.try_admit(&head) {
                    Ok(()) => {
                        self.max_wait = self.max_wait.max(self.now - head.enqueued_at);
                        self.cursor = (position + 1) % lanes.len();
                        if let Some(live) = self.live.get_mut(&head.ordinal) {
                            live.admitted = true;
                        }
                        self.micro.push_back(Micro::Admitted {
                            ordinal: head.ordinal,
                        });
                        progressed = true;
                    }
                    Err(wake) => {
                        let expiry = head.enqueued_at + wait_limit;
                        nearest = nearest
                            .min(wake)
                            .min(head.deadline.max(self.now + 1))
                            .min(expiry.max(self.now + 1));
                        if let Some(queue) = self.queues.get_mut(&lane) {
                            queue.push_front(head);
                        }
                    }
                }
            }
        }
        self.lanes
            .retain(|l| self.queues.get(l).is_some_and(|q| !q.is_empty()));
        if self.rules.expire_every_waiter {
            for queue in self.queues.values() {
                for w in queue {
                    nearest = nearest.min(
                        (w.enqueued_at + self.wait_limit(w.principal, w.provider))
                            .max(self.now + 1),
                    );
                }
            }
        }
        if self.queued(|_| true) > 0 {
            let at = if nearest == u64::MAX {
                self.now + 25
            } else {
                nearest.clamp(self.now + 1, self.now + 30_000)
            };
            self.pump_timer = Some(self.set_timer(at, Timer::Pump));
        }
    }
}

impl Model<'_> {
    /// The pump with turnstile's ring: serve the front lane's head; a served lane goes to the
    /// back; stop after a full turn without an admission; the lanes looked at since the last
    /// admission go back to the front.
    fn pump_ring(&mut self) {
        self.lanes
            .retain(|l| self.queues.get(l).is_some_and(|q| !q.is_empty()));
        let mut ring: VecDeque<(usize, usize)> = self.lanes.iter().copied().collect();
        let mut nearest = u64::MAX;
        let mut since_admission = 0;
        while since_admission < ring.len() {
            let Some(lane) = ring.pop_front() else {
                break;
            };
            let Some(head) = self.queues.get_mut(&lane).and_then(|q| q.pop_front()) else {
                continue;
            };
            let wait_limit = self.wait_limit(head.principal, head.provider);
            if self.now >= head.deadline || self.now - head.enqueued_at >= wait_limit {
                // Head-only expiry (without `expire_every_waiter`): the lane's next waiter is
                // considered at once.
                self.holders.retain(|_, (holder, _)| *holder != head.uid);
                let end = if self.now >= head.deadline {
                    End::OtherShed
                } else {
                    End::QueueTimeout
                };
                self.finish(head.ordinal, end);
                ring.push_front(lane);
                continue;
            }
            match self.try_admit(&head) {
                Ok(()) => {
                    self.max_wait = self.max_wait.max(self.now - head.enqueued_at);
                    if let Some(live) = self.live.get_mut(&head.ordinal) {
                        live.admitted = true;
                    }
                    self.micro.push_back(Micro::Admitted {
                        ordinal: head.ordinal,
                    });
                    if self.queues.get(&lane).is_some_and(|q| !q.is_empty()) {
                        ring.push_back(lane);
                    }
                    since_admission = 0;
                }
                Err(wake) => {
                    let expiry = head.enqueued_at + wait_limit;
                    nearest = nearest
                        .min(wake)
                        .min(head.deadline.max(self.now + 1))
                        .min(expiry.max(self.now + 1));
                    if let Some(queue) = self.queues.get_mut(&lane) {
                        queue.push_front(head);
                    }
                    ring.push_back(lane);
                    since_admission += 1;
                }
            }
        }
        let unserved = since_admission.min(ring.len());
        ring.rotate_right(unserved);
        self.lanes = ring.into_iter().collect();
        for queue in self.queues.values() {
            for w in queue {
                let expiry = w.enqueued_at + self.wait_limit(w.principal, w.provider);
                nearest = nearest.min(expiry.max(self.now + 1));
            }
        }
        if self.queued(|_| true) > 0 {
            let at = if nearest == u64::MAX {
                self.now + 25
            } else {
                nearest.clamp(self.now + 1, self.now + 30_000)
            };
            self.pump_timer = Some(self.set_timer(at, Timer::Pump));
        }
    }
}

/// `max(1, floor(share × pool))`.
fn share_cap(share: f64, pool: u64) -> u64 {
    ((share * pool as f64).floor() as u64).max(1)
}

/// Switches one of turnstile's rules on in the model.
type RuleSwitch = fn(&mut Rules);

/// One row of the decomposition: how every arrival ended, by ordinal.
pub struct Row {
    pub name: &'static str,
    pub outcomes: BTreeMap<u64, Outcome>,
}

/// How many arrivals ended with `end`.
pub fn count(outcomes: &BTreeMap<u64, Outcome>, end: End) -> usize {
    outcomes.values().filter(|o| o.end == end).count()
}

/// The share of `class`'s arrivals admitted at least once.
pub fn admission_ratio(
    arrivals: &[Arrival],
    outcomes: &BTreeMap<u64, Outcome>,
    class: PrincipalClass,
) -> f64 {
    let of_class: Vec<&Arrival> = arrivals
        .iter()
        .filter(|a| a.principal_class == class)
        .collect();
    let admitted = of_class
        .iter()
        .filter(|a| outcomes.get(&a.ordinal).is_some_and(|o| o.admitted))
        .count();
    admitted as f64 / of_class.len().max(1) as f64
}

/// One line: shed (by reason), completed, cancelled and both admission ratios.
pub fn summary(arrivals: &[Arrival], outcomes: &BTreeMap<u64, Outcome>) -> String {
    let count = |end: End| count(outcomes, end);
    let ratio = |class: PrincipalClass| admission_ratio(arrivals, outcomes, class);
    format!(
        "shed {:>3} (queue-full {:>3}, queue-timeout {:>3}, other {})  completed {:>5}  cancelled {:>3}  quiet {:.6}  noisy {:.6}",
        count(End::QueueFull) + count(End::QueueTimeout) + count(End::OtherShed),
        count(End::QueueFull),
        count(End::QueueTimeout),
        count(End::OtherShed),
        count(End::Completed),
        count(End::Cancelled),
        ratio(PrincipalClass::Quiet),
        ratio(PrincipalClass::Noisy)
    )
}

/// The decomposition's rows: the model with the reference's rules, then with turnstile's rules
/// switched in one at a time (cumulatively), then turnstile's own harness and controller.
pub fn decompose(
    manifest: &Manifest,
    arrivals: &[Arrival],
    window: u64,
) -> Result<Vec<Row>, turnstile_admission::RegistryError> {
    let mut rows = Vec::new();
    let mut rules = Rules::default();
    let steps: [(&str, RuleSwitch); 5] = [
        ("+ ring round robin (served lane to the back)", |r| {
            r.ring_round_robin = true
        }),
        ("+ every waiter expires at its own bound", |r| {
            r.expire_every_waiter = true
        }),
        ("+ exact wakes (no 9 / 88 ms retry hints)", |r| {
            r.exact_wakes = true
        }),
        ("+ an aborted call releases with no outcome", |r| {
            r.abort_is_no_outcome = true
        }),
        ("+ arrivals before call ends at one instant", |r| {
            r.arrivals_first = true
        }),
    ];
    rows.push(Row {
        name: "reference rules (model)",
        outcomes: Model::new(manifest, rules).run(arrivals),
    });
    for (name, switch) in steps {
        switch(&mut rules);
        rows.push(Row {
            name,
            outcomes: Model::new(manifest, rules).run(arrivals),
        });
    }

    let (_, traced) =
        run_admission_controller_traced(manifest, arrivals.iter().cloned(), window * 1000)?;
    let ours: BTreeMap<u64, Outcome> = traced
        .iter()
        .map(|o| {
            let end = match o.ending {
                Ending::Completed => End::Completed,
                Ending::Failed => End::Failed,
                Ending::Cancelled => End::Cancelled,
                Ending::Shed => match o.reason.map(|r| r.as_str()) {
                    Some("queue-full") => End::QueueFull,
                    Some("queue-timeout") => End::QueueTimeout,
                    _ => End::OtherShed,
                },
            };
            (
                o.ordinal,
                Outcome {
                    end,
                    admitted: o.admitted,
                },
            )
        })
        .collect();
    rows.push(Row {
        name: "turnstile harness + controller",
        outcomes: ours,
    });

    Ok(rows)
}
