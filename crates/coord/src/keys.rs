//! Key names in Redis: every key of a workspace under one hash tag.
//!
//! `ts:{W}:…` with W the first 16 hex digits (64 bits) of sha256(workspace ID). A call touches
//! one cluster slot, and no tenant ID ever appears in a key, `MONITOR` or the slowlog: scope
//! and budget names are hashed the same way (principal `u<h>`, workspace `w`, provider `p<h>`).
//!
//! Invariant: every key a function call names comes from one [`WorkspaceKeys`], so all keys of
//! one call share a slot.

use std::cell::RefCell;
use std::collections::HashMap;

use sha2::{Digest, Sha256};

/// How many hashed IDs each thread remembers (see [`short_hash`]); past it the memo starts
/// over.
const SHORT_HASHES_KEPT: usize = 4096;

thread_local! {
    /// IDs hashed on this thread, with their 16 hex digits.
    static SHORT_HASHES: RefCell<HashMap<Box<str>, [u8; 16], foldhash::fast::RandomState>> =
        RefCell::new(HashMap::default());
}

/// 16 hex digits of sha256(`text`).
///
/// Memoised per thread: an admission names its workspace, principal, provider and budget in
/// several keys, and a SHA-256 costs about 3,000 instructions on a CPU without SHA extensions
/// (`docs/performance.md`), about 8 of them per acquire. The memo is bounded (it starts over
/// past [`SHORT_HASHES_KEPT`] IDs: budget IDs come from clients) and holds nothing a replica
/// does not already hold in memory.
pub fn short_hash(text: &str) -> String {
    let mut hash = String::with_capacity(16);
    push_short_hash(&mut hash, text);
    hash
}

/// Appends [`short_hash`]`(text)` to `out`.
pub fn push_short_hash(out: &mut String, text: &str) {
    let remembered = SHORT_HASHES.with(|memo| {
        let memo = memo.try_borrow().ok()?;
        memo.get(text).copied()
    });
    let hex = match remembered {
        Some(hex) => hex,
        None => {
            let hex = hash_hex(text);
            SHORT_HASHES.with(|memo| {
                if let Ok(mut memo) = memo.try_borrow_mut() {
                    if memo.len() >= SHORT_HASHES_KEPT {
                        memo.clear();
                    }
                    memo.insert(text.into(), hex);
                }
            });
            hex
        }
    };
    // Hex digits are ASCII: always UTF-8.
    out.push_str(std::str::from_utf8(&hex).unwrap_or_default());
}

/// The 16 hex digits of sha256(`text`), as ASCII bytes.
fn hash_hex(text: &str) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = [0u8; 16];
    for (pair, byte) in hex.chunks_exact_mut(2).zip(digest.iter()) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
    hex
}

/// The keys of one workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceKeys {
    prefix: String,
}

impl WorkspaceKeys {
    /// The keys of `workspace` (its ID is hashed into the hash tag, never written).
    pub fn new(workspace: &str) -> Self {
        WorkspaceKeys {
            prefix: format!("ts:{{{}}}:", short_hash(workspace)),
        }
    }

    /// The hash-tagged prefix `ts:{W}:` (also the renew batch's grouping key).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The workspace's books epoch (`ts:{W}:ep`, written by the library: the server ms from
    /// which the workspace's books are trusted; `docs/replicas.md`, "Redis loses the books").
    pub fn books_epoch(&self) -> String {
        format!("{}ep", self.prefix)
    }

    /// A scope's lease zset.
    pub fn leases(&self, scope: &ScopeName) -> String {
        format!("{}lease:{}", self.prefix, scope.0)
    }

    /// A scope's shared buckets (request and token bucket in one hash).
    pub fn buckets(&self, scope: &ScopeName) -> String {
        format!("{}bkt:{}", self.prefix, scope.0)
    }

    /// A scope's request bucket (the degraded mode's local bucket map).
    pub fn requests(&self, scope: &ScopeName) -> String {
        format!("{}bkt:{}:rpm", self.prefix, scope.0)
    }

    /// A scope's token bucket (the degraded mode's local bucket map).
    pub fn tokens(&self, scope: &ScopeName) -> String {
        format!("{}bkt:{}:tps", self.prefix, scope.0)
    }

    /// A provider's pause.
    pub fn pause(&self, provider: &str) -> String {
        format!("{}pause:{}", self.prefix, short_hash(provider))
    }

    /// An invocation's budget lines.
    pub fn budget(&self, budget_id: &str) -> String {
        format!("{}bud:{}", self.prefix, short_hash(budget_id))
    }

    /// The principals waiting for a contended scope (fair turns).
    pub fn waiting(&self, scope: &ScopeName) -> String {
        format!("{}wait:{}", self.prefix, scope.0)
    }

    /// A provider's shared breaker.
    pub fn breaker(&self, provider: &str) -> String {
        format!("{}brk:{}", self.prefix, short_hash(provider))
    }

    /// A provider's half-open probe leases.
    pub fn probes(&self, provider: &str) -> String {
        format!("{}probe:{}", self.prefix, short_hash(provider))
    }
}

/// A scope's name inside its workspace's keys (hashed: never an ID).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScopeName(pub String);

impl ScopeName {
    /// The scope of `principal` (hashed).
    pub fn principal(principal: &str) -> Self {
        ScopeName::hashed('u', principal)
    }

    /// The workspace's own scope.
    pub fn workspace() -> Self {
        ScopeName("w".to_owned())
    }

    /// The scope of `provider` (hashed).
    pub fn provider(provider: &str) -> Self {
        ScopeName::hashed('p', provider)
    }

    /// `letter` then the short hash of `id` (one allocation: built for every admission).
    fn hashed(letter: char, id: &str) -> Self {
        let mut name = String::with_capacity(17);
        name.push(letter);
        push_short_hash(&mut name, id);
        ScopeName(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_workspace_shares_one_hash_tag_and_names_no_id() {
        let keys = WorkspaceKeys::new("acme-corp");
        let scope = ScopeName::principal("alice");
        let names = [
            keys.leases(&scope),
            keys.buckets(&ScopeName::workspace()),
            keys.requests(&ScopeName::workspace()),
            keys.tokens(&ScopeName::provider("openai")),
            keys.pause("openai"),
            keys.budget("run-1"),
            keys.waiting(&scope),
            keys.breaker("openai"),
            keys.probes("openai"),
        ];
        let tag = format!("{{{}}}", short_hash("acme-corp"));
        for name in &names {
            assert!(name.starts_with(&format!("ts:{tag}:")), "{name}");
            for id in ["acme", "alice", "openai", "run-1"] {
                assert!(!name.contains(id), "{name} names {id}");
            }
        }
        assert_ne!(WorkspaceKeys::new("a"), WorkspaceKeys::new("b"));
        assert_eq!(scope.0, format!("u{}", short_hash("alice")));
        assert_eq!(
            ScopeName::provider("openai").0,
            format!("p{}", short_hash("openai"))
        );
    }

    #[test]
    fn short_hash_is_the_first_16_hex_digits_of_sha256_remembered_or_not() {
        // sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
        assert_eq!(short_hash("abc"), "ba7816bf8f01cfea");
        assert_eq!(short_hash("abc"), "ba7816bf8f01cfea", "from the memo");
        // Past the bound the memo starts over and answers stay the same.
        for i in 0..SHORT_HASHES_KEPT + 10 {
            let id = format!("budget-{i}");
            let expected = hex::encode(&Sha256::digest(id.as_bytes())[..8]);
            assert_eq!(short_hash(&id), expected);
        }
        SHORT_HASHES.with(|memo| assert!(memo.borrow().len() <= SHORT_HASHES_KEPT));
        assert_eq!(short_hash("abc"), "ba7816bf8f01cfea");
    }
}
