//! Restart: calls recorded in a SQLite file, the store reopened (a process restart), and the
//! status reports the same rolling usage.

mod common;

use common::{ScriptedReader, MINUTE, SECOND, T20};
use turnstile_semantic::{GenerationEvidence, ManualClock, NeverStop, PassSettings, Roster};
use turnstile_store::{MemoryRosterStore, SqliteRosterStore};

#[test]
fn restart_status_reports_the_same_rolling_usage() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T20);
    let later = T20 + 30 * MINUTE;
    let before = {
        let mut roster = Roster::new(
            SqliteRosterStore::open_dir(dir.path()).unwrap(),
            PassSettings::default(),
        );
        let mut reader = ScriptedReader::instant(clock.clone(), MemoryRosterStore::new());
        for id in ["a", "b", "c"] {
            roster
                .enqueue(&GenerationEvidence::active(id, "x"), T20)
                .unwrap();
        }
        clock.set(T20 + 10 * SECOND);
        assert_eq!(
            roster
                .run_pass(Some(&mut reader), &clock, &NeverStop)
                .unwrap()
                .calls(),
            3
        );
        roster
            .enqueue(&GenerationEvidence::active("d", "y"), T20 + MINUTE)
            .unwrap();
        roster.status(later).unwrap()
    };
    let reopened = Roster::new(
        SqliteRosterStore::open_dir(dir.path()).unwrap(),
        PassSettings::default(),
    );
    let after = reopened.status(later).unwrap();
    assert_eq!(after, before);
    assert_eq!(after.rolling_calls.used, 3);
    assert_eq!(after.rolling_calls.available, 117);
    assert_eq!(after.pending, 1);
    // An hour after the calls they leave the window.
    let next_hour = reopened.status(T20 + 10 * SECOND + 60 * MINUTE).unwrap();
    assert_eq!(next_hour.rolling_calls.used, 0);
}
