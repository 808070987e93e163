//! One cell's read-ahead of its database's log: armed for the activation,
//! and again by each [`WholeLog`] guard while the cell is open.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use corium_store::{BlobId, FullStore, StoreError};
use tokio::sync::OwnedSemaphorePermit;

use futures::TryStreamExt as _;

use super::index::{IndexRead, read_index};
use super::pool::{Pool, is_record, keep, keepable, read_roots};

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
    },
    /// Read: the records, and the budget their bytes hold.
    Read {
        records: HashMap<String, Vec<u8>>,
        _held: Option<OwnedSemaphorePermit>,
        /// The budget of a tail read after held records.
        _tail: Option<OwnedSemaphorePermit>,
        purpose: Purpose,
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
    },
    /// Done, or not for an activation: blobs come from storage.
    Off,
}

struct Inner {
    state: State,
    index: Index,
    /// Holders: the activation until [`ReadAhead::finish`], and each live
    /// [`WholeLog`]. The records are dropped when the last one goes.
    holders: usize,
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
            Start::Prepared { records, held, index } => (
                State::Held { records, held },
                index.map_or(Index::Armed, |(blobs, held)| Index::Read { blobs, _held: held }),
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
        let mut inner = self.lock();
        inner.holders += 1;
        if matches!(inner.state, State::Off)
            && let Some(reserved) = self.pool.reserve()
        {
            inner.state = State::Armed(reserved, Purpose::WholeLog);
        }
        WholeLog(Arc::clone(self))
    }

    /// Runs `read` (a Corium `tx_range`) under a [`Self::whole_log`] guard.
    pub async fn whole_log_read<F: Future>(self: &Arc<Self>, read: F) -> F::Output {
        let _whole_log = self.whole_log();
        read.await
    }

    /// One holder is done; the last one drops the records.
    fn release(&self) {
        let mut inner = self.lock();
        inner.holders = inner.holders.saturating_sub(1);
        if inner.holders == 0 {
            inner.state = State::Off;
            inner.index = Index::Off;
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
        let taken = {
            let mut inner = self.lock();
            match std::mem::replace(&mut inner.state, State::Reading) {
                State::Armed(reserved, purpose) => Ok((reserved, purpose)),
                State::Held { records, held } => Err((records, held)),
                other => {
                    inner.state = other;
                    return None;
                }
            }
        };
        let (reserved, purpose) = match taken {
            Ok(armed) => armed,
            Err((records, held)) => return Some(self.read_tail(prefix, base, records, held).await),
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
            };
        }
        Some(names)
    }

    /// The first listing of an activation that starts from held records:
    /// the listing from storage, and the listed records not held read
    /// eight at a time, within what is free of the budget (the rest
    /// Corium reads itself).
    async fn read_tail(
        &self,
        prefix: &str,
        base: &dyn FullStore,
        mut records: HashMap<String, Vec<u8>>,
        held: OwnedSemaphorePermit,
    ) -> Result<Vec<String>, StoreError> {
        let listed = base.list_roots(prefix).await;
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
            };
        }
        listed
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
        {
            let mut inner = self.lock();
            match &inner.index {
                Index::Read { blobs, .. } => {
                    let blob = blobs.get(id).cloned();
                    if blob.is_some() {
                        self.pool
                            .counts
                            .index_blobs_served
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    return blob;
                }
                Index::Reading | Index::Off => return None,
                Index::Armed => inner.index = Index::Reading,
            }
        }
        let Some(reserved) = self.pool.reserve() else {
            self.lock().index = Index::Off;
            return None;
        };
        let read = match read_index(base, &self.db, reserved.num_permits() * 1024).await {
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(db = %self.db, %error, "index read-ahead failed; reading blobs one by one");
                self.lock().index = Index::Off;
                return None;
            }
        };
        self.pool.counts.index_reads.fetch_add(1, Ordering::Relaxed);
        let IndexRead { blobs, bytes } = read;
        let held = keep(reserved, bytes);
        let blob = blobs.get(id).cloned();
        let mut inner = self.lock();
        // Every holder may have gone while it read: then nothing is kept.
        if inner.holders > 0 && matches!(inner.index, Index::Reading) {
            inner.index = Index::Read {
                blobs,
                _held: Some(held),
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
