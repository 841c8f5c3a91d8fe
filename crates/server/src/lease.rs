//! The lease table: server-side lease tokens with a time to live.
//!
//! A lease token is 128 random bits, hex encoded: unguessable, so a token is never enumerable
//! from another one. Each entry remembers the workspace controller's own [`LeaseId`], the owner
//! (checked on release and heartbeat) and its expiry. Expiries sit in an ordered set, so the
//! next one is found in O(log n) and the driver's single timer covers them exactly.
//!
//! Invariants: every entry has exactly one expiry in the set; a token leaves the table exactly
//! once (release, reclaim, or an undeliverable grant).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use turnstile_admission::{LeaseId, Millis};

use crate::keys::{random_bytes, RandomError};

/// A server-side lease ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseToken([u8; 16]);

impl LeaseToken {
    /// A fresh random token.
    pub fn random() -> Result<Self, RandomError> {
        let mut bytes = [0u8; 16];
        random_bytes(&mut bytes)?;
        Ok(LeaseToken(bytes))
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
        f.write_str(&hex::encode(self.0))
    }
}

/// One granted lease.
#[derive(Debug, Clone)]
pub struct LeaseEntry {
    pub workspace: Arc<str>,
    pub principal: Arc<str>,
    pub lease: LeaseId,
    pub expires_at: Millis,
}

/// Leases by token, with their expiries in order.
#[derive(Debug, Default)]
pub struct LeaseTable {
    entries: HashMap<LeaseToken, LeaseEntry>,
    expiries: BTreeSet<(Millis, LeaseToken)>,
}

impl LeaseTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Stores `entry` under a fresh random token.
    pub fn insert(&mut self, entry: LeaseEntry) -> Result<LeaseToken, RandomError> {
        let mut token = LeaseToken::random()?;
        while self.entries.contains_key(&token) {
            token = LeaseToken::random()?;
        }
        self.expiries.insert((entry.expires_at, token));
        self.entries.insert(token, entry);
        Ok(token)
    }

    pub fn get(&self, token: &LeaseToken) -> Option<&LeaseEntry> {
        self.entries.get(token)
    }

    /// Moves a lease's expiry to `expires_at`. Returns `false` for an unknown token.
    pub fn extend(&mut self, token: &LeaseToken, expires_at: Millis) -> bool {
        let Some(entry) = self.entries.get_mut(token) else {
            return false;
        };
        self.expiries.remove(&(entry.expires_at, *token));
        entry.expires_at = expires_at;
        self.expiries.insert((expires_at, *token));
        true
    }

    pub fn remove(&mut self, token: &LeaseToken) -> Option<LeaseEntry> {
        let entry = self.entries.remove(token)?;
        self.expiries.remove(&(entry.expires_at, *token));
        Some(entry)
    }

    /// The earliest expiry.
    pub fn next_expiry(&self) -> Option<Millis> {
        self.expiries.first().map(|&(at, _)| at)
    }

    /// Removes and returns one lease expired at `now`, earliest first.
    pub fn pop_expired(&mut self, now: Millis) -> Option<LeaseEntry> {
        let &(at, token) = self.expiries.first()?;
        if at > now {
            return None;
        }
        self.remove(&token)
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
            expires_at,
        }
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
}
