//! The owner cache: database → who holds its lease, read from the database
//! root in storage (read-only), refreshed from `NotOwner` hints.
//!
//! Entries live for a short TTL. A burst of requests for one uncached
//! database makes one storage read (`moka`'s `try_get_with` coalesces
//! concurrent misses). Every entry is a hint: the hinted node checks its
//! own lease and answers `NotOwner` when the hint is stale.
//!
//! When storage cannot be read, the last owner seen (within
//! [`LAST_KNOWN_TTL`]) is used instead of failing the call: it is a hint
//! like any other, which the node fences by its lease version, so a storage
//! outage at the ingress does not stop calls to databases whose owner is
//! still serving.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use corium_fleet_common::owner::{node_of, now_unix_ms};

use corium_fleet_wire::not_owner::NotOwner;
use corium_store::FullStore;

use crate::metrics::Metrics;

/// The lease holder of a database, as last seen.
#[derive(Clone, Debug, Eq, PartialEq)]
pub(crate) struct Owner {
    /// Node id of the holder.
    pub node_id: String,
    /// The lease version it holds, sent on the hop so a node can refuse a
    /// route made on a stale lease (0: unknown, as in a handoff hint).
    pub lease_version: u64,
    /// Internal endpoint of the holder (from the root's `owner_endpoint`).
    pub endpoint: String,
}

/// What the ingress knows about one database.
#[derive(Clone, Debug, Eq, PartialEq)]
pub(crate) enum Resolution {
    /// An unexpired lease.
    Owned(Owner),
    /// Catalogued, but no unexpired lease: a candidate activates it.
    NoLiveOwner,
    /// Not in the catalog.
    Unknown,
}

/// Why an owner could not be resolved.
#[derive(Clone, Debug, thiserror::Error)]
#[error("cannot read the lease of {db:?} from storage: {detail}")]
pub(crate) struct ResolveError {
    /// The database whose lease was being read.
    pub db: String,
    /// What the storage read said (or that it timed out).
    pub detail: String,
}

/// How long the last owner seen is kept for when storage cannot be read.
pub(crate) const LAST_KNOWN_TTL: Duration = Duration::from_mins(10);

/// The owner cache.
pub(crate) struct Cache {
    entries: moka::future::Cache<String, Resolution>,
    /// The last owner read from storage or learned, per database, for when
    /// storage cannot be read.
    last_known: moka::sync::Cache<String, Owner>,
    store: Arc<dyn FullStore>,
    storage_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Cache {
    /// An empty cache over `store`: entries live for `ttl`, at most
    /// `capacity` of them, and one storage read is bounded by
    /// `storage_timeout`.
    #[must_use]
    pub(crate) fn new(
        store: Arc<dyn FullStore>,
        ttl: Duration,
        capacity: u64,
        storage_timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            entries: moka::future::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl)
                .build(),
            last_known: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(LAST_KNOWN_TTL)
                .build(),
            store,
            storage_timeout,
            metrics,
        }
    }

    /// The cached resolution of `db`, reading storage on a miss.
    ///
    /// # Errors
    /// When storage cannot be read in time (never a guess).
    pub(crate) async fn resolve(&self, db: &str) -> Result<Resolution, ResolveError> {
        if let Some(found) = self.entries.get(db).await {
            self.metrics.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(found);
        }
        match self.entries.try_get_with(db.to_owned(), self.read(db)).await {
            Ok(resolution) => {
                if let Resolution::Owned(owner) = &resolution {
                    self.last_known.insert(db.to_owned(), owner.clone());
                }
                Ok(resolution)
            }
            Err(error) => {
                self.metrics.resolution_failures.fetch_add(1, Ordering::Relaxed);
                // Storage is unreachable: the last owner seen is still the
                // best hint (the node fences it by lease version).
                if let Some(owner) = self.last_known.get(db) {
                    self.metrics.stale_owner_served.fetch_add(1, Ordering::Relaxed);
                    return Ok(Resolution::Owned(owner));
                }
                Err((*error).clone())
            }
        }
    }

    async fn read(&self, db: &str) -> Result<Resolution, ResolveError> {
        self.metrics.cache_misses.fetch_add(1, Ordering::Relaxed);
        let view = corium_fleet_store::roots::read(self.store.as_ref(), db, self.storage_timeout)
            .await
            .map_err(|error| ResolveError {
                db: db.to_owned(),
                detail: error.to_string(),
            })?;
        if !view.exists {
            return Ok(Resolution::Unknown);
        }
        Ok(match view.live_owner(now_unix_ms()) {
            Some(root) => Resolution::Owned(Owner {
                node_id: node_of(&root.owner).to_owned(),
                lease_version: root.lease_version,
                endpoint: root.owner_endpoint.clone(),
            }),
            None => Resolution::NoLiveOwner,
        })
    }

    /// Learns from a `NotOwner` hint: the named owner when there is one,
    /// otherwise forget the entry so the next request re-reads storage.
    pub(crate) async fn learn(&self, hint: &NotOwner) {
        self.metrics.cache_stale.fetch_add(1, Ordering::Relaxed);
        if hint.owner_id.is_empty() || hint.route_endpoint.is_empty() {
            self.entries.invalidate(&hint.database).await;
        } else {
            let owner = Owner {
                node_id: hint.owner_id.clone(),
                lease_version: hint.lease_version,
                endpoint: hint.route_endpoint.clone(),
            };
            self.last_known.insert(hint.database.clone(), owner.clone());
            self.entries
                .insert(hint.database.clone(), Resolution::Owned(owner))
                .await;
        }
    }

    /// Forgets `db` (its owner could not be reached).
    pub(crate) async fn invalidate(&self, db: &str) {
        self.entries.invalidate(db).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use async_trait::async_trait;
    use corium_store::{BlobId, BlobIdStream, BlobStore, MemoryStore, RootStore, StoreError, meta_root_name};

    use super::*;

    /// A store that counts root reads and makes each one slow, so concurrent
    /// misses overlap.
    #[derive(Default)]
    struct CountingStore {
        inner: MemoryStore,
        root_reads: AtomicUsize,
    }

    #[async_trait]
    impl BlobStore for CountingStore {
        async fn put(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
            self.inner.put(bytes).await
        }
        async fn get(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
            self.inner.get(id).await
        }
        async fn delete(&self, id: &BlobId) -> Result<(), StoreError> {
            self.inner.delete(id).await
        }
        async fn list(&self) -> Result<BlobIdStream, StoreError> {
            self.inner.list().await
        }
    }

    #[async_trait]
    impl RootStore for CountingStore {
        async fn get_root(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
            self.root_reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.inner.get_root(name).await
        }
        async fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<(), StoreError> {
            self.inner.cas_root(name, expected, new).await
        }
        async fn delete_root(&self, name: &str) -> Result<(), StoreError> {
            self.inner.delete_root(name).await
        }
        async fn list_roots(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
            self.inner.list_roots(prefix).await
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_for_one_uncached_database_reads_storage_once() {
        let store = Arc::new(CountingStore::default());
        store
            .inner
            .cas_root(&meta_root_name("cold"), None, b"meta")
            .await
            .unwrap();
        let metrics = Arc::new(Metrics::default());
        let cache = Arc::new(Cache::new(
            Arc::clone(&store) as Arc<dyn FullStore>,
            Duration::from_mins(1),
            1000,
            Duration::from_secs(5),
            Arc::clone(&metrics),
        ));
        let burst: Vec<_> = (0..64)
            .map(|_| {
                let cache = Arc::clone(&cache);
                tokio::spawn(async move { cache.resolve("cold").await.unwrap() })
            })
            .collect();
        for request in burst {
            assert_eq!(request.await.unwrap(), Resolution::NoLiveOwner);
        }
        // One resolution: the catalog entry and the root, once each.
        assert_eq!(store.root_reads.load(Ordering::SeqCst), 2);
        assert_eq!(metrics.cache_misses.load(Ordering::Relaxed), 1);
        assert_eq!(cache.resolve("absent").await.unwrap(), Resolution::Unknown);
    }
}
