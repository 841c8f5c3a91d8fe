//! Idle principal state is evicted with a bound, and eviction never changes a decision.
//!
//! - `eviction_never_changes_a_decision` drives two controllers with the same random sequence
//!   of acquire, try-now, cancel, release (every outcome), time advances and profile changes
//!   (which raise and lower bucket capacities, reservations and share caps): one forgets every
//!   idle principal state it may (`set_idle_principals_kept(0)`), the other never forgets any.
//!   Every answer, resolution, snapshot, principal count and timeout must be identical, and the
//!   first must actually have forgotten states.
//! - `principal_state_stays_bounded_over_many_distinct_principals`: 100,000 principals of one
//!   profile each acquire and release once; the states kept never exceed the bound (idle kept +
//!   those whose buckets are still refilling).

use proptest::prelude::*;
use turnstile_admission::{
    Acquired, AdmissionRequest, Controller, Estimate, LeaseId, Limits, Outcome, Profile, WaiterId,
};

const PRINCIPALS: usize = 12;
const PROVIDERS: [&str; 2] = ["jev", "llm-subagent"];

fn principal(i: usize) -> String {
    format!("principal-{i}")
}

/// Three classes of principals: rated (request and token buckets with small bursts), reserved
/// (a reservation), plain. `raised` raises the bucket capacities and moves the share cap.
fn profile(raised: bool) -> Profile {
    let mut profile = Profile {
        workspace: Limits {
            concurrency: 4,
            max_queue_length: Some(20),
            max_principal_share: Some(if raised { 0.75 } else { 0.5 }),
            tokens_per_second: Some(if raised { 400 } else { 300 }),
            ..Limits::default()
        },
        ..Profile::default()
    };
    for provider in PROVIDERS {
        profile.providers.insert(
            provider.into(),
            Limits {
                concurrency: 3,
                requests_per_minute: Some(600),
                requests_burst: Some(if raised { 8 } else { 5 }),
                ..Limits::default()
            },
        );
    }
    for i in 0..PRINCIPALS {
        let limits = match i % 3 {
            0 => Limits {
                concurrency: 2,
                requests_per_minute: Some(60),
                requests_burst: Some(if raised { 3 } else { 2 }),
                tokens_per_second: Some(100),
                tokens_burst: Some(if raised { 250 } else { 150 }),
                ..Limits::default()
            },
            1 if i % 6 == 1 => Limits {
                concurrency: 1,
                reserved_concurrency: Some(1),
                ..Limits::default()
            },
            _ => Limits {
                concurrency: 2,
                requests_per_minute: Some(if raised { 120 } else { 30 }),
                ..Limits::default()
            },
        };
        profile.principals.insert(principal(i), limits);
    }
    profile
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        principal: usize,
        provider: usize,
        tokens: u64,
        deadline_in: Option<u64>,
    },
    TryNow {
        principal: usize,
        provider: usize,
        tokens: u64,
    },
    Release {
        pick: usize,
        outcome: u8,
    },
    Cancel {
        pick: usize,
    },
    Advance {
        ms: u64,
    },
    SetProfile {
        raised: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..PRINCIPALS, 0..2usize, 0..200u64, proptest::option::of(1..3_000u64)).prop_map(
            |(principal, provider, tokens, deadline_in)| Op::Acquire {
                principal,
                provider,
                tokens,
                deadline_in,
            }
        ),
        2 => (0..PRINCIPALS, 0..2usize, 0..200u64).prop_map(|(principal, provider, tokens)| {
            Op::TryNow {
                principal,
                provider,
                tokens,
            }
        }),
        4 => (any::<usize>(), 0..4u8).prop_map(|(pick, outcome)| Op::Release { pick, outcome }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        3 => prop_oneof![1..50u64, 500..5_000u64, 30_000..90_000u64].prop_map(|ms| Op::Advance { ms }),
        1 => any::<bool>().prop_map(|raised| Op::SetProfile { raised }),
    ]
}

fn request(principal_index: usize, provider: usize, tokens: u64) -> AdmissionRequest {
    AdmissionRequest::new(
        principal(principal_index),
        PROVIDERS[provider],
        format!("budget-{}", principal_index % 4),
    )
    .with_estimate(Estimate::new().tokens(tokens))
}

/// Two controllers that must stay indistinguishable.
struct Twins {
    evicting: Controller,
    keeping: Controller,
    leases: Vec<LeaseId>,
    waiters: Vec<WaiterId>,
    now: u64,
}

impl Twins {
    fn new() -> Self {
        let mut evicting = Controller::new(profile(false), 0).expect("profile");
        evicting.set_idle_principals_kept(0);
        let mut keeping = Controller::new(profile(false), 0).expect("profile");
        keeping.set_idle_principals_kept(usize::MAX);
        Twins {
            evicting,
            keeping,
            leases: Vec::new(),
            waiters: Vec::new(),
            now: 0,
        }
    }

    /// Runs the same call on both and checks the answers are equal.
    fn both<T: PartialEq + std::fmt::Debug>(&mut self, call: impl Fn(&mut Controller) -> T) -> T {
        let evicting = call(&mut self.evicting);
        let keeping = call(&mut self.keeping);
        assert_eq!(evicting, keeping, "answers differ");
        evicting
    }

    fn note(&mut self, acquired: &Acquired) {
        match acquired {
            Acquired::Admitted(lease) => self.leases.push(lease.id),
            Acquired::Queued { waiter, .. } => self.waiters.push(*waiter),
            Acquired::Rejected(_) => {}
        }
    }

    fn apply(&mut self, op: &Op) {
        let now = self.now;
        match *op {
            Op::Acquire {
                principal,
                provider,
                tokens,
                deadline_in,
            } => {
                let mut req = request(principal, provider, tokens);
                if let Some(d) = deadline_in {
                    req = req.with_deadline(now + d);
                }
                let acquired = self.both(|c| c.acquire(req.clone(), now));
                self.note(&acquired);
            }
            Op::TryNow {
                principal,
                provider,
                tokens,
            } => {
                let req = request(principal, provider, tokens);
                if let Ok(lease) = self.both(|c| c.try_acquire(req.clone(), now)) {
                    self.leases.push(lease.id);
                }
            }
            Op::Release { pick, outcome } => {
                if self.leases.is_empty() {
                    return;
                }
                let lease = self.leases.swap_remove(pick % self.leases.len());
                let outcome = match outcome {
                    0 => Outcome::Success,
                    1 => Outcome::Failure,
                    2 => Outcome::RetryAfter {
                        retry_after_ms: 700,
                    },
                    _ => Outcome::None,
                };
                self.both(|c| c.release(lease, outcome, now));
            }
            Op::Cancel { pick } => {
                if self.waiters.is_empty() {
                    return;
                }
                let waiter = self.waiters.swap_remove(pick % self.waiters.len());
                self.both(|c| c.cancel(waiter, now));
            }
            Op::Advance { ms } => {
                self.now += ms;
                let now = self.now;
                self.both(|c| c.handle_timeout(now));
            }
            Op::SetProfile { raised } => {
                self.both(|c| c.set_profile(profile(raised), now).is_ok());
            }
        }
        self.drain_and_compare();
    }

    fn drain_and_compare(&mut self) {
        loop {
            let resolution = self.both(Controller::poll_resolution);
            let Some(resolution) = resolution else { break };
            if let Ok(lease) = &resolution.outcome {
                self.leases.push(lease.id);
            }
        }
        self.both(|c| c.snapshot());
        self.both(|c| c.poll_timeout());
        self.both(|c| c.lane_views(c.now()));
        for i in 0..PRINCIPALS {
            let id = principal(i);
            self.both(|c| c.principal_counts(&id));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn eviction_never_changes_a_decision(ops in proptest::collection::vec(op(), 1..250)) {
        let mut twins = Twins::new();
        for op in &ops {
            twins.apply(op);
        }
        // Let every bucket refill, release everything: the evicting twin forgets idle states.
        twins.apply(&Op::Advance { ms: 120_000 });
        while !twins.leases.is_empty() {
            twins.apply(&Op::Release { pick: 0, outcome: 0 });
        }
        twins.apply(&Op::Advance { ms: 120_000 });
        prop_assert!(twins.evicting.principal_states_kept() <= twins.keeping.principal_states_kept());
        prop_assert_eq!(twins.keeping.principal_states_evicted(), 0);
    }
}

/// The twins above do evict (a fixed sequence, so the check does not depend on the draw).
#[test]
fn the_evicting_twin_does_forget_state_and_re_creates_it_equivalently() {
    let mut twins = Twins::new();
    for i in 0..PRINCIPALS {
        twins.apply(&Op::TryNow {
            principal: i,
            provider: i % 2,
            tokens: 100,
        });
    }
    while !twins.leases.is_empty() {
        twins.apply(&Op::Release {
            pick: 0,
            outcome: 0,
        });
    }
    // Raise capacities while the rated principals' buckets are still partly drained, and
    // again once they are full (forgotten states are re-created for the raise).
    twins.apply(&Op::SetProfile { raised: true });
    twins.apply(&Op::Advance { ms: 60_000 });
    twins.apply(&Op::SetProfile { raised: false });
    twins.apply(&Op::Advance { ms: 60_000 });
    assert!(twins.evicting.principal_states_evicted() > 0);
    twins.apply(&Op::SetProfile { raised: true });
    for i in 0..PRINCIPALS {
        for _ in 0..3 {
            twins.apply(&Op::TryNow {
                principal: i,
                provider: 0,
                tokens: 120,
            });
        }
    }
    assert!(twins.evicting.principal_states_evicted() > 0);
    assert_eq!(twins.keeping.principal_states_evicted(), 0);
}

#[test]
fn principal_state_stays_bounded_over_many_distinct_principals() {
    const COUNT: usize = 100_000;
    let rated = Limits {
        concurrency: 1,
        requests_per_minute: Some(60), // a drained request refills in one second
        ..Limits::default()
    };
    let mut profile = Profile {
        workspace: Limits::with_concurrency(64),
        ..Profile::default()
    };
    profile
        .providers
        .insert("jev".into(), Limits::with_concurrency(64));
    let names: Vec<String> = (0..COUNT).map(principal).collect();
    for name in &names {
        profile.principals.insert(name.clone(), rated.clone());
    }
    let mut controller = Controller::new(profile, 0).expect("profile");
    let mut peak = 0;
    for (i, name) in names.iter().enumerate() {
        let now = i as u64; // one principal per millisecond
        let lease = match controller.acquire(AdmissionRequest::new(name.as_str(), "jev", "b"), now)
        {
            Acquired::Admitted(lease) => lease,
            other => panic!("admitted: {other:?}"),
        };
        controller.release(lease.id, Outcome::Success, now);
        peak = peak.max(controller.principal_states_kept());
    }
    // Kept: at most 1024 idle ones plus those whose bucket is still refilling (1 s = 1,000
    // principals at this rate), plus one scan's worth of slack.
    let bound = turnstile_admission::IDLE_PRINCIPALS_KEPT + 1_000 + 64;
    assert!(peak <= bound, "peak {peak} > {bound}");
    assert!(controller.principal_states_evicted() as usize >= COUNT - bound);
    assert_eq!(controller.totals().active, 0);
}
