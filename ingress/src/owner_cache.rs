//! The owner cache: database → who holds its lease, read from the database
//! root in storage (read-only), refreshed from `NotOwner` hints.
//!
//! Entries live for a short TTL. A burst of requests for one uncached
//! database makes one storage read (`moka`'s `try_get_with` coalesces
//! concurrent misses). Every entry is a hint: the hinted node checks its
//! own lease and answers `NotOwner` when the hint is stale.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use corium_fleet_common::owner::{node_of, now_unix_ms};

use corium_fleet_common::not_owner::NotOwner;
use corium_store::{DbRoot, FullStore, db_root_name, meta_root_name};

use crate::metrics::Metrics;

/// The lease holder of a database, as last seen.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Owner {
    pub node_id: String,
    pub lease_version: u64,
    /// Internal endpoint of the holder (from the root's `owner_endpoint`).
    pub endpoint: String,
}

/// What the ingress knows about one database.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Resolution {
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
pub struct ResolveError {
    pub db: String,
    pub detail: String,
}

/// The owner cache.
pub struct Cache {
    entries: moka::future::Cache<String, Resolution>,
    store: Arc<dyn FullStore>,
    storage_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Cache {
    #[must_use]
    pub fn new(
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
            store,
            storage_timeout,
            metrics,
        }
    }

    /// The cached resolution of `db`, reading storage on a miss.
    ///
    /// # Errors
    /// When storage cannot be read in time (never a guess).
    pub async fn resolve(&self, db: &str) -> Result<Resolution, ResolveError> {
        if let Some(found) = self.entries.get(db).await {
            self.metrics.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(found);
        }
        self.entries
            .try_get_with(db.to_owned(), self.read(db))
            .await
            .map_err(|error: Arc<ResolveError>| {
                self.metrics.resolution_failures.fetch_add(1, Ordering::Relaxed);
                (*error).clone()
            })
    }

    async fn read(&self, db: &str) -> Result<Resolution, ResolveError> {
        self.metrics.cache_misses.fetch_add(1, Ordering::Relaxed);
        let read = async {
            let meta = self.store.get_root(&meta_root_name(db)).await?;
            let root = self.store.get_root(&db_root_name(db)).await?;
            Ok::<_, corium_store::StoreError>((meta.is_some(), root.as_deref().and_then(DbRoot::decode)))
        };
        let error = |detail: String| ResolveError {
            db: db.to_owned(),
            detail,
        };
        let (exists, root) = tokio::time::timeout(self.storage_timeout, read)
            .await
            .map_err(|_| error("storage timed out".to_owned()))?
            .map_err(|store| error(store.to_string()))?;
        if !exists {
            return Ok(Resolution::Unknown);
        }
        Ok(match root {
            Some(root) if !root.owner.is_empty() && root.lease_expires_unix_ms > now_unix_ms() => {
                Resolution::Owned(Owner {
                    node_id: node_of(&root.owner).to_owned(),
                    lease_version: root.lease_version,
                    endpoint: root.owner_endpoint,
                })
            }
            _ => Resolution::NoLiveOwner,
        })
    }

    /// Learns from a `NotOwner` hint: the named owner when there is one,
    /// otherwise forget the entry so the next request re-reads storage.
    pub async fn learn(&self, hint: &NotOwner) {
        self.metrics.cache_stale.fetch_add(1, Ordering::Relaxed);
        if hint.owner_id.is_empty() || hint.route_endpoint.is_empty() {
            self.entries.invalidate(&hint.database).await;
        } else {
            let owner = Owner {
                node_id: hint.owner_id.clone(),
                lease_version: hint.lease_version,
                endpoint: hint.route_endpoint.clone(),
            };
            self.entries
                .insert(hint.database.clone(), Resolution::Owned(owner))
                .await;
        }
    }

    /// Forgets `db` (its owner could not be reached).
    pub async fn invalidate(&self, db: &str) {
        self.entries.invalidate(db).await;
    }
}
