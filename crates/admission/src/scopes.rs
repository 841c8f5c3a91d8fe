//! The scope tables of one controller ([`Scopes`]): the workspace scope, and the principal and
//! provider tables with their interning, their per-pass "blocked" marks and the bounded
//! eviction of idle principal state.
//!
//! # What it decides
//!
//! Which dense index a principal or provider ID has, which limits each scope is under (the
//! profile in force), which principals hold a concurrency reservation, and when an idle
//! principal's counters and buckets are forgotten. The checks that read these scopes live in
//! `controller/admit.rs`.
//!
//! # Layout
//!
//! An entry is small: its limits (shared: principals with equal limits share one copy, so a
//! profile of 100,000 principals in a few classes keeps a few `Limits`), the blocked mark, and
//! its counters and buckets ([`ScopeState`]) in their own allocation, present only while they
//! differ from a fresh state. Strings are interned once, when the profile is installed: every
//! hot path addresses a scope by index.
//!
//! # Invariants
//!
//! - Interning is append-only: an ID keeps its index for the controller's life, so lane keys
//!   and budget scope keys built from indices never dangle. Only IDs the profile names are
//!   interned ([`Scopes::install`]); a request naming any other ID is refused before any state
//!   is kept for it, so arbitrary IDs cannot grow the tables.
//! - An entry's limits are exactly the profile's limits for its ID (`None` once the profile no
//!   longer names it), and its buckets match those limits ([`ScopeState::sync_limits`]).
//! - **Eviction never changes a decision.** A principal's state is forgotten only when it equals
//!   [`ScopeState::fresh`] under its limits at that instant (no lease, no waiter, no token
//!   reservation, every bucket full), so re-creating it on next use is equivalent; reservations
//!   and share caps come from the limits, which stay. A profile change that raises a bucket's
//!   capacity re-creates the forgotten states it would treat differently (a kept full bucket
//!   keeps its level; a fresh one starts at the new capacity) before it applies.
//! - **Bounded.** Principals whose state went idle are listed in the order they went idle
//!   (each at most once); beyond [`IDLE_PRINCIPALS_KEPT`] listed, the oldest are forgotten as
//!   soon as their buckets are full again. So the states kept are those of busy principals,
//!   plus those used within the longest bucket refill period, plus at most
//!   [`IDLE_PRINCIPALS_KEPT`]. Provider state is never evicted (providers are few).
//! - The blocked marks hold the number of the pump pass that found the scope blocked; a mark
//!   from an older pass means "not blocked", so starting a pass clears every mark in O(1).
//!
//! # Complexity
//!
//! Lookup by ID is O(1) expected (a hash of the ID); by index, O(1). Installing a profile is
//! O(scopes known + scopes named), and only happens on a profile change. Eviction is O(1)
//! amortised per principal that goes idle, and costs nothing while the oldest idle state is
//! not yet pristine (its instant is remembered).

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Index, IndexMut};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::breaker::Breaker;
use crate::fair_order::FairOrder;
use crate::lane::LaneKey;
use crate::limits::Limits;
use crate::profile::Profile;
use crate::provider_quota::QuotaHold;
use crate::scope::ScopeState;
use crate::service_rate::ServiceRate;
use crate::time::Millis;

/// Idle principal states kept beyond those not yet pristine (the reference keeps at most 1024
/// idle scopes).
pub const IDLE_PRINCIPALS_KEPT: usize = 1024;

/// How many listed idle states one eviction pass looks at, at most.
const EVICTION_SCAN_LIMIT: usize = 64;

/// How an evicted (or never used) scope reads: no lease, no waiter, no bucket. Buckets are only
/// ever read through [`ScopeTable::state_mut`], which re-creates the real state first.
static NO_STATE: ScopeState = ScopeState {
    active: 0,
    queued: 0,
    requests: None,
    tokens: None,
    token_holder: None,
};

/// What a table keeps per scope beyond limits and counters.
pub(crate) trait ScopeExtra {
    /// The extra state of a newly interned ID.
    fn new(id: &str) -> Self;
    /// The scope's limits were (re)installed.
    fn limits_installed(&mut self, _limits: Option<&Limits>) {}
}

impl ScopeExtra for () {
    fn new(_id: &str) -> Self {}
}

/// A provider lane's own state: its ID (for transitions and snapshots), breaker, pause, the
/// order of its principals (when the profile asks for one) and its recent service rate.
#[derive(Debug)]
pub(crate) struct ProviderExtra {
    pub(crate) id: String,
    pub(crate) breaker: Breaker,
    /// A Retry-After pause lasts until this instant (0: never paused).
    pub(crate) paused_until: Millis,
    /// The fair order of the lane's principals: present in token mode, or when a principal of
    /// the profile has a weight or band ([`crate::fair_order`]); absent, the ring's turns are
    /// the order.
    pub(crate) order: Option<Box<FairOrder>>,
    /// Recent service intervals (deadline-aware refusal).
    pub(crate) rate: ServiceRate,
    /// The provider's announced quota windows, while an observation holds the lane
    /// ([`crate::provider_quota`]).
    pub(crate) quota: Option<Box<QuotaHold>>,
}

impl ScopeExtra for ProviderExtra {
    fn new(id: &str) -> Self {
        ProviderExtra {
            id: id.to_owned(),
            breaker: Breaker::default(),
            paused_until: 0,
            order: None,
            rate: ServiceRate::default(),
            quota: None,
        }
    }

    fn limits_installed(&mut self, limits: Option<&Limits>) {
        if limits.is_none_or(|l| l.circuit_breaker.is_none()) {
            // Without a breaker configuration nothing is counted: forget any old state.
            self.breaker = Breaker::default();
        }
    }
}

/// One scope: the limits in force (shared, so the pump can hold them across mutations of the
/// same state without copying them), the pass that last found it blocked, its counters and
/// buckets (absent while they equal a fresh state's), and its extra state.
#[derive(Debug)]
pub(crate) struct ScopeEntry<X> {
    pub(crate) limits: Option<Arc<Limits>>,
    blocked_in_pass: u64,
    /// Whether the entry is in its table's list of idle states.
    idle_listed: bool,
    state: Option<Box<ScopeState>>,
    pub(crate) extra: X,
}

impl<X> ScopeEntry<X> {
    /// The scope's counters and buckets; an evicted state reads as idle without buckets.
    #[inline]
    pub(crate) fn scope(&self) -> &ScopeState {
        self.state.as_deref().unwrap_or(&NO_STATE)
    }
}

/// Equal limits shared through one allocation, within one installation of a profile.
#[derive(Default)]
struct SharedLimits {
    recent: Vec<Arc<Limits>>,
}

/// How many distinct limits [`SharedLimits`] compares a new one with.
const SHARED_LIMITS_KEPT: usize = 8;

impl SharedLimits {
    fn share(&mut self, limits: &Limits) -> Arc<Limits> {
        if let Some(known) = self.recent.iter().find(|known| ***known == *limits) {
            return Arc::clone(known);
        }
        let shared = Arc::new(limits.clone());
        if self.recent.len() == SHARED_LIMITS_KEPT {
            self.recent.remove(0);
        }
        self.recent.push(Arc::clone(&shared));
        shared
    }
}

/// Scopes of one kind (principals or providers), interned to dense indices.
#[derive(Debug)]
pub(crate) struct ScopeTable<X> {
    entries: Vec<ScopeEntry<X>>,
    index: FxHashMap<String, u32>,
    /// Each entry's ID, by index (the reverse of `index`).
    ids: Vec<Box<str>>,
    /// Entries whose state went idle, oldest first (stale once busy again or evicted).
    idle: VecDeque<u32>,
    /// The oldest listed state is not pristine before this instant: no eviction pass before.
    next_eviction_at: Millis,
    /// States forgotten for idleness, over the table's life.
    evicted: u64,
    /// Entries that keep a state now.
    states: usize,
}

impl<X> Default for ScopeTable<X> {
    fn default() -> Self {
        ScopeTable {
            entries: Vec::new(),
            index: FxHashMap::default(),
            ids: Vec::new(),
            idle: VecDeque::new(),
            next_eviction_at: 0,
            evicted: 0,
            states: 0,
        }
    }
}

/// Whether a forgotten state, re-created under `new`, would differ from the state kept under
/// `old` and then moved to `new`: only when `new` raises a bucket's capacity (a kept full bucket
/// keeps its level, a fresh one starts full at the new capacity).
fn raises_a_capacity(old: Option<&Limits>, new: Option<&Limits>) -> bool {
    let (Some(old), Some(new)) = (old, new) else {
        return false;
    };
    let raised =
        |old: Option<u64>, new: Option<u64>| matches!((old, new), (Some(o), Some(n)) if n > o);
    raised(old.request_capacity(), new.request_capacity())
        || raised(old.token_capacity(), new.token_capacity())
}

impl<X: ScopeExtra> ScopeTable<X> {
    /// The index of a known ID.
    #[inline]
    pub(crate) fn find(&self, id: &str) -> Option<u32> {
        self.index.get(id).copied()
    }

    /// The index of `id`, interning it under `limits` if it is new (its state is created on
    /// first use).
    fn intern(&mut self, id: &str, limits: Option<&Limits>, shared: &mut SharedLimits) -> u32 {
        if let Some(index) = self.find(id) {
            return index;
        }
        let index = self.entries.len() as u32;
        self.entries.push(ScopeEntry {
            limits: limits.map(|l| shared.share(l)),
            blocked_in_pass: 0,
            idle_listed: false,
            state: None,
            extra: X::new(id),
        });
        self.index.insert(id.to_owned(), index);
        self.ids.push(id.into());
        index
    }

    /// The ID of an interned index.
    #[inline]
    pub(crate) fn id_of(&self, index: u32) -> Option<&str> {
        self.ids.get(index as usize).map(|id| &**id)
    }

    /// Puts every known scope under the limits `configured` gives its ID (or none), then
    /// interns the IDs `configured` names for the first time.
    fn install(&mut self, configured: &BTreeMap<String, Limits>, now: Millis) {
        let mut shared = SharedLimits::default();
        let mut recreated = Vec::new();
        for (id, &index) in &self.index {
            let entry = &mut self.entries[index as usize];
            let limits = configured.get(id);
            match entry.state.as_deref_mut() {
                Some(state) => state.sync_limits(limits.unwrap_or(&Limits::default()), now),
                None if raises_a_capacity(entry.limits.as_deref(), limits) => {
                    // Exactly the state that was forgotten (fresh under the old limits), then
                    // moved to the new ones as a kept state would be.
                    let old = entry.limits.as_deref().cloned().unwrap_or_default();
                    let mut state = ScopeState::fresh(&old, now);
                    state.sync_limits(limits.unwrap_or(&Limits::default()), now);
                    entry.state = Some(Box::new(state));
                    self.states += 1;
                    recreated.push(index);
                }
                None => {}
            }
            entry.limits = limits.map(|l| shared.share(l));
            entry.extra.limits_installed(limits);
        }
        for index in recreated {
            self.list_if_idle(index);
        }
        for (id, limits) in configured {
            self.intern(id, Some(limits), &mut shared);
        }
    }

    /// The limits of a scope, `None` when the profile does not name it.
    #[inline]
    pub(crate) fn limits(&self, index: u32) -> Option<&Limits> {
        self.entries[index as usize].limits.as_deref()
    }

    /// The counters and buckets of a scope, re-created fresh if they were forgotten (or never
    /// used); a re-created state is listed as idle until something counts in it.
    #[inline]
    pub(crate) fn state_mut(&mut self, index: u32, now: Millis) -> &mut ScopeState {
        let entry = &mut self.entries[index as usize];
        if entry.state.is_none() {
            let limits = entry.limits.as_deref().cloned().unwrap_or_default();
            entry.state = Some(Box::new(ScopeState::fresh(&limits, now)));
            self.states += 1;
            if !entry.idle_listed {
                entry.idle_listed = true;
                self.idle.push_back(index);
            }
        }
        let entry = &mut self.entries[index as usize];
        entry.state.get_or_insert_with(Box::default)
    }

    /// Lists a scope whose state may have gone idle (its last lease or waiter left).
    #[inline]
    pub(crate) fn list_if_idle(&mut self, index: u32) {
        let Some(entry) = self.entries.get_mut(index as usize) else {
            return;
        };
        if !entry.idle_listed && entry.state.as_deref().is_some_and(ScopeState::is_idle) {
            entry.idle_listed = true;
            self.idle.push_back(index);
        }
    }

    /// Forgets the oldest idle states beyond `kept` that are pristine at `now` (see the module
    /// docs); returns how many it forgot.
    pub(crate) fn evict_idle(&mut self, now: Millis, kept: usize) -> u64 {
        if self.idle.len() <= kept || now < self.next_eviction_at {
            return 0;
        }
        let mut evicted = 0;
        for _ in 0..EVICTION_SCAN_LIMIT {
            if self.idle.len() <= kept {
                break;
            }
            let Some(&index) = self.idle.front() else {
                break;
            };
            let Some(entry) = self.entries.get_mut(index as usize) else {
                self.idle.pop_front();
                continue;
            };
            let Some(state) = entry.state.as_deref_mut().filter(|s| s.is_idle()) else {
                // Busy again, or already forgotten: it is listed again when it goes idle.
                self.idle.pop_front();
                entry.idle_listed = false;
                continue;
            };
            match state.pristine_at(now) {
                Some(at) if at <= now => {
                    self.idle.pop_front();
                    entry.idle_listed = false;
                    if entry.state.take().is_some() {
                        evicted += 1;
                    }
                }
                Some(at) => {
                    // Not pristine yet: nothing listed after it is looked at before `at`.
                    self.next_eviction_at = at;
                    break;
                }
                None => {
                    // A bucket that never refills is never full again: keep it, unlisted
                    // until it goes idle again.
                    self.idle.pop_front();
                    entry.idle_listed = false;
                }
            }
        }
        self.evicted += evicted;
        self.states -= evicted as usize;
        evicted
    }

    /// States forgotten for idleness, over the table's life.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Scopes that keep counters and buckets now.
    pub(crate) fn states_kept(&self) -> usize {
        self.states
    }

    /// Marks a scope blocked for the rest of pump pass `pass`.
    #[inline]
    pub(crate) fn mark_blocked(&mut self, index: u32, pass: u64) {
        self.entries[index as usize].blocked_in_pass = pass;
    }

    /// Whether pump pass `pass` already found the scope blocked.
    #[inline]
    pub(crate) fn is_blocked(&self, index: u32, pass: u64) -> bool {
        self.entries[index as usize].blocked_in_pass == pass
    }

    /// Every scope that keeps counters and buckets now, with its ID (unordered).
    pub(crate) fn kept_states(&self) -> impl Iterator<Item = (&str, &ScopeState)> {
        self.index.iter().filter_map(|(id, &index)| {
            let state = self.entries[index as usize].state.as_deref()?;
            Some((id.as_str(), state))
        })
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &ScopeEntry<X>> {
        self.entries.iter()
    }

    /// Number of interned scopes.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

impl<X> Index<u32> for ScopeTable<X> {
    type Output = ScopeEntry<X>;

    #[inline]
    fn index(&self, index: u32) -> &ScopeEntry<X> {
        &self.entries[index as usize]
    }
}

impl<X> IndexMut<u32> for ScopeTable<X> {
    #[inline]
    fn index_mut(&mut self, index: u32) -> &mut ScopeEntry<X> {
        &mut self.entries[index as usize]
    }
}

/// Every scope of one workspace controller.
#[derive(Debug, Default)]
pub(crate) struct Scopes {
    pub(crate) workspace: ScopeState,
    pub(crate) principals: ScopeTable<()>,
    pub(crate) providers: ScopeTable<ProviderExtra>,
    /// Principals with a `reservedConcurrency` above 0, by index.
    pub(crate) reserved_principals: Vec<u32>,
}

impl Scopes {
    /// Puts every scope under `profile` (see [`ScopeTable::install`]).
    pub(crate) fn install(&mut self, profile: &Profile, now: Millis) {
        self.workspace.sync_limits(&profile.workspace, now);
        self.providers.install(&profile.providers, now);
        // Provider state is never forgotten (providers are few): it exists from the start, so
        // views read its buckets even before the first request.
        for provider in 0..self.providers.len() as u32 {
            self.providers.state_mut(provider, now);
        }
        self.principals.install(&profile.principals, now);
        self.reserved_principals = self
            .principals
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                p.limits
                    .as_ref()
                    .is_some_and(|l| l.reserved_concurrency.unwrap_or(0) > 0)
            })
            .map(|(i, _)| i as u32)
            .collect();
    }

    /// The lane's three scopes, in the reference order: principal, workspace, provider
    /// (re-creating a forgotten principal or provider state at `now`).
    #[inline]
    pub(crate) fn of_lane_mut(
        &mut self,
        (provider, principal): LaneKey,
        now: Millis,
    ) -> [&mut ScopeState; 3] {
        [
            self.principals.state_mut(principal, now),
            &mut self.workspace,
            self.providers.state_mut(provider, now),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::CircuitBreakerConfig;

    fn profile(principals: &[(&str, Limits)], providers: &[(&str, Limits)]) -> Profile {
        Profile {
            workspace: Limits::with_concurrency(4),
            principals: principals
                .iter()
                .map(|(id, l)| ((*id).to_owned(), l.clone()))
                .collect(),
            providers: providers
                .iter()
                .map(|(id, l)| ((*id).to_owned(), l.clone()))
                .collect(),
        }
    }

    #[test]
    fn interning_is_stable_across_installs_and_only_named_ids_are_interned() {
        let mut scopes = Scopes::default();
        scopes.install(
            &profile(
                &[("a", Limits::with_concurrency(1))],
                &[("jev", Limits::default())],
            ),
            0,
        );
        let a = scopes.principals.find("a").unwrap();
        assert_eq!(scopes.principals.find("stranger"), None);
        scopes.install(
            &profile(
                &[("b", Limits::with_concurrency(2))],
                &[("jev", Limits::default())],
            ),
            0,
        );
        assert_eq!(scopes.principals.find("a"), Some(a), "an index never moves");
        assert_eq!(scopes.principals.len(), 2);
        assert!(
            scopes.principals.limits(a).is_none(),
            "unnamed now: no limits"
        );
        let b = scopes.principals.find("b").unwrap();
        assert_eq!(scopes.principals.limits(b).map(|l| l.concurrency), Some(2));
    }

    #[test]
    fn buckets_follow_the_installed_limits() {
        let rated = Limits {
            requests_per_minute: Some(10),
            ..Limits::with_concurrency(1)
        };
        let mut scopes = Scopes::default();
        scopes.install(&profile(&[("a", rated)], &[]), 0);
        let a = scopes.principals.find("a").unwrap();
        assert!(scopes.principals.state_mut(a, 0).requests.is_some());
        scopes.install(&profile(&[("a", Limits::with_concurrency(1))], &[]), 0);
        assert!(scopes.principals.state_mut(a, 0).requests.is_none());
    }

    #[test]
    fn a_provider_without_breaker_configuration_forgets_its_breaker_state() {
        let with_breaker = Limits {
            circuit_breaker: Some(CircuitBreakerConfig {
                failure_threshold: 1,
                open_ms: Some(100),
                half_open_max_calls: Some(1),
            }),
            ..Limits::default()
        };
        let mut scopes = Scopes::default();
        scopes.install(&profile(&[], &[("jev", with_breaker.clone())]), 0);
        let jev = scopes.providers.find("jev").unwrap();
        let config = with_breaker.circuit_breaker.clone();
        scopes.providers[jev].extra.breaker.record_failure(
            config.as_ref(),
            "jev",
            0,
            &mut Vec::new(),
        );
        assert_eq!(scopes.providers[jev].extra.breaker.failures(), 1);
        scopes.install(&profile(&[], &[("jev", with_breaker)]), 0);
        assert_eq!(scopes.providers[jev].extra.breaker.failures(), 1, "kept");
        scopes.install(&profile(&[], &[("jev", Limits::default())]), 0);
        assert_eq!(
            scopes.providers[jev].extra.breaker.failures(),
            0,
            "forgotten"
        );
        assert_eq!(scopes.providers[jev].extra.id, "jev");
    }

    #[test]
    fn reservations_and_blocked_marks() {
        let reserved = Limits {
            reserved_concurrency: Some(1),
            ..Limits::with_concurrency(2)
        };
        let mut scopes = Scopes::default();
        scopes.install(
            &profile(&[("a", Limits::with_concurrency(1)), ("r", reserved)], &[]),
            0,
        );
        let r = scopes.principals.find("r").unwrap();
        assert_eq!(scopes.reserved_principals, vec![r]);
        scopes.principals.mark_blocked(r, 7);
        assert!(scopes.principals.is_blocked(r, 7));
        assert!(
            !scopes.principals.is_blocked(r, 8),
            "a new pass clears the mark"
        );
    }
}
