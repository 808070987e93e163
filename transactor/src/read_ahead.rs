//! Activation read-ahead: a database's log records read in one go when its
//! cell opens, served from memory to both of Corium's recovery passes, and
//! dropped when the open is done.
//!
//! On storage where the log is roots (`PostgreSQL`, S3), Corium 0.1.90's
//! recovery lists the log and reads every record with its own `get_root`,
//! sequentially, twice (docs/benchmarks.md: 4,015 root reads for 2,000
//! records). The view answers the first log listing of an activation with
//! one bulk read instead ([`PrefixRead`]: one query on `PostgreSQL`), keeps
//! the records, and serves Corium's reads of them from memory.
//!
//! Why this cannot change what a new owner sees:
//! - a record (`log:<db>:v<version>:r<t>`) is written once, by a create-only
//!   compare-and-swap, and never rewritten; only records are kept, never
//!   a mutable root (`meta:`, `db:`, `lease:`, legacy chunks);
//! - the bulk read happens inside the open, after the lease was acquired
//!   (Corium acquires, then recovers), so it *is* the listing after the
//!   lease that decides what exists; a later listing goes to storage, and a
//!   record it names that was not read ahead is read from storage;
//! - the records are dropped when the open returns, so nothing outlives the
//!   activation that read it.
//!
//! A handoff reads ahead earlier: the owner asks its target to
//! [`Budget::prepare`] while it still serves, the target reads the log
//! then, and the activation that follows lists the log from storage and
//! reads only the records committed since. That is safe for a further
//! reason: a record's name is never reused. Its version is the lease
//! version its writer acquired, lease roots are never deleted (Corium's
//! `delete_db` leaves `lease:<db>`), so a database deleted and created again
//! writes under higher versions; the one exception, a fork's log written
//! under version 0 (a name forked into, deleted and forked into again), is
//! never kept ahead. A prepared log not used within [`PREPARED_FOR`] is
//! dropped.
//!
//! Memory is bounded: every read-ahead reserves its bytes from the node's
//! budget (`--activation-read-ahead-mib`, [`Budget`]) before it reads, at most
//! [`MAX_PER_ACTIVATION`] each; when the budget is spent (hundreds of
//! activations at once during a drain) an activation reads as before. A read
//! that fails or stops at its bound falls back to plain listing and reads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use corium_fleet_store::prefix_read::PrefixRead;
use corium_store::{FullStore, StoreError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most one activation reads ahead.
pub const MAX_PER_ACTIVATION: usize = 64 << 20;

/// How long a log read ahead of a handoff waits for its activation.
pub const PREPARED_FOR: Duration = Duration::from_secs(30);

/// A log read ahead of an activation that has not started yet.
struct Prepared {
    records: HashMap<String, Vec<u8>>,
    read_at: Instant,
    held: OwnedSemaphorePermit,
}

/// What [`Budget::prepare`] read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PreparedLog {
    /// Records kept.
    pub records: usize,
    /// Their bytes.
    pub bytes: usize,
}

/// What the node's read-aheads did (its `/metrics`).
#[derive(Default)]
pub struct Counts {
    /// Bulk reads of a log made.
    pub reads: AtomicU64,
    /// Records they read.
    pub records: AtomicU64,
    /// Corium's record reads served from them.
    pub served: AtomicU64,
    /// Activations that read as before: the budget was spent, or the bulk
    /// read failed.
    pub skipped: AtomicU64,
    /// Logs read ahead of a handoff ([`Budget::prepare`]).
    pub prepared: AtomicU64,
    /// Activations that started from a prepared log.
    pub prepared_used: AtomicU64,
}

/// The node's read-ahead memory, shared by its activations.
#[derive(Clone)]
pub struct Budget {
    /// One permit per KiB; `None` when read-ahead is off.
    kib: Option<Arc<Semaphore>>,
    reader: Arc<dyn PrefixRead>,
    /// Shared by every read-ahead of the node.
    pub counts: Arc<Counts>,
    /// Logs read ahead of handoffs to this node, by database.
    prepared: Arc<Mutex<HashMap<String, Prepared>>>,
}

impl Budget {
    /// `mib` MiB of read-ahead (0: off), read through `reader`.
    #[must_use]
    pub fn new(mib: usize, reader: Arc<dyn PrefixRead>) -> Self {
        Self {
            kib: (mib > 0).then(|| Arc::new(Semaphore::new(mib.saturating_mul(1024)))),
            reader,
            counts: Arc::default(),
            prepared: Arc::default(),
        }
    }

    /// Reserves what is free of the budget, up to [`MAX_PER_ACTIVATION`].
    fn reserve(&self) -> Option<OwnedSemaphorePermit> {
        let kib = self.kib.as_ref()?;
        let wanted = kib.available_permits().min(MAX_PER_ACTIVATION / 1024);
        let reserved = u32::try_from(wanted)
            .ok()
            .filter(|&wanted| wanted > 0)
            .and_then(|wanted| Arc::clone(kib).try_acquire_many_owned(wanted).ok());
        if reserved.is_none() {
            self.counts.skipped.fetch_add(1, Ordering::Relaxed);
        }
        reserved
    }

    /// Drops prepared logs whose activation did not come.
    fn forget_stale(&self) {
        self.prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, prepared| prepared.read_at.elapsed() < PREPARED_FOR);
    }

    /// Reads `db`'s log now for an activation that is about to come (the
    /// target's half of a handoff). Nothing is kept when read-ahead is off
    /// or its budget is spent.
    ///
    /// # Errors
    /// The store's failure (the activation then reads as usual).
    pub async fn prepare(&self, db: &str) -> Result<PreparedLog, StoreError> {
        self.forget_stale();
        let Some(reserved) = self.reserve() else {
            return Ok(PreparedLog::default());
        };
        let prefix = log_prefix(db);
        let read = self
            .reader
            .read_prefix(&prefix, reserved.num_permits() * 1024)
            .await?;
        let records: HashMap<String, Vec<u8>> = read
            .rows
            .into_iter()
            .filter(|(name, _)| is_record(&prefix, name) && !name[prefix.len()..].starts_with(FORK_VERSION))
            .collect();
        let bytes: usize = records.values().map(Vec::len).sum();
        let held = keep(reserved, bytes);
        let log = PreparedLog {
            records: records.len(),
            bytes,
        };
        self.counts.prepared.fetch_add(1, Ordering::Relaxed);
        self.prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                db.to_owned(),
                Prepared {
                    records,
                    read_at: Instant::now(),
                    held,
                },
            );
        Ok(log)
    }

    /// A read-ahead for one activation of `db`: reserves what is free of the
    /// budget, up to [`MAX_PER_ACTIVATION`]. `None` when nothing is free.
    #[must_use]
    pub fn start(&self, db: &str) -> Option<Arc<ReadAhead>> {
        let prepared = self
            .prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(db)
            .filter(|prepared| prepared.read_at.elapsed() < PREPARED_FOR);
        if let Some(Prepared { records, held, .. }) = prepared {
            // Read before the lease moved: the listing comes from storage,
            // and only records committed since are read from it.
            self.counts.prepared_used.fetch_add(1, Ordering::Relaxed);
            return Some(Arc::new(ReadAhead {
                prefix: log_prefix(db),
                reader: Arc::clone(&self.reader),
                state: Mutex::new(State::Read {
                    records,
                    _held: Some(held),
                }),
                counts: Arc::clone(&self.counts),
            }));
        }
        let reserved = self.reserve()?;
        Some(Arc::new(ReadAhead {
            prefix: log_prefix(db),
            reader: Arc::clone(&self.reader),
            state: Mutex::new(State::Armed(reserved)),
            counts: Arc::clone(&self.counts),
        }))
    }
}

/// The version a fork writes its copied log under: such names can be
/// written again (see the module's doc), so they are never kept ahead.
const FORK_VERSION: &str = "00000000000000000000:";

/// The part of `reserved` that `bytes` use; the rest goes back to the budget.
fn keep(mut reserved: OwnedSemaphorePermit, bytes: usize) -> OwnedSemaphorePermit {
    let used = bytes.div_ceil(1024).min(reserved.num_permits());
    reserved.split(used).unwrap_or(reserved)
}

/// The prefix of `db`'s log records (Corium's `NativeRootLogStore::prefix`).
#[must_use]
pub fn log_prefix(db: &str) -> String {
    format!("log:{db}:v")
}

/// Whether `name` is a record under `prefix`: `<prefix><20 digits>:r<20
/// digits>`, Corium's per-record key, the only kind kept.
fn is_record(prefix: &str, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix) else {
        return false;
    };
    let Some((version, t)) = rest.split_once(":r") else {
        return false;
    };
    [version, t]
        .iter()
        .all(|part| part.len() == 20 && part.bytes().all(|byte| byte.is_ascii_digit()))
}

enum State {
    /// Not read yet; holds the reserved budget.
    Armed(OwnedSemaphorePermit),
    /// Read: the records, and the budget their bytes hold.
    Read {
        records: HashMap<String, Vec<u8>>,
        _held: Option<OwnedSemaphorePermit>,
    },
    /// Done (the open returned, or the read failed): everything goes to storage.
    Off,
}

/// One activation's read-ahead of its database's log records.
pub struct ReadAhead {
    prefix: String,
    reader: Arc<dyn PrefixRead>,
    state: Mutex<State>,
    counts: Arc<Counts>,
}

impl ReadAhead {
    /// A listing of `prefix` through the view: the bulk read when this is
    /// the first listing of the database's log, else `None` (the view lists
    /// from storage).
    ///
    /// # Errors
    /// Never from the bulk read (a failed read falls back); the store's
    /// error when the fallback listing fails.
    pub async fn list(&self, prefix: &str, base: &dyn FullStore) -> Option<Result<Vec<String>, StoreError>> {
        if prefix != self.prefix {
            return None;
        }
        let reserved = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            match std::mem::replace(&mut *state, State::Off) {
                State::Armed(reserved) => reserved,
                other => {
                    *state = other;
                    return None;
                }
            }
        };
        let max_bytes = reserved.num_permits() * 1024;
        let read = match self.reader.read_prefix(prefix, max_bytes).await {
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(prefix, %error, "log read-ahead failed; reading records one by one");
                self.counts.skipped.fetch_add(1, Ordering::Relaxed);
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
        self.counts.reads.fetch_add(1, Ordering::Relaxed);
        self.counts
            .records
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = State::Read { records, _held: held };
        Some(names)
    }

    /// A record read ahead, if `name` is one.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        let record = match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Read { records, .. } => records.get(name).cloned(),
            _ => None,
        };
        if record.is_some() {
            self.counts.served.fetch_add(1, Ordering::Relaxed);
        }
        record
    }

    /// Drops what was read and returns its budget: the open is done.
    pub fn finish(&self) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = State::Off;
    }
}

impl Counts {
    /// Appends the counts to a `/metrics` page.
    pub fn render(&self, out: &mut String) {
        use corium_fleet_common::prometheus::counter;
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        counter(
            out,
            "corium_fleet_activation_log_reads_total",
            "Logs read in one go while their database activated.",
            load(&self.reads),
        );
        counter(
            out,
            "corium_fleet_activation_log_records_read_total",
            "Log records those reads returned.",
            load(&self.records),
        );
        counter(
            out,
            "corium_fleet_activation_log_records_served_total",
            "Recovery's record reads served from them instead of storage.",
            load(&self.served),
        );
        counter(
            out,
            "corium_fleet_activation_logs_prepared_total",
            "Logs read ahead of a handoff to this node, while the old owner still served.",
            load(&self.prepared),
        );
        counter(
            out,
            "corium_fleet_activation_logs_prepared_used_total",
            "Activations that started from a log read ahead of their handoff.",
            load(&self.prepared_used),
        );
        counter(
            out,
            "corium_fleet_activation_log_reads_skipped_total",
            "Activations that read their log record by record: read-ahead budget spent, or the bulk read failed.",
            load(&self.skipped),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corium_fleet_store::prefix_read::ListThenRead;

    fn record(db: &str, version: u64, t: u64) -> String {
        format!("log:{db}:v{version:020}:r{t:020}")
    }

    #[test]
    fn only_per_record_keys_are_kept() {
        let prefix = log_prefix("a");
        assert!(is_record(&prefix, &record("a", 1, 7)));
        for name in [
            "log:a:v00000000000000000001".to_owned(),
            "log:a:v00000000000000000001:c00000000000000000002".to_owned(),
            record("ab", 1, 7),
            "log:a:v1:r7".to_owned(),
            "meta:a".to_owned(),
        ] {
            assert!(!is_record(&prefix, &name), "{name}");
        }
    }

    #[tokio::test]
    async fn the_first_log_listing_reads_ahead_and_later_reads_are_served_until_finish() {
        let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
        for t in 1..=3 {
            store
                .cas_root(&record("a", 1, t), None, &[u8::try_from(t).unwrap()])
                .await
                .unwrap();
        }
        store.cas_root(&record("b", 1, 1), None, b"other").await.unwrap();
        let budget = Budget::new(1, Arc::new(ListThenRead(Arc::clone(&store))));
        let ahead = budget.start("a").unwrap();
        assert!(
            ahead.list("meta:", store.as_ref()).await.is_none(),
            "other prefixes pass through"
        );
        let names = ahead
            .list(&log_prefix("a"), store.as_ref())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(names, (1..=3).map(|t| record("a", 1, t)).collect::<Vec<_>>());
        // A record written after the read is not served from memory.
        store.cas_root(&record("a", 2, 4), None, b"late").await.unwrap();
        assert_eq!(ahead.get(&record("a", 1, 2)), Some(vec![2]));
        assert_eq!(ahead.get(&record("a", 2, 4)), None);
        assert!(
            ahead.list(&log_prefix("a"), store.as_ref()).await.is_none(),
            "the second listing is storage's"
        );
        // The budget holds only what the bytes use (3 bytes: 1 KiB).
        let available = |budget: &Budget| budget.kib.as_ref().unwrap().available_permits();
        assert_eq!(available(&budget), 1023);
        ahead.finish();
        assert_eq!(ahead.get(&record("a", 1, 2)), None);
        assert_eq!(available(&budget), 1024);
    }

    #[tokio::test]
    async fn a_spent_budget_or_an_off_switch_reads_nothing_ahead() {
        let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
        let reader: Arc<dyn PrefixRead> = Arc::new(ListThenRead(Arc::clone(&store)));
        assert!(Budget::new(0, Arc::clone(&reader)).start("a").is_none());
        let budget = Budget::new(64, reader);
        let first = budget.start("a").expect("64 MiB free");
        assert!(budget.start("b").is_none(), "the first reserved all of it");
        first.finish();
        drop(first);
        assert!(budget.start("b").is_some());
    }

    #[tokio::test]
    async fn a_prepared_log_starts_the_activation_keeps_no_fork_records_and_reads_the_tail() {
        let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
        store.cas_root(&record("a", 0, 1), None, b"forked").await.unwrap();
        for t in 2..=3 {
            store.cas_root(&record("a", 1, t), None, b"old").await.unwrap();
        }
        let budget = Budget::new(1, Arc::new(ListThenRead(Arc::clone(&store))));
        let prepared = budget.prepare("a").await.unwrap();
        assert_eq!(
            prepared,
            PreparedLog { records: 2, bytes: 6 },
            "the version-0 record is not kept"
        );
        // Committed after the prepare: the tail.
        store.cas_root(&record("a", 1, 4), None, b"tail").await.unwrap();
        let ahead = budget.start("a").expect("the prepared log");
        assert!(
            ahead.list(&log_prefix("a"), store.as_ref()).await.is_none(),
            "the listing comes from storage"
        );
        assert_eq!(ahead.get(&record("a", 1, 2)).as_deref(), Some(&b"old"[..]));
        assert_eq!(ahead.get(&record("a", 0, 1)), None, "read from storage");
        assert_eq!(ahead.get(&record("a", 1, 4)), None, "read from storage");
        assert_eq!(budget.counts.prepared_used.load(Ordering::Relaxed), 1);
        ahead.finish();
        assert!(budget.start("b").is_some(), "the budget came back");
    }

    #[tokio::test]
    async fn a_read_stopped_at_its_bound_lists_from_storage_and_serves_what_it_read() {
        let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
        for t in 1..=3 {
            store
                .cas_root(&record("a", 1, t), None, &vec![0; 400 << 10])
                .await
                .unwrap();
        }
        let budget = Budget::new(1, Arc::new(ListThenRead(Arc::clone(&store))));
        let ahead = budget.start("a").unwrap();
        let names = ahead
            .list(&log_prefix("a"), store.as_ref())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(names.len(), 3, "every record listed");
        assert!(ahead.get(&record("a", 1, 2)).is_some());
        assert!(ahead.get(&record("a", 1, 3)).is_none(), "past the 1 MiB bound");
    }
}
