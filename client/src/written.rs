//! What this client has seen committed: the highest basis per database,
//! which its reads ask the fleet's read replicas for (`corium-min-basis`)
//! so they never miss its own writes. Kept by [`Client`](crate::Client),
//! read by [`reads`](crate::reads).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The highest basis this client has seen committed, per database.
#[derive(Clone, Default)]
pub struct WrittenBases(Arc<Mutex<HashMap<String, u64>>>);

impl WrittenBases {
    /// Records a commit of `db` at `basis`.
    pub fn record(&self, db: &str, basis: u64) {
        let mut by_db = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = by_db.entry(db.to_owned()).or_default();
        *known = (*known).max(basis);
    }

    /// The highest basis recorded for `db` (0: none).
    #[must_use]
    pub fn get(&self, db: &str) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(db)
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_basis_only_grows_and_is_per_database() {
        let bases = WrittenBases::default();
        assert_eq!(bases.get("a"), 0);
        bases.record("a", 7);
        bases.record("a", 5);
        bases.record("b", 2);
        assert_eq!((bases.get("a"), bases.get("b")), (7, 2));
        let shared = bases.clone();
        shared.record("a", 9);
        assert_eq!(bases.get("a"), 9, "clones share it");
    }
}
