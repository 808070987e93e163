//! The node's read-ahead memory, what its read-aheads did, and which root
//! names are log records.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use corium_fleet_store::prefix_read::PrefixRead;
use corium_store::{FullStore, StoreError};

use super::index::IN_FLIGHT;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most one read-ahead reads.
pub(crate) const MAX_PER_ACTIVATION: usize = 64 << 20;

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
    /// Logs read ahead of a handoff (`Budget::prepare`).
    pub prepared: AtomicU64,
    /// Activations that started from a prepared log.
    pub prepared_used: AtomicU64,
    /// Whole-log reads of an open cell (a replay, a subscription's
    /// catch-up) that armed the read-ahead again.
    pub whole_log_reads: AtomicU64,
    /// Index read-aheads made (an activation's, or ahead of a handoff).
    pub index_reads: AtomicU64,
    /// Corium's index blob reads served from them instead of storage.
    pub index_blobs_served: AtomicU64,
    /// Log listings answered with the listing a read-ahead took from
    /// storage (the cell wrote no log root since).
    pub listings_served: AtomicU64,
    /// Opens whose records were kept for the cell's first whole-log reads.
    pub kept: AtomicU64,
    /// Whole-log reads that found an open's records still kept.
    pub kept_used: AtomicU64,
    /// Kept records dropped early because an activation needed the budget.
    pub kept_evicted: AtomicU64,
    /// Log listings made of a listing held from before and storage's names
    /// after it ([`list_since`]).
    pub listings_since: AtomicU64,
}

/// Records kept after an open, which give their budget back when an
/// activation needs it.
pub(super) trait Evict: Send + Sync {
    /// Drops the kept records unless a read is using them.
    fn evict(&self);
}

/// The read-aheads keeping an open's records, oldest first.
#[derive(Default)]
pub(super) struct Kept {
    next: AtomicU64,
    entries: Mutex<BTreeMap<u64, Weak<dyn Evict>>>,
}

impl Kept {
    /// Registers `kept`; the key takes it off again ([`Self::remove`]).
    pub(super) fn add(&self, kept: Weak<dyn Evict>) -> u64 {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, kept);
        key
    }

    pub(super) fn remove(&self, key: u64) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
    }

    /// The oldest entry, taken off the list.
    fn pop_oldest(&self) -> Option<Weak<dyn Evict>> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_first()
            .map(|(_, kept)| kept)
    }
}

/// The node's read-ahead memory and reader, shared by every read-ahead.
#[derive(Clone)]
pub(super) struct Pool {
    /// One permit per KiB; `None` when read-ahead is off.
    pub(super) kib: Option<Arc<Semaphore>>,
    /// Reads a log in one go.
    pub(super) reader: Arc<dyn PrefixRead>,
    /// Shared by every read-ahead of the node.
    pub(super) counts: Arc<Counts>,
    /// Opens' records kept for their cells' first whole-log reads: given
    /// back first when a reservation finds the budget short.
    pub(super) kept: Arc<Kept>,
}

impl Pool {
    /// Reserves what is free of the budget, up to [`MAX_PER_ACTIVATION`],
    /// after dropping kept records (oldest first) while less than that is
    /// free. Never called with a read-ahead's lock held (eviction takes
    /// the kept read-aheads' locks).
    pub(super) fn reserve(&self) -> Option<OwnedSemaphorePermit> {
        let kib = self.kib.as_ref()?;
        while kib.available_permits() < MAX_PER_ACTIVATION / 1024 {
            let Some(kept) = self.kept.pop_oldest() else {
                break;
            };
            if let Some(kept) = kept.upgrade() {
                kept.evict();
                self.counts.kept_evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        let wanted = kib.available_permits().min(MAX_PER_ACTIVATION / 1024);
        u32::try_from(wanted)
            .ok()
            .filter(|&wanted| wanted > 0)
            .and_then(|wanted| Arc::clone(kib).try_acquire_many_owned(wanted).ok())
    }
}

/// The part of `reserved` that `bytes` use; the rest goes back to the budget.
pub(super) fn keep(mut reserved: OwnedSemaphorePermit, bytes: usize) -> OwnedSemaphorePermit {
    let used = bytes.div_ceil(1024).min(reserved.num_permits());
    reserved.split(used).unwrap_or(reserved)
}

/// The version a fork writes its copied log under: such names can be
/// written again (see the module's doc), so they are never kept ahead.
const FORK_VERSION: &str = "00000000000000000000:";

/// The prefix of `db`'s log records (Corium's `NativeRootLogStore::prefix`).
#[must_use]
pub(crate) fn log_prefix(db: &str) -> String {
    format!("log:{db}:v")
}

/// Whether `name` is a record under `prefix`: `<prefix><20 digits>:r<20
/// digits>`, Corium's per-record key, the only kind kept.
pub(super) fn is_record(prefix: &str, name: &str) -> bool {
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

/// Whether `name` is a record under `prefix` that may be kept ahead: every
/// record but a fork's version-0 ones (their names can be written again).
pub(super) fn keepable(prefix: &str, name: &str) -> bool {
    is_record(prefix, name) && !name[prefix.len()..].starts_with(FORK_VERSION)
}

/// A listing of the log under `prefix` built on `known`, a complete listing
/// of it taken earlier (sorted): `known` and the names storage lists after
/// its second-to-last name, which must begin with its last one. `None` when
/// they do not (or `known` has fewer than two names): the caller lists in
/// full.
///
/// The same names as a full listing, for a native log (Corium 0.1.90):
/// - a log grows at its end: a writer appends under its lease version in
///   increasing `t` (one writer per version, appends serialized), and a
///   newer version's names sort after every older one's (zero-padded);
/// - a name written since that sorts *before* `known`'s last is an older
///   version's stale append, made after the last name's version had
///   opened the log, so at or past that version's first `t`, which `known`
///   holds: Corium's takeover cutoff drops it either way;
/// - names leave a log only when its database is deleted (`delete_all`
///   removes every one, a fork writes version-0 names only into a database
///   that does not exist): the last name still listed proves that did not
///   happen since.
///
/// # Errors
/// The store's failure.
pub(super) async fn list_since(
    reader: &dyn PrefixRead,
    counts: &Counts,
    prefix: &str,
    known: &[String],
) -> Result<Option<Vec<String>>, StoreError> {
    let [.., second_last, last] = known else {
        return Ok(None);
    };
    let newer = reader.list_after(prefix, second_last).await?;
    if newer.first() != Some(last) {
        return Ok(None);
    }
    counts.listings_since.fetch_add(1, Ordering::Relaxed);
    let mut names = Vec::with_capacity(known.len() - 1 + newer.len());
    names.extend_from_slice(&known[..known.len() - 1]);
    names.extend(newer);
    Ok(Some(names))
}

/// Reads the roots `names` from `base`, [`IN_FLIGHT`] at a time, in order.
pub(super) fn read_roots(
    base: &dyn FullStore,
    names: Vec<String>,
) -> impl futures::Stream<Item = Result<(String, Option<Vec<u8>>), StoreError>> + '_ {
    use futures::StreamExt as _;
    futures::stream::iter(names)
        .map(move |name| async move { base.get_root(&name).await.map(|bytes| (name, bytes)) })
        .buffered(IN_FLIGHT)
}

impl Counts {
    /// Writes the counts' series.
    pub fn collect(&self, scrape: &mut corium_fleet_common::metrics::Scrape<'_>) {
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        scrape.counter(
            "corium_fleet_activation_log_reads_total",
            "Logs read in one go while their database activated.",
            load(&self.reads),
        );
        scrape.counter(
            "corium_fleet_activation_log_records_read_total",
            "Log records those reads returned.",
            load(&self.records),
        );
        scrape.counter(
            "corium_fleet_activation_log_records_served_total",
            "Recovery's record reads served from them instead of storage.",
            load(&self.served),
        );
        scrape.counter(
            "corium_fleet_activation_logs_prepared_total",
            "Logs read ahead of a handoff to this node, while the old owner still served.",
            load(&self.prepared),
        );
        scrape.counter(
            "corium_fleet_activation_logs_prepared_used_total",
            "Activations that started from a log read ahead of their handoff.",
            load(&self.prepared_used),
        );
        scrape.counter(
            "corium_fleet_activation_log_reads_skipped_total",
            "Activations that read their log record by record: read-ahead budget spent, or the bulk read failed.",
            load(&self.skipped),
        );
        scrape.counter(
            "corium_fleet_whole_log_reads_total",
            "Whole-log reads of an open cell (a request-id replay, a subscription's catch-up) read in one go.",
            load(&self.whole_log_reads),
        );
        scrape.counter(
            "corium_fleet_activation_index_reads_total",
            "Published index blobs read in one go, concurrently, for an activation or ahead of a handoff.",
            load(&self.index_reads),
        );
        scrape.counter(
            "corium_fleet_activation_index_blobs_served_total",
            "Recovery's index blob reads served from them instead of storage.",
            load(&self.index_blobs_served),
        );
        scrape.counter(
            "corium_fleet_log_listings_served_total",
            "Log listings of an activation or a whole-log read answered with the listing taken from storage after the lease (the cell wrote no log root since).",
            load(&self.listings_served),
        );
        scrape.counter(
            "corium_fleet_activation_logs_kept_total",
            "Opens whose log records were kept for the cell's first whole-log reads (a request-id replay, a subscription's catch-up).",
            load(&self.kept),
        );
        scrape.counter(
            "corium_fleet_whole_log_reads_from_kept_total",
            "Whole-log reads served from an open's kept records (only the tail read from storage).",
            load(&self.kept_used),
        );
        scrape.counter(
            "corium_fleet_activation_logs_kept_evicted_total",
            "Kept records dropped early because an activation needed the read-ahead budget.",
            load(&self.kept_evicted),
        );
        scrape.counter(
            "corium_fleet_log_listings_since_total",
            "Log listings made of a listing held from before (a handoff's, a warm standby's) and the names storage lists after it.",
            load(&self.listings_since),
        );
    }
}
