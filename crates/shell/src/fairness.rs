//! The fairness window: each principal's grants, summed queue delay and tokens served over the
//! last [`WINDOW_MINUTES`] minutes, per workspace, kept by the driver whether or not anybody
//! watches (the console's Fairness view and `GET …/fairness` read it; the browser no longer
//! aggregates).
//!
//! # Design
//!
//! Per workspace, a ring of [`WINDOW_MINUTES`] per-minute buckets indexed by
//! `(now / BUCKET_MS) % WINDOW_MINUTES`. A grant adds to the bucket of its minute; a bucket
//! whose minute is older than the window is cleared when its slot is reused, and skipped when
//! read. Reading sums the buckets inside the window: O(buckets × principals in them).
//!
//! Tokens served: a grant adds the lease's estimated tokens (`evidence.estimatedTokens`, 0
//! without one) to the bucket of its minute and returns a [`TokensServed`] receipt the lease
//! keeps; a release that reports the tokens the call used replaces the estimate with them, in
//! that same bucket (O(1): one lookup), while that bucket still counts that minute (a release
//! after the minute left the window changes nothing). So the window's tokens are, per grant in
//! it, the actual tokens where its release reported them and the estimate otherwise.
//!
//! A read also names, from the workspace's profile in force, each principal's `weight` and
//! `priority` and each provider lane's `fairness` mode (`null` weight and priority: the profile
//! no longer names that principal).
//!
//! # Invariants
//!
//! - **Bounded.** A workspace holds [`WINDOW_MINUTES`] buckets; a bucket holds at most
//!   [`MAX_PRINCIPALS_PER_BUCKET`] principals (only principals the core granted, which are
//!   named by the workspace's profile); grants (and their tokens) of further principals in
//!   that minute are counted as `unattributed`, never dropped from the totals. A workspace
//!   appears only after its first grant; [`FairnessWindows::forget_idle`] (run by the first
//!   grant of each minute and by every read) drops workspaces whose every bucket left the
//!   window.
//! - **Counted once.** Every grant the driver hands out (at once or after a queue) is recorded
//!   exactly once, with the queue delay and the estimated tokens the core's evidence states;
//!   a lease's tokens are corrected at most once, by its release.
//! - **O(1) per decision.** A grant and a correction each touch one bucket and one row.
//! - **IDs stay here.** Principal IDs leave this structure only in a [`FairnessView`], which the
//!   service returns to authenticated callers only; never to a log line, span or metric label.

use std::sync::Arc;

use foldhash::HashMap;
use serde::Serialize;
use turnstile_admission::{Fairness, Millis, Priority, Profile};

/// Buckets (minutes) in a workspace's window.
pub const WINDOW_MINUTES: usize = 5;

/// The width of one bucket.
pub const BUCKET_MS: Millis = 60_000;

/// Principals one bucket keeps by ID; the rest of that minute is counted without an ID.
pub const MAX_PRINCIPALS_PER_BUCKET: usize = 4_096;

/// Weight of a principal whose limits do not say (`weight` absent).
const DEFAULT_WEIGHT: f64 = 1.0;

/// Grants, their summed queue delay and the tokens they were served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    grants: u64,
    queue_delay_ms: u64,
    tokens: u64,
}

impl Counts {
    /// One grant, after `queue_delay_ms` in the queue, estimated at `tokens`.
    fn one(queue_delay_ms: Millis, tokens: u64) -> Self {
        Counts {
            grants: 1,
            queue_delay_ms,
            tokens,
        }
    }

    fn add(&mut self, other: Counts) {
        self.grants = self.grants.saturating_add(other.grants);
        self.queue_delay_ms = self.queue_delay_ms.saturating_add(other.queue_delay_ms);
        self.tokens = self.tokens.saturating_add(other.tokens);
    }

    /// Replaces a grant's estimated tokens with the tokens it actually used.
    fn correct(&mut self, estimated: u64, actual: u64) {
        self.tokens = self.tokens.saturating_sub(estimated).saturating_add(actual);
    }
}

/// What a grant added to its bucket's tokens: kept with the lease, so that its release can
/// replace the estimate with the tokens the call used ([`FairnessWindows::correct`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokensServed {
    /// `now / BUCKET_MS` of the grant.
    minute: u64,
    /// The estimate the grant added.
    estimated: u64,
}

impl TokensServed {
    /// A grant at `now` of a lease estimated at `estimated` tokens.
    pub fn at(now: Millis, estimated: Option<u64>) -> Self {
        TokensServed {
            minute: now / BUCKET_MS,
            estimated: estimated.unwrap_or(0),
        }
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
    /// Tokens served to it in the window: per grant, the actual tokens its release reported,
    /// else the estimate.
    pub tokens: u64,
    /// `tokens / totalTokens` (0 when no token was served).
    pub token_share: f64,
    /// Its weight in the profile in force (1 when its limits do not say); `None`: the profile
    /// no longer names it.
    pub weight: Option<f64>,
    /// Its band in the profile in force (`standard` when its limits do not say); `None`: the
    /// profile no longer names it.
    pub priority: Option<Priority>,
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
    /// Tokens served by those grants.
    pub tokens: u64,
}

/// What one provider lane's turns are fair in, in the profile in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderFairness {
    /// The provider lane.
    pub provider_id: String,
    /// `requests` (the default) or `tokens`.
    pub fairness: Fairness,
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
    /// Tokens served in the window.
    pub total_tokens: u64,
    /// Tokens served to principals a full bucket could not name.
    pub unattributed_tokens: u64,
    /// Every provider lane of the profile in force, by ID, with its fairness mode.
    pub providers: Vec<ProviderFairness>,
}

fn mean(counts: Counts) -> f64 {
    if counts.grants == 0 {
        0.0
    } else {
        counts.queue_delay_ms as f64 / counts.grants as f64
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
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
    /// Records one grant of `principal` in `workspace`, after `queue_delay_ms` in the queue,
    /// of a lease estimated at `tokens` (`None`: no estimate, counted as 0 until its release
    /// reports usage). Returns what the lease keeps for that correction.
    pub fn grant(
        &mut self,
        workspace: &str,
        principal: &Arc<str>,
        queue_delay_ms: Millis,
        tokens: Option<u64>,
        now: Millis,
    ) -> TokensServed {
        let served = TokensServed::at(now, tokens);
        let counts = Counts::one(queue_delay_ms, served.estimated);
        let minute = served.minute;
        if minute != self.swept_minute {
            self.forget_idle(now);
        }
        if !self.workspaces.contains_key(workspace) {
            let buckets = (0..WINDOW_MINUTES).map(|_| Bucket::default()).collect();
            self.workspaces.insert(Arc::from(workspace), buckets);
        }
        let Some(bucket) = self
            .workspaces
            .get_mut(workspace)
            .and_then(|buckets| buckets.get_mut(slot(minute)))
        else {
            return served;
        };
        if bucket.minute != minute {
            bucket.reset(minute);
        }
        bucket.total.add(counts);
        if let Some(row) = bucket.principals.get_mut(principal) {
            row.add(counts);
        } else if bucket.principals.len() < MAX_PRINCIPALS_PER_BUCKET {
            bucket.principals.insert(principal.clone(), counts);
        } else {
            bucket.unattributed.add(counts);
        }
        served
    }

    /// A lease granted as `served` was released reporting `actual` tokens: they replace its
    /// estimate in the bucket of its grant, if that bucket still counts that minute.
    pub fn correct(&mut self, workspace: &str, principal: &str, served: TokensServed, actual: u64) {
        let Some(bucket) = self
            .workspaces
            .get_mut(workspace)
            .and_then(|buckets| buckets.get_mut(slot(served.minute)))
            .filter(|bucket| bucket.minute == served.minute && bucket.total.grants > 0)
        else {
            return;
        };
        bucket.total.correct(served.estimated, actual);
        // A bucket's named principals only grow within its minute: a principal it does not
        // name now was not named when the grant was counted either.
        match bucket.principals.get_mut(principal) {
            Some(row) => row.correct(served.estimated, actual),
            None => bucket.unattributed.correct(served.estimated, actual),
        }
    }

    /// The window of `workspace` read at `now` (empty for a workspace with no recent grant),
    /// with the weights, bands and fairness modes of `profile`, the profile in force.
    pub fn view(&self, workspace: &str, profile: &Profile, now: Millis) -> FairnessView {
        let current = now / BUCKET_MS;
        let oldest = current.saturating_sub(WINDOW_MINUTES as u64 - 1);
        let buckets = self.workspaces.get(workspace);
        let in_window = |minute: u64| {
            buckets
                .and_then(|b| b.get(slot(minute)))
                .filter(|bucket| bucket.minute == minute && bucket.total.grants > 0)
        };
        let mut total = Counts::default();
        let mut unattributed = Counts::default();
        let mut per_principal: HashMap<&Arc<str>, Counts> = HashMap::default();
        let mut minutes = Vec::with_capacity(WINDOW_MINUTES);
        for minute in oldest..=current {
            let bucket = in_window(minute);
            let counts = bucket.map(|b| b.total).unwrap_or_default();
            minutes.push(MinuteGrants {
                start_epoch_ms: minute.saturating_mul(BUCKET_MS),
                grants: counts.grants,
                queue_delay_ms: counts.queue_delay_ms,
                tokens: counts.tokens,
            });
            let Some(bucket) = bucket else {
                continue;
            };
            total.add(bucket.total);
            unattributed.add(bucket.unattributed);
            for (principal, counts) in &bucket.principals {
                per_principal.entry(principal).or_default().add(*counts);
            }
        }
        let mut principals: Vec<PrincipalShare> = per_principal
            .into_iter()
            .map(|(principal, counts)| {
                let limits = profile.principals.get(&**principal);
                PrincipalShare {
                    principal_id: principal.to_string(),
                    grants: counts.grants,
                    share: ratio(counts.grants, total.grants),
                    mean_queue_delay_ms: mean(counts),
                    tokens: counts.tokens,
                    token_share: ratio(counts.tokens, total.tokens),
                    weight: limits.map(|l| l.weight.unwrap_or(DEFAULT_WEIGHT)),
                    priority: limits.map(|l| l.priority.unwrap_or_default()),
                }
            })
            .collect();
        principals.sort_by(|a, b| {
            b.grants
                .cmp(&a.grants)
                .then_with(|| a.principal_id.cmp(&b.principal_id))
        });
        let providers = profile
            .providers
            .iter()
            .map(|(provider_id, limits)| ProviderFairness {
                provider_id: provider_id.clone(),
                fairness: limits.fairness.unwrap_or_default(),
            })
            .collect();
        FairnessView {
            at_epoch_ms: now,
            from_epoch_ms: oldest.saturating_mul(BUCKET_MS),
            bucket_ms: BUCKET_MS,
            total_grants: total.grants,
            mean_queue_delay_ms: mean(total),
            unattributed_grants: unattributed.grants,
            principals,
            minutes,
            total_tokens: total.tokens,
            unattributed_tokens: unattributed.tokens,
            providers,
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

/// The ring slot of `minute`.
fn slot(minute: u64) -> usize {
    (minute % WINDOW_MINUTES as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnstile_admission::Limits;

    fn id(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    /// A profile naming `a` (weight 2, batch) and `b` (no weight, no band), and lanes `p`
    /// (token mode) and `q` (no mode).
    fn profile() -> Profile {
        let a = Limits {
            weight: Some(2.0),
            priority: Some(Priority::Batch),
            ..Limits::with_concurrency(1)
        };
        let p = Limits {
            fairness: Some(Fairness::Tokens),
            ..Limits::with_concurrency(1)
        };
        Profile {
            workspace: Limits::with_concurrency(1),
            providers: [("p".into(), p), ("q".into(), Limits::with_concurrency(1))].into(),
            principals: [("a".into(), a), ("b".into(), Limits::with_concurrency(1))].into(),
        }
    }

    #[test]
    fn shares_and_mean_delays_cover_the_last_minutes_only() {
        let mut windows = FairnessWindows::default();
        let (a, b) = (id("a"), id("b"));
        // Minute 0: a twice (10 ms, 30 ms), b once (0 ms).
        windows.grant("w", &a, 10, None, 1_000);
        windows.grant("w", &a, 30, None, 2_000);
        windows.grant("w", &b, 0, None, 59_999);
        // Minute 3: b once (100 ms).
        windows.grant("w", &b, 100, None, 3 * BUCKET_MS + 5);
        let view = windows.view("w", &profile(), 3 * BUCKET_MS + 10);
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
        windows.grant("w", &a, 0, None, 5 * BUCKET_MS);
        let view = windows.view("w", &profile(), 5 * BUCKET_MS + 1);
        assert_eq!(view.minutes.len(), WINDOW_MINUTES);
        assert_eq!(view.from_epoch_ms, BUCKET_MS);
        assert_eq!(view.total_grants, 2);
        assert_eq!(view.principals.len(), 2);
        assert!(view.principals.iter().all(|p| p.grants == 1));

        // Much later, nothing is in the window and the workspace is forgotten.
        let later = 20 * BUCKET_MS;
        assert_eq!(windows.view("w", &profile(), later).total_grants, 0);
        assert!(windows.view("w", &profile(), later).principals.is_empty());
        windows.forget_idle(later);
        assert_eq!(windows.workspaces(), 0);
        assert_eq!(windows.view("other", &profile(), later).total_grants, 0);
    }

    #[test]
    fn a_bucket_names_at_most_its_cap_and_counts_the_rest() {
        let mut windows = FairnessWindows::default();
        let ids: Vec<Arc<str>> = (0..MAX_PRINCIPALS_PER_BUCKET + 10)
            .map(|i| id(&format!("p{i}")))
            .collect();
        for principal in &ids {
            windows.grant("w", principal, 1, None, 0);
        }
        // A named principal keeps counting.
        windows.grant("w", &ids[0], 1, None, 1);
        let view = windows.view("w", &profile(), 2);
        assert_eq!(view.principals.len(), MAX_PRINCIPALS_PER_BUCKET);
        assert_eq!(view.unattributed_grants, 10);
        assert_eq!(view.total_grants, MAX_PRINCIPALS_PER_BUCKET as u64 + 11);
        assert_eq!(view.principals[0].grants, 2);
    }

    #[test]
    fn tokens_are_estimates_at_the_grant_corrected_by_the_release_in_the_grants_minute() {
        let mut windows = FairnessWindows::default();
        let (a, b) = (id("a"), id("b"));
        let heavy = windows.grant("w", &a, 0, Some(4_000), 1_000);
        let light = windows.grant("w", &b, 0, Some(400), 2_000);
        // No estimate: 0 until its release reports usage.
        let unknown = windows.grant("w", &b, 0, None, 3_000);
        let view = windows.view("w", &profile(), 4_000);
        assert_eq!(view.total_tokens, 4_400);
        assert_eq!(view.minutes[0].tokens, 4_400);
        assert_eq!(view.principals[0].principal_id, "b", "most grants first");
        assert_eq!(
            (view.principals[0].tokens, view.principals[1].tokens),
            (400, 4_000)
        );
        assert!((view.principals[1].token_share - 4_000.0 / 4_400.0).abs() < 1e-9);

        // Released in a later minute: the actual tokens replace the estimate where it was counted.
        windows.correct("w", &a, heavy, 1_000);
        windows.correct("w", &b, unknown, 100);
        let view = windows.view("w", &profile(), BUCKET_MS + 1);
        assert_eq!(view.total_tokens, 1_500);
        assert_eq!(view.minutes[0].tokens, 1_500);
        assert_eq!(view.minutes[1].tokens, 0);
        let tokens = |v: &FairnessView, p: &str| {
            v.principals
                .iter()
                .find(|r| r.principal_id == p)
                .map(|r| r.tokens)
        };
        assert_eq!(tokens(&view, "a"), Some(1_000));
        assert_eq!(tokens(&view, "b"), Some(500));
        let shares: f64 = view.principals.iter().map(|p| p.token_share).sum();
        assert!((shares - 1.0).abs() < 1e-9);

        // A release after its minute left the window changes nothing.
        windows.grant("w", &a, 0, Some(10), 7 * BUCKET_MS);
        windows.correct("w", &b, light, 90_000);
        let view = windows.view("w", &profile(), 7 * BUCKET_MS + 1);
        assert_eq!(view.total_tokens, 10);
        assert_eq!(tokens(&view, "b"), None);
    }

    #[test]
    fn a_full_buckets_tokens_are_corrected_without_an_id() {
        let mut windows = FairnessWindows::default();
        for i in 0..MAX_PRINCIPALS_PER_BUCKET {
            windows.grant("w", &id(&format!("p{i}")), 0, Some(1), 0);
        }
        let late = id("late");
        let served = windows.grant("w", &late, 0, Some(50), 1);
        windows.correct("w", &late, served, 20);
        let view = windows.view("w", &profile(), 2);
        assert_eq!(view.unattributed_grants, 1);
        assert_eq!(view.unattributed_tokens, 20);
        assert_eq!(view.total_tokens, MAX_PRINCIPALS_PER_BUCKET as u64 + 20);
    }

    #[test]
    fn a_view_names_weights_bands_and_modes_of_the_profile_in_force() {
        let mut windows = FairnessWindows::default();
        for principal in ["a", "b", "gone"] {
            windows.grant("w", &id(principal), 0, Some(1), 0);
        }
        let view = windows.view("w", &profile(), 1);
        let row = |p: &str| {
            view.principals
                .iter()
                .find(|r| r.principal_id == p)
                .map(|r| (r.weight, r.priority))
        };
        assert_eq!(row("a"), Some((Some(2.0), Some(Priority::Batch))));
        assert_eq!(row("b"), Some((Some(1.0), Some(Priority::Standard))));
        assert_eq!(row("gone"), Some((None, None)), "no longer named");
        let modes: Vec<(&str, Fairness)> = view
            .providers
            .iter()
            .map(|p| (p.provider_id.as_str(), p.fairness))
            .collect();
        assert_eq!(modes, [("p", Fairness::Tokens), ("q", Fairness::Requests)]);
        // An empty window still names the lanes.
        assert_eq!(windows.view("idle", &profile(), 1).providers.len(), 2);
    }
}
