//! Why the admission-controller target sheds 388 where the reference's retained record sheds 381
//! on the same 20,103 arrivals: a per-request decomposition.
//!
//! `cargo run --release -p turnstile-qualification --example shed_decomposition [-- --list]`
//!
//! With `-- --rules expire,wakes,arrivals-first,abort,ring` (any subset) it runs only the model
//! with those of turnstile's rules, for trying other combinations.
//!
//! It runs, on manifest v2's arrivals:
//!
//! 1. a **model of the reference's rules** (REFERENCE §4 and §7 as the reference implements them,
//!    written here independently for the features manifest v2 uses: concurrency, share caps,
//!    reservations, request and token buckets with the token-holder rule, queue bounds, dwell,
//!    deadlines, the breaker, cancellation), with the reference's host behaviour: only lane
//!    heads expire, and only when the pump runs; the pump re-runs on a single timer at the
//!    reference's retry hints (9 ms after a concurrency deferral, 88 ms after a bucket
//!    deferral) or a head's expiry; events at one instant run timers first (call ends,
//!    retries, cancellations, pump timers, by creation order) and arrivals last; a call aborted
//!    by a cancellation is released as a failure;
//! 2. the same model with turnstile's rules switched in **one at a time**, cumulatively (the
//!    order matters: the steps do not commute);
//! 3. turnstile's own harness and controller (`run_admission_controller_traced`).
//!
//! Between consecutive rows it prints how many arrivals changed outcome (and, with `--list`,
//! which: ordinal, arrival time, principal class, provider, tokens, before → after). Principal
//! IDs are never printed, only the class.

mod model;

use std::collections::{BTreeMap, HashMap};

use model::{decompose, summary, End, Model, Rules};
use turnstile_qualification::arrivals::{generate, Arrival};
use turnstile_qualification::manifest::LoadedManifest;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let list = std::env::args().any(|a| a == "--list");
    let loaded = LoadedManifest::embedded_v2()?;
    let manifest = &loaded.manifest;
    let window = manifest.duration.window_seconds();
    let arrivals = generate(manifest, window);

    if let Some(names) = std::env::args().skip_while(|a| a != "--rules").nth(1) {
        let mut rules = Rules::default();
        for name in names.split(',') {
            match name {
                "expire" => rules.expire_every_waiter = true,
                "wakes" => rules.exact_wakes = true,
                "arrivals-first" => rules.arrivals_first = true,
                "abort" => rules.abort_is_no_outcome = true,
                "ring" => rules.ring_round_robin = true,
                other => return Err(format!("unknown rule {other}").into()),
            }
        }
        let (outcomes, max_wait) = Model::new(manifest, rules).run_with_wait(&arrivals);
        println!(
            "{names:<44} {}  longest admitted wait {max_wait} ms",
            summary(&arrivals, &outcomes)
        );
        return Ok(());
    }
    let rows = decompose(manifest, &arrivals, window)?;

    println!("manifest {} ({} arrivals)", loaded.digest, arrivals.len());
    println!("reference retained record: shed 381 (queue-full 152, queue-timeout 229)  completed 19541  cancelled 181  quiet 0.991454  noisy 0.970525");
    let by_ordinal: HashMap<u64, &Arrival> = arrivals.iter().map(|a| (a.ordinal, a)).collect();
    for (index, row) in rows.iter().enumerate() {
        println!("{:<44} {}", row.name, summary(&arrivals, &row.outcomes));
        if index == 0 {
            continue;
        }
        let before = &rows[index - 1].outcomes;
        let changed: Vec<u64> = row
            .outcomes
            .iter()
            .filter(|(ordinal, o)| before.get(ordinal) != Some(o))
            .map(|(ordinal, _)| *ordinal)
            .collect();
        let mut transitions: BTreeMap<(End, End), usize> = BTreeMap::new();
        for ordinal in &changed {
            let from = before.get(ordinal).map_or(End::OtherShed, |o| o.end);
            *transitions
                .entry((from, row.outcomes[ordinal].end))
                .or_default() += 1;
        }
        println!(
            "    {} arrivals changed outcome: {transitions:?}",
            changed.len()
        );
        if list {
            for ordinal in changed {
                let a = by_ordinal[&ordinal];
                println!(
                    "      #{ordinal:<6} at {:>7} ms  {:?} {:<13} tokens {:>5}  {:?} -> {:?}",
                    a.at_ms,
                    a.principal_class,
                    a.provider_id,
                    a.tokens,
                    before.get(&ordinal),
                    row.outcomes[&ordinal]
                );
            }
        }
    }
    Ok(())
}
