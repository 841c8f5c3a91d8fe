//! The ADR 0119 incident, replayed: six generations for one simulated hour, two of them emitting
//! priority evidence every 30 seconds, under the legacy policy (60 calls/hour, 30 s priority
//! interval, no coverage first) and under ADR 0119 (120 calls/hour, 2 min, coverage first).
//!
//! The per-generation table is kept in `docs/semantic.md` between the `incident-table` markers;
//! this test fails if the document disagrees with the simulation. Regenerate it with
//! `TURNSTILE_BLESS=1 cargo test -p turnstile-semantic --test incident`.

mod common;

use std::collections::BTreeMap;

use common::{evidence, simulate, Emission, ObservedCall, ScriptedReader, MINUTE, SECOND, T20};
use turnstile_semantic::{CallLimit, CallOutcome, ManualClock, PassSettings, Policy};
use turnstile_store::MemoryRosterStore;

const HOT: [&str; 2] = ["hot-1", "hot-2"];
const ROUTINE: [&str; 4] = ["card-3", "card-4", "card-5", "card-6"];
/// A reasoning read over ~18k input tokens (the incident averaged 1,097,385 / 60) takes about
/// this long; longer than the legacy 30 s priority interval, which is what let two hot
/// generations take turns forever.
const READ_MS: u64 = 40 * SECOND;
const HOUR: u64 = 60 * MINUTE;

/// Hot generations emit new priority evidence every 30 s; the four routine cards emit new
/// routine evidence every 90 s, starting 10 s apart.
fn stream() -> Vec<Emission> {
    let mut emissions = Vec::new();
    for (index, id) in HOT.iter().enumerate() {
        for step in 0..120u64 {
            emissions.push(Emission {
                at: T20 + step * 30 * SECOND + index as u64 * SECOND,
                evidence: evidence(id, true, &format!("needs attention, step {step}")),
            });
        }
    }
    for (index, id) in ROUTINE.iter().enumerate() {
        for step in 0..40u64 {
            emissions.push(Emission {
                at: T20 + index as u64 * 10 * SECOND + step * 90 * SECOND,
                evidence: evidence(id, false, &format!("routine action {step}")),
            });
        }
    }
    emissions
}

fn replay(policy: Policy) -> Vec<ObservedCall> {
    let store = MemoryRosterStore::new();
    let clock = ManualClock::new(T20);
    let mut reader = ScriptedReader::new(clock, store, |_, _| (READ_MS, CallOutcome::Accepted));
    let settings = PassSettings {
        policy,
        limit: CallLimit::hard(&policy),
        debounce_ms: 5 * SECOND,
    };
    simulate(settings, stream(), T20, T20 + HOUR, &mut reader);
    reader.calls()
}

struct Row {
    calls: usize,
    first: Option<u64>,
}

fn rows(calls: &[ObservedCall]) -> BTreeMap<&'static str, Row> {
    HOT.iter()
        .chain(ROUTINE.iter())
        .map(|id| {
            let mine: Vec<&ObservedCall> = calls
                .iter()
                .filter(|call| call.generation_id == *id)
                .collect();
            (
                *id,
                Row {
                    calls: mine.len(),
                    first: mine.first().map(|call| call.started_at - T20),
                },
            )
        })
        .collect()
}

fn clock_text(offset: Option<u64>) -> String {
    match offset {
        None => "never".to_owned(),
        Some(ms) => format!("+{:02}:{:02}", ms / MINUTE, ms % MINUTE / SECOND),
    }
}

fn table(legacy: &[ObservedCall], adr: &[ObservedCall]) -> String {
    let old = rows(legacy);
    let new = rows(adr);
    let mut out = String::from(
        "| generation | evidence | legacy calls | legacy first read | ADR 0119 calls | ADR 0119 first read |\n\
         |---|---|---:|---:|---:|---:|\n",
    );
    for id in HOT.iter().chain(ROUTINE.iter()) {
        let kind = if HOT.contains(id) {
            "priority every 30 s"
        } else {
            "routine every 90 s"
        };
        out.push_str(&format!(
            "| {id} | {kind} | {} | {} | {} | {} |\n",
            old[id].calls,
            clock_text(old[id].first),
            new[id].calls,
            clock_text(new[id].first)
        ));
    }
    out.push_str(&format!(
        "| **total** | | **{}** | | **{}** | |\n",
        legacy.len(),
        adr.len()
    ));
    out
}

const BEGIN: &str = "<!-- incident-table:begin -->\n";
const END: &str = "<!-- incident-table:end -->";

#[test]
fn incident_replay_new_policy_reads_every_generation_early() {
    let legacy = replay(Policy::LEGACY);
    let adr = replay(Policy::ADR_0119);
    let table = table(&legacy, &adr);
    println!("{table}");

    let old = rows(&legacy);
    let new = rows(&adr);
    // The legacy policy spends its allowance on the two hot generations.
    assert_eq!(legacy.len(), 60);
    let hot_legacy: usize = HOT.iter().map(|id| old[id].calls).sum();
    assert!(
        hot_legacy * 10 >= legacy.len() * 7,
        "hot share {hot_legacy}/60"
    );
    for id in ROUTINE {
        assert_eq!(old[id].calls, 0, "legacy never reads routine card {id}");
    }
    // ADR 0119: every generation is read, within its first four minutes (the reader is busy
    // back to back with 40 s reads, so six first reads need at least 4 minutes of reader time).
    for id in HOT.iter().chain(ROUTINE.iter()) {
        let first = new[id].first.unwrap_or(u64::MAX);
        assert!(first <= 4 * MINUTE, "{id} first read at {first} ms");
    }
    // The hot generations no longer take turns: each is read at most every 2 minutes.
    for id in HOT {
        assert!(new[id].calls <= 30, "{id} read {} times", new[id].calls);
    }
    assert!(adr.len() <= 120);
}

#[test]
fn incident_table_in_docs_matches_the_simulation() {
    let table = table(&replay(Policy::LEGACY), &replay(Policy::ADR_0119));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/semantic.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let start = doc
        .find(BEGIN)
        .expect("docs/semantic.md has the begin marker")
        + BEGIN.len();
    let end = doc.find(END).expect("docs/semantic.md has the end marker");
    if std::env::var_os("TURNSTILE_BLESS").is_some() {
        let updated = format!("{}{}{}", &doc[..start], table, &doc[end..]);
        std::fs::write(path, updated).unwrap();
        return;
    }
    assert_eq!(
        &doc[start..end],
        table,
        "docs/semantic.md is stale; rerun with TURNSTILE_BLESS=1"
    );
}
