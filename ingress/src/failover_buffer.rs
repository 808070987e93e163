//! Holding calls while a database's ownership moves, so clients see added
//! latency instead of errors (what Vitess's vtgate does during a primary
//! failover).
//!
//! An attempt that met a typed `NotOwner` or a refused connection provably
//! did nothing at any node, so sending it again is safe for every call,
//! idempotent or not. The owner path already does that until the deadline
//! for a `Transact` with a request id, and once for every other call; a
//! second such answer is what a client used to see while a handoff, a drain
//! or a takeover after a crash was under way. Instead, the call now takes a
//! place here and goes on being sent (the owner path's backoff, 25 ms
//! doubling to 500 ms, the hinted or re-read holder each time) until it is
//! answered or its own deadline passes.
//!
//! Bounded: at most `per_database` calls of one database and `total` calls
//! holding `max_bytes` of request bodies in all. A call that finds no place
//! ends as before, with the answer it got; `per_database` 0 turns holding off.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use corium_fleet_common::counted::{Counted, Counts};

/// Places for held calls.
pub(crate) struct FailoverBuffer {
    per_database: usize,
    total: usize,
    max_bytes: usize,
    state: Mutex<Occupancy>,
    /// Calls holding a place, per database; taken and given back under
    /// `state`'s lock, so the three bounds are decided together.
    by_database: Counts<String>,
    /// Calls that took a place.
    pub held: AtomicU64,
    /// Calls that found none (the database's or the ingress's places full).
    pub overflowed: AtomicU64,
}

#[derive(Default)]
struct Occupancy {
    calls: usize,
    bytes: usize,
}

/// A held call's place; given back when dropped.
pub(crate) struct Held {
    buffer: Arc<FailoverBuffer>,
    /// The place among its database's calls.
    place: Option<Counted<String>>,
    bytes: usize,
}

impl FailoverBuffer {
    /// Places for `per_database` calls of a database, `total` in all, with
    /// bodies of at most `max_bytes` together.
    #[must_use]
    pub(crate) fn new(per_database: usize, total: usize, max_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            per_database,
            total,
            max_bytes,
            state: Mutex::default(),
            by_database: Counts::new(),
            held: AtomicU64::new(0),
            overflowed: AtomicU64::new(0),
        })
    }

    /// A place for a call to `db` whose body is `bytes` long, if one is free.
    #[must_use]
    pub(crate) fn hold(self: &Arc<Self>, db: &str, bytes: usize) -> Option<Held> {
        if self.per_database == 0 {
            return None;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let place = if state.calls >= self.total || state.bytes.saturating_add(bytes) > self.max_bytes {
            None
        } else {
            self.by_database.enter(db, self.per_database)
        };
        let Some(place) = place else {
            drop(state);
            self.overflowed.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        state.calls += 1;
        state.bytes += bytes;
        drop(state);
        self.held.fetch_add(1, Ordering::Relaxed);
        Some(Held {
            buffer: Arc::clone(self),
            place: Some(place),
            bytes,
        })
    }

    /// Calls holding a place now.
    #[must_use]
    pub(crate) fn holding(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).calls
    }

    /// Writes the buffer's series.
    pub(crate) fn collect(&self, scrape: &mut corium_fleet_common::metrics::Scrape<'_>) {
        scrape.gauge(
            "corium_fleet_ingress_failover_held_calls",
            "Calls held while their database's ownership moves.",
            self.holding() as u64,
        );
        scrape.counter(
            "corium_fleet_ingress_failover_held_total",
            "Calls held (sent again until answered or out of time) after a second NotOwner or refused connection.",
            self.held.load(Ordering::Relaxed),
        );
        scrape.counter(
            "corium_fleet_ingress_failover_overflow_total",
            "Calls that found the failover buffer full and ended with the answer they got.",
            self.overflowed.load(Ordering::Relaxed),
        );
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut state = self.buffer.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.calls = state.calls.saturating_sub(1);
        state.bytes = state.bytes.saturating_sub(self.bytes);
        // Given back under the lock, as it was taken.
        drop(self.place.take());
        drop(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_per_database_in_all_and_in_bytes_and_given_back() {
        let buffer = FailoverBuffer::new(2, 3, 100);
        let a1 = buffer.hold("a", 10).expect("a place");
        let a2 = buffer.hold("a", 10).expect("a second place");
        assert!(buffer.hold("a", 10).is_none(), "two per database");
        let b1 = buffer.hold("b", 10).expect("another database");
        assert!(buffer.hold("c", 10).is_none(), "three in all");
        assert_eq!(buffer.holding(), 3);
        drop(a1);
        assert!(buffer.hold("c", 91).is_none(), "100 bytes in all");
        let c1 = buffer.hold("c", 80).expect("room again");
        drop((a2, b1, c1));
        assert_eq!(buffer.holding(), 0);
        assert_eq!(buffer.by_database.keys(), 0);
        assert_eq!(buffer.held.load(Ordering::Relaxed), 4);
        assert_eq!(buffer.overflowed.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn no_places_when_off() {
        let buffer = FailoverBuffer::new(0, 100, 100);
        assert!(buffer.hold("a", 1).is_none());
    }
}
