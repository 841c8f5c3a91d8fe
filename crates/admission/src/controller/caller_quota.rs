//! The caller's own rate limits ([`CallerQuota`]): what the principal's scope allows it on a
//! lane at the instant of a decision, for the `x-ratelimit-*` / `anthropic-ratelimit-*`
//! headers hosts write on its answers.
//!
//! # What it decides
//!
//! For each kind, requests (`requestsPerMinute`, capacity `requestsBurst`) and tokens
//! (`tokensPerSecond`, capacity `tokensBurst`), of the **principal's own** scope:
//!
//! - `limit`: the bucket's capacity;
//! - `remaining`: the whole units in it now (on a grant: after this grant's charge);
//! - `reset_ms`: the time until it is full again at its rate (0 when full).
//!
//! A kind the principal's limits do not configure is absent (hosts write no header for it).
//! The workspace's and the provider lane's buckets are never read: they are the account's, and
//! their levels reveal other tenants' use.
//!
//! **Tightest binding.** A principal's scope holds at most one bucket of each kind (the
//! registry keeps one set of limits per principal), so within one core the figures are that
//! bucket's. Where more than one limit of a kind binds the same caller (a future source of
//! limits beside this core), the tightest binding is the one that leaves the caller the fewest
//! whole units now, and on a tie the one full again last; its three figures are reported
//! together, never the limit of one with the remaining of another.
//!
//! # Cost and size
//!
//! Computed in [`Controller::caller_quota`] when the evidence of a decision is built, from the
//! principal's state the decision already holds (two bucket reads, no allocation), and carried
//! on [`crate::Evidence::caller`], so a lease and a refusal bring it to the host with no second
//! call. It is packed into 24 bytes so that a [`crate::Rejection`] stays under clippy's
//! 160-byte bound (`clippy.toml`): each figure is held as a `u32`, so a limit or remaining
//! above 4,294,967,295 units reads as 4,294,967,295 ("at least that many"), and a reset longer
//! than about 49.7 days as that; every smaller figure is exact.
//!
//! # Invariants
//!
//! - `remaining <= limit`; `reset_ms == 0` exactly when `remaining == limit` and the bucket
//!   holds no fraction short of full.
//! - Never an ID, never another scope's level.

use crate::bucket::{TokenBucket, MINUTE_MS, SECOND_MS};
use crate::time::Millis;

use super::Controller;

/// One kind of the caller's own rate limit at a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerLimit {
    /// The bucket's capacity (the burst, else the rate).
    pub limit: u64,
    /// Whole units available now (at most `limit`).
    pub remaining: u64,
    /// Milliseconds until the bucket is full again (0: full now).
    pub reset_ms: Millis,
}

/// A reset field holding this means "the kind is absent".
const ABSENT: u32 = u32::MAX;

/// The caller's own request and token limits at a decision (see the module documentation):
/// read them with [`CallerQuota::requests`] and [`CallerQuota::tokens`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerQuota {
    requests: Held,
    tokens: Held,
}

/// One kind as held: saturated figures; `reset_ms` is [`ABSENT`] when the kind is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    limit: u32,
    remaining: u32,
    reset_ms: u32,
}

impl Held {
    const ABSENT: Held = Held {
        limit: 0,
        remaining: 0,
        reset_ms: ABSENT,
    };

    fn new(line: Option<CallerLimit>) -> Self {
        line.map_or(Held::ABSENT, |line| Held {
            limit: saturate(line.limit),
            remaining: saturate(line.remaining.min(line.limit)),
            reset_ms: held_reset(line.reset_ms),
        })
    }

    fn get(self) -> Option<CallerLimit> {
        (self.reset_ms != ABSENT).then(|| CallerLimit {
            limit: u64::from(self.limit),
            remaining: u64::from(self.remaining),
            reset_ms: Millis::from(self.reset_ms),
        })
    }
}

impl Default for CallerQuota {
    fn default() -> Self {
        CallerQuota::NONE
    }
}

/// `value` as a `u32`, saturating.
fn saturate(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// A reset as held: saturating one below [`ABSENT`].
fn held_reset(ms: Millis) -> u32 {
    saturate(ms).min(ABSENT - 1)
}

impl CallerQuota {
    /// No limit of either kind: no header.
    pub const NONE: CallerQuota = CallerQuota {
        requests: Held::ABSENT,
        tokens: Held::ABSENT,
    };

    /// A quota of the given kinds. Figures saturate at `u32::MAX`, resets at about 49.7 days
    /// (`u32::MAX - 1` ms); `remaining` is capped at `limit`.
    pub fn new(requests: Option<CallerLimit>, tokens: Option<CallerLimit>) -> Self {
        CallerQuota {
            requests: Held::new(requests),
            tokens: Held::new(tokens),
        }
    }

    /// The caller's request limit (`requestsPerMinute`), if it has one.
    pub fn requests(&self) -> Option<CallerLimit> {
        self.requests.get()
    }

    /// The caller's token limit (`tokensPerSecond`), if it has one.
    pub fn tokens(&self) -> Option<CallerLimit> {
        self.tokens.get()
    }

    /// Whether the caller has no limit of either kind.
    pub fn is_empty(&self) -> bool {
        self.requests.reset_ms == ABSENT && self.tokens.reset_ms == ABSENT
    }
}

/// One kind read from the principal's bucket at `now`; a configured kind whose state was
/// forgotten reads as full (a state is forgotten only when it equals a fresh one).
#[inline]
fn read(bucket: Option<&TokenBucket>, capacity: Option<u64>, now: Millis) -> Option<CallerLimit> {
    let capacity = capacity?;
    let Some(bucket) = bucket else {
        return Some(CallerLimit {
            limit: capacity,
            remaining: capacity,
            reset_ms: 0,
        });
    };
    let limit = bucket.capacity_units();
    let period = bucket.period_ms();
    let level = bucket.scaled_level_at(now);
    let deficit = (u128::from(limit) * u128::from(period)).saturating_sub(level);
    Some(CallerLimit {
        limit,
        remaining: divide(level, period, false).min(limit),
        // A bucket that never refills has capacity 0: it is full (no deficit).
        reset_ms: match bucket.rate() {
            _ if deficit == 0 => 0,
            0 => Millis::MAX,
            rate => divide(deficit, rate, true),
        },
    })
}

/// `n / d` (rounded up when `up`), saturating. The hot path: a numerator that fits a `u64` takes
/// one hardware division, and none for the core's two periods (constant divisors); the `u128`
/// division (a library call, several times slower) only for larger levels.
#[inline]
fn divide(n: u128, d: u64, up: bool) -> u64 {
    let Ok(n) = u64::try_from(n) else {
        let d = u128::from(d.max(1));
        let q = if up { n.div_ceil(d) } else { n / d };
        return u64::try_from(q).unwrap_or(u64::MAX);
    };
    let d = d.max(1);
    match (d, up) {
        (MINUTE_MS, false) => n / MINUTE_MS,
        (SECOND_MS, false) => n / SECOND_MS,
        (_, false) => n / d,
        (_, true) => n.div_ceil(d),
    }
}

impl Controller {
    /// The principal's own request and token limits at the controller's `now`.
    #[inline]
    pub(super) fn caller_quota(&self, principal: u32) -> CallerQuota {
        let entry = &self.scopes.principals[principal];
        let Some(limits) = entry.limits.as_deref() else {
            return CallerQuota::NONE;
        };
        if limits.requests_per_minute.is_none() && limits.tokens_per_second.is_none() {
            return CallerQuota::NONE;
        }
        let state = entry.scope();
        CallerQuota::new(
            read(state.requests.as_ref(), limits.request_capacity(), self.now),
            read(state.tokens.as_ref(), limits.token_capacity(), self.now),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{Acquired, AdmissionRequest};
    use crate::estimate::Estimate;
    use crate::evidence::Outcome;
    use crate::limits::Limits;
    use crate::profile::Profile;
    use crate::reason::Reason;

    fn controller(principal: Limits) -> Controller {
        let mut profile = Profile {
            workspace: Limits {
                requests_per_minute: Some(1_000),
                tokens_per_second: Some(1_000_000),
                ..Limits::with_concurrency(16)
            },
            ..Profile::default()
        };
        profile.providers.insert(
            "llm".into(),
            Limits {
                requests_per_minute: Some(500),
                ..Limits::with_concurrency(16)
            },
        );
        profile.principals.insert("p".into(), principal);
        profile
            .principals
            .insert("plain".into(), Limits::with_concurrency(4));
        Controller::new(profile, 0).unwrap()
    }

    fn request(principal: &str, tokens: u64) -> AdmissionRequest {
        AdmissionRequest::new(principal, "llm", "b").with_estimate(Estimate::new().tokens(tokens))
    }

    fn lease_quota(
        controller: &mut Controller,
        principal: &str,
        tokens: u64,
        now: Millis,
    ) -> CallerQuota {
        match controller.acquire(request(principal, tokens), now) {
            Acquired::Admitted(lease) => {
                controller.release(lease.id, Outcome::Success, now);
                lease.evidence.caller
            }
            other => panic!("not admitted: {other:?}"),
        }
    }

    #[test]
    fn a_grant_carries_the_principals_own_figures_after_its_charge() {
        let mut controller = controller(Limits {
            requests_per_minute: Some(60),
            requests_burst: Some(10),
            tokens_per_second: Some(1_000),
            ..Limits::with_concurrency(4)
        });
        let first = lease_quota(&mut controller, "p", 400, 0);
        // 10 requests of capacity, one taken: a request refills every second.
        assert_eq!(
            first.requests(),
            Some(CallerLimit {
                limit: 10,
                remaining: 9,
                reset_ms: 1_000
            })
        );
        assert_eq!(
            first.tokens(),
            Some(CallerLimit {
                limit: 1_000,
                remaining: 600,
                reset_ms: 400
            })
        );
        // Spending lowers them; time gives them back.
        let second = lease_quota(&mut controller, "p", 300, 100);
        assert_eq!(second.requests().map(|l| l.remaining), Some(8));
        assert_eq!(
            second.tokens(),
            Some(CallerLimit {
                limit: 1_000,
                remaining: 400,
                reset_ms: 600
            })
        );
        let later = lease_quota(&mut controller, "p", 0, 60_000);
        assert_eq!(
            later.requests().map(|l| (l.remaining, l.reset_ms)),
            Some((9, 1_000))
        );
        assert_eq!(
            later.tokens().map(|l| (l.remaining, l.reset_ms)),
            Some((1_000, 0))
        );
    }

    #[test]
    fn without_a_principal_rate_no_kind_is_present_whatever_the_account_has() {
        let mut controller = controller(Limits::with_concurrency(4));
        let quota = lease_quota(&mut controller, "plain", 10, 0);
        assert!(quota.is_empty());
        assert_eq!((quota.requests(), quota.tokens()), (None, None));
        let mut only_tokens = controller_with_tokens_only();
        let quota = lease_quota(&mut only_tokens, "p", 10, 0);
        assert_eq!(quota.requests(), None);
        assert_eq!(quota.tokens().map(|l| l.remaining), Some(90));
    }

    fn controller_with_tokens_only() -> Controller {
        controller(Limits {
            tokens_per_second: Some(100),
            ..Limits::with_concurrency(4)
        })
    }

    #[test]
    fn a_refusal_carries_the_figures_that_refused_it() {
        let mut controller = controller(Limits {
            requests_per_minute: Some(2),
            ..Limits::with_concurrency(4)
        });
        lease_quota(&mut controller, "p", 0, 0);
        lease_quota(&mut controller, "p", 0, 0);
        let Err(rejection) = controller.try_acquire(request("p", 0), 1_000) else {
            panic!("refused");
        };
        assert_eq!(rejection.reason, Reason::RequestsPerMinute);
        // Two per minute: one back after 30 s, both after 60 s; 1 s has passed.
        assert_eq!(
            rejection.evidence.caller.requests(),
            Some(CallerLimit {
                limit: 2,
                remaining: 0,
                reset_ms: 59_000
            })
        );
    }

    #[test]
    fn a_forgotten_principal_state_reads_full() {
        let mut controller = controller(Limits {
            requests_per_minute: Some(60),
            ..Limits::with_concurrency(4)
        });
        controller.set_idle_principals_kept(0);
        lease_quota(&mut controller, "p", 0, 0);
        // Full again after a second; the next decision forgets the idle state first.
        controller.handle_timeout(5_000);
        assert_eq!(controller.principal_states_evicted(), 1);
        assert_eq!(
            controller.caller_quota(controller.scopes.principals.find("p").unwrap()),
            CallerQuota::new(
                Some(CallerLimit {
                    limit: 60,
                    remaining: 60,
                    reset_ms: 0
                }),
                None
            )
        );
    }

    #[test]
    fn the_fast_reading_equals_the_buckets_own_for_every_size() {
        let cases = [
            (1, 1, MINUTE_MS),
            (60, 10, MINUTE_MS),
            (1_000, 1_000, SECOND_MS),
            (7, 13, 250),
            (u64::from(u32::MAX), u64::from(u32::MAX), MINUTE_MS),
            ((1 << 53) - 1, (1 << 53) - 1, MINUTE_MS),
            (1, (1 << 53) - 1, SECOND_MS),
        ];
        for (rate, capacity, period) in cases {
            let mut bucket = TokenBucket::full_with_capacity(rate, capacity, period, 0);
            for (take, now) in [
                (0, 0),
                (1, 0),
                (capacity / 3, 5),
                (capacity, 17),
                (1, 60_001),
            ] {
                bucket.refill(now);
                if bucket.has(take) {
                    bucket.take(take);
                }
                let read = read(Some(&bucket), Some(capacity), now).unwrap();
                let expected = CallerLimit {
                    limit: capacity,
                    remaining: bucket.level_units(),
                    reset_ms: bucket.wait_for(capacity).unwrap_or(0),
                };
                assert_eq!(read, expected, "rate {rate} capacity {capacity} at {now}");
            }
        }
    }

    #[test]
    fn figures_saturate_where_documented_and_the_quota_stays_small() {
        let quota = CallerQuota::new(
            Some(CallerLimit {
                limit: u64::MAX,
                remaining: u64::MAX,
                reset_ms: u64::MAX,
            }),
            Some(CallerLimit {
                limit: 1 << 40,
                remaining: 1 << 41,
                reset_ms: 7,
            }),
        );
        let saturated = (
            u64::from(u32::MAX),
            u64::from(u32::MAX),
            u64::from(u32::MAX - 1),
        );
        let requests = quota.requests().unwrap();
        assert_eq!(
            (requests.limit, requests.remaining, requests.reset_ms),
            saturated
        );
        let tokens = quota.tokens().unwrap();
        assert_eq!(
            (tokens.limit, tokens.remaining, tokens.reset_ms),
            (u64::from(u32::MAX), u64::from(u32::MAX), 7)
        );
        let exact = CallerLimit {
            limit: u64::from(u32::MAX),
            remaining: 12,
            reset_ms: 34,
        };
        assert_eq!(CallerQuota::new(None, Some(exact)).tokens(), Some(exact));
        assert_eq!(std::mem::size_of::<CallerQuota>(), 24);
        // Carried on every refusal's evidence: within clippy's `large-error-threshold`.
        assert!(std::mem::size_of::<crate::evidence::Rejection>() < 160);
        assert!(CallerQuota::default().is_empty());
    }
}
