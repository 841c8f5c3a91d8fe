//! The lease table: the driver's record of every granted lease, by unguessable token, with an
//! optional time to live and the lease's open `decision.admit` span.
//!
//! A lease token is 128 random bits, hex encoded: unguessable, so a token is never enumerable
//! from another one. The bits come from a ChaCha20 generator that the table seeds once from the
//! operating system (a `getrandom` system call per lease was measurable on the request path);
//! ChaCha20 is a cryptographically secure generator, so tokens stay unpredictable. Each entry
//! remembers the workspace controller's own [`LeaseId`], the owner (checked on release and
//! heartbeat), its expiry (none for leases of in-process holders, which release on drop) and
//! the lease's span. Expiries sit in an ordered set, so the next one is found in O(log n) and
//! the driver's single timer covers them exactly.
//!
//! Invariants: every entry with an expiry has exactly one entry in the expiry set; a token
//! leaves the table exactly once (release, reclaim, expiry), and its span ends when it leaves
//! (the entry owns the span: ended with the release's transitions, or on drop).

use std::collections::BTreeSet;

use foldhash::HashMap;
use std::sync::Arc;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use turnstile_admission::{LeaseId, Millis};

use crate::fairness::TokensServed;
use crate::telemetry::AdmitSpan;

/// The operating system could not seed the token generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the operating system's random source failed")]
pub struct RandomError;

/// A lease's public ID: 128 random bits, shown as 32 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseToken([u8; 16]);

impl LeaseToken {
    /// A fresh random token from `rng`.
    fn random(rng: &mut ChaCha20Rng) -> Self {
        let mut bytes = [0u8; 16];
        rng.fill_bytes(&mut bytes);
        LeaseToken(bytes)
    }

    /// Parses 32 hex digits; anything else is no token.
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() != 32 {
            return None;
        }
        let bytes = hex::decode(text).ok()?;
        <[u8; 16]>::try_from(bytes.as_slice()).ok().map(LeaseToken)
    }
}

impl std::fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut digits = [0u8; 32];
        // Cannot fail: 16 bytes are exactly 32 hex digits.
        if hex::encode_to_slice(self.0, &mut digits).is_err() {
            return Err(std::fmt::Error);
        }
        f.write_str(std::str::from_utf8(&digits).map_err(|_| std::fmt::Error)?)
    }
}

/// One granted lease.
pub struct LeaseEntry {
    pub workspace: Arc<str>,
    pub principal: Arc<str>,
    pub lease: LeaseId,
    /// `None`: the holder is in-process and releases on drop; no expiry.
    pub expires_at: Option<Millis>,
    /// The lease's open `decision.admit` span (ends when the entry leaves the table).
    pub span: Option<AdmitSpan>,
    /// What its grant added to the fairness window (`None`: reinstated after a restart); its
    /// release replaces the estimate with the tokens used.
    pub served: Option<TokensServed>,
}

impl std::fmt::Debug for LeaseEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseEntry")
            .field("lease", &self.lease)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Leases by token, with their expiries in order.
#[derive(Default)]
pub struct LeaseTable {
    entries: HashMap<LeaseToken, LeaseEntry>,
    expiries: BTreeSet<(Millis, LeaseToken)>,
    /// Seeded from the operating system on the first lease.
    rng: Option<ChaCha20Rng>,
}

impl LeaseTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Stores `entry` under a fresh random token. Fails only when the operating system cannot
    /// seed the token generator (on the first lease).
    pub fn insert(&mut self, entry: LeaseEntry) -> Result<LeaseToken, RandomError> {
        let rng = match &mut self.rng {
            Some(rng) => rng,
            slot => {
                let mut seed = [0u8; 32];
                getrandom::fill(&mut seed).map_err(|_| RandomError)?;
                slot.insert(ChaCha20Rng::from_seed(seed))
            }
        };
        let mut token = LeaseToken::random(rng);
        while self.entries.contains_key(&token) {
            token = LeaseToken::random(rng);
        }
        if let Some(at) = entry.expires_at {
            self.expiries.insert((at, token));
        }
        self.entries.insert(token, entry);
        Ok(token)
    }

    /// Stores `entry` under a token a previous process issued (a lease reinstated after a
    /// restart). Returns `false`, storing nothing, when the token is already taken.
    pub fn insert_with_token(&mut self, token: LeaseToken, entry: LeaseEntry) -> bool {
        if self.entries.contains_key(&token) {
            return false;
        }
        if let Some(at) = entry.expires_at {
            self.expiries.insert((at, token));
        }
        self.entries.insert(token, entry);
        true
    }

    pub fn get(&self, token: &LeaseToken) -> Option<&LeaseEntry> {
        self.entries.get(token)
    }

    /// Moves the expiry of a lease that has one to `expires_at`. Returns `false` for an
    /// unknown token or a lease without expiry.
    pub fn extend(&mut self, token: &LeaseToken, expires_at: Millis) -> bool {
        let Some(entry) = self.entries.get_mut(token) else {
            return false;
        };
        let Some(old) = entry.expires_at else {
            return false;
        };
        self.expiries.remove(&(old, *token));
        entry.expires_at = Some(expires_at);
        self.expiries.insert((expires_at, *token));
        true
    }

    pub fn remove(&mut self, token: &LeaseToken) -> Option<LeaseEntry> {
        let entry = self.entries.remove(token)?;
        if let Some(at) = entry.expires_at {
            self.expiries.remove(&(at, *token));
        }
        Some(entry)
    }

    /// The earliest expiry.
    pub fn next_expiry(&self) -> Option<Millis> {
        self.expiries.first().map(|&(at, _)| at)
    }

    /// Removes and returns one lease expired at `now`, earliest first.
    pub fn pop_expired(&mut self, now: Millis) -> Option<(LeaseToken, LeaseEntry)> {
        let &(at, token) = self.expiries.first()?;
        if at > now {
            return None;
        }
        self.remove(&token).map(|entry| (token, entry))
    }

    /// Leases of one workspace (for the admin snapshot).
    pub fn count_in(&self, workspace: &str) -> usize {
        self.entries
            .values()
            .filter(|e| &*e.workspace == workspace)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(expires_at: Millis) -> LeaseEntry {
        LeaseEntry {
            workspace: "w".into(),
            principal: "p".into(),
            lease: LeaseId(1),
            expires_at: Some(expires_at),
            span: None,
            served: None,
        }
    }

    #[test]
    fn leases_without_expiry_never_expire_and_cannot_be_extended() {
        let mut table = LeaseTable::new();
        let token = table
            .insert(LeaseEntry {
                expires_at: None,
                ..entry(0)
            })
            .unwrap();
        assert_eq!(table.next_expiry(), None);
        assert!(table.pop_expired(Millis::MAX).is_none());
        assert!(!table.extend(&token, 10));
        assert!(table.remove(&token).is_some());
        assert!(table.is_empty());
    }

    #[test]
    fn tokens_round_trip_and_expire_in_order() {
        let mut table = LeaseTable::new();
        let late = table.insert(entry(20)).unwrap();
        let early = table.insert(entry(10)).unwrap();
        assert_eq!(LeaseToken::parse(&early.to_string()), Some(early));
        assert_eq!(LeaseToken::parse("xyz"), None);
        assert_eq!(table.next_expiry(), Some(10));
        assert!(table.extend(&early, 30));
        assert_eq!(table.next_expiry(), Some(20));
        assert!(table.pop_expired(19).is_none());
        assert!(table.pop_expired(25).is_some());
        assert!(table.get(&late).is_none());
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_reinstated_token_keeps_its_expiry_and_is_never_taken_twice() {
        let mut table = LeaseTable::new();
        let token = LeaseToken::parse(&"ab".repeat(16)).unwrap();
        assert!(table.insert_with_token(token, entry(40)));
        assert!(!table.insert_with_token(token, entry(10)));
        assert_eq!(table.next_expiry(), Some(40));
        assert!(table.extend(&token, 50));
        assert_eq!(table.pop_expired(50).map(|(t, _)| t), Some(token));
        assert!(table.is_empty());
    }

    #[test]
    fn tokens_are_distinct_within_and_across_tables() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2 {
            // Each table seeds its own generator from the operating system.
            let mut table = LeaseTable::new();
            for _ in 0..1000 {
                let token = table.insert(entry(10)).unwrap();
                assert_eq!(token.to_string().len(), 32);
                assert!(seen.insert(token), "a token repeated");
            }
        }
    }
}
