//! `CountingStore`: the node's shared store, counting root operations per
//! database.
//!
//! Invariant 5 says a node reads, writes and renews the roots of only the
//! databases it is a candidate for (or owns). The counts make that
//! observable from outside: `/debug/root-ops` on the admin port lists, per
//! database, the root reads and writes this process has made. Only
//! per-database root names are counted (`meta:`, `db:`, `keys:`, `lease:`,
//! `log:`). The map is bounded: after [`MAX_TRACKED`] databases, further
//! ones are counted together under [`OTHERS`] (a client can name any number
//! of valid, absent databases, each read once at its candidates).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use corium_store::{FullStore, RootStore, StoreError};
use serde::Serialize;

/// Databases counted one by one; more share [`OTHERS`].
pub(crate) const MAX_TRACKED: usize = 10_000;

/// The entry that counts every database past [`MAX_TRACKED`] (a name no
/// database can have).
pub(crate) const OTHERS: &str = "(others)";

/// Root operations on one database.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Serialize)]
pub struct RootOps {
    /// Root reads (`get_root`, a listing under the database's prefix).
    pub reads: u64,
    /// Root writes (`cas_root`, `delete_root`).
    pub writes: u64,
}

/// The wrapped store and its counts.
pub struct CountingStore {
    inner: Arc<dyn FullStore>,
    counts: Mutex<BTreeMap<String, RootOps>>,
}

/// The database a root name belongs to (saga branches count as their
/// database), or `None` for fleet-level names.
#[must_use]
pub(crate) fn database_of(name: &str) -> Option<&str> {
    let (prefix, rest) = name.split_once(':')?;
    let db = match prefix {
        "meta" | "db" | "keys" | "lease" => rest,
        "log" => rest.split(':').next()?,
        _ => return None,
    };
    let db = db.split(".saga.").next().unwrap_or(db);
    (!db.is_empty()).then_some(db)
}

impl CountingStore {
    /// Counts the root operations made on `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn FullStore>) -> Self {
        Self {
            inner,
            counts: Mutex::new(BTreeMap::new()),
        }
    }

    fn count(&self, name: &str, write: bool) {
        let Some(db) = database_of(name) else { return };
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = if counts.len() >= MAX_TRACKED && !counts.contains_key(db) {
            OTHERS
        } else {
            db
        };
        let ops = counts.entry(key.to_owned()).or_default();
        if write {
            ops.writes += 1;
        } else {
            ops.reads += 1;
        }
    }

    /// Root operations per database since start.
    #[must_use]
    pub fn snapshot(&self) -> BTreeMap<String, RootOps> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

corium_fleet_store::delegate_blobs!(CountingStore, inner);

#[async_trait]
impl RootStore for CountingStore {
    async fn get_root(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.count(name, false);
        self.inner.get_root(name).await
    }

    async fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<(), StoreError> {
        self.count(name, true);
        self.inner.cas_root(name, expected, new).await
    }

    async fn delete_root(&self, name: &str) -> Result<(), StoreError> {
        self.count(name, true);
        self.inner.delete_root(name).await
    }

    async fn list_roots(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        // A listing names no single database unless its prefix does.
        if prefix.contains(':') && !prefix.ends_with(':') {
            self.count(prefix, false);
        }
        self.inner.list_roots(prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_root_names_to_databases() {
        assert_eq!(database_of("meta:orders"), Some("orders"));
        assert_eq!(database_of("db:orders"), Some("orders"));
        assert_eq!(database_of("log:orders:v00001:r0002"), Some("orders"));
        assert_eq!(database_of("meta:orders.saga.00ff"), Some("orders"));
        assert_eq!(database_of("fleet-node:node-1"), None);
        assert_eq!(database_of("meta:"), None);
    }

    #[tokio::test]
    async fn counts_reads_and_writes_per_database() {
        let store = CountingStore::new(Arc::new(corium_store::MemoryStore::default()));
        store.cas_root("db:a", None, b"1").await.unwrap();
        store.get_root("db:a").await.unwrap();
        store.get_root("meta:b").await.unwrap();
        store.list_roots("meta:").await.unwrap();
        store.list_roots("meta:a.saga.").await.unwrap();
        let counts = store.snapshot();
        assert_eq!(counts["a"], RootOps { reads: 2, writes: 1 });
        assert_eq!(counts["b"], RootOps { reads: 1, writes: 0 });
        assert_eq!(counts.len(), 2);
    }

    #[tokio::test]
    async fn the_map_is_bounded_and_the_rest_is_counted_together() {
        let store = CountingStore::new(Arc::new(corium_store::MemoryStore::default()));
        for i in 0..MAX_TRACKED + 500 {
            store.get_root(&format!("meta:db{i}")).await.unwrap();
        }
        store.get_root("meta:db0").await.unwrap();
        let counts = store.snapshot();
        // One entry more than the bound, for the rest, whatever is asked.
        assert_eq!(counts.len(), MAX_TRACKED + 1);
        assert_eq!(
            counts["db0"].reads, 2,
            "databases already tracked keep their own count"
        );
        assert_eq!(counts[OTHERS].reads, 500);
    }
}
