//! Issue 31, item 6: the token-fair scheduling manifest (`load-manifest.v3-tokens.json`) in the
//! qualification suite, with its bars: weighted token shares within 5 % of the weights' (Jain
//! ≥ 0.99) for calls 10× apart and weights 1:1:2, batch ≥ its `minShare` of the grants while
//! the interactive band saturates the lane, and no false deadline refusal in the A/B.
//! Design input: `../shared/design/token-fairness.md` §5, tests (c), (h), (i), (j).

use turnstile_admission::{Fairness, MinShare, Priority};
use turnstile_qualification::arrivals::{generate, ArrivalStream};
use turnstile_qualification::fair_share::FairShareObservations;
use turnstile_qualification::harness::{run, RunOptions};
use turnstile_qualification::manifest::{LoadedManifest, Manifest};
use turnstile_qualification::qualify::qualify_admission_controller;
use turnstile_qualification::record::LoadResultRecord;

const V3_TOKENS_DIGEST: &str =
    "sha256:87ba120526d34e7c99be88e8be8193e7209d1c2a1495cdc001f0067a4ad151fb";

/// The bound of the batch band's share of the contended grants.
const BATCH_BAR: &str = "minimumBatchContendedGrantShare";

fn manifest() -> LoadedManifest {
    LoadedManifest::embedded_v3_tokens().expect("the embedded v3-tokens manifest is pinned")
}

/// The fair-share block of a run of `manifest` with the record's options.
fn fair_share_of(manifest: &Manifest) -> FairShareObservations {
    let window = manifest.duration.window_seconds();
    let arrivals = ArrivalStream::new(manifest, window);
    let options = RunOptions::new(manifest);
    run(manifest, arrivals, window * 1000, options, &mut |_| {})
        .expect("the run")
        .observations
        .fair_share
        .expect("a manifest that shapes the order has the block")
}

fn qualified() -> LoadResultRecord {
    qualify_admission_controller(&manifest(), &mut |_| {}).expect("the run")
}

#[test]
fn cnc_load_001_v3_tokens_manifest_is_pinned_and_shapes_the_order() {
    let loaded = manifest();
    assert_eq!(loaded.digest, V3_TOKENS_DIGEST);
    let m = &loaded.manifest;
    assert_eq!(m.schema, "decision-load-manifest/v3");
    assert!(!m.pass_fail.live_service_required);
    assert!(m.shapes_order());
    let fairness: Vec<Option<Fairness>> = m.providers.values().map(|p| p.fairness).collect();
    assert_eq!(
        fairness,
        [Some(Fairness::Tokens)],
        "one provider lane in token mode"
    );

    // Scheduling weights (limits.weight) 1, 1, 2 in the interactive band; call sizes 10× apart;
    // the load generator's weights (arrival shares) are other numbers.
    let interactive: Vec<(f64, u64)> = m
        .principals
        .iter()
        .filter(|p| p.limits.priority == Some(Priority::Interactive))
        .map(|p| {
            (
                p.limits.weight.unwrap_or(1.0),
                p.actual_tokens_of(p.call_tokens.unwrap_or(0)),
            )
        })
        .collect();
    assert_eq!(interactive, [(1.0, 400), (1.0, 4000), (2.0, 4000)]);
    let arrival_shares: Vec<f64> = m.principals.iter().map(|p| p.weight).collect();
    assert_ne!(
        arrival_shares,
        m.principals
            .iter()
            .map(|p| p.limits.weight.unwrap_or(1.0))
            .collect::<Vec<_>>()
    );
    let batch: Vec<_> = m
        .principals
        .iter()
        .filter(|p| p.limits.priority == Some(Priority::Batch))
        .collect();
    assert_eq!(batch.len(), 1, "one batch principal");
    assert!(
        batch[0].deadline_ms.is_some(),
        "batch calls carry a deadline"
    );

    let first = generate(m, m.duration.window_seconds());
    assert_eq!(
        first,
        generate(m, m.duration.window_seconds()),
        "deterministic"
    );
    for (index, principal) in m.principals.iter().enumerate() {
        assert!(
            first
                .iter()
                .filter(|a| a.principal_index == index)
                .all(|a| Some(a.tokens) == principal.call_tokens),
            "every call of principal {index} has its callTokens"
        );
    }
}

#[test]
fn cnc_load_002_v3_tokens_bars_in_token_mode() {
    let loaded = manifest();
    let record = qualified();
    let o = &record.observations;
    let figures = serde_json::to_string_pretty(&(&o.fair_share, &o.deadline_refusals)).unwrap();
    for comparison in &record.comparisons {
        assert!(comparison.pass, "{comparison:?}\n{figures}");
    }
    assert!(
        record.comparisons.iter().any(|c| c.bound == BATCH_BAR),
        "the batch bar is compared"
    );
    assert!(record.passed, "{figures}");
    assert_eq!(o.shed + o.completed + o.failed + o.cancelled, o.arrivals);
    record.verify(&loaded.digest).unwrap();

    // Batch is served at once when it starts waiting (its starting credit), then once in
    // every 10 contended grants: at least ceil(N * minShare) of N.
    let fair_share = o.fair_share.as_ref().unwrap();
    let batch = fair_share
        .bands
        .iter()
        .find(|b| b.band == Priority::Batch)
        .unwrap();
    let promised = (batch.contended_grants as f64 * batch.min_share).floor() as u64;
    assert!(
        batch.contended_own_grants >= promised,
        "batch got {} of {} contended grants\n{figures}",
        batch.contended_own_grants,
        batch.contended_grants
    );
    let interactive = &fair_share.bands[0];
    assert_eq!(interactive.band, Priority::Interactive);
    // The bars are measured over joint backlog: the interactive load saturates the lane, so
    // nearly every interactive grant counts.
    for p in fair_share
        .principals
        .iter()
        .filter(|p| p.band == Priority::Interactive)
    {
        assert!(
            p.backlogged_grants * 10 >= p.grants * 9,
            "principal {} was jointly backlogged for {} of {} grants\n{figures}",
            p.principal,
            p.backlogged_grants,
            p.grants
        );
    }
    let batch = fair_share
        .bands
        .iter()
        .find(|b| b.band == Priority::Batch)
        .unwrap();
    assert!(
        batch.contended_grants * 10 >= interactive.grants * 9,
        "{figures}"
    );

    // The false-refusal bar is not met by refusing nothing: the batch deadline is predictably
    // unreachable behind the saturating band, and B refuses some.
    let deadline = o.deadline_refusals.as_ref().unwrap();
    assert!(deadline.refused > 0, "{figures}");
    assert_eq!(
        o.shed_reasons
            .get("deadline-unreachable")
            .copied()
            .unwrap_or(0),
        deadline.refused,
        "each refusal ends its arrival: no retry follows an admission refusal"
    );
}

/// The batch bar is the `minShare` at work: with `minShare.batch` 0 the saturating
/// interactive band leaves batch (next to) nothing, below the manifest's 0.1.
#[test]
fn v3_tokens_batch_bar_fails_without_its_min_share() {
    let mut m = manifest().manifest;
    let shares = m.workspace.min_share.get_or_insert_with(MinShare::default);
    shares.batch = Some(0.0);
    let fair_share = fair_share_of(&m);
    let share = fair_share
        .contended_grant_share(Priority::Batch)
        .unwrap_or(0.0);
    assert!(
        share < 0.05,
        "batch's contended share {share} without a minShare"
    );
}

#[test]
fn v3_tokens_record_is_deterministic_and_digest_bound() {
    let loaded = manifest();
    let first = qualified();
    let second = qualified();
    assert_eq!(
        first.observations, second.observations,
        "same seed, same figures"
    );
    first.verify(&loaded.digest).unwrap();

    let mut tampered = first.clone();
    if let Some(fair_share) = tampered.observations.fair_share.as_mut() {
        fair_share.bands[0].jain_index = Some(1.0);
        fair_share.principals[0].backlogged_tokens += 1;
    }
    assert!(tampered.verify(&loaded.digest).is_err());
    let mut tampered = first.clone();
    if let Some(deadline) = tampered.observations.deadline_refusals.as_mut() {
        deadline.false_refusals += 1;
    }
    assert!(tampered.verify(&loaded.digest).is_err());
}

/// The weighted-token bars fail when the same load is scheduled in requests mode: one grant
/// per principal per round gives the 4,000-token principals ten times the light one's tokens.
#[test]
fn v3_tokens_share_bars_fail_in_requests_mode() {
    let mut m = manifest().manifest;
    for provider in m.providers.values_mut() {
        provider.fairness = Some(Fairness::Requests);
    }
    let fair_share = fair_share_of(&m);
    let jain = fair_share.minimum_jain_index().unwrap();
    let error = fair_share.maximum_weighted_share_error().unwrap();
    assert!(jain < 0.9, "Jain {jain} in requests mode");
    assert!(error > 0.5, "share error {error} in requests mode");
}

/// The HTML report shows the new figures for v3-tokens, by principal position and band, and
/// no principal ID; v2's report has no such section.
#[test]
fn v3_tokens_report_shows_the_fair_share_and_deadline_figures_without_ids() {
    use turnstile_qualification::qualify::qualify_admission_controller_with_report;
    let loaded = manifest();
    let (record, html) = qualify_admission_controller_with_report(&loaded, &mut |_| {}).unwrap();
    assert_eq!(
        record.observations,
        qualified().observations,
        "the same run"
    );
    assert!(html.contains("<h2>Token-fair scheduling</h2>"));
    assert!(html.contains(r#"<tr data-band="interactive">"#));
    assert!(html.contains(r#"<tr data-band="batch">"#));
    assert_eq!(html.matches("<tr data-principal=").count(), 4);
    let false_refusals = record
        .observations
        .deadline_refusals
        .as_ref()
        .unwrap()
        .false_refusals;
    assert!(html.contains(&format!(
        r#"<dd class="false-refusals">{false_refusals}</dd>"#
    )));
    for principal in &loaded.manifest.principals {
        assert!(
            !html.contains(&principal.id),
            "the report names {}",
            principal.id
        );
    }
    assert!(!html.contains("load-harness"), "nor the workspace");

    let v2 = LoadedManifest::embedded_v2().unwrap();
    let (_, html) = qualify_admission_controller_with_report(&v2, &mut |_| {}).unwrap();
    assert!(!html.contains("Token-fair scheduling"));
    assert!(!html.contains("Deadline refusals (A/B)"));
}
