//! Calls that wait for a database to reach a basis (`Sync(t)`, a read with
//! `corium-min-basis`, an as-of or since view): where they wait and how far
//! ahead they may ask.
//!
//! A wait does no work, so it holds none of the node's work places
//! (`work_limits.rs`): a caller who asks for a basis that never comes would
//! otherwise hold a place for its whole deadline, and enough of them would
//! refuse every other database's writes on the node. Waits take a place in
//! this set instead, bounded on the node, per database and per principal, so
//! one caller's waits cannot crowd out another's, and none touch the writes.
//!
//! A basis further ahead than the database could reach within the call's
//! deadline — more transactions than [`REACHABLE_PER_SECOND`] a second for
//! the time left — is refused at once instead of waited for: a caller asks
//! for a basis it saw committed (its own write, a report), which the owner
//! has and a replica reaches in milliseconds.

use std::time::Duration;

use corium_fleet_common::counted::{Counted, Counts};
use corium_fleet_wire::overload::Scope;

use crate::work_limits::{Overloaded, Shed};

/// The most transactions a second one database is taken to commit when
/// deciding whether a basis is in reach: above what one Corium transactor
/// commits with group commit on fast storage (~6,500 a second, Corium's own
/// benchmarks), so no basis a database can really reach is refused.
pub(crate) const REACHABLE_PER_SECOND: u64 = 10_000;

/// How many waits the node keeps, in all and per key.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct WaiterLimits {
    /// Waits on the node at once.
    pub per_node: usize,
    /// Waits for one database at once.
    pub per_database: usize,
    /// Waits of one principal at once (every anonymous caller is the one
    /// anonymous principal).
    pub per_principal: usize,
}

impl Default for WaiterLimits {
    fn default() -> Self {
        Self {
            per_node: 4096,
            per_database: 512,
            per_principal: 256,
        }
    }
}

/// The node's waits.
pub(crate) struct Waiters {
    limits: WaiterLimits,
    node: Counts<()>,
    per_database: Counts<String>,
    per_principal: Counts<String>,
    /// Waits refused for want of a place.
    refused: std::sync::atomic::AtomicU64,
    /// Waits refused because the basis was out of reach.
    out_of_reach: std::sync::atomic::AtomicU64,
}

/// One wait's place; dropping it gives the place back.
pub(crate) struct WaitPlace {
    _node: Counted<()>,
    _database: Counted<String>,
    _principal: Counted<String>,
}

/// A basis the database cannot reach within the call's deadline.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[error(
    "basis {target} of {db:?} is out of reach: the database is at {basis}, and {ahead} transactions \
     cannot commit within the {within_ms} ms left of this call (at most {REACHABLE_PER_SECOND} a \
     second); ask for a basis you have seen committed"
)]
pub(crate) struct OutOfReach {
    /// The database.
    pub db: String,
    /// The basis asked for.
    pub target: u64,
    /// Where the database is.
    pub basis: u64,
    /// How far ahead that is.
    pub ahead: u64,
    /// The time the call had left.
    pub within_ms: u128,
}

/// Whether `target` is in reach of a database at `basis` within `within`.
///
/// # Errors
/// [`OutOfReach`] when more transactions would have to commit in the time
/// left than a database commits.
pub(crate) fn check_reach(db: &str, target: u64, basis: u64, within: Duration) -> Result<(), OutOfReach> {
    let ahead = target.saturating_sub(basis);
    // Whole seconds rounded up, and at least one: a short deadline still
    // waits for the next few commits.
    let seconds = within.as_millis().div_ceil(1000).max(1);
    let reachable = u128::from(REACHABLE_PER_SECOND) * seconds;
    if u128::from(ahead) <= reachable {
        return Ok(());
    }
    Err(OutOfReach {
        db: db.to_owned(),
        target,
        basis,
        ahead,
        within_ms: within.as_millis(),
    })
}

impl Waiters {
    /// A set bounded by `limits`.
    #[must_use]
    pub(crate) fn new(limits: WaiterLimits) -> Self {
        Self {
            limits,
            node: Counts::new(),
            per_database: Counts::new(),
            per_principal: Counts::new(),
            refused: std::sync::atomic::AtomicU64::new(0),
            out_of_reach: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A place for one wait of `principal` on `db`.
    ///
    /// # Errors
    /// [`Overloaded`] naming the limit that refused.
    pub(crate) fn enter(&self, principal: &str, db: &str) -> Result<WaitPlace, Overloaded> {
        let refuse = |scope, message: String| {
            self.refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Overloaded {
                reason: Shed::Waits,
                scope,
                message,
                retry_after: Duration::from_secs(1),
            }
        };
        let principal_place = self
            .per_principal
            .enter(principal, self.limits.per_principal)
            .ok_or_else(|| {
                refuse(
                    Scope::Caller,
                    format!(
                        "principal {principal} has {} calls waiting for a basis on this node, its limit; retry later",
                        self.limits.per_principal
                    ),
                )
            })?;
        let database_place = self
            .per_database
            .enter(db, self.limits.per_database)
            .ok_or_else(|| {
                refuse(
                    Scope::Database,
                    format!(
                        "{db:?} has {} calls waiting for a basis on this node, its limit; retry later",
                        self.limits.per_database
                    ),
                )
            })?;
        let node_place = self.node.enter(&(), self.limits.per_node).ok_or_else(|| {
            refuse(
                Scope::Node,
                format!(
                    "this node has {} calls waiting for a basis, its limit; retry later",
                    self.limits.per_node
                ),
            )
        })?;
        Ok(WaitPlace {
            _node: node_place,
            _database: database_place,
            _principal: principal_place,
        })
    }

    /// Counts a wait refused as out of reach.
    pub(crate) fn count_out_of_reach(&self) {
        self.out_of_reach
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits in progress now.
    #[must_use]
    pub(crate) fn waiting(&self) -> usize {
        self.node.get(&())
    }

    /// Writes the set's series.
    pub(crate) fn collect(&self, scrape: &mut corium_fleet_common::metrics::Scrape<'_>) {
        use std::sync::atomic::Ordering::Relaxed;
        scrape.gauge(
            "corium_fleet_basis_waits",
            "Calls waiting for a database to reach a basis (Sync, corium-min-basis, as-of views); they hold no work place.",
            self.waiting() as u64,
        );
        scrape.counter(
            "corium_fleet_basis_waits_refused_total",
            "Waits for a basis refused RESOURCE_EXHAUSTED: the node, the database or the principal had its limit of waits.",
            self.refused.load(Relaxed),
        );
        scrape.counter(
            "corium_fleet_basis_out_of_reach_total",
            "Waits for a basis refused OUT_OF_RANGE at once: further ahead than the database could commit within the deadline.",
            self.out_of_reach.load(Relaxed),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_far_future_basis_is_out_of_reach_and_a_near_one_is_not() {
        let minute = Duration::from_mins(1);
        assert!(check_reach("a", 1 << 62, 10, minute).is_err());
        assert!(check_reach("a", 10 + 600_000, 10, minute).is_ok());
        assert!(check_reach("a", 10 + 600_001, 10, minute).is_err());
        // A short deadline still waits for the next commits.
        assert!(check_reach("a", 15, 10, Duration::from_millis(5)).is_ok());
        // A basis already reached is always in reach.
        assert!(check_reach("a", 3, 10, Duration::ZERO).is_ok());
        let refused = check_reach("a", u64::MAX, 0, minute).unwrap_err();
        assert!(refused.to_string().contains("out of reach"), "{refused}");
    }

    #[test]
    fn waits_are_bounded_per_principal_database_and_node() {
        let waiters = Waiters::new(WaiterLimits {
            per_node: 3,
            per_database: 2,
            per_principal: 2,
        });
        let a1 = waiters.enter("mallory", "a").expect("first");
        let a2 = waiters.enter("mallory", "b").expect("second");
        let refused = waiters
            .enter("mallory", "c")
            .err()
            .expect("over the principal's limit");
        assert_eq!(refused.scope, Scope::Caller);
        let b1 = waiters.enter("alice", "a").expect("alice has her own");
        let refused = waiters.enter("bob", "c").err().expect("over the node's limit");
        assert_eq!(refused.scope, Scope::Node);
        drop(a2);
        let refused = waiters
            .enter("bob", "a")
            .err()
            .expect("over the database's limit");
        assert_eq!(refused.scope, Scope::Database);
        assert!(waiters.enter("bob", "c").is_ok());
        drop((a1, b1));
        assert_eq!(waiters.waiting(), 0);
    }
}
