//! Counted slots per client key: per-address connections, per-key requests, per-key pending
//! admissions.
//!
//! A [`Slots`] map counts how many slots each key holds and refuses a slot past the per-key
//! cap. A [`Slot`] gives its unit back when dropped, and a key whose count reaches zero is
//! removed, so the map holds at most one entry per key that holds a slot *now*: its size is
//! bounded by the number of open connections (or in-flight requests), never by the number of
//! keys ever seen.
//!
//! Complexity: one hash lookup under a mutex per take and per drop.

use std::hash::Hash;
use std::sync::{Arc, Mutex};

use foldhash::HashMap;

/// Slot counts by key, each capped at `cap`.
#[derive(Debug)]
pub struct Slots<K: Eq + Hash> {
    cap: usize,
    held: Mutex<HashMap<K, usize>>,
}

/// One slot of one key; dropping it gives the slot back.
#[derive(Debug)]
pub struct Slot<K: Eq + Hash + Clone> {
    slots: Arc<Slots<K>>,
    key: K,
}

impl<K: Eq + Hash + Clone> Slots<K> {
    /// A map whose keys may hold at most `cap` slots each.
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Slots {
            cap,
            held: Mutex::new(HashMap::default()),
        })
    }

    /// One more slot for `key`, or `None` when it holds `cap` already.
    pub fn take(self: &Arc<Self>, key: K) -> Option<Slot<K>> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(key.clone()).or_insert(0);
        if *count >= self.cap {
            if *count == 0 {
                held.remove(&key);
            }
            return None;
        }
        *count += 1;
        Some(Slot {
            slots: self.clone(),
            key,
        })
    }

    /// Keys holding at least one slot (the map's size).
    #[cfg(test)]
    pub fn keys(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Slots `key` holds.
    #[cfg(test)]
    pub fn held_by(&self, key: &K) -> usize {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

impl<K: Eq + Hash + Clone> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_capped_and_forgotten_when_it_holds_nothing() {
        let slots = Slots::new(2);
        let a = slots.take("a").unwrap();
        let b = slots.take("a").unwrap();
        assert!(slots.take("a").is_none());
        let other = slots.take("b").unwrap();
        assert_eq!((slots.keys(), slots.held_by(&"a")), (2, 2));
        drop(a);
        assert!(slots.take("a").is_some());
        drop((b, other));
        assert_eq!(slots.keys(), 0);
        let zero = Slots::new(0);
        assert!(zero.take("x").is_none());
        assert_eq!(zero.keys(), 0);
    }
}
