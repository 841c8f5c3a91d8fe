//! Token-fair scheduling (issue 31): token mode against a reference scheduler written here,
//! weights, the lift rule, actual-usage corrections, priority bands with minimum shares, and
//! requests mode left exactly as it was.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use proptest::prelude::*;
use turnstile_admission::{
    Acquired, ActualUsage, AdmissionRequest, Controller, Estimate, Fairness, LeaseId, Limits,
    MinShare, Outcome, Priority, Profile, WaiterId,
};

const K: u128 = 1000 << 20;

fn profile(concurrency: u32, fairness: Option<Fairness>, principals: &[(&str, Limits)]) -> Profile {
    let mut provider = Limits::with_concurrency(concurrency);
    provider.fairness = fairness;
    Profile {
        workspace: Limits::with_concurrency(64),
        providers: BTreeMap::from([("p".to_owned(), provider)]),
        principals: principals
            .iter()
            .map(|(id, l)| ((*id).to_owned(), l.clone()))
            .collect(),
    }
}

fn principal(weight: Option<f64>, priority: Option<Priority>) -> Limits {
    Limits {
        weight,
        priority,
        ..Limits::with_concurrency(64)
    }
}

fn request(principal: &str, tokens: u64) -> AdmissionRequest {
    AdmissionRequest::new(principal, "p", format!("{principal}-budget"))
        .with_estimate(Estimate::new().tokens(tokens))
}

/// Grants in order, from acquire answers and resolutions.
struct Driver {
    controller: Controller,
    now: u64,
    /// Waiter → principal, for queued requests.
    waiting: HashMap<WaiterId, String>,
    /// Leases held, oldest first, with their principal.
    held: VecDeque<(LeaseId, String)>,
    grants: Vec<String>,
}

impl Driver {
    fn new(profile: Profile) -> Self {
        Driver {
            controller: Controller::new(profile, 0).expect("valid profile"),
            now: 0,
            waiting: HashMap::new(),
            held: VecDeque::new(),
            grants: Vec::new(),
        }
    }

    fn acquire(&mut self, principal: &str, tokens: u64) -> Option<WaiterId> {
        match self
            .controller
            .acquire(request(principal, tokens), self.now)
        {
            Acquired::Admitted(lease) => {
                self.grants.push(principal.to_owned());
                self.held.push_back((lease.id, principal.to_owned()));
                None
            }
            Acquired::Queued { waiter, .. } => {
                self.waiting.insert(waiter, principal.to_owned());
                Some(waiter)
            }
            Acquired::Rejected(rejection) => panic!("rejected: {rejection:?}"),
        }
    }

    fn collect(&mut self) {
        while let Some(resolution) = self.controller.poll_resolution() {
            let principal = self
                .waiting
                .remove(&resolution.waiter)
                .expect("known waiter");
            if let Ok(lease) = resolution.outcome {
                self.grants.push(principal.clone());
                self.held.push_back((lease.id, principal));
            }
        }
    }

    /// Releases the oldest lease, reporting `actual` tokens when given.
    fn release_oldest(&mut self, actual: Option<u64>) {
        let (lease, _) = self.held.pop_front().expect("a lease is held");
        let usage = actual.map_or(ActualUsage::none(), |t| ActualUsage::none().tokens(t));
        self.controller
            .release_with_usage(lease, Outcome::Success, usage, self.now)
            .expect("released once");
        self.collect();
    }
}

/// Two principals kept backlogged on a lane of concurrency 1: the grant order over `grants`.
fn backlogged_order(profile: Profile, sizes: &[(&str, u64)], grants: usize) -> Vec<String> {
    let mut driver = Driver::new(profile);
    for _ in 0..grants {
        for &(principal, tokens) in sizes {
            driver.acquire(principal, tokens);
        }
    }
    while driver.grants.len() < grants {
        driver.release_oldest(None);
    }
    driver.grants.truncate(grants);
    driver.grants
}

fn letters(order: &[String]) -> String {
    order.iter().map(|p| &p[..1]).collect()
}

#[test]
fn requests_mode_alternates_whatever_the_sizes() {
    let principals = [("H", principal(None, None)), ("l", principal(None, None))];
    let order = backlogged_order(
        profile(1, None, &principals),
        &[("H", 4000), ("l", 400)],
        11,
    );
    assert_eq!(letters(&order), "HlHlHlHlHlH");
}

#[test]
fn token_mode_gives_ten_small_calls_per_large_one() {
    let principals = [("H", principal(None, None)), ("l", principal(None, None))];
    let profile = profile(1, Some(Fairness::Tokens), &principals);
    let order = backlogged_order(profile, &[("H", 4000), ("l", 400)], 44);
    assert_eq!(letters(&order[..12]), "Hllllllllllh".replace('h', "H"));
    let heavy = order.iter().filter(|p| *p == "H").count() as u64;
    let light = order.iter().filter(|p| *p == "l").count() as u64;
    assert_eq!((heavy * 4000, light * 400), (4 * 4000, 40 * 400));
}

#[test]
fn token_mode_with_equal_sizes_keeps_the_round_robin_order() {
    let principals = [("H", principal(None, None)), ("l", principal(None, None))];
    let profile = profile(1, Some(Fairness::Tokens), &principals);
    let order = backlogged_order(profile, &[("H", 500), ("l", 500)], 10);
    assert_eq!(letters(&order), "HlHlHlHlHl");
}

#[test]
fn weight_two_receives_twice_the_tokens_of_weight_one() {
    let principals = [
        ("a", principal(None, None)),
        ("b", principal(Some(2.0), None)),
    ];
    let profile = profile(1, Some(Fairness::Tokens), &principals);
    let order = backlogged_order(profile, &[("a", 1000), ("b", 1000)], 300);
    let b = order.iter().filter(|p| *p == "b").count();
    assert_eq!(b, 200, "{}", letters(&order[..30]));
}

#[test]
fn a_returning_principal_cannot_bank_credit_while_idle() {
    let principals = [("a", principal(None, None)), ("b", principal(None, None))];
    let mut driver = Driver::new(profile(1, Some(Fairness::Tokens), &principals));
    // `a` alone for 20 grants, then `b` arrives with a backlog too.
    for _ in 0..40 {
        driver.acquire("a", 100);
    }
    for _ in 0..20 {
        driver.release_oldest(None);
    }
    for _ in 0..20 {
        driver.acquire("b", 100);
    }
    let before = driver.grants.len();
    for _ in 0..20 {
        driver.release_oldest(None);
    }
    let after = letters(&driver.grants[before..]);
    // Without the lift rule `b` would take the next 20 grants in a row.
    // Lifted to `a`'s counter, `b` ties with it and goes after it (it entered later).
    assert_eq!(after, "ab".repeat(10), "{after}");
}

#[test]
fn an_underestimate_is_charged_at_release_and_the_debt_is_kept() {
    let principals = [("a", principal(None, None)), ("b", principal(None, None))];
    let mut driver = Driver::new(profile(1, Some(Fairness::Tokens), &principals));
    // `a` estimates 1 token and uses 4,000, once; then both stay backlogged with 100.
    driver.acquire("a", 1);
    for _ in 0..60 {
        driver.acquire("b", 100);
        driver.acquire("a", 100);
    }
    let start = driver.grants.len();
    driver.release_oldest(Some(4_000));
    for _ in 0..45 {
        driver.release_oldest(Some(100));
    }
    let next = letters(&driver.grants[start..]);
    // 3,999 tokens owed at 100 a grant: `b` catches up for 40 grants, then they alternate.
    assert!(next.starts_with(&format!("{}a", "b".repeat(40))), "{next}");
}

#[test]
fn a_waiting_batch_band_gets_its_min_share_under_saturating_interactive_load() {
    let principals = [
        ("i", principal(None, Some(Priority::Interactive))),
        ("s", principal(None, None)),
        ("b", principal(None, Some(Priority::Batch))),
    ];
    // Requests mode: the bands alone give the providers an order.
    let order = backlogged_order(
        profile(1, None, &principals),
        &[("i", 100), ("s", 100), ("b", 100)],
        1000,
    );
    let count = |who: &str| order.iter().filter(|p| *p == who).count();
    assert!(count("b") >= 99, "batch ≥ 10 %: {}", count("b"));
    assert!(count("s") >= 199, "standard ≥ 20 %: {}", count("s"));
    assert!(count("i") >= 690, "interactive first: {}", count("i"));
    // No run without a batch grant is longer than ⌈1 / 0.1⌉ + 1 grants.
    let longest = order
        .split(|p| p == "b")
        .skip(1)
        .map(<[String]>::len)
        .max()
        .unwrap_or(0);
    assert!(longest <= 11, "{longest}");
}

#[test]
fn min_shares_are_read_from_the_workspace() {
    let principals = [
        ("i", principal(None, Some(Priority::Interactive))),
        ("b", principal(None, Some(Priority::Batch))),
    ];
    let mut profile = profile(1, Some(Fairness::Tokens), &principals);
    profile.workspace.min_share = Some(MinShare {
        standard: None,
        batch: Some(0.25),
    });
    let order = backlogged_order(profile, &[("i", 100), ("b", 100)], 400);
    let batch = order.iter().filter(|p| *p == "b").count();
    assert!((99..=100).contains(&batch), "{batch}");
}

#[test]
fn the_new_fields_are_validated_on_their_own_scope() {
    let mut wrong = profile(1, None, &[("a", principal(Some(0.0), None))]);
    assert_eq!(wrong.validate().unwrap_err().field(), "weight");
    wrong
        .principals
        .insert("a".into(), principal(Some(101.0), None));
    assert_eq!(wrong.validate().unwrap_err().field(), "weight");
    let mut placed = profile(1, None, &[]);
    placed.workspace.fairness = Some(Fairness::Tokens);
    let err = placed.validate().unwrap_err();
    assert_eq!(err.field(), "fairness");
    assert!(
        err.to_string().contains("only allowed on provider"),
        "{err}"
    );
    let mut shares = profile(1, None, &[]);
    shares.workspace.min_share = Some(MinShare {
        standard: Some(0.6),
        batch: Some(0.5),
    });
    assert_eq!(shares.validate().unwrap_err().field(), "minShare");
    let parsed: Result<Limits, _> =
        serde_json::from_str(r#"{"concurrency":1,"minShare":{"interactive":0.1}}"#);
    assert!(parsed.is_err(), "the top band has no share");
}

// ----- model-based: token mode against a reference scheduler ----------------------------------

/// The reference: an O(n) scan over per-principal counters, with the same lift, charge,
/// correction and tie rules, written from the specification of the order.
#[derive(Default)]
struct Reference {
    weight_milli: Vec<u64>,
    counter: Vec<u128>,
    key: Vec<Option<(u128, u64)>>,
    fifo: Vec<VecDeque<(u64, u64)>>,
    v: u128,
    seq: u64,
    capacity: usize,
    /// Held: (waiter, principal, charged).
    held: Vec<(u64, usize, u128)>,
    granted: Vec<u64>,
}

impl Reference {
    fn per(&self, p: usize, tokens: u64) -> u128 {
        u128::from(tokens.max(1)) * (K / u128::from(self.weight_milli[p]))
    }

    fn least_waiting(&self) -> Option<usize> {
        (0..self.key.len())
            .filter(|&p| self.key[p].is_some())
            .min_by_key(|&p| self.key[p])
    }

    fn arrive(&mut self, id: u64, p: usize, tokens: u64) {
        self.fifo[p].push_back((id, tokens));
        if self.key[p].is_none() {
            let least = self.least_waiting().map_or(0, |q| self.counter[q]);
            self.counter[p] = self.counter[p].max(self.v).max(least);
            self.seq += 1;
            self.key[p] = Some((self.counter[p], self.seq));
        }
        self.pump();
    }

    fn pump(&mut self) {
        while self.held.len() < self.capacity {
            let Some(p) = self.least_waiting() else {
                return;
            };
            let (id, tokens) = self.fifo[p].pop_front().unwrap();
            self.v = self.v.max(self.counter[p]);
            let charged = self.per(p, tokens);
            self.counter[p] += charged;
            self.key[p] = if self.fifo[p].is_empty() {
                None
            } else {
                self.seq += 1;
                Some((self.counter[p], self.seq))
            };
            self.held.push((id, p, charged));
            self.granted.push(id);
        }
    }

    fn release(&mut self, index: usize, actual: Option<u64>) {
        let (_, p, charged) = self.held.remove(index);
        if let Some(actual) = actual {
            self.counter[p] = (self.counter[p] + self.per(p, actual)).saturating_sub(charged);
            if let Some((_, seq)) = self.key[p] {
                self.key[p] = Some((self.counter[p], seq));
            }
        }
        self.pump();
    }

    fn cancel(&mut self, id: u64) {
        for p in 0..self.fifo.len() {
            if let Some(at) = self.fifo[p].iter().position(|&(w, _)| w == id) {
                self.fifo[p].remove(at);
                if self.fifo[p].is_empty() {
                    self.key[p] = None;
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Arrive {
        principal: usize,
        tokens: u64,
    },
    Release {
        pick: prop::sample::Index,
        actual: Option<u64>,
    },
    Cancel(prop::sample::Index),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0usize..4, prop::sample::select(vec![1u64, 40, 400, 4000]))
            .prop_map(|(principal, tokens)| Op::Arrive { principal, tokens }),
        4 => (any::<prop::sample::Index>(), prop::option::of(0u64..6000))
            .prop_map(|(pick, actual)| Op::Release { pick, actual }),
        1 => any::<prop::sample::Index>().prop_map(Op::Cancel),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The controller grants in exactly the reference scheduler's order, through arrivals,
    /// releases with and without actual usage (refunds and debts), and cancellations.
    #[test]
    fn token_mode_grants_in_the_reference_order(
        capacity in 1u32..=3,
        weights in prop::collection::vec(prop::sample::select(vec![0.5f64, 1.0, 2.0, 3.0]), 4),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let names = ["w", "x", "y", "z"];
        let principals: Vec<(&str, Limits)> = names
            .iter()
            .zip(&weights)
            .map(|(name, &w)| (*name, principal(Some(w), None)))
            .collect();
        let mut controller =
            Controller::new(profile(capacity, Some(Fairness::Tokens), &principals), 0).unwrap();
        let mut reference = Reference {
            weight_milli: weights.iter().map(|w| (w * 1000.0).round() as u64).collect(),
            counter: vec![0; 4],
            key: vec![None; 4],
            fifo: vec![VecDeque::new(); 4],
            capacity: capacity as usize,
            ..Reference::default()
        };
        // Controller waiter/lease ↔ reference ID.
        let mut ids: HashMap<WaiterId, u64> = HashMap::new();
        let mut held: Vec<(LeaseId, u64)> = Vec::new();
        let mut queued: BTreeSet<u64> = BTreeSet::new();
        let mut by_id: HashMap<u64, WaiterId> = HashMap::new();
        let mut granted = Vec::new();
        let mut next = 0u64;
        for op in ops {
            match op {
                Op::Arrive { principal, tokens } => {
                    next += 1;
                    match controller.acquire(request(names[principal], tokens), 0) {
                        Acquired::Admitted(lease) => {
                            held.push((lease.id, next));
                            granted.push(next);
                        }
                        Acquired::Queued { waiter, .. } => {
                            ids.insert(waiter, next);
                            by_id.insert(next, waiter);
                            queued.insert(next);
                        }
                        Acquired::Rejected(r) => prop_assert!(false, "rejected {r:?}"),
                    }
                    reference.arrive(next, principal, tokens);
                }
                Op::Release { pick, actual } => {
                    if held.is_empty() {
                        continue;
                    }
                    let index = pick.index(held.len());
                    let (lease, id) = held.remove(index);
                    let usage = actual.map_or(ActualUsage::none(), |t| ActualUsage::none().tokens(t));
                    controller.release_with_usage(lease, Outcome::Success, usage, 0).unwrap();
                    let at = reference.held.iter().position(|h| h.0 == id).unwrap();
                    reference.release(at, actual);
                }
                Op::Cancel(pick) => {
                    if queued.is_empty() {
                        continue;
                    }
                    let id = *queued.iter().nth(pick.index(queued.len())).unwrap();
                    queued.remove(&id);
                    controller.cancel(by_id[&id], 0).unwrap();
                    reference.cancel(id);
                    while controller.poll_resolution().is_some() {}
                }
            }
            while let Some(resolution) = controller.poll_resolution() {
                let id = ids[&resolution.waiter];
                queued.remove(&id);
                let lease = resolution.outcome.expect("admitted");
                held.push((lease.id, id));
                granted.push(id);
            }
            prop_assert_eq!(&granted, &reference.granted);
        }
    }

    /// Absent `fairness` is requests mode: a profile written with `"fairness": "requests"`
    /// decides exactly like the same profile without the field, and the field's absence leaves
    /// every digest as it was.
    #[test]
    fn absent_fairness_is_requests_mode_and_digests_do_not_move(
        sizes in prop::collection::vec((0usize..3, 1u64..5000), 1..60),
        releases in prop::collection::vec(any::<bool>(), 60),
    ) {
        let principals = [("a", Limits::with_concurrency(4)), ("b", Limits::with_concurrency(4)),
            ("c", Limits::with_concurrency(4))];
        let absent = profile(1, None, &principals);
        let explicit = profile(1, Some(Fairness::Requests), &principals);
        let json = serde_json::to_string(&absent).unwrap();
        prop_assert!(!json.contains("fairness") && !json.contains("weight"));
        let reread: Profile = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(reread.digest().unwrap(), absent.digest().unwrap());
        let run = |profile: Profile| {
            let mut driver = Driver::new(profile);
            for (i, &(p, tokens)) in sizes.iter().enumerate() {
                driver.acquire(["a", "b", "c"][p], tokens);
                if releases[i] && !driver.held.is_empty() {
                    driver.release_oldest(None);
                }
            }
            driver.grants
        };
        prop_assert_eq!(run(absent), run(explicit));
    }
}
