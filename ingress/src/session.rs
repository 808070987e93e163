//! What one client connection has written: the highest basis a `Transact`
//! on it committed at, per database (from the owner's `corium-basis-t`
//! answer header). A `PeerServer` read on the same connection that names no
//! `corium-min-basis` of its own is given that basis, so the read replica
//! waits for the client's own writes: a stock thin client
//! (`corium_client::RemotePeer`, one connection) reads its writes through
//! the fleet as it does from one stock peer server, which syncs after each
//! `Transact`.

use std::collections::HashMap;
use std::sync::Mutex;

/// Databases remembered per connection. A client writing to more databases
/// than this on one connection loses read-your-writes for the ones dropped
/// (the oldest entries go first), never correctness of what it reads.
const DATABASES_PER_CONNECTION: usize = 1024;

/// Database → (basis, write order); the order picks the oldest to drop.
#[derive(Default)]
struct Bases {
    by_db: HashMap<String, (u64, u64)>,
    clock: u64,
}

/// One connection's written bases.
#[derive(Default)]
pub(crate) struct Written {
    bases: Mutex<Bases>,
}

impl Written {
    /// Records a commit of `db` at `basis`.
    pub(crate) fn record(&self, db: &str, basis: u64) {
        let mut guard = self
            .bases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Bases { by_db, clock } = &mut *guard;
        *clock += 1;
        let order = *clock;
        if !by_db.contains_key(db)
            && by_db.len() >= DATABASES_PER_CONNECTION
            && let Some(oldest) = by_db
                .iter()
                .min_by_key(|(_, (_, order))| *order)
                .map(|(db, _)| db.clone())
        {
            by_db.remove(&oldest);
        }
        let entry = by_db.entry(db.to_owned()).or_insert((0, order));
        *entry = (entry.0.max(basis), order);
    }

    /// The highest basis recorded for `db`.
    #[must_use]
    pub(crate) fn get(&self, db: &str) -> Option<u64> {
        self.bases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .by_db
            .get(db)
            .map(|(basis, _)| *basis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_basis_per_database_is_kept() {
        let written = Written::default();
        assert_eq!(written.get("a"), None);
        written.record("a", 5);
        written.record("a", 3);
        written.record("b", 1);
        assert_eq!((written.get("a"), written.get("b")), (Some(5), Some(1)));
    }

    #[test]
    fn past_the_bound_the_oldest_written_database_is_dropped() {
        let written = Written::default();
        for n in 0..DATABASES_PER_CONNECTION {
            written.record(&format!("db-{n}"), 1);
        }
        written.record("db-0", 2);
        written.record("new", 1);
        assert_eq!(written.get("db-1"), None, "the oldest went");
        assert_eq!(written.get("db-0"), Some(2), "a database written again stays");
        assert_eq!(written.get("new"), Some(1));
    }
}
