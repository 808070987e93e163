//! One cell's read-ahead of its database's log: armed for the activation,
//! and again by each [`WholeLog`] guard while the cell is open.
//!
//! While it holds records it also keeps the log's listing: Corium lists the
//! log twice for every read of it (legacy chunks, then records) and an
//! activation reads it twice (the log's open, then recovery), four listings
//! of the same names. The first is taken from storage (by then the lease is
//! held); the others are answered with it until the cell writes or deletes
//! a log root of its own ([`ReadAhead::writing`]). That is one listing seen
//! by all of Corium's passes, which a schedule where nothing else committed
//! between them would give: no record of this cell can be missing (it wrote
//! none since), and a record another process writes meanwhile is a deposed
//! writer's, under an older lease version, at or past the first `t` the
//! newest version wrote or will write — Corium's takeover cutoff drops it.
//!
//! - [`listing`] — [`ReadAhead::list`]: the bulk read, or the held listing;
//! - [`index_blobs`] — [`ReadAhead::blob`]: the index blobs read ahead.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use corium_store::{BlobId, StoreError};
use tokio::sync::OwnedSemaphorePermit;

use super::pool::{Evict, Pool};

mod index_blobs;
mod listing;

/// Why the read-ahead is armed: counted apart in `/metrics`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// The cell's open (recovery's two passes).
    Activation,
    /// A whole-log read of the open cell.
    WholeLog,
}

enum State {
    /// Not read yet; holds the reserved budget.
    Armed(OwnedSemaphorePermit, Purpose),
    /// The bulk read is under way: listings and reads go to storage until
    /// it is done (a second whole-log read does not start another).
    Reading,
    /// Read before the activation (a handoff's prepared log, a warm
    /// standby's records): the first listing comes from storage and the
    /// records it names that are not held (the tail) are read then, eight
    /// at a time, instead of one by one as Corium asks for them.
    Held {
        records: HashMap<String, Vec<u8>>,
        held: OwnedSemaphorePermit,
        /// The complete listing they were read under, if there was one:
        /// the first listing is then that and the names after it
        /// ([`list_since`](super::pool::list_since)).
        listed: Option<Vec<String>>,
    },
    /// Read: the records, and the budget their bytes hold.
    Read {
        records: HashMap<String, Vec<u8>>,
        _held: Option<OwnedSemaphorePermit>,
        /// The budget of a tail read after held records.
        _tail: Option<OwnedSemaphorePermit>,
        purpose: Purpose,
        /// The last listing of the log from storage, and the cell's log
        /// writes counted when it started: served while that count holds.
        listing: Option<Listing>,
    },
    /// Done: everything goes to storage.
    Off,
}

/// The activation's index blobs ([`super::index`]).
enum Index {
    /// For an activation, not read yet: the first blob the open asks for
    /// reads them all.
    Armed,
    /// Being read: blobs asked for meanwhile come from storage.
    Reading,
    /// Read: the blobs, and the budget their bytes hold.
    Read {
        blobs: HashMap<BlobId, Vec<u8>>,
        _held: Option<OwnedSemaphorePermit>,
        /// The budget of blobs added by a top-up.
        _more: Option<OwnedSemaphorePermit>,
        /// Whether they were read for the root the open reads: blobs held
        /// from before (a prepared or warm index) are topped up once, at
        /// the first blob they lack (the owner published since).
        current: bool,
    },
    /// Done, or not for an activation: blobs come from storage.
    Off,
}

/// What a listing found the read-ahead holding.
enum Taken {
    Armed(OwnedSemaphorePermit, Purpose),
    Held(
        HashMap<String, Vec<u8>>,
        OwnedSemaphorePermit,
        Option<Vec<String>>,
    ),
    /// Read: the listing to serve, if it is current.
    Listing(Option<Vec<String>>),
}

/// Held records, as the activation's first listing finds them.
struct Tail {
    records: HashMap<String, Vec<u8>>,
    held: OwnedSemaphorePermit,
    listed: Option<Vec<String>>,
    /// [`Inner::writes`] when the listing started.
    writes: u64,
}

/// A listing of the log from storage.
struct Listing {
    names: Vec<String>,
    /// [`Inner::writes`] when the listing started: a log write of the cell
    /// since makes it stale (the write may be missing from it).
    writes: u64,
}

struct Inner {
    state: State,
    index: Index,
    /// Holders: the activation until [`ReadAhead::finish`], and each live
    /// [`WholeLog`]. The records are dropped when the last one goes.
    holders: usize,
    /// Log roots this cell has started to write or delete: counted before
    /// each goes to storage, so a listing started before one is never
    /// served after it.
    writes: u64,
    /// While an open's records are kept for the cell's first whole-log
    /// reads ([`ReadAhead::finish_keeping`]): its entry in the pool's
    /// [`Kept`](super::pool::Kept) list.
    kept: Option<u64>,
}

impl Inner {
    /// Keeps `names`, listed from storage starting at write count `writes`,
    /// for the next listings, unless the cell wrote to its log since.
    fn keep_listing(&mut self, names: &Result<Vec<String>, StoreError>, writes: u64) {
        if self.writes != writes {
            return;
        }
        if let (State::Read { listing, .. }, Ok(names)) = (&mut self.state, names) {
            *listing = Some(Listing {
                names: names.clone(),
                writes,
            });
        }
    }
}

/// One cell's read-ahead of its database's log records.
pub struct ReadAhead {
    /// The database.
    db: String,
    /// Its log records' prefix.
    prefix: String,
    pool: Pool,
    inner: Mutex<Inner>,
}

/// A whole-log read of an open cell in progress: while any is alive, the
/// cell's next log listing is one bulk read and its record reads are
/// served from it (see the module docs).
#[must_use = "the read-ahead stays armed only while the guard lives"]
pub struct WholeLog(Arc<ReadAhead>);

impl Drop for WholeLog {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl ReadAhead {
    /// A read-ahead for `prefix`: for an activation (held by it until
    /// [`Self::finish`]) armed, already read (a prepared log) or off (no
    /// budget); or idle. [`Self::whole_log`] can arm any of them later.
    pub(super) fn new(db: &str, pool: Pool, start: Start) -> Self {
        let start_kind = if matches!(start, Start::Idle) {
            StartKind::Idle
        } else {
            StartKind::Activation
        };
        let (state, index) = match start {
            Start::Armed(reserved) => (State::Armed(reserved, Purpose::Activation), Index::Armed),
            Start::Prepared {
                records,
                held,
                index,
                listed,
            } => (
                State::Held {
                    records,
                    held,
                    listed,
                },
                index.map_or(Index::Armed, |(blobs, held)| Index::Read {
                    blobs,
                    _held: held,
                    _more: None,
                    current: false,
                }),
            ),
            Start::Off | Start::Idle => (State::Off, Index::Off),
        };
        let holders = usize::from(!matches!(start_kind, StartKind::Idle));
        Self {
            db: db.to_owned(),
            prefix: super::pool::log_prefix(db),
            pool,
            inner: Mutex::new(Inner {
                state,
                index,
                holders,
                writes: 0,
                kept: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Arms the read-ahead for a whole-log read of the open cell (a
    /// request-id replay, a subscription's catch-up), until the guard drops.
    /// Reads as before when the budget is spent.
    pub fn whole_log(self: &Arc<Self>) -> WholeLog {
        let off = {
            let mut inner = self.lock();
            inner.holders += 1;
            if inner.kept.is_some() && matches!(inner.state, State::Read { .. }) {
                self.pool.counts.kept_used.fetch_add(1, Ordering::Relaxed);
            }
            matches!(inner.state, State::Off)
        };
        // Reserved without the lock: a short budget evicts kept records,
        // which takes their read-aheads' locks.
        if off && let Some(reserved) = self.pool.reserve() {
            let mut inner = self.lock();
            if matches!(inner.state, State::Off) && inner.holders > 0 {
                inner.state = State::Armed(reserved, Purpose::WholeLog);
            }
        }
        WholeLog(Arc::clone(self))
    }

    /// Runs `read` (a Corium `tx_range`) under a [`Self::whole_log`] guard.
    pub async fn whole_log_read<F: Future>(self: &Arc<Self>, read: F) -> F::Output {
        let _whole_log = self.whole_log();
        read.await
    }

    /// One holder is done; the last one drops the records, unless they
    /// are kept after the open.
    fn release(&self) {
        let mut inner = self.lock();
        inner.holders = inner.holders.saturating_sub(1);
        if inner.holders == 0 && inner.kept.is_none() {
            inner.state = State::Off;
            inner.index = Index::Off;
        }
    }

    /// The records kept after the open go (their time is up, or an
    /// activation needs the budget), now or when the reads using them end.
    fn stop_keeping(&self) {
        let mut inner = self.lock();
        if let Some(key) = inner.kept.take() {
            self.pool.kept.remove(key);
        }
        if inner.holders == 0 {
            inner.state = State::Off;
        }
    }

    /// The cell is about to write or delete root `name`: a log root makes
    /// every listing taken so far stale.
    pub fn writing(&self, name: &str) {
        if name.starts_with(&self.prefix) {
            self.lock().writes += 1;
        }
    }

    /// A record read ahead, if `name` is one.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        let inner = self.lock();
        let (records, purpose) = match &inner.state {
            State::Read { records, purpose, .. } => (records, *purpose),
            State::Held { records, .. } => (records, Purpose::Activation),
            _ => return None,
        };
        let record = records.get(name).cloned();
        if record.is_some() && purpose == Purpose::Activation {
            self.pool.counts.served.fetch_add(1, Ordering::Relaxed);
        }
        record
    }

    /// The activation is done: its hold ends (the records go, and the
    /// budget comes back, unless a whole-log read holds them).
    pub fn finish(&self) {
        self.release();
    }

    /// The activation opened the cell: the index blobs go, and the log
    /// records (with the listing) are kept for [`KEPT_AFTER_OPEN`], for the
    /// cell's first whole-log reads — the replay of a `Transact` the dead
    /// owner committed, which arrives right after a takeover, and
    /// subscriptions catching up — which then read only the tail from
    /// storage. The first to go when an activation finds the budget short.
    pub fn finish_keeping(self: &Arc<Self>) {
        let keep = {
            let mut inner = self.lock();
            inner.holders = inner.holders.saturating_sub(1);
            inner.index = Index::Off;
            if let State::Read { purpose, .. } = &mut inner.state {
                // Reads served from now on are not recovery's.
                *purpose = Purpose::WholeLog;
                true
            } else {
                if inner.holders == 0 {
                    inner.state = State::Off;
                }
                false
            }
        };
        if !keep {
            return;
        }
        let weak: std::sync::Weak<dyn Evict> = Arc::downgrade(self) as std::sync::Weak<Self>;
        let key = self.pool.kept.add(weak);
        self.lock().kept = Some(key);
        self.pool.counts.kept.fetch_add(1, Ordering::Relaxed);
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(KEPT_AFTER_OPEN).await;
            if let Some(ahead) = weak.upgrade() {
                ahead.stop_keeping();
            }
        });
    }
}

/// How long an open's records are kept for the cell's first whole-log
/// reads ([`ReadAhead::finish_keeping`]).
pub(crate) const KEPT_AFTER_OPEN: std::time::Duration = std::time::Duration::from_secs(10);

impl Evict for ReadAhead {
    fn evict(&self) {
        self.stop_keeping();
    }
}

/// Index blobs read before an activation, and the budget their bytes hold
/// (`None` when another permit already holds them).
pub(super) type IndexBlobs = (HashMap<BlobId, Vec<u8>>, Option<OwnedSemaphorePermit>);

/// How a read-ahead starts.
pub(super) enum Start {
    /// Armed for the activation with this much budget.
    Armed(OwnedSemaphorePermit),
    /// With a log read ahead of a handoff.
    Prepared {
        records: HashMap<String, Vec<u8>>,
        held: OwnedSemaphorePermit,
        /// The complete listing the records were read under, if known.
        listed: Option<Vec<String>>,
        /// The index blobs read with it, if they were; else the open reads
        /// them as an armed activation does.
        index: Option<IndexBlobs>,
    },
    /// For an activation; nothing read, nothing reserved.
    Off,
    /// Not for an activation (a database created here): held by nobody
    /// until a [`WholeLog`].
    Idle,
}

enum StartKind {
    Activation,
    Idle,
}
