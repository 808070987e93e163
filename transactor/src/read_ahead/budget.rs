//! The node's read-ahead budget: a read-ahead for each activation, and logs
//! read ahead of a handoff to this node.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use corium_fleet_store::prefix_read::PrefixRead;
use corium_store::{BlobId, FullStore, StoreError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use futures::TryStreamExt as _;

use super::index::{IN_FLIGHT, IndexRead, read_index};
use super::log::{ReadAhead, Start};
use super::pool::{Counts, Pool, keep, keepable, list_since, log_prefix, read_roots};
use super::warm::WarmSet;

/// Listings after the first read of a handoff's log, each reading what the
/// owner committed meanwhile (they stop once that is a handful).
const CATCH_UP_ROUNDS: usize = 3;

/// How long a log read ahead of a handoff waits for its activation.
pub(crate) const PREPARED_FOR: Duration = Duration::from_secs(30);

/// A log read ahead of an activation that has not started yet.
struct Prepared {
    records: HashMap<String, Vec<u8>>,
    /// The complete listing they were read under (`None` when the read
    /// stopped at its bound).
    listed: Option<Vec<String>>,
    read_at: Instant,
    held: OwnedSemaphorePermit,
    /// The index blobs the root named at the time, and their budget.
    index: Option<(HashMap<BlobId, Vec<u8>>, OwnedSemaphorePermit)>,
}

/// What [`Budget::prepare`] read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PreparedLog {
    /// Records kept.
    pub records: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Index blobs kept.
    pub index_blobs: usize,
    /// Their bytes.
    pub index_bytes: usize,
}

/// The node's read-ahead memory, shared by its read-aheads.
#[derive(Clone)]
pub struct Budget {
    pool: Pool,
    /// Shared by every read-ahead of the node.
    pub counts: Arc<Counts>,
    /// Logs read ahead of handoffs to this node, by database.
    prepared: Arc<Mutex<HashMap<String, Prepared>>>,
    /// Databases this node keeps warm as their first standby.
    pub warm: Arc<WarmSet>,
    /// The read-ahead budget in KiB (0: off).
    total_kib: usize,
}

impl Budget {
    /// `mib` MiB of read-ahead (0: off), read through `reader`, and
    /// `warm_mib` MiB for warm standbys (0: off).
    #[must_use]
    pub fn new(mib: usize, warm_mib: usize, reader: Arc<dyn PrefixRead>) -> Self {
        let counts = Arc::<Counts>::default();
        let warm = Arc::new(WarmSet::new(warm_mib, Arc::clone(&reader), Arc::clone(&counts)));
        Self {
            pool: Pool {
                kib: (mib > 0).then(|| Arc::new(Semaphore::new(mib.saturating_mul(1024)))),
                reader,
                counts: Arc::clone(&counts),
                kept: Arc::default(),
            },
            counts,
            prepared: Arc::default(),
            warm,
            total_kib: mib.saturating_mul(1024),
        }
    }

    /// The bytes the activations' read-aheads and prepared logs hold now
    /// (firm memory under the node's budget; the warm set's bytes are a
    /// cache, counted apart: [`WarmSet::usage`]).
    #[must_use]
    pub fn held_bytes(&self) -> u64 {
        let free_kib = self.pool.kib.as_ref().map_or(0, |kib| kib.available_permits());
        let read_ahead = self.total_kib.saturating_sub(free_kib).saturating_mul(1024);
        u64::try_from(read_ahead).unwrap_or(u64::MAX)
    }

    /// KiB of the budget free now (tests).
    #[cfg(test)]
    pub(super) fn free_kib(&self) -> usize {
        self.pool.kib.as_ref().map_or(0, |kib| kib.available_permits())
    }

    /// Drops prepared logs whose activation did not come.
    fn forget_stale(&self) {
        self.prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, prepared| prepared.read_at.elapsed() < PREPARED_FOR);
    }

    /// Reads `db`'s log, and the index blobs its root names (from `base`),
    /// now for an activation that is about to come (the target's half of a
    /// handoff). Nothing is kept when read-ahead is off or its budget is
    /// spent; an index that cannot be read is read by the activation.
    ///
    /// # Errors
    /// The store's failure to read the log (the activation then reads as
    /// usual).
    pub async fn prepare(&self, db: &str, base: &dyn FullStore) -> Result<PreparedLog, StoreError> {
        self.forget_stale();
        let Some(reserved) = self.pool.reserve() else {
            self.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(PreparedLog::default());
        };
        let prefix = log_prefix(db);
        let max_bytes = reserved.num_permits() * 1024;
        let read = self.pool.reader.read_prefix(&prefix, max_bytes).await?;
        let mut listed = read
            .complete
            .then(|| read.rows.iter().map(|(name, _)| name.clone()).collect::<Vec<_>>());
        let mut records: HashMap<String, Vec<u8>> = read
            .rows
            .into_iter()
            .filter(|(name, _)| keepable(&prefix, name))
            .collect();
        let mut bytes: usize = records.values().map(Vec::len).sum();
        // The owner kept committing while the log was read: catch up with
        // the names after it, so the release leaves only the last moments'.
        for _ in 0..CATCH_UP_ROUNDS {
            let Some(known) = &listed else { break };
            let Ok(Some(names)) = list_since(self.pool.reader.as_ref(), &self.counts, &prefix, known).await
            else {
                listed = None;
                break;
            };
            let new: Vec<String> = names
                .iter()
                .filter(|name| keepable(&prefix, name) && !records.contains_key(*name))
                .cloned()
                .collect();
            let few = new.len() <= IN_FLIGHT;
            let mut reads = std::pin::pin!(read_roots(base, new));
            while let Ok(Some((name, record))) = reads.try_next().await {
                let Some(record) = record else { continue };
                if bytes + record.len() > max_bytes {
                    break;
                }
                bytes += record.len();
                records.insert(name, record);
            }
            listed = Some(names);
            if few {
                break;
            }
        }
        let held = keep(reserved, bytes);
        let index = self.prepare_index(db, base).await;
        let log = PreparedLog {
            records: records.len(),
            bytes,
            index_blobs: index.as_ref().map_or(0, |(blobs, _)| blobs.len()),
            index_bytes: index
                .as_ref()
                .map_or(0, |(blobs, _)| blobs.values().map(Vec::len).sum()),
        };
        self.counts.prepared.fetch_add(1, Ordering::Relaxed);
        self.prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                db.to_owned(),
                Prepared {
                    records,
                    listed,
                    read_at: Instant::now(),
                    held,
                    index,
                },
            );
        Ok(log)
    }

    /// The index blobs of `db` for a prepared log, within what is free of
    /// the budget; `None` when the budget is spent or the read failed (the
    /// activation then reads them itself).
    async fn prepare_index(
        &self,
        db: &str,
        base: &dyn FullStore,
    ) -> Option<(HashMap<BlobId, Vec<u8>>, OwnedSemaphorePermit)> {
        let reserved = self.pool.reserve()?;
        match read_index(base, db, reserved.num_permits() * 1024, &HashMap::new()).await {
            Ok(IndexRead { blobs, bytes }) => {
                self.counts.index_reads.fetch_add(1, Ordering::Relaxed);
                Some((blobs, keep(reserved, bytes)))
            }
            Err(error) => {
                tracing::debug!(db, %error, "index read ahead of a handoff failed; the activation reads it");
                None
            }
        }
    }

    /// The read-ahead for one activation of `db`: a prepared log if there
    /// is one, else armed with what is free of the budget (up to
    /// [`MAX_PER_ACTIVATION`](super::pool::MAX_PER_ACTIVATION)), else off. Kept by the cell afterwards for
    /// its whole-log reads ([`ReadAhead::whole_log`]).
    #[must_use]
    pub fn start(&self, db: &str) -> Arc<ReadAhead> {
        let prepared = self
            .prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(db)
            .filter(|prepared| prepared.read_at.elapsed() < PREPARED_FOR);
        let start = if let Some(Prepared {
            records,
            listed,
            held,
            index,
            ..
        }) = prepared
        {
            // Read before the lease moved: the listing comes from storage,
            // and only records committed since are read from it.
            self.counts.prepared_used.fetch_add(1, Ordering::Relaxed);
            Start::Prepared {
                records,
                held,
                index: index.map(|(blobs, held)| (blobs, Some(held))),
                listed,
            }
        } else if let Some(warm) = self.warm.take(db) {
            // Kept warm as its first standby: as a prepared log, the
            // listing comes from storage and only the tail is read.
            Start::Prepared {
                records: warm.records,
                held: warm.held,
                // The blobs' bytes are in `held` too.
                index: Some((warm.blobs, None)),
                listed: warm.listed,
            }
        } else if let Some(reserved) = self.pool.reserve() {
            Start::Armed(reserved)
        } else {
            self.counts.skipped.fetch_add(1, Ordering::Relaxed);
            Start::Off
        };
        Arc::new(ReadAhead::new(db, self.pool.clone(), start))
    }

    /// A read-ahead for a cell that opens without recovery (a database
    /// created here), for its whole-log reads.
    #[must_use]
    pub fn idle(&self, db: &str) -> Arc<ReadAhead> {
        Arc::new(ReadAhead::new(db, self.pool.clone(), Start::Idle))
    }
}
