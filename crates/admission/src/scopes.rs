//! The scope tables of one controller ([`Scopes`]): the workspace scope, and the principal and
//! provider tables with their interning and their per-pass "blocked" marks.
//!
//! # What it decides
//!
//! Which dense index a principal or provider ID has, which limits each scope is under (the
//! profile in force), and which principals hold a concurrency reservation. The checks that read
//! these scopes live in `controller/admit.rs`.
//!
//! # Invariants
//!
//! - Interning is append-only: an ID keeps its index for the controller's life, so lane keys
//!   and budget scope keys built from indices never dangle. Only IDs the profile names are
//!   interned ([`Scopes::install`]); a request naming any other ID is refused before any state
//!   is kept for it, so arbitrary IDs cannot grow the tables.
//! - An entry's limits are exactly the profile's limits for its ID (`None` once the profile no
//!   longer names it), and its buckets match those limits ([`ScopeState::sync_limits`]).
//! - The blocked marks hold the number of the pump pass that found the scope blocked; a mark
//!   from an older pass means "not blocked", so starting a pass clears every mark in O(1).
//!
//! # Complexity
//!
//! Lookup by ID is O(1) expected (a hash of the ID); by index, O(1). Installing a profile is
//! O(scopes known + scopes named), and only happens on a profile change.

use std::collections::BTreeMap;
use std::ops::{Index, IndexMut};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::breaker::Breaker;
use crate::lane::LaneKey;
use crate::limits::Limits;
use crate::profile::Profile;
use crate::scope::ScopeState;
use crate::time::Millis;

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

/// A provider lane's own state: its ID (for transitions and snapshots), breaker and pause.
#[derive(Debug)]
pub(crate) struct ProviderExtra {
    pub(crate) id: String,
    pub(crate) breaker: Breaker,
    /// A Retry-After pause lasts until this instant (0: never paused).
    pub(crate) paused_until: Millis,
}

impl ScopeExtra for ProviderExtra {
    fn new(id: &str) -> Self {
        ProviderExtra {
            id: id.to_owned(),
            breaker: Breaker::default(),
            paused_until: 0,
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
/// same state without copying them), its counters and buckets, and its extra state.
#[derive(Debug)]
pub(crate) struct ScopeEntry<X> {
    pub(crate) limits: Option<Arc<Limits>>,
    pub(crate) scope: ScopeState,
    pub(crate) extra: X,
}

/// Scopes of one kind (principals or providers), interned to dense indices.
#[derive(Debug)]
pub(crate) struct ScopeTable<X> {
    entries: Vec<ScopeEntry<X>>,
    index: FxHashMap<String, u32>,
    blocked_in_pass: Vec<u64>,
}

impl<X> Default for ScopeTable<X> {
    fn default() -> Self {
        ScopeTable {
            entries: Vec::new(),
            index: FxHashMap::default(),
            blocked_in_pass: Vec::new(),
        }
    }
}

impl<X: ScopeExtra> ScopeTable<X> {
    /// The index of a known ID.
    #[inline]
    pub(crate) fn find(&self, id: &str) -> Option<u32> {
        self.index.get(id).copied()
    }

    /// The index of `id`, interning it under `limits` if it is new.
    fn intern(&mut self, id: &str, limits: Option<&Limits>, now: Millis) -> u32 {
        if let Some(index) = self.find(id) {
            return index;
        }
        let index = self.entries.len() as u32;
        let mut scope = ScopeState::default();
        if let Some(limits) = limits {
            scope.sync_limits(limits, now);
        }
        self.entries.push(ScopeEntry {
            limits: limits.cloned().map(Arc::new),
            scope,
            extra: X::new(id),
        });
        self.blocked_in_pass.push(0);
        self.index.insert(id.to_owned(), index);
        index
    }

    /// Puts every known scope under the limits `configured` gives its ID (or none), then
    /// interns the IDs `configured` names for the first time.
    fn install(&mut self, configured: &BTreeMap<String, Limits>, now: Millis) {
        for (id, &index) in &self.index {
            let entry = &mut self.entries[index as usize];
            let limits = configured.get(id);
            entry.limits = limits.cloned().map(Arc::new);
            entry
                .scope
                .sync_limits(limits.unwrap_or(&Limits::default()), now);
            entry.extra.limits_installed(limits);
        }
        for (id, limits) in configured {
            self.intern(id, Some(limits), now);
        }
    }

    /// The limits of a scope, `None` when the profile does not name it.
    #[inline]
    pub(crate) fn limits(&self, index: u32) -> Option<&Limits> {
        self.entries[index as usize].limits.as_deref()
    }

    /// Marks a scope blocked for the rest of pump pass `pass`.
    #[inline]
    pub(crate) fn mark_blocked(&mut self, index: u32, pass: u64) {
        self.blocked_in_pass[index as usize] = pass;
    }

    /// Whether pump pass `pass` already found the scope blocked.
    #[inline]
    pub(crate) fn is_blocked(&self, index: u32, pass: u64) -> bool {
        self.blocked_in_pass[index as usize] == pass
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

    /// The lane's three scopes, in the reference order: principal, workspace, provider.
    #[inline]
    pub(crate) fn of_lane_mut(&mut self, (provider, principal): LaneKey) -> [&mut ScopeState; 3] {
        [
            &mut self.principals[principal].scope,
            &mut self.workspace,
            &mut self.providers[provider].scope,
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
        assert!(scopes.principals[a].scope.requests.is_some());
        scopes.install(&profile(&[("a", Limits::with_concurrency(1))], &[]), 0);
        assert!(scopes.principals[a].scope.requests.is_none());
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
