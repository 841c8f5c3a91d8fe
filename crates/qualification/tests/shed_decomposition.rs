//! The 388-against-381 shed decomposition of `docs/qualification.md`, run as a test: the
//! model of the reference's rules reproduces the reference's retained record exactly, the
//! ring round robin is the one step that moves the total (381 → 388), the other rule switches
//! move no count, and with every switch on the model matches turnstile's harness per request.
//! (`examples/shed_decomposition` prints the same rows, and lists the arrivals that change.)

#[allow(dead_code)]
#[path = "../examples/shed_decomposition/model.rs"]
mod model;

use std::collections::BTreeMap;

use model::{admission_ratio, count, decompose, End, Outcome, Row};
use turnstile_qualification::arrivals::{generate, Arrival};
use turnstile_qualification::manifest::{LoadedManifest, PrincipalClass};

/// (shed queue-full, shed queue-timeout, other shed, completed, cancelled, quiet, noisy).
#[derive(Debug, PartialEq)]
struct Counts {
    queue_full: usize,
    queue_timeout: usize,
    other_shed: usize,
    completed: usize,
    cancelled: usize,
    quiet: String,
    noisy: String,
}

fn counts(arrivals: &[Arrival], outcomes: &BTreeMap<u64, Outcome>) -> Counts {
    let ratio = |class| format!("{:.6}", admission_ratio(arrivals, outcomes, class));
    Counts {
        queue_full: count(outcomes, End::QueueFull),
        queue_timeout: count(outcomes, End::QueueTimeout),
        other_shed: count(outcomes, End::OtherShed),
        completed: count(outcomes, End::Completed),
        cancelled: count(outcomes, End::Cancelled),
        quiet: ratio(PrincipalClass::Quiet),
        noisy: ratio(PrincipalClass::Noisy),
    }
}

fn expected(
    (queue_full, queue_timeout): (usize, usize),
    completed: usize,
    cancelled: usize,
    quiet: &str,
    noisy: &str,
) -> Counts {
    Counts {
        queue_full,
        queue_timeout,
        other_shed: 0,
        completed,
        cancelled,
        quiet: quiet.into(),
        noisy: noisy.into(),
    }
}

fn changed(before: &Row, after: &Row) -> usize {
    after
        .outcomes
        .iter()
        .filter(|(ordinal, o)| before.outcomes.get(ordinal) != Some(o))
        .count()
}

#[test]
fn cnc_load_shed_388_against_the_references_381_decomposed() {
    let loaded = LoadedManifest::embedded_v2().unwrap();
    let manifest = &loaded.manifest;
    let window = manifest.duration.window_seconds();
    let arrivals = generate(manifest, window);
    assert_eq!(arrivals.len(), 20_103);
    let rows = decompose(manifest, &arrivals, window).unwrap();
    assert_eq!(rows.len(), 7);
    for row in &rows {
        assert_eq!(
            row.outcomes.len(),
            arrivals.len(),
            "{}: every arrival",
            row.name
        );
    }

    // The reference's retained record (its admission-controller.json), reproduced exactly.
    let reference = counts(&arrivals, &rows[0].outcomes);
    assert_eq!(
        reference,
        expected((152, 229), 19_541, 181, "0.991454", "0.970525")
    );
    assert_eq!(reference.queue_full + reference.queue_timeout, 381);

    // The ring round robin: 388, 280 arrivals change outcome.
    let ring = counts(&arrivals, &rows[1].outcomes);
    assert_eq!((ring.queue_full, ring.queue_timeout), (155, 233));
    assert_eq!(
        (ring.quiet.as_str(), ring.noisy.as_str()),
        ("0.996230", "0.966903")
    );
    assert_eq!(changed(&rows[0], &rows[1]), 280);

    // Exact expiry, exact wakes, an aborted call without outcome: no arrival changes.
    for step in 2..=4 {
        assert_eq!(
            changed(&rows[step - 1], &rows[step]),
            0,
            "{}",
            rows[step].name
        );
    }
    // Arrivals before call ends at one instant: 29 outcomes move, the total does not.
    assert_eq!(changed(&rows[4], &rows[5]), 29);
    let all_rules = counts(&arrivals, &rows[5].outcomes);
    let ours_expected = expected((154, 234), 19_535, 180, "0.996355", "0.966820");
    assert_eq!(all_rules, ours_expected);

    // Turnstile's harness and controller: the same outcome for every single arrival.
    assert_eq!(rows[6].name, "turnstile harness + controller");
    assert_eq!(changed(&rows[5], &rows[6]), 0);
    assert_eq!(counts(&arrivals, &rows[6].outcomes), ours_expected);
}
