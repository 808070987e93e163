//! The cell view: a registered storage backend that shows one cell only its
//! own database over the node's one shared store.
//!
//! Corium's `TransactorNode` hosts every database its store lists under
//! `meta:`. A fleet node hosts each database as its own `TransactorNode` (a
//! cell, see `cell.rs`) over this view, which
//! - answers the `meta:` catalog listing with a point read of the cell's own
//!   database (activation is O(1), never a catalog scan);
//! - fences writes (`cas_root`, `delete_root`) to root names the database
//!   owns, so a cell can never write another database's roots;
//! - answers the first listing of the cell's log during its activation, and
//!   during each whole-log read of the open cell, with one bulk read, and
//!   Corium's reads of those records, and its further listings until the
//!   cell writes to its log, from memory ([`read_ahead`](crate::read_ahead));
//! - passes every other call through: blobs are content-addressed and shared,
//!   and `list_roots("db:")` must stay unfiltered for garbage collection to
//!   see every live root (design note 0002 has the negative control).
//!
//! One kind is registered per log placement of the base backend, once per
//! process: the storage-backend registry is process-global and has no
//! unregister. The base store and the database travel in the
//! `StorageConfig` (an extension and a JSON field).

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;

use crate::read_ahead::ReadAhead;
use corium_store::{
    BackendCapabilities, BlobId, FullStore, LogPlacement, ReadStore, RootStore, StorageBackend,
    StorageConfig, StoreError,
};

/// The shared base store, attached to a cell's `StorageConfig` as a
/// process-local extension (never serialized).
#[derive(Clone)]
pub(crate) struct BaseStore(pub Arc<dyn FullStore>);

/// Databases a cell may write besides its own while it forks into them
/// (fleet fork: the target is reserved fleet-wide first). Shared between the
/// cell and its view.
#[derive(Clone, Default)]
pub struct ForkTargets(pub Arc<std::sync::RwLock<std::collections::BTreeSet<String>>>);

impl ForkTargets {
    fn contains(&self, db: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(db)
    }

    /// Allows writes to `db`'s roots until the guard drops.
    #[must_use]
    pub fn allow(&self, db: &str) -> ForkAllowance {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(db.to_owned());
        ForkAllowance {
            targets: self.clone(),
            db: db.to_owned(),
        }
    }
}

/// Revokes a fork target's write allowance when dropped.
pub struct ForkAllowance {
    targets: ForkTargets,
    db: String,
}

impl Drop for ForkAllowance {
    fn drop(&mut self) {
        self.targets
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.db);
    }
}

/// A view of the base store limited to one database (or to none, for the
/// node's garbage-collection cell).
pub(crate) struct CellView {
    base: Arc<dyn FullStore>,
    /// The one database this view may write; `None` for the GC view, which
    /// writes nothing but blob deletions.
    db: Option<String>,
    /// Fork targets the cell is currently allowed to write.
    fork_targets: ForkTargets,
    /// The cell's read-ahead of its log: armed while it opens and during
    /// its whole-log reads.
    read_ahead: Option<Arc<ReadAhead>>,
}

/// Whether root `name` belongs to database `db` (its saga branches included).
fn belongs(db: &str, name: &str) -> bool {
    let Some((prefix, rest)) = name.split_once(':') else {
        return false;
    };
    let saga = format!("{db}.saga.");
    match prefix {
        "meta" | "db" | "keys" | "lease" => rest == db || rest.starts_with(&saga),
        "log" => rest.starts_with(&format!("{db}:")) || rest.starts_with(&saga),
        _ => false,
    }
}

impl CellView {
    fn owns(&self, name: &str) -> bool {
        let Some(db) = &self.db else {
            return false;
        };
        if belongs(db, name) {
            return true;
        }
        crate::counting::database_of(name)
            .is_some_and(|target| self.fork_targets.contains(target) && belongs(target, name))
    }

    fn fenced(&self, name: &str) -> StoreError {
        StoreError::Backend {
            kind: "fleet-view".into(),
            detail: format!(
                "root {name:?} is not owned by the cell for {:?}",
                self.db.as_deref().unwrap_or("")
            ),
        }
    }
}

corium_fleet_store::delegate_blobs!(CellView, base, get = get_blob);

impl CellView {
    /// A blob: from the activation's index read-ahead when it holds it
    /// (blobs are content-addressed: the bytes are storage's), else from
    /// storage.
    async fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(ahead) = &self.read_ahead
            && let Some(bytes) = ahead.blob(id, self.base.as_ref()).await
        {
            return Ok(Some(bytes));
        }
        self.base.get(id).await
    }
}

#[async_trait]
impl RootStore for CellView {
    async fn get_root(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(record) = self.read_ahead.as_ref().and_then(|ahead| ahead.get(name)) {
            return Ok(Some(record));
        }
        self.base.get_root(name).await
    }

    async fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<(), StoreError> {
        if !self.owns(name) {
            return Err(self.fenced(name));
        }
        if let Some(ahead) = &self.read_ahead {
            ahead.writing(name);
        }
        self.base.cas_root(name, expected, new).await
    }

    async fn delete_root(&self, name: &str) -> Result<(), StoreError> {
        if !self.owns(name) {
            return Err(self.fenced(name));
        }
        if let Some(ahead) = &self.read_ahead {
            ahead.writing(name);
        }
        self.base.delete_root(name).await
    }

    async fn list_roots(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        if let Some(ahead) = &self.read_ahead
            && let Some(listed) = ahead.list(prefix, self.base.as_ref()).await
        {
            return listed;
        }
        if prefix != "meta:" {
            return self.base.list_roots(prefix).await;
        }
        // The catalog listing a node opens at start: answer it with a point
        // read of this cell's own database. Its saga branches are not
        // listed: Corium opens no branch from this listing (it filters them
        // out and opens a branch beside its parent when it is asked for),
        // and a prefix listing on the filesystem store reads the whole roots
        // directory — once per activation, growing with every database
        // (issue 48).
        let Some(db) = &self.db else {
            return Ok(Vec::new());
        };
        let own = format!("meta:{db}");
        Ok(if self.base.get_root(&own).await?.is_some() {
            vec![own]
        } else {
            Vec::new()
        })
    }
}

/// The view backend for one log placement.
struct ViewBackend {
    kind: &'static str,
    placement: LogPlacement,
}

#[async_trait]
impl StorageBackend for ViewBackend {
    fn kind(&self) -> &str {
        self.kind
    }

    fn capabilities(&self) -> BackendCapabilities {
        BackendCapabilities {
            log_placement: self.placement,
            direct_access: false,
        }
    }

    async fn open(&self, config: &StorageConfig) -> Result<Arc<dyn FullStore>, StoreError> {
        Ok(Arc::new(self.view(config)?))
    }

    async fn open_existing(&self, config: &StorageConfig) -> Result<Arc<dyn ReadStore>, StoreError> {
        Ok(Arc::new(self.view(config)?))
    }
}

impl ViewBackend {
    fn view(&self, config: &StorageConfig) -> Result<CellView, StoreError> {
        let invalid = |detail: &str| StoreError::InvalidBackendConfig {
            kind: self.kind.into(),
            detail: detail.into(),
        };
        let base = config
            .extension::<BaseStore>()
            .ok_or_else(|| invalid("no base store attached"))?;
        let db = match config.get("db") {
            Some(serde_json::Value::String(db)) => Some(db.clone()),
            Some(serde_json::Value::Null) | None => None,
            Some(_) => return Err(invalid("db must be a string")),
        };
        Ok(CellView {
            base: Arc::clone(&base.0),
            db,
            fork_targets: config
                .extension::<ForkTargets>()
                .map(|targets| (*targets).clone())
                .unwrap_or_default(),
            read_ahead: config
                .extension::<Arc<ReadAhead>>()
                .map(|ahead| Arc::clone(&*ahead)),
        })
    }
}

/// A storage backend whose logs live in memory: every cell reopen would
/// lose them, so cells cannot share it.
#[derive(Debug, thiserror::Error)]
#[error("the memory storage backend cannot be shared between cells")]
pub struct MemoryNotShared;

/// Registers the view kinds (once per process) and returns the kind whose
/// log placement matches `placement`.
///
/// # Errors
/// A memory-placed base is refused: its logs are per node and would be lost
/// every time a cell is reopened.
pub fn kind_for(placement: LogPlacement) -> Result<&'static str, MemoryNotShared> {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        let backends: Vec<Arc<dyn StorageBackend>> = vec![
            Arc::new(ViewBackend {
                kind: "fleet-view-fs",
                placement: LogPlacement::Filesystem,
            }),
            Arc::new(ViewBackend {
                kind: "fleet-view-native",
                placement: LogPlacement::RootStore,
            }),
        ];
        // Duplicate registration cannot happen: guarded by the OnceLock.
        let _ = corium_store::register_storage_backends(backends);
    });
    match placement {
        LogPlacement::Filesystem => Ok("fleet-view-fs"),
        LogPlacement::RootStore => Ok("fleet-view-native"),
        LogPlacement::Memory => Err(MemoryNotShared),
    }
}

/// The `StorageConfig` of a view over `base` for `db` (`None`: the GC view),
/// allowed to write `fork_targets` too, reading its log ahead with
/// `read_ahead` while it opens.
#[must_use]
pub(crate) fn config(
    base: &Arc<dyn FullStore>,
    db: Option<&str>,
    fork_targets: &ForkTargets,
    read_ahead: Option<&Arc<ReadAhead>>,
) -> StorageConfig {
    let mut config = StorageConfig::from_value(serde_json::json!({ "db": db }))
        .unwrap_or_else(|_| unreachable!("a JSON object"));
    config.insert_extension(BaseStore(Arc::clone(base)));
    config.insert_extension(fork_targets.clone());
    if let Some(read_ahead) = read_ahead {
        config.insert_extension(Arc::clone(read_ahead));
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(db: &str) -> CellView {
        let base: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
        CellView {
            base,
            db: Some(db.into()),
            fork_targets: ForkTargets::default(),
            read_ahead: None,
        }
    }

    #[test]
    fn owns_only_its_database_roots() {
        let view = view("a");
        for name in [
            "meta:a",
            "db:a",
            "keys:a",
            "lease:a",
            "meta:a.saga.00ff",
            "log:a:v00001:r0002",
            "log:a.saga.00ff:v1",
        ] {
            assert!(view.owns(name), "{name}");
        }
        for name in ["meta:ab", "db:b", "log:ab:v1", "meta:", "a", "other:a"] {
            assert!(!view.owns(name), "{name}");
        }
    }

    #[tokio::test]
    async fn catalog_listing_is_point_reads_and_writes_are_fenced() {
        let view = view("a");
        view.base.cas_root("meta:a", None, b"x").await.unwrap();
        view.base.cas_root("meta:b", None, b"y").await.unwrap();
        assert_eq!(view.list_roots("meta:").await.unwrap(), vec!["meta:a".to_owned()]);
        assert!(view.cas_root("meta:b", Some(b"y"), b"z").await.is_err());
        assert!(view.delete_root("db:b").await.is_err());
        view.cas_root("db:a", None, b"r").await.unwrap();
        // A fork target is writable only while allowed.
        let allowance = view.fork_targets.allow("b");
        view.cas_root("meta:b", Some(b"y"), b"z").await.unwrap();
        assert!(view.cas_root("meta:c", None, b"z").await.is_err());
        drop(allowance);
        assert!(view.cas_root("meta:b", Some(b"z"), b"w").await.is_err());
        // GC listings pass through whole.
        let mut all = view.list_roots("meta").await.unwrap();
        all.sort();
        assert_eq!(all, vec!["meta:a".to_owned(), "meta:b".to_owned()]);
    }
}
