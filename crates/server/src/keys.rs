//! API keys: generation, hashing and the in-memory key ring.
//!
//! A key is 256 random bits from the operating system, hex encoded behind a prefix that says
//! what it is (`tsa_` admin, `tsk_` principal). Only `sha256(key)` is ever stored; with keys of
//! that entropy a plain hash is enough (no password stretching is needed), and lookups compare
//! hashes, so timing reveals nothing usable about a key.
//!
//! Invariant: the plaintext of a key exists only in the response (or first-start banner) that
//! created it.
//!
//! Below: authentication and the role table (`auth.rs`), and the cache of recent key hashes
//! (`key_cache.rs`).

use std::sync::{Arc, RwLock};

use foldhash::HashMap;
use sha2::{Digest, Sha256};

use crate::keys::key_cache::KeyHashCache;
use turnstile_store::{KeyRole, StoredKey};

pub(crate) mod auth;
pub(crate) mod key_cache;

/// Who an authenticated request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Manages profiles and keys of every workspace.
    Admin,
    /// One principal of one workspace.
    Principal {
        workspace: Arc<str>,
        principal: Arc<str>,
    },
}

/// The randomness source failed.
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random source failed")]
pub struct RandomError;

/// Fills `buf` from the operating system's random source.
pub fn random_bytes(buf: &mut [u8]) -> Result<(), RandomError> {
    getrandom::fill(buf).map_err(|_| RandomError)
}

/// A fresh key with the prefix of its role.
pub fn generate(role: KeyRole) -> Result<String, RandomError> {
    let mut bytes = [0u8; 32];
    random_bytes(&mut bytes)?;
    let prefix = match role {
        KeyRole::Admin => "tsa_",
        KeyRole::Principal => "tsk_",
    };
    Ok(format!("{prefix}{}", hex::encode(bytes)))
}

/// `sha256(key)`.
pub fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The stored form of a key.
pub fn stored(
    key: &str,
    role: KeyRole,
    workspace: Option<&str>,
    principal: Option<&str>,
    now_ms: u64,
) -> StoredKey {
    StoredKey {
        hash: hex::encode(hash(key)),
        role,
        workspace_id: workspace.map(str::to_owned),
        principal_id: principal.map(str::to_owned),
        created_at_ms: now_ms,
    }
}

/// The public ID of a stored key: `key_` and the first 16 hex digits of its hash. It names a key
/// in listings and revocations; it reveals nothing usable about the key (the key has 256 bits
/// of entropy, the ID is 64 bits of its hash).
pub fn key_id(hash_hex: &str) -> String {
    format!("key_{}", &hash_hex[..hash_hex.len().min(16)])
}

/// Key hashes and what they grant, loaded from the store at start and extended when an admin
/// creates a key.
#[derive(Debug, Default)]
pub struct KeyRing {
    keys: RwLock<HashMap<[u8; 32], Caller>>,
    /// The hashes of keys presented recently (`lookup` hashes a busy key once).
    recent: KeyHashCache,
}

impl KeyRing {
    /// A ring holding the stored keys. Rows that cannot be read (bad hash, principal key
    /// without its scope) are skipped: they authenticate nobody.
    pub fn from_stored(stored: &[StoredKey]) -> Self {
        let ring = KeyRing::default();
        for key in stored {
            ring.insert(key);
        }
        ring
    }

    /// Adds one stored key.
    pub fn insert(&self, key: &StoredKey) {
        let Ok(bytes) = hex::decode(&key.hash) else {
            return;
        };
        let Ok(hash) = <[u8; 32]>::try_from(bytes.as_slice()) else {
            return;
        };
        let caller = match (key.role, &key.workspace_id, &key.principal_id) {
            (KeyRole::Admin, _, _) => Caller::Admin,
            (KeyRole::Principal, Some(workspace), Some(principal)) => Caller::Principal {
                workspace: Arc::from(workspace.as_str()),
                principal: Arc::from(principal.as_str()),
            },
            (KeyRole::Principal, _, _) => return,
        };
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        keys.insert(hash, caller);
    }

    /// Forgets a key (revocation): from now on it authenticates nobody.
    pub fn remove(&self, hash_hex: &str) {
        let Ok(bytes) = hex::decode(hash_hex) else {
            return;
        };
        let Ok(hash) = <[u8; 32]>::try_from(bytes.as_slice()) else {
            return;
        };
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        keys.remove(&hash);
    }

    /// Who `key` authenticates, if anyone.
    #[cfg(test)]
    pub fn lookup(&self, key: &str) -> Option<Caller> {
        self.authenticate(key).map(|(_, caller)| caller)
    }

    /// The hash of `key` and who it authenticates, if anyone. A key that authenticated
    /// recently is not hashed again ([`KeyHashCache`]); who it is still comes from the ring.
    pub fn authenticate(&self, key: &str) -> Option<([u8; 32], Caller)> {
        let tag = self.recent.tag(key);
        if let Some(remembered) = tag.and_then(|tag| self.recent.get(tag)) {
            if let Some(caller) = self.lookup_hash(&remembered) {
                return Some((remembered, caller));
            }
        }
        let hash = hash(key);
        let caller = self.lookup_hash(&hash)?;
        if let Some(tag) = tag {
            self.recent.remember(tag, hash);
        }
        Some((hash, caller))
    }

    /// Who the key with this hash authenticates, if anyone.
    pub fn lookup_hash(&self, hash: &[u8; 32]) -> Option<Caller> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        keys.get(hash).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_hash_is_stored_and_it_authenticates() {
        let key = generate(KeyRole::Principal).unwrap();
        assert!(key.starts_with("tsk_") && key.len() == 68);
        let stored = stored(&key, KeyRole::Principal, Some("w"), Some("p"), 0);
        assert!(!stored.hash.contains(&key[4..]));
        let ring = KeyRing::from_stored(&[stored]);
        assert_eq!(
            ring.lookup(&key),
            Some(Caller::Principal {
                workspace: "w".into(),
                principal: "p".into()
            })
        );
        assert_eq!(ring.lookup("tsk_wrong"), None);
    }

    #[test]
    fn a_remembered_key_is_refused_once_revoked_and_a_wrong_key_is_never_remembered() {
        let key = generate(KeyRole::Principal).unwrap();
        let stored = stored(&key, KeyRole::Principal, Some("w"), Some("p"), 0);
        let ring = KeyRing::from_stored(std::slice::from_ref(&stored));
        let first = ring.authenticate(&key).unwrap();
        // The second lookup is served from the cache, with the same hash and caller.
        let tag = ring.recent.tag(&key).unwrap();
        assert_eq!(ring.recent.get(tag), Some(first.0));
        assert_eq!(ring.authenticate(&key), Some(first.clone()));
        assert_eq!(first.0, hash(&key));
        ring.remove(&stored.hash);
        assert_eq!(ring.authenticate(&key), None);
        // A wrong key that differs in one character is neither authenticated nor remembered.
        let mut wrong = key.clone();
        wrong.pop();
        wrong.push(if key.ends_with('0') { '1' } else { '0' });
        assert_eq!(ring.authenticate(&wrong), None);
        assert_eq!(ring.recent.get(ring.recent.tag(&wrong).unwrap()), None);
    }

    #[test]
    fn the_cache_is_bounded_and_tags_are_keyed_per_process() {
        let cache = KeyHashCache::default();
        for i in 0..(crate::keys::key_cache::CAPACITY as u128 + 10) {
            cache.remember(i, [0; 32]);
        }
        assert!(cache.get(0).is_none(), "a full cache starts over");
        assert!(cache
            .get(crate::keys::key_cache::CAPACITY as u128 + 9)
            .is_some());
        let other = KeyHashCache::default();
        assert_ne!(cache.tag("tsk_same"), other.tag("tsk_same"));
    }
}
