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

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use corium_store::{BlobId, FullStore, StoreError};
use tokio::sync::OwnedSemaphorePermit;

use futures::TryStreamExt as _;

use super::index::{IndexRead, read_index};
use super::pool::{Evict, Pool, is_record, keep, keepable, list_since, read_roots};

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
        /// ([`list_since`]).
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
    /// [`Kept`] list.
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

    /// A listing of `prefix` through the view: the bulk read when the
    /// read-ahead is armed and `prefix` is the database's log, else `None`
    /// (the view lists from storage).
    ///
    /// # Errors
    /// Never from the bulk read (a failed read falls back); the store's
    /// error when the fallback listing fails.
    pub async fn list(&self, prefix: &str, base: &dyn FullStore) -> Option<Result<Vec<String>, StoreError>> {
        if prefix != self.prefix {
            return None;
        }
        let (taken, writes) = {
            let mut inner = self.lock();
            let writes = inner.writes;
            if let State::Read { listing, .. } = &inner.state {
                let served = listing
                    .as_ref()
                    .filter(|listing| listing.writes == writes)
                    .map(|listing| listing.names.clone());
                (Taken::Listing(served), writes)
            } else {
                match std::mem::replace(&mut inner.state, State::Reading) {
                    State::Armed(reserved, purpose) => (Taken::Armed(reserved, purpose), writes),
                    State::Held {
                        records,
                        held,
                        listed,
                    } => (Taken::Held(records, held, listed), writes),
                    other => {
                        inner.state = other;
                        return None;
                    }
                }
            }
        };
        let (reserved, purpose) = match taken {
            Taken::Armed(reserved, purpose) => (reserved, purpose),
            Taken::Held(records, held, listed) => {
                let tail = Tail {
                    records,
                    held,
                    listed,
                    writes,
                };
                return Some(self.read_tail(prefix, base, tail).await);
            }
            Taken::Listing(Some(names)) => {
                self.pool.counts.listings_served.fetch_add(1, Ordering::Relaxed);
                return Some(Ok(names));
            }
            Taken::Listing(None) => {
                // Stale or none yet: storage's, kept for the next listing.
                let listed = base.list_roots(prefix).await;
                self.lock().keep_listing(&listed, writes);
                return Some(listed);
            }
        };
        let counts = &self.pool.counts;
        let max_bytes = reserved.num_permits() * 1024;
        let read = match self.pool.reader.read_prefix(prefix, max_bytes).await {
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(prefix, %error, "log read-ahead failed; reading records one by one");
                if purpose == Purpose::Activation {
                    counts.skipped.fetch_add(1, Ordering::Relaxed);
                }
                self.lock().state = State::Off;
                return None;
            }
        };
        let bytes: usize = read.rows.iter().map(|(_, bytes)| bytes.len()).sum();
        let names = if read.complete {
            Ok(read.rows.iter().map(|(name, _)| name.clone()).collect())
        } else {
            // Stopped at its bound: the listing comes from storage; what was
            // read is still served.
            base.list_roots(prefix).await
        };
        // Keep only the budget the bytes use.
        let held = Some(keep(reserved, bytes));
        let records: HashMap<String, Vec<u8>> = read
            .rows
            .into_iter()
            .filter(|(name, _)| is_record(prefix, name))
            .collect();
        match purpose {
            Purpose::Activation => {
                counts.reads.fetch_add(1, Ordering::Relaxed);
                counts.records.fetch_add(records.len() as u64, Ordering::Relaxed);
            }
            Purpose::WholeLog => {
                counts.whole_log_reads.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut inner = self.lock();
        // Every holder may have gone while it read: then nothing is kept.
        if inner.holders > 0 && matches!(inner.state, State::Reading) {
            inner.state = State::Read {
                records,
                _held: held,
                _tail: None,
                purpose,
                listing: None,
            };
            inner.keep_listing(&names, writes);
        }
        Some(names)
    }

    /// The first listing of an activation that starts from held records:
    /// the held listing and the names after it when there is one (else the
    /// listing from storage), and the listed records not held read eight
    /// at a time, within what is free of the budget (the rest Corium reads
    /// itself).
    async fn read_tail(
        &self,
        prefix: &str,
        base: &dyn FullStore,
        tail: Tail,
    ) -> Result<Vec<String>, StoreError> {
        let Tail {
            mut records,
            held,
            listed: known,
            writes,
        } = tail;
        let since = match &known {
            Some(known) => list_since(self.pool.reader.as_ref(), &self.pool.counts, prefix, known)
                .await
                .unwrap_or_else(|error| {
                    tracing::debug!(prefix, %error, "listing after the held names failed; listing in full");
                    None
                }),
            None => None,
        };
        let listed = match since {
            Some(names) => Ok(names),
            None => base.list_roots(prefix).await,
        };
        let tail: Vec<String> = listed
            .as_ref()
            .map(|names| {
                names
                    .iter()
                    .filter(|name| keepable(prefix, name) && !records.contains_key(*name))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let mut tail_held = None;
        if !tail.is_empty()
            && let Some(reserved) = self.pool.reserve()
        {
            let max_bytes = reserved.num_permits() * 1024;
            let mut bytes = 0;
            let mut reads = std::pin::pin!(read_roots(base, tail));
            while let Ok(Some((name, record))) = reads.try_next().await {
                let Some(record) = record else { continue };
                bytes += record.len();
                if bytes > max_bytes {
                    break;
                }
                records.insert(name, record);
            }
            tail_held = Some(keep(reserved, bytes.min(max_bytes)));
        }
        let mut inner = self.lock();
        if inner.holders > 0 && matches!(inner.state, State::Reading) {
            inner.state = State::Read {
                records,
                _held: Some(held),
                _tail: tail_held,
                purpose: Purpose::Activation,
                listing: None,
            };
            inner.keep_listing(&listed, writes);
        }
        listed
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

    /// Blob `id` from the activation's index read-ahead: the first blob the
    /// open asks for reads the database's index blobs (from `base`, within
    /// the budget); `None` when the read-ahead does not hold it (the view
    /// reads it from storage).
    pub async fn blob(&self, id: &BlobId, base: &dyn FullStore) -> Option<Vec<u8>> {
        let held = {
            let mut inner = self.lock();
            match &mut inner.index {
                Index::Read { blobs, current, .. } => {
                    if let Some(blob) = blobs.get(id).cloned() {
                        self.pool
                            .counts
                            .index_blobs_served
                            .fetch_add(1, Ordering::Relaxed);
                        return Some(blob);
                    }
                    if *current {
                        return None;
                    }
                    // Held from before, and lacking what the open asks for:
                    // read what the root names now, beside what is held.
                    match std::mem::replace(&mut inner.index, Index::Reading) {
                        Index::Read {
                            blobs, _held: held, ..
                        } => Some((blobs, held)),
                        _ => unreachable!("matched above"),
                    }
                }
                Index::Reading | Index::Off => return None,
                Index::Armed => {
                    inner.index = Index::Reading;
                    None
                }
            }
        };
        let (have, have_held) = held.unwrap_or_default();
        let restore = |have: HashMap<BlobId, Vec<u8>>, have_held: Option<OwnedSemaphorePermit>| {
            let mut inner = self.lock();
            inner.index = if have.is_empty() && have_held.is_none() {
                Index::Off
            } else {
                Index::Read {
                    blobs: have,
                    _held: have_held,
                    _more: None,
                    current: true,
                }
            };
        };
        let Some(reserved) = self.pool.reserve() else {
            restore(have, have_held);
            return None;
        };
        let read = match read_index(base, &self.db, reserved.num_permits() * 1024, &have).await {
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(db = %self.db, %error, "index read-ahead failed; reading blobs one by one");
                restore(have, have_held);
                return None;
            }
        };
        self.pool.counts.index_reads.fetch_add(1, Ordering::Relaxed);
        let IndexRead { mut blobs, bytes } = read;
        let more = keep(reserved, bytes);
        blobs.extend(have);
        let blob = blobs.get(id).cloned();
        let mut inner = self.lock();
        // Every holder may have gone while it read: then nothing is kept.
        if inner.holders > 0 && matches!(inner.index, Index::Reading) {
            inner.index = Index::Read {
                blobs,
                _held: have_held,
                _more: Some(more),
                current: true,
            };
            if blob.is_some() {
                self.pool
                    .counts
                    .index_blobs_served
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        blob
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
