//! Rollouts (issue 33; the runbook RUN-JEV-ADMISSION-v1, steps 3 "shadow" and 4 "canary") on
//! virtual time: a shadow candidate counts exactly what its tighter limits would have done and
//! changes no real answer; a canary slice is stable and both slices count each other's load;
//! promote and abort; the bounded history.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use turnstile_admission::{
    Acquired, AdmissionRequest, Comparison, Estimate, Limits, Outcome, Profile, ProfileChangeKind,
    Registry, RegistryError, RolloutError, RolloutMode, RolloutOutcome, TokenBucket, MINUTE_MS,
    ROLLOUT_HISTORY_LIMIT,
};

const WS: &str = "ws";
const PROVIDER: &str = "jev";

fn limits(concurrency: u32) -> Limits {
    Limits {
        concurrency,
        max_queue_length: Some(10_000),
        max_queue_wait_ms: Some(60_000),
        ..Limits::default()
    }
}

fn principals(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("p{i}")).collect()
}

/// A profile with `workspace` limits, provider `jev` at concurrency 1000 and each principal at
/// concurrency 1000 (so the workspace scope is what binds).
fn profile(workspace: Limits, principals: &[String]) -> Profile {
    let mut profile = Profile {
        workspace,
        ..Profile::default()
    };
    profile.providers.insert(PROVIDER.into(), limits(1000));
    for p in principals {
        profile.principals.insert(p.clone(), limits(1000));
    }
    profile
}

fn registry(workspace: Limits, principals: &[String]) -> Registry {
    let mut registry = Registry::new();
    registry
        .register(WS, "v1", profile(workspace, principals), 0)
        .expect("v1");
    registry
}

fn request(principal: &str, budget: &str, now: u64) -> AdmissionRequest {
    AdmissionRequest::new(principal, PROVIDER, budget)
        .with_estimate(Estimate::new().tokens(10))
        .with_deadline(now + 30_000)
}

/// A small deterministic generator (no dependency on a crate's RNG stream).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}

/// Everything the host saw: each arrival's answer, each resolution, each release's answer.
#[derive(Debug, Default, PartialEq)]
struct Transcript(Vec<String>);

/// The model a test checks the candidate against: given the real state just before an
/// arrival, what the candidate would decide (`None`: admit; `Some(reason)`: differ).
type Expect<'a> = dyn FnMut(&Registry, &AdmissionRequest, u64) -> Option<&'static str> + 'a;

/// Runs one seeded workload of arrivals, releases and time passing. Before each arrival,
/// `expect` is asked what the candidate should decide; returns the transcript and how many
/// arrivals the model says differ, by reason.
fn run(
    registry: &mut Registry,
    seed: u64,
    steps: usize,
    names: &[String],
    budgets: u64,
    mut on_step: impl FnMut(&mut Registry, usize, u64),
    expect: &mut Expect<'_>,
) -> (Transcript, BTreeMap<String, u64>) {
    let mut rng = Lcg(seed);
    let mut now = 0;
    let mut held = Vec::new();
    let mut transcript = Transcript::default();
    let mut differ = BTreeMap::new();
    for step in 0..steps {
        on_step(registry, step, now);
        now += rng.next(400);
        for due in registry.handle_due(now) {
            while let Some(r) = registry.poll_resolution(&due) {
                if let Ok(lease) = &r.outcome {
                    held.push(lease.id);
                }
                transcript.0.push(format!("resolved {r:?}"));
            }
        }
        if held.len() as u64 <= rng.next(10) {
            let name = &names[rng.next(names.len() as u64) as usize];
            let budget = format!("b{}", rng.next(budgets));
            let request = request(name, &budget, now);
            if let Some(reason) = expect(registry, &request, now) {
                *differ.entry(reason.to_owned()).or_insert(0) += 1;
            }
            let acquired = registry.acquire(WS, request, now).expect("workspace");
            if let Acquired::Admitted(lease) = &acquired {
                held.push(lease.id);
            }
            transcript.0.push(format!("{now} acquire {acquired:?}"));
        } else {
            let lease = held.swap_remove(rng.next(held.len() as u64) as usize);
            let released = registry.release(WS, lease, Outcome::Success, now);
            transcript.0.push(format!("{now} release {released:?}"));
        }
        while let Some(r) = registry.poll_resolution(WS) {
            if let Ok(lease) = &r.outcome {
                held.push(lease.id);
            }
            transcript.0.push(format!("resolved {r:?}"));
        }
    }
    (transcript, differ)
}

fn no_expectation() -> impl FnMut(&Registry, &AdmissionRequest, u64) -> Option<&'static str> {
    |_: &Registry, _: &AdmissionRequest, _| None
}

fn canary(registry: &mut Registry, candidate: Profile, share: f64) {
    registry
        .start_rollout(WS, "v2", candidate, RolloutMode::Canary { share }, 0)
        .expect("started");
}

fn shadow(registry: &mut Registry, candidate: Profile) {
    registry
        .start_rollout(WS, "v2", candidate, RolloutMode::Shadow, 0)
        .expect("started");
}

/// Runs a seeded workload twice, without a rollout and with a shadow of `candidate`; asserts
/// that no real answer changed and returns the comparison and the model's differing arrivals.
fn shadow_against_baseline(
    active: Limits,
    candidate: Profile,
    names: &[String],
    (seed, steps, budgets): (u64, usize, u64),
    expect: &mut Expect<'_>,
) -> (Comparison, BTreeMap<String, u64>) {
    let (baseline, _) = run(
        &mut registry(active.clone(), names),
        seed,
        steps,
        names,
        budgets,
        |_, _, _| {},
        &mut no_expectation(),
    );
    let mut with_shadow = registry(active, names);
    shadow(&mut with_shadow, candidate);
    let (transcript, differ) = run(
        &mut with_shadow,
        seed,
        steps,
        names,
        budgets,
        |_, _, _| {},
        expect,
    );
    assert_eq!(transcript, baseline, "the shadow changed a real answer");
    let decisions = with_shadow.rollout(WS).expect("running").decisions;
    assert_eq!(decisions.agree + decisions.differ, decisions.compared);
    assert!(decisions.compared > 1_000, "{decisions:?}");
    (decisions, differ)
}

#[test]
fn run_jev_admission_step3_a_shadow_with_a_tighter_concurrency_counts_exactly_and_changes_nothing()
{
    let names = principals(20);
    // The tighter limit queues exactly the arrivals the active admitted while 4 to 7 leases
    // were really held (at 8 the active queues too); below 4 it admits, as the active does.
    let (decisions, differ) = shadow_against_baseline(
        limits(8),
        profile(limits(4), &names),
        &names,
        (7, 4_000, 50),
        &mut |registry: &Registry, _: &AdmissionRequest, _| {
            let real = registry.totals(WS).expect("ws");
            (real.active >= 4 && real.active < 8 && real.queued == 0).then_some("concurrency")
        },
    );
    let expected = differ.get("concurrency").copied().unwrap_or(0);
    assert!(expected > 100, "the workload must reach the tighter limit");
    assert_eq!(decisions.differ, expected, "{decisions:?}");
    assert_eq!(decisions.by_reason.get("concurrency"), Some(&expected));
    assert_eq!(decisions.candidate_only.queue, expected);
}

#[test]
fn run_jev_admission_step3_a_shadow_with_a_tighter_rate_counts_exactly_and_changes_nothing() {
    let names = principals(5);
    let mut tighter = limits(1000);
    tighter.requests_per_minute = Some(90);
    // The reference: a bucket of 90 a minute that takes every real grant, even when empty.
    let mut bucket = TokenBucket::full_with_capacity(90, 90, MINUTE_MS, 0);
    let (decisions, differ) = shadow_against_baseline(
        limits(1000),
        profile(tighter, &names),
        &names,
        (11, 3_000, 20),
        &mut |_: &Registry, _: &AdmissionRequest, now| {
            bucket.refill(now);
            let would_admit = bucket.has(1);
            bucket.take(1); // the active admits every arrival here
            (!would_admit).then_some("requests-per-minute")
        },
    );
    let expected = differ.get("requests-per-minute").copied().unwrap_or(0);
    assert!(expected > 100, "the workload must exceed the tighter rate");
    assert_eq!(decisions.differ, expected, "{decisions:?}");
    assert_eq!(decisions.candidate_only.queue, expected);
}

#[test]
fn run_jev_admission_step3_a_shadow_with_a_tighter_budget_counts_exactly_and_changes_nothing() {
    let names = principals(5);
    let mut tighter = limits(1000);
    tighter.max_attempts = Some(3);
    // Every arrival is admitted for real, so an invocation's attempts are its arrivals.
    let mut attempts = HashMap::<String, u64>::new();
    let (decisions, differ) = shadow_against_baseline(
        limits(1000),
        profile(tighter, &names),
        &names,
        (13, 2_000, 40),
        &mut |_: &Registry, request: &AdmissionRequest, _| {
            let spent = attempts.entry(request.budget_id.clone()).or_insert(0);
            *spent += 1;
            (*spent > 3).then_some("attempts")
        },
    );
    let expected = differ.get("attempts").copied().unwrap_or(0);
    assert!(expected > 100);
    assert_eq!(decisions.differ, expected, "{decisions:?}");
    assert_eq!(decisions.by_reason.get("attempts"), Some(&expected));
    assert_eq!(decisions.candidate_only.refuse, expected);
}

#[test]
fn an_identical_candidate_agrees_on_every_arrival() {
    let names = principals(10);
    let mut with_shadow = registry(limits(6), &names);
    shadow(&mut with_shadow, profile(limits(6), &names));
    run(
        &mut with_shadow,
        5,
        3_000,
        &names,
        30,
        |_, _, _| {},
        &mut no_expectation(),
    );
    let decisions = with_shadow.rollout(WS).expect("running").decisions;
    assert!(decisions.compared > 1_000);
    assert_eq!(decisions.differ, 0, "{decisions:?}");
}

#[test]
fn a_shadow_started_mid_run_takes_the_leases_already_held() {
    let names = principals(4);
    let mut registry = registry(limits(10), &names);
    let mut leases = Vec::new();
    for name in &names[..3] {
        let acquired = registry.acquire(WS, request(name, "b", 0), 0).unwrap();
        let Acquired::Admitted(lease) = acquired else {
            panic!("{acquired:?}")
        };
        leases.push(lease.id);
    }
    shadow(&mut registry, profile(limits(3), &names));
    registry.acquire(WS, request(&names[3], "b", 1), 1).unwrap();
    let decisions = registry.rollout(WS).unwrap().decisions;
    assert_eq!(
        (decisions.compared, decisions.differ),
        (1, 1),
        "{decisions:?}"
    );
    // Releasing a lease granted before the start frees the candidate's twin too.
    registry
        .release(WS, leases[0], Outcome::Success, 2)
        .unwrap();
    registry
        .release(WS, leases[1], Outcome::Success, 2)
        .unwrap();
    registry.acquire(WS, request(&names[0], "b", 3), 3).unwrap();
    let decisions = registry.rollout(WS).unwrap().decisions;
    assert_eq!(
        (decisions.compared, decisions.agree),
        (2, 1),
        "{decisions:?}"
    );
}

fn canary_slice(registry: &mut Registry, names: &[String], now: u64) -> BTreeSet<String> {
    let mut slice = BTreeSet::new();
    for name in names {
        let acquired = registry.acquire(WS, request(name, "b", now), now).unwrap();
        let Acquired::Admitted(lease) = acquired else {
            panic!("{acquired:?}")
        };
        if registry.revision_of(WS, &lease.evidence) == Some("v2") {
            slice.insert(name.clone());
        }
        registry
            .release(WS, lease.id, Outcome::Success, now)
            .unwrap();
    }
    slice
}

#[test]
fn run_jev_admission_step4_a_canary_of_half_puts_half_the_principals_under_the_candidate_stably() {
    let names = principals(1_000);
    let mut registry = registry(limits(1000), &names);
    canary(&mut registry, profile(limits(999), &names), 0.5);
    let first = canary_slice(&mut registry, &names, 1);
    assert!((450..=550).contains(&first.len()), "{}", first.len());
    assert_eq!(
        canary_slice(&mut registry, &names, 2),
        first,
        "stable across calls"
    );
    // Every principal was compared; nobody's evidence outside the slice names a revision.
    assert_eq!(registry.rollout(WS).unwrap().decisions.compared, 2_000);
    let snapshot = registry.totals(WS).unwrap();
    assert_eq!((snapshot.active, snapshot.queued), (0, 0));
}

#[test]
fn run_jev_admission_step4_both_slices_count_the_load_the_other_admitted() {
    let names = principals(200);
    let mut registry = registry(limits(4), &names);
    canary(&mut registry, profile(limits(4), &names), 0.5);
    let slice = canary_slice(&mut registry, &names, 0);
    let canary: Vec<&String> = names.iter().filter(|n| slice.contains(*n)).collect();
    let stable: Vec<&String> = names.iter().filter(|n| !slice.contains(*n)).collect();
    // Two leases on each side fill the shared limit of 4 on both sides.
    let mut leases = Vec::new();
    for name in [canary[0], stable[0], canary[1], stable[1]] {
        match registry.acquire(WS, request(name, "b", 1), 1).unwrap() {
            Acquired::Admitted(lease) => leases.push(lease),
            other => panic!("{other:?}"),
        }
    }
    let Acquired::Queued {
        waiter: canary_waiter,
        evidence,
    } = registry.acquire(WS, request(canary[2], "b", 1), 1).unwrap()
    else {
        panic!("the candidate must count the active's grants")
    };
    assert!(evidence.candidate);
    assert_eq!(registry.revision_of(WS, &evidence), Some("v2"));
    let Acquired::Queued {
        waiter: stable_waiter,
        evidence,
    } = registry.acquire(WS, request(stable[2], "b", 1), 1).unwrap()
    else {
        panic!("the active must count the candidate's grants")
    };
    assert!(!evidence.candidate);
    assert_eq!(registry.revision_of(WS, &evidence), Some("v1"));
    assert_ne!(canary_waiter, stable_waiter);
    // A stable-slice release frees one permit on both sides: exactly one waiter is admitted
    // (the active's, deciding first), and the other side counts it at once.
    registry
        .release(WS, leases[1].id, Outcome::Success, 2)
        .unwrap();
    let resolved: Vec<_> = std::iter::from_fn(|| registry.poll_resolution(WS)).collect();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0].waiter, stable_waiter);
    assert_eq!(registry.totals(WS).unwrap().active, 4);
    // A canary release reaches the candidate's waiter.
    registry
        .release(WS, leases[0].id, Outcome::Success, 3)
        .unwrap();
    let resolved: Vec<_> = std::iter::from_fn(|| registry.poll_resolution(WS)).collect();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0].waiter, canary_waiter);
    let lease = resolved[0].outcome.as_ref().expect("admitted");
    assert_eq!(registry.revision_of(WS, &lease.evidence), Some("v2"));
    assert_eq!(registry.totals(WS).unwrap().active, 4);
}

#[test]
fn promote_makes_the_candidate_decide_and_emits_the_change_record() {
    let names = principals(3);
    let mut registry = registry(limits(5), &names);
    registry
        .start_rollout(
            WS,
            "v2",
            profile(limits(1), &names),
            RolloutMode::Shadow,
            10,
        )
        .unwrap();
    assert_eq!(registry.current_profile_version(WS), Some("v1"));
    let (finished, change) = registry.promote_rollout(WS, 20).unwrap();
    assert_eq!(finished.outcome, RolloutOutcome::Promoted);
    assert_eq!(
        (finished.started_at_epoch_ms, finished.ended_at_epoch_ms),
        (10, 20)
    );
    let change = change.expect("a change of current revision");
    assert_eq!(change.kind, ProfileChangeKind::Change);
    assert_eq!(change.previous_profile_version.as_deref(), Some("v1"));
    assert_eq!(change.profile_version, "v2");
    assert_eq!(
        Some(change.digest.as_str()),
        registry.revision_digest(WS, "v2")
    );
    assert_eq!(registry.profile_history(WS).last(), Some(&change));
    assert_eq!(registry.current_profile_version(WS), Some("v2"));
    assert!(registry.rollout(WS).is_none());
    assert_eq!(registry.rollouts(WS), vec![finished]);
    // The candidate's concurrency of 1 now binds.
    assert!(matches!(
        registry.acquire(WS, request("p0", "b", 30), 30).unwrap(),
        Acquired::Admitted(_)
    ));
    assert!(matches!(
        registry.acquire(WS, request("p1", "b", 30), 30).unwrap(),
        Acquired::Queued { .. }
    ));
}

#[test]
fn abort_leaves_the_active_untouched() {
    let names = principals(10);
    let (baseline, _) = run(
        &mut registry(limits(5), &names),
        3,
        2_000,
        &names,
        10,
        |_, _, _| {},
        &mut no_expectation(),
    );
    let canary = |registry: &mut Registry, step: usize, now: u64| match step {
        500 => {
            registry
                .start_rollout(
                    WS,
                    "v2",
                    profile(limits(2), &principals(10)),
                    RolloutMode::Canary { share: 0.0 },
                    now,
                )
                .unwrap();
        }
        1_500 => {
            let finished = registry.abort_rollout(WS, now).unwrap();
            assert_eq!(finished.outcome, RolloutOutcome::Aborted);
            assert!(finished.decisions.compared > 100);
        }
        _ => {}
    };
    let mut aborted = registry(limits(5), &names);
    let (transcript, _) = run(
        &mut aborted,
        3,
        2_000,
        &names,
        10,
        canary,
        &mut no_expectation(),
    );
    assert_eq!(transcript, baseline);
    assert_eq!(aborted.current_profile_version(WS), Some("v1"));
    assert_eq!(aborted.rollouts(WS).len(), 1);
    assert!(aborted.rollout(WS).is_none());
    // The aborted candidate stays kept (immutable): its name cannot carry other limits.
    assert!(matches!(
        aborted.register(WS, "v2", profile(limits(3), &names), 9_999_999),
        Err(RegistryError::Conflict { .. })
    ));
}

#[test]
fn a_finished_canary_serves_its_remaining_waiters_then_leaves() {
    let names = principals(2);
    let mut registry = registry(limits(1), &names);
    canary(&mut registry, profile(limits(1), &names), 1.0);
    let Acquired::Admitted(lease) = registry.acquire(WS, request("p0", "b", 1), 1).unwrap() else {
        panic!()
    };
    let Acquired::Queued { waiter, .. } = registry.acquire(WS, request("p1", "b", 1), 1).unwrap()
    else {
        panic!()
    };
    registry.abort_rollout(WS, 2).unwrap();
    // The slice's waiter and lease are still served; a new rollout waits for them.
    assert_eq!(
        registry.start_rollout(WS, "v3", profile(limits(1), &names), RolloutMode::Shadow, 3),
        Err(RolloutError::Draining)
    );
    let Acquired::Queued { .. } = registry.acquire(WS, request("p0", "b", 3), 3).unwrap() else {
        panic!("the active counts the slice's lease")
    };
    registry.release(WS, lease.id, Outcome::Success, 4).unwrap();
    let first = registry.poll_resolution(WS).expect("one admitted");
    assert_eq!(first.waiter, waiter);
    let lease = first.outcome.expect("admitted");
    registry.release(WS, lease.id, Outcome::Success, 5).unwrap();
    let second = registry.poll_resolution(WS).expect("the active's waiter");
    assert!(!second.outcome.unwrap().evidence.candidate);
    registry
        .start_rollout(WS, "v3", profile(limits(1), &names), RolloutMode::Shadow, 6)
        .expect("drained");
}

#[test]
fn one_rollout_at_a_time_and_no_registration_while_it_runs() {
    let names = principals(2);
    let mut registry = registry(limits(2), &names);
    let candidate = || profile(limits(1), &names);
    assert_eq!(
        registry.start_rollout("other", "v2", candidate(), RolloutMode::Shadow, 0),
        Err(RolloutError::UnknownWorkspace)
    );
    assert_eq!(
        registry.start_rollout(WS, "v1", candidate(), RolloutMode::Shadow, 0),
        Err(RolloutError::CandidateIsCurrent {
            revision: "v1".into()
        })
    );
    for share in [-0.1, 1.5, f64::NAN] {
        assert_eq!(
            registry.start_rollout(WS, "v2", candidate(), RolloutMode::Canary { share }, 0),
            Err(RolloutError::InvalidShare)
        );
    }
    assert_eq!(registry.abort_rollout(WS, 0), Err(RolloutError::NoRollout));
    assert!(registry.promote_rollout(WS, 0).is_err());
    registry
        .start_rollout(WS, "v2", candidate(), RolloutMode::Shadow, 0)
        .unwrap();
    assert_eq!(
        registry.start_rollout(WS, "v3", candidate(), RolloutMode::Shadow, 0),
        Err(RolloutError::AlreadyRunning)
    );
    assert_eq!(
        registry.register(WS, "v3", candidate(), 1),
        Err(RegistryError::RolloutRunning)
    );
    assert_eq!(
        registry.register(WS, "v1", profile(limits(2), &names), 1),
        Err(RegistryError::RolloutRunning)
    );
    registry.abort_rollout(WS, 2).unwrap();
    // A revision name already kept with other limits is refused as a registration would be.
    assert!(matches!(
        registry.start_rollout(WS, "v2", profile(limits(7), &names), RolloutMode::Shadow, 3),
        Err(RolloutError::Registry(RegistryError::Conflict { .. }))
    ));
    registry.register(WS, "v3", candidate(), 4).unwrap();
}

#[test]
fn the_history_keeps_the_last_rollouts() {
    let names = principals(1);
    let mut registry = registry(limits(2), &names);
    for i in 0..ROLLOUT_HISTORY_LIMIT + 6 {
        let revision = format!("c{i}");
        registry
            .start_rollout(
                WS,
                &revision,
                profile(limits(1), &names),
                RolloutMode::Shadow,
                i as u64,
            )
            .unwrap();
        registry.abort_rollout(WS, i as u64).unwrap();
    }
    let history = registry.rollouts(WS);
    assert_eq!(history.len(), ROLLOUT_HISTORY_LIMIT);
    assert_eq!(history[0].revision, "c6");
    assert_eq!(
        history.last().map(|r| r.revision.as_str()),
        Some(format!("c{}", ROLLOUT_HISTORY_LIMIT + 5).as_str())
    );
}

#[test]
fn run_jev_admission_step4_a_principal_only_the_candidate_names_stays_with_the_active() {
    let names = principals(2);
    let mut registry = registry(limits(4), &names);
    let mut candidate = profile(limits(4), &names);
    candidate.principals.insert("newcomer".into(), limits(4));
    registry
        .start_rollout(WS, "v2", candidate, RolloutMode::Canary { share: 1.0 }, 0)
        .unwrap();
    // The active could not count its grant, so the candidate does not decide it.
    let Acquired::Rejected(rejection) = registry
        .acquire(WS, request("newcomer", "b", 1), 1)
        .unwrap()
    else {
        panic!("v1 does not name the newcomer")
    };
    assert!(!rejection.evidence.candidate);
    let decisions = registry.rollout(WS).unwrap().decisions;
    assert_eq!((decisions.compared, decisions.candidate_only.admit), (1, 1));
    // After a promote the newcomer is admitted.
    registry.promote_rollout(WS, 2).unwrap();
    assert!(matches!(
        registry
            .acquire(WS, request("newcomer", "b", 3), 3)
            .unwrap(),
        Acquired::Admitted(_)
    ));
}

#[test]
fn run_jev_admission_step4_a_limit_shared_by_both_slices_is_never_exceeded() {
    let names = principals(30);
    let mut registry = registry(limits(4), &names);
    canary(&mut registry, profile(limits(4), &names), 0.5);
    let mut rng = Lcg(17);
    let (mut now, mut held, mut by_candidate) = (0, Vec::new(), 0);
    for _ in 0..5_000 {
        now += rng.next(300);
        let mut resolved = Vec::new();
        for due in registry.handle_due(now) {
            resolved.extend(std::iter::from_fn(|| registry.poll_resolution(&due)));
        }
        if held.len() as u64 <= rng.next(8) {
            let name = &names[rng.next(30) as usize];
            if let Acquired::Admitted(lease) =
                registry.acquire(WS, request(name, "b", now), now).unwrap()
            {
                by_candidate += u64::from(lease.evidence.candidate);
                held.push(lease.id);
            }
        } else {
            let lease = held.swap_remove(rng.next(held.len() as u64) as usize);
            registry.release(WS, lease, Outcome::Success, now).unwrap();
        }
        resolved.extend(std::iter::from_fn(|| registry.poll_resolution(WS)));
        for resolution in resolved {
            if let Ok(lease) = resolution.outcome {
                by_candidate += u64::from(lease.evidence.candidate);
                held.push(lease.id);
            }
        }
        assert!(
            held.len() <= 4,
            "{} leases held under a shared limit of 4",
            held.len()
        );
        assert_eq!(registry.totals(WS).unwrap().active, held.len() as u64);
    }
    assert!(by_candidate > 500, "{by_candidate}");
}
