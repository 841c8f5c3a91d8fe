//! The fairness window: each principal's grants and summed queue delay over the last
//! [`WINDOW_MINUTES`] minutes, per workspace, kept by the driver whether or not anybody watches
//! (the console's Fairness view and `GET …/fairness` read it; the browser no longer aggregates).
//!
//! # Design
//!
//! Per workspace, a ring of [`WINDOW_MINUTES`] per-minute buckets indexed by
//! `(now / BUCKET_MS) % WINDOW_MINUTES`. A grant adds to the bucket of its minute; a bucket
//! whose minute is older than the window is cleared when its slot is reused, and skipped when
//! read. Reading sums the buckets inside the window: O(buckets × principals in them).
//!
//! # Invariants
//!
//! - **Bounded.** A workspace holds [`WINDOW_MINUTES`] buckets; a bucket holds at most
//!   [`MAX_PRINCIPALS_PER_BUCKET`] principals (only principals the core granted, which are
//!   named by the workspace's profile); grants of further principals in that minute are
//!   counted as `unattributed`, never dropped from the totals. A workspace appears only after
//!   its first grant; [`FairnessWindows::forget_idle`] (run by the first grant of each minute
//!   and by every read) drops workspaces whose every bucket left the window.
//! - **Counted once.** Every grant the driver hands out (at once or after a queue) is recorded
//!   exactly once, with the queue delay the core's evidence states.
//! - **IDs stay here.** Principal IDs leave this structure only in a [`FairnessView`], which the
//!   service returns to authenticated callers only; never to a log line, span or metric label.

use std::sync::Arc;

use foldhash::HashMap;
use serde::Serialize;
use turnstile_admission::Millis;

/// Buckets (minutes) in a workspace's window.
pub const WINDOW_MINUTES: usize = 5;

/// The width of one bucket.
pub const BUCKET_MS: Millis = 60_000;

/// Principals one bucket keeps by ID; the rest of that minute is counted without an ID.
pub const MAX_PRINCIPALS_PER_BUCKET: usize = 4_096;

/// Grants and their summed queue delay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    grants: u64,
    queue_delay_ms: u64,
}

impl Counts {
    fn add(&mut self, grants: u64, queue_delay_ms: u64) {
        self.grants = self.grants.saturating_add(grants);
        self.queue_delay_ms = self.queue_delay_ms.saturating_add(queue_delay_ms);
    }
}

#[derive(Debug, Default)]
struct Bucket {
    /// `now / BUCKET_MS` of the minute this bucket counts.
    minute: u64,
    principals: HashMap<Arc<str>, Counts>,
    /// Grants of principals beyond [`MAX_PRINCIPALS_PER_BUCKET`].
    unattributed: Counts,
    total: Counts,
}

impl Bucket {
    fn reset(&mut self, minute: u64) {
        self.minute = minute;
        self.principals.clear();
        self.unattributed = Counts::default();
        self.total = Counts::default();
    }
}

/// One principal's part of a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrincipalShare {
    /// The principal (admin view only).
    pub principal_id: String,
    /// Its grants in the window.
    pub grants: u64,
    /// `grants / totalGrants` (0 when nothing was granted).
    pub share: f64,
    /// Its mean queue delay, in milliseconds.
    pub mean_queue_delay_ms: f64,
}

/// Grants of one minute of the window (the console's bars).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MinuteGrants {
    /// The minute's start.
    pub start_epoch_ms: Millis,
    /// Grants in that minute.
    pub grants: u64,
    /// Queue delay of those grants, summed.
    pub queue_delay_ms: u64,
}

/// A workspace's window as read at `at_epoch_ms`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FairnessView {
    /// When the window was read.
    pub at_epoch_ms: Millis,
    /// The start of the oldest minute in the window (the counts cover `[from, at]`).
    pub from_epoch_ms: Millis,
    /// The width of one bucket.
    pub bucket_ms: Millis,
    /// Grants in the window.
    pub total_grants: u64,
    /// Their mean queue delay, in milliseconds.
    pub mean_queue_delay_ms: f64,
    /// Grants of principals a full bucket could not name.
    pub unattributed_grants: u64,
    /// Most grants first, then by ID.
    pub principals: Vec<PrincipalShare>,
    /// Oldest first, one per minute of the window (empty minutes included).
    pub minutes: Vec<MinuteGrants>,
}

fn mean(counts: Counts) -> f64 {
    if counts.grants == 0 {
        0.0
    } else {
        counts.queue_delay_ms as f64 / counts.grants as f64
    }
}

/// Every workspace's window; see the module docs.
#[derive(Debug, Default)]
pub struct FairnessWindows {
    workspaces: HashMap<Arc<str>, Vec<Bucket>>,
    /// The minute of the last [`FairnessWindows::forget_idle`] sweep (one per minute).
    swept_minute: u64,
}

impl FairnessWindows {
    /// Records one grant of `principal` in `workspace`, after `queue_delay_ms` in the queue.
    pub fn grant(
        &mut self,
        workspace: &str,
        principal: &Arc<str>,
        queue_delay_ms: Millis,
        now: Millis,
    ) {
        let minute = now / BUCKET_MS;
        if minute != self.swept_minute {
            self.forget_idle(now);
        }
        if !self.workspaces.contains_key(workspace) {
            let buckets = (0..WINDOW_MINUTES).map(|_| Bucket::default()).collect();
            self.workspaces.insert(Arc::from(workspace), buckets);
        }
        let Some(buckets) = self.workspaces.get_mut(workspace) else {
            return;
        };
        let slot = (minute % WINDOW_MINUTES as u64) as usize;
        let Some(bucket) = buckets.get_mut(slot) else {
            return;
        };
        if bucket.minute != minute {
            bucket.reset(minute);
        }
        bucket.total.add(1, queue_delay_ms);
        if let Some(counts) = bucket.principals.get_mut(principal) {
            counts.add(1, queue_delay_ms);
        } else if bucket.principals.len() < MAX_PRINCIPALS_PER_BUCKET {
            let mut counts = Counts::default();
            counts.add(1, queue_delay_ms);
            bucket.principals.insert(principal.clone(), counts);
        } else {
            bucket.unattributed.add(1, queue_delay_ms);
        }
    }

    /// The window of `workspace` read at `now` (empty for a workspace with no recent grant).
    pub fn view(&self, workspace: &str, now: Millis) -> FairnessView {
        let current = now / BUCKET_MS;
        let oldest = current.saturating_sub(WINDOW_MINUTES as u64 - 1);
        let buckets = self.workspaces.get(workspace);
        let in_window = |minute: u64| {
            buckets
                .and_then(|b| b.get((minute % WINDOW_MINUTES as u64) as usize))
                .filter(|bucket| bucket.minute == minute && bucket.total.grants > 0)
        };
        let mut total = Counts::default();
        let mut unattributed = 0u64;
        let mut per_principal: HashMap<&Arc<str>, Counts> = HashMap::default();
        let mut minutes = Vec::with_capacity(WINDOW_MINUTES);
        for minute in oldest..=current {
            let bucket = in_window(minute);
            let counts = bucket.map(|b| b.total).unwrap_or_default();
            minutes.push(MinuteGrants {
                start_epoch_ms: minute.saturating_mul(BUCKET_MS),
                grants: counts.grants,
                queue_delay_ms: counts.queue_delay_ms,
            });
            let Some(bucket) = bucket else {
                continue;
            };
            total.add(bucket.total.grants, bucket.total.queue_delay_ms);
            unattributed = unattributed.saturating_add(bucket.unattributed.grants);
            for (principal, counts) in &bucket.principals {
                per_principal
                    .entry(principal)
                    .or_default()
                    .add(counts.grants, counts.queue_delay_ms);
            }
        }
        let mut principals: Vec<PrincipalShare> = per_principal
            .into_iter()
            .map(|(principal, counts)| PrincipalShare {
                principal_id: principal.to_string(),
                grants: counts.grants,
                share: if total.grants == 0 {
                    0.0
                } else {
                    counts.grants as f64 / total.grants as f64
                },
                mean_queue_delay_ms: mean(counts),
            })
            .collect();
        principals.sort_by(|a, b| {
            b.grants
                .cmp(&a.grants)
                .then_with(|| a.principal_id.cmp(&b.principal_id))
        });
        FairnessView {
            at_epoch_ms: now,
            from_epoch_ms: oldest.saturating_mul(BUCKET_MS),
            bucket_ms: BUCKET_MS,
            total_grants: total.grants,
            mean_queue_delay_ms: mean(total),
            unattributed_grants: unattributed,
            principals,
            minutes,
        }
    }

    /// Drops the workspaces none of whose buckets is inside the window at `now`.
    pub fn forget_idle(&mut self, now: Millis) {
        self.swept_minute = now / BUCKET_MS;
        let oldest = (now / BUCKET_MS).saturating_sub(WINDOW_MINUTES as u64 - 1);
        self.workspaces.retain(|_, buckets| {
            buckets
                .iter()
                .any(|b| b.minute >= oldest && b.total.grants > 0)
        });
    }

    /// Workspaces with a window (tests and bounds).
    pub fn workspaces(&self) -> usize {
        self.workspaces.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn shares_and_mean_delays_cover_the_last_minutes_only() {
        let mut windows = FairnessWindows::default();
        let (a, b) = (id("a"), id("b"));
        // Minute 0: a twice (10 ms, 30 ms), b once (0 ms).
        windows.grant("w", &a, 10, 1_000);
        windows.grant("w", &a, 30, 2_000);
        windows.grant("w", &b, 0, 59_999);
        // Minute 3: b once (100 ms).
        windows.grant("w", &b, 100, 3 * BUCKET_MS + 5);
        let view = windows.view("w", 3 * BUCKET_MS + 10);
        assert_eq!(view.total_grants, 4);
        assert_eq!(view.from_epoch_ms, 0);
        assert_eq!(
            view.minutes.len(),
            4,
            "minutes 0..=3 (the window is not full yet)"
        );
        assert_eq!(view.minutes[0].grants, 3);
        assert_eq!(view.minutes[3].grants, 1);
        assert_eq!(view.principals[0].principal_id, "a", "ties broken by ID");
        assert_eq!(view.principals[0].grants, 2);
        assert!((view.principals[0].share - 0.5).abs() < 1e-9);
        assert!((view.principals[0].mean_queue_delay_ms - 20.0).abs() < 1e-9);
        assert!((view.principals[1].mean_queue_delay_ms - 50.0).abs() < 1e-9);
        assert!((view.mean_queue_delay_ms - 35.0).abs() < 1e-9);
        let shares: f64 = view.principals.iter().map(|p| p.share).sum();
        assert!((shares - 1.0).abs() < 1e-9);

        // Minute 5: minute 0 left the window; its slot is reused.
        windows.grant("w", &a, 0, 5 * BUCKET_MS);
        let view = windows.view("w", 5 * BUCKET_MS + 1);
        assert_eq!(view.minutes.len(), WINDOW_MINUTES);
        assert_eq!(view.from_epoch_ms, BUCKET_MS);
        assert_eq!(view.total_grants, 2);
        assert_eq!(view.principals.len(), 2);
        assert!(view.principals.iter().all(|p| p.grants == 1));

        // Much later, nothing is in the window and the workspace is forgotten.
        let later = 20 * BUCKET_MS;
        assert_eq!(windows.view("w", later).total_grants, 0);
        assert!(windows.view("w", later).principals.is_empty());
        windows.forget_idle(later);
        assert_eq!(windows.workspaces(), 0);
        assert_eq!(windows.view("other", later).total_grants, 0);
    }

    #[test]
    fn a_bucket_names_at_most_its_cap_and_counts_the_rest() {
        let mut windows = FairnessWindows::default();
        let ids: Vec<Arc<str>> = (0..MAX_PRINCIPALS_PER_BUCKET + 10)
            .map(|i| id(&format!("p{i}")))
            .collect();
        for principal in &ids {
            windows.grant("w", principal, 1, 0);
        }
        // A named principal keeps counting.
        windows.grant("w", &ids[0], 1, 1);
        let view = windows.view("w", 2);
        assert_eq!(view.principals.len(), MAX_PRINCIPALS_PER_BUCKET);
        assert_eq!(view.unattributed_grants, 10);
        assert_eq!(view.total_grants, MAX_PRINCIPALS_PER_BUCKET as u64 + 11);
        assert_eq!(view.principals[0].grants, 2);
    }
}
