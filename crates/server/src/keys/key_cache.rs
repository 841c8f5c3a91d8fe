//! Remembers the `sha256` of keys that authenticated recently, so a busy client's key is hashed
//! once, not on every request.
//!
//! Hashing the presented key was the largest single cost of a request on the admission API
//! (about 8 % of the service's instructions per acquire + release pair: two SHA-256 blocks per
//! request, and this VM's CPU has no SHA extensions). The cache maps a **tag** of the presented
//! key to its hash: SipHash-2-4 with 128-bit output, keyed with 128 random bits drawn at start.
//!
//! Invariants:
//! - no plaintext key is stored: only tags and hashes. A tag is a keyed PRF of the key; without
//!   the process's random SipHash key, finding another string with the same tag as a cached key
//!   is a 2⁻¹²⁸ guess per try;
//! - only keys that authenticated are remembered (a flood of wrong keys cannot fill or churn
//!   the cache, it only costs the hash it always cost);
//! - the cache never decides who a key is: the caller looks the remembered hash up in the key
//!   ring, so a revoked key authenticates nobody from the moment the ring forgets it;
//! - at most [`CAPACITY`] entries; a full cache is emptied and refills with the keys in use.

use std::hash::Hasher;
use std::sync::RwLock;

use foldhash::HashMap;
use siphasher::sip128::{Hasher128, SipHasher24};

/// Most keys remembered at once.
pub const CAPACITY: usize = 4096;

/// Tags of recently authenticated keys and their `sha256`.
#[derive(Debug)]
pub struct KeyHashCache {
    /// The SipHash key; `None` (the system's random source failed) turns the cache off.
    secret: Option<(u64, u64)>,
    hashes: RwLock<HashMap<u128, [u8; 32]>>,
}

impl Default for KeyHashCache {
    fn default() -> Self {
        let mut seed = [0u8; 16];
        let secret = crate::keys::random_bytes(&mut seed).ok().map(|()| {
            let [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p] = seed;
            (
                u64::from_le_bytes([a, b, c, d, e, f, g, h]),
                u64::from_le_bytes([i, j, k, l, m, n, o, p]),
            )
        });
        KeyHashCache {
            secret,
            hashes: RwLock::new(HashMap::default()),
        }
    }
}

impl KeyHashCache {
    /// The tag of a presented key (`None` when the cache is off).
    pub fn tag(&self, key: &str) -> Option<u128> {
        let (k0, k1) = self.secret?;
        let mut hasher = SipHasher24::new_with_keys(k0, k1);
        hasher.write(key.as_bytes());
        Some(hasher.finish128().as_u128())
    }

    /// The remembered hash of the key with this tag.
    pub fn get(&self, tag: u128) -> Option<[u8; 32]> {
        let hashes = self.hashes.read().unwrap_or_else(|e| e.into_inner());
        hashes.get(&tag).copied()
    }

    /// Remembers the hash of a key that authenticated.
    pub fn remember(&self, tag: u128, hash: [u8; 32]) {
        let mut hashes = self.hashes.write().unwrap_or_else(|e| e.into_inner());
        if hashes.len() >= CAPACITY {
            hashes.clear();
        }
        hashes.insert(tag, hash);
    }
}
