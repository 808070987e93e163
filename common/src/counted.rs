//! Counts per key with a limit: "how many calls (streams, waits,
//! connections) does this database (principal, address) have open now?".
//!
//! A key's entry lives only while its count is above zero, so the map holds
//! just the keys with something open, however many keys come and go (a
//! hostile caller's junk names included). Every per-key bound of both tiers
//! is one of these, so each is taken and given back the same way: a place
//! is a guard, and dropping it is the only way to give it back.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

/// Open counts per key.
pub struct Counts<K: Eq + Hash> {
    open: Arc<Mutex<HashMap<K, usize>>>,
}

impl<K: Eq + Hash> Default for Counts<K> {
    fn default() -> Self {
        Self { open: Arc::default() }
    }
}

impl<K: Eq + Hash> Clone for Counts<K> {
    fn clone(&self) -> Self {
        Self {
            open: Arc::clone(&self.open),
        }
    }
}

/// One place counted under a key; dropping it gives the place back.
#[must_use = "the place is given back when this is dropped"]
pub struct Counted<K: Eq + Hash> {
    open: Arc<Mutex<HashMap<K, usize>>>,
    key: Option<K>,
}

impl<K: Eq + Hash> Drop for Counted<K> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&key);
            }
        }
    }
}

impl<K: Eq + Hash + Clone> Counts<K> {
    /// Empty counts.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// One more under `key` if it has fewer than `limit` open; `None`
    /// (nothing counted) when it has `limit` already. `key` may be borrowed
    /// (`&str` for `String` keys): it is copied once, for the place, and
    /// once more only when the key is new.
    pub fn enter<Q>(&self, key: &Q, limit: usize) -> Option<Counted<K>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        match open.get_mut(key) {
            Some(count) if *count >= limit => return None,
            Some(count) => *count += 1,
            None if limit == 0 => return None,
            None => {
                open.insert(key.to_owned(), 1);
            }
        }
        Some(Counted {
            open: Arc::clone(&self.open),
            key: Some(key.to_owned()),
        })
    }

    /// One more under `key`, whatever it has open (for counts that are
    /// only reported, or bounded elsewhere).
    pub fn add<Q>(&self, key: &Q) -> Counted<K>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        match open.get_mut(key) {
            Some(count) => *count += 1,
            None => {
                open.insert(key.to_owned(), 1);
            }
        }
        Counted {
            open: Arc::clone(&self.open),
            key: Some(key.to_owned()),
        }
    }

    /// How many `key` has open now.
    #[must_use]
    pub fn get<Q>(&self, key: &Q) -> usize
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// How many keys have something open.
    #[must_use]
    pub fn keys(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Everything open, over all keys.
    #[must_use]
    pub fn total(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_key_is_bounded_and_forgotten_at_zero() {
        let counts = Counts::new();
        let one = counts.enter(&"a", 2).expect("first");
        let two = counts.enter(&"a", 2).expect("second");
        assert!(counts.enter(&"a", 2).is_none(), "the limit holds");
        assert!(counts.enter(&"b", 2).is_some(), "other keys have their own");
        assert_eq!(counts.get(&"a"), 2);
        drop(one);
        assert_eq!(counts.get(&"a"), 1);
        let three = counts.enter(&"a", 2).expect("a place came back");
        drop((two, three));
        assert_eq!(counts.keys(), 0, "nothing is kept for a key at zero");
    }

    #[test]
    fn add_counts_past_any_limit() {
        let counts = Counts::new();
        let held: Vec<_> = (0..5).map(|_| counts.add(&7u32)).collect();
        assert_eq!(counts.get(&7), 5);
        assert!(counts.enter(&7, 5).is_none());
        drop(held);
        assert_eq!(counts.total(), 0);
    }

    proptest! {
        #[test]
        fn counts_match_the_places_held(steps in proptest::collection::vec((0u8..4, any::<bool>()), 0..200)) {
            let counts = Counts::new();
            let mut held: Vec<(u8, Counted<u8>)> = Vec::new();
            for (key, take) in steps {
                if take {
                    if let Some(place) = counts.enter(&key, 3) {
                        held.push((key, place));
                    }
                } else if let Some(at) = held.iter().position(|(held_key, _)| *held_key == key) {
                    drop(held.swap_remove(at));
                }
                for probe in 0..4u8 {
                    let expected = held.iter().filter(|(held_key, _)| *held_key == probe).count();
                    prop_assert_eq!(counts.get(&probe), expected);
                    prop_assert!(expected <= 3);
                }
            }
            drop(held);
            prop_assert_eq!(counts.keys(), 0);
        }
    }
}
