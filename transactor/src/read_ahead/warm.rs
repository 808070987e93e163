//! Warm standbys: the first standby of an active database keeps the
//! database's log records and published index blobs in memory, read a
//! little at a time while the owner serves, so that a takeover after the
//! owner's crash lists the log and reads only what was committed since the
//! last refresh.
//!
//! Safe for the reasons a prepared log is (see the module docs of
//! `read_ahead`): records are written once and their names never reused
//! (version-0 fork records are never kept), blobs are content-addressed,
//! and the activation still lists the log from storage after it took the
//! lease, so the listing decides what exists; a held record it does not
//! list is never served, one it lists that is not held is read from
//! storage.
//!
//! Bounded: every record and blob holds permits (one per KiB) of the
//! node's own warm budget (`--warm-standby-mib`), separate from the
//! activations' read-ahead budget so that warming never takes memory an
//! activation needs. A refresh that cannot reserve stops where it is: the
//! takeover reads the rest as usual.
//!
//! A cache under the node's memory budget too: the warm bytes may fill at
//! most half of the room the node's firm memory leaves
//! ([`WarmSet::limit_to_room`], set before every refresh), they are the
//! first thing dropped when the node is over its budget
//! ([`WarmSet::drop_all`]), and the load a node publishes to its peers
//! leaves them out, so a cache never makes a node look full.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use corium_store::{BlobId, DbRoot, FullStore, StoreError};
use futures::TryStreamExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::index::{IndexRead, read_index};
use corium_fleet_store::prefix_read::PrefixRead;

use super::pool::{Counts, keepable, list_since, log_prefix, read_roots};

/// How long a database handed to its activation is not warmed again.
const TAKEN_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// Bytes with the budget they hold.
type Held<K> = HashMap<K, (Vec<u8>, OwnedSemaphorePermit)>;

/// One database kept warm.
#[derive(Default)]
struct Warm {
    records: Held<String>,
    /// The last complete listing of its log (every name, sorted), and the
    /// budget its bytes hold: the next refresh lists only what is after it.
    listed: Option<(Vec<String>, OwnedSemaphorePermit)>,
    /// The manifests the index blobs were read for (the `db:` root's).
    manifests: Vec<BlobId>,
    blobs: Held<BlobId>,
}

impl Warm {
    fn bytes(&self) -> usize {
        self.records.values().map(|(bytes, _)| bytes.len()).sum::<usize>()
            + self.blobs.values().map(|(bytes, _)| bytes.len()).sum::<usize>()
    }
}

/// What a takeover starts from: the records and blobs, and one permit for
/// all of their bytes.
pub(super) struct Taken {
    pub(super) records: HashMap<String, Vec<u8>>,
    pub(super) blobs: HashMap<BlobId, Vec<u8>>,
    pub(super) held: OwnedSemaphorePermit,
    /// The listing the records were read under, if kept.
    pub(super) listed: Option<Vec<String>>,
}

/// What warm standbys did (the node's `/metrics`).
#[derive(Default)]
pub struct WarmCounts {
    /// Records read by refreshes.
    pub records_read: AtomicU64,
    /// Index blobs read by refreshes.
    pub blobs_read: AtomicU64,
    /// Refreshes that stopped at the budget.
    pub budget_full: AtomicU64,
    /// Activations that started from a warm database.
    pub takeovers: AtomicU64,
}

/// The node's warm databases and their budget.
pub struct WarmSet {
    /// One permit per KiB; `None` when warming is off.
    kib: Option<Arc<Semaphore>>,
    /// Its size in KiB.
    total_kib: usize,
    /// The most KiB the set may hold now (≤ `total_kib`): half the room the
    /// node's memory budget leaves, set by the refresh loop
    /// ([`WarmSet::limit_to_room`]); reservations past it are refused.
    ceiling_kib: AtomicUsize,
    dbs: Mutex<HashMap<String, Warm>>,
    /// Databases handed to an activation, and when: not warmed again for
    /// [`TAKEN_FOR`] (a refresh would read the log beside the takeover).
    taken: Mutex<HashMap<String, std::time::Instant>>,
    /// Shared with `/metrics`.
    pub counts: WarmCounts,
    /// Lists after a held listing ([`list_since`]).
    reader: Arc<dyn PrefixRead>,
    /// The read-aheads' counts (listings since a held one).
    read_ahead_counts: Arc<Counts>,
}

impl WarmSet {
    /// `mib` MiB of warm records and blobs; 0 turns warming off.
    #[must_use]
    pub(super) fn new(mib: usize, reader: Arc<dyn PrefixRead>, read_ahead_counts: Arc<Counts>) -> Self {
        let total_kib = mib.saturating_mul(1024);
        Self {
            kib: (mib > 0).then(|| Arc::new(Semaphore::new(total_kib))),
            total_kib,
            ceiling_kib: AtomicUsize::new(total_kib),
            dbs: Mutex::default(),
            taken: Mutex::default(),
            counts: WarmCounts::default(),
            reader,
            read_ahead_counts,
        }
    }

    /// Whether warming is on.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.kib.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Warm>> {
        self.dbs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Databases kept warm, and their bytes.
    #[must_use]
    pub fn usage(&self) -> (usize, usize) {
        let dbs = self.lock();
        (dbs.len(), dbs.values().map(Warm::bytes).sum())
    }

    /// The budget in bytes.
    #[must_use]
    pub fn budget_bytes(&self) -> usize {
        self.total_kib.saturating_mul(1024)
    }

    /// KiB of the budget held now (records and blobs kept, and those handed
    /// to activations that still use them).
    fn held_kib(&self) -> usize {
        self.kib
            .as_ref()
            .map_or(0, |kib| self.total_kib.saturating_sub(kib.available_permits()))
    }

    /// Bytes that may still be reserved: what is free of the budget, under
    /// the ceiling.
    fn free_bytes(&self) -> usize {
        let ceiling = self.ceiling_kib.load(Ordering::Relaxed).min(self.total_kib);
        ceiling.saturating_sub(self.held_kib()).saturating_mul(1024)
    }

    /// Lets the set hold at most half of `room` bytes (the node's budget
    /// less its firm memory; `None`: no node budget, only the warm budget
    /// bounds it). What is held already stays until dropped; only new
    /// reservations are refused past it.
    pub fn limit_to_room(&self, room: Option<u64>) {
        let ceiling = room.map_or(self.total_kib, |room| {
            usize::try_from(room / 2 / 1024)
                .unwrap_or(usize::MAX)
                .min(self.total_kib)
        });
        self.ceiling_kib.store(ceiling, Ordering::Relaxed);
    }

    /// Drops every warm database, with its budget (the node is over its
    /// memory budget: caches go first). The next refresh reads again
    /// within the room there is then.
    pub fn drop_all(&self) {
        self.lock().clear();
    }

    /// Keeps only `dbs` warm: the others are dropped, with their budget.
    pub fn retain(&self, dbs: &HashSet<String>) {
        self.lock().retain(|db, _| dbs.contains(db));
    }

    /// Hands `db`'s warm records and blobs to its activation, if it has any.
    pub(super) fn take(&self, db: &str) -> Option<Taken> {
        {
            let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
            taken.retain(|_, at| at.elapsed() < TAKEN_FOR);
            taken.insert(db.to_owned(), std::time::Instant::now());
        }
        let warm = self.lock().remove(db)?;
        let kib = self.kib.as_ref()?;
        let mut held = Arc::clone(kib).try_acquire_many_owned(0).ok()?;
        let mut records = HashMap::with_capacity(warm.records.len());
        for (name, (bytes, permit)) in warm.records {
            held.merge(permit);
            records.insert(name, bytes);
        }
        let mut blobs = HashMap::with_capacity(warm.blobs.len());
        for (id, (bytes, permit)) in warm.blobs {
            held.merge(permit);
            blobs.insert(id, bytes);
        }
        let listed = warm.listed.map(|(names, permit)| {
            held.merge(permit);
            names
        });
        self.counts.takeovers.fetch_add(1, Ordering::Relaxed);
        Some(Taken {
            records,
            blobs,
            held,
            listed,
        })
    }

    /// Whether `db` was handed to an activation within [`TAKEN_FOR`].
    fn recently_taken(&self, db: &str) -> bool {
        self.taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(db)
            .is_some_and(|at| at.elapsed() < TAKEN_FOR)
    }

    /// Reserves the budget for `bytes`, or `None` when it is spent or the
    /// ceiling is reached.
    fn reserve(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let kib = bytes.div_ceil(1024).max(1);
        if self.held_kib().saturating_add(kib) > self.ceiling_kib.load(Ordering::Relaxed) {
            return None;
        }
        Arc::clone(self.kib.as_ref()?)
            .try_acquire_many_owned(u32::try_from(kib).ok()?)
            .ok()
    }

    /// Brings `db` up to date from `base`: the log records listed now that
    /// are not held yet (eight reads at a time), records no longer
    /// listed dropped (a deleted database), and the index blobs read again
    /// when the `db:` root names other manifests. The listing is the last
    /// one and the names after it when that holds ([`list_since`]: one page
    /// on S3), else a full one.
    ///
    /// # Errors
    /// The store's failure; what was read before it is kept.
    pub async fn refresh(&self, db: &str, base: &dyn FullStore) -> Result<(), StoreError> {
        if !self.enabled() {
            return Ok(());
        }
        if self.recently_taken(db) {
            return Ok(());
        }
        if self.free_bytes() == 0 {
            // No room under the node's budget (or the warm one): not even
            // the listing is read.
            self.counts.budget_full.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let prefix = log_prefix(db);
        let known = self
            .lock()
            .get(db)
            .and_then(|warm| warm.listed.as_ref().map(|(names, _)| names.clone()));
        let since = match &known {
            Some(known) => list_since(self.reader.as_ref(), &self.read_ahead_counts, &prefix, known).await?,
            None => None,
        };
        let names = match since {
            Some(names) => names,
            None => base.list_roots(&prefix).await?,
        };
        let listed: HashSet<String> = names
            .iter()
            .filter(|name| keepable(&prefix, name))
            .cloned()
            .collect();
        // The names themselves are kept within the budget too; without room
        // the next refresh lists in full.
        let names_bytes = names.iter().map(String::len).sum();
        let names_held = self.reserve(names_bytes).map(|permit| (names, permit));
        let missing: Vec<String> = {
            let mut dbs = self.lock();
            // Checked again under the lock: a takeover that came meanwhile
            // keeps the log to itself.
            if self.recently_taken(db) {
                return Ok(());
            }
            let warm = dbs.entry(db.to_owned()).or_default();
            warm.listed = names_held;
            warm.records.retain(|name, _| listed.contains(name));
            let mut missing: Vec<String> = listed
                .into_iter()
                .filter(|name| !warm.records.contains_key(name))
                .collect();
            missing.sort();
            missing
        };
        let mut reads = std::pin::pin!(read_roots(base, missing));
        while let Some((name, bytes)) = reads.try_next().await? {
            let Some(bytes) = bytes else { continue };
            let Some(permit) = self.reserve(bytes.len()) else {
                self.counts.budget_full.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            };
            self.counts.records_read.fetch_add(1, Ordering::Relaxed);
            let mut dbs = self.lock();
            let Some(warm) = dbs.get_mut(db) else {
                // Handed to its takeover (or no longer this node's): stop
                // reading beside it.
                return Ok(());
            };
            warm.records.insert(name, (bytes, permit));
        }
        self.refresh_index(db, base).await
    }

    /// Reads `db`'s index blobs again when its root names other manifests.
    async fn refresh_index(&self, db: &str, base: &dyn FullStore) -> Result<(), StoreError> {
        let manifests: Vec<BlobId> = base
            .get_root(&corium_store::db_root_name(db))
            .await?
            .as_deref()
            .and_then(DbRoot::decode)
            .map(|root| {
                root.roots
                    .iter()
                    .chain(&root.history_roots)
                    .flatten()
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let unchanged = self.lock().get(db).is_none_or(|warm| warm.manifests == manifests);
        if unchanged {
            return Ok(());
        }
        let IndexRead { blobs, .. } = read_index(base, db, self.free_bytes(), &HashMap::new()).await?;
        let mut held = Held::default();
        for (id, bytes) in blobs {
            let Some(permit) = self.reserve(bytes.len()) else {
                self.counts.budget_full.fetch_add(1, Ordering::Relaxed);
                break;
            };
            self.counts.blobs_read.fetch_add(1, Ordering::Relaxed);
            held.insert(id, (bytes, permit));
        }
        if let Some(warm) = self.lock().get_mut(db) {
            warm.manifests = manifests;
            warm.blobs = held;
        }
        Ok(())
    }
}

impl WarmCounts {
    /// Writes the counts' series, with `set`'s usage.
    pub fn collect(&self, set: &WarmSet, scrape: &mut corium_fleet_common::metrics::Scrape<'_>) {
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        let (dbs, bytes) = set.usage();
        scrape.gauge(
            "corium_fleet_warm_standby_databases",
            "Databases this node keeps warm as their first standby.",
            dbs as u64,
        );
        scrape.gauge(
            "corium_fleet_warm_standby_bytes",
            "Bytes of log records and index blobs kept warm.",
            bytes as u64,
        );
        scrape.gauge(
            "corium_fleet_warm_standby_budget_bytes",
            "The most that may be kept warm (--warm-standby-mib).",
            set.budget_bytes() as u64,
        );
        scrape.counter(
            "corium_fleet_warm_standby_records_read_total",
            "Log records read to keep databases warm.",
            load(&self.records_read),
        );
        scrape.counter(
            "corium_fleet_warm_standby_blobs_read_total",
            "Index blobs read to keep databases warm.",
            load(&self.blobs_read),
        );
        scrape.counter(
            "corium_fleet_warm_standby_budget_full_total",
            "Refreshes that stopped because the warm budget was spent.",
            load(&self.budget_full),
        );
        scrape.counter(
            "corium_fleet_warm_standby_takeovers_total",
            "Activations that started from a warm database.",
            load(&self.takeovers),
        );
    }
}
