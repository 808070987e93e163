//! The one reader of a database's roots: its catalog entry (`meta:<db>`) and
//! its root record (`db:<db>`, which carries the lease), read together and
//! bounded by a timeout. A node decides ownership from it and an ingress
//! resolves owners from it; both read it the same way.

use std::time::Duration;

use corium_store::{DbRoot, RootStore, StoreError, db_root_name, meta_root_name};

/// What storage says about one database.
#[derive(Clone, Debug, PartialEq)]
pub struct RootView {
    /// The catalog entry exists.
    pub exists: bool,
    /// The root record, when there is one that decodes.
    pub root: Option<DbRoot>,
}

impl RootView {
    /// The root, if it carries an unexpired lease at `now_ms`.
    #[must_use]
    pub fn live_owner(&self, now_ms: i64) -> Option<&DbRoot> {
        self.root
            .as_ref()
            .filter(|root| !root.owner.is_empty() && root.lease_expires_unix_ms > now_ms)
    }
}

/// Why a database's roots could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Storage answered with an error.
    #[error("storage read failed: {0}")]
    Store(#[from] StoreError),
    /// Storage did not answer within the timeout.
    #[error("storage read timed out")]
    Timeout,
}

/// Reads `db`'s catalog entry and root record, bounded by `timeout`.
///
/// # Errors
/// [`ReadError`]: storage failed or did not answer.
pub async fn read(store: &dyn RootStore, db: &str, timeout: Duration) -> Result<RootView, ReadError> {
    let read = async {
        let meta = store.get_root(&meta_root_name(db)).await?;
        let root = store.get_root(&db_root_name(db)).await?;
        Ok::<_, StoreError>(RootView {
            exists: meta.is_some(),
            root: root.as_deref().and_then(DbRoot::decode),
        })
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| ReadError::Timeout)?
        .map_err(ReadError::Store)
}

#[cfg(test)]
mod tests {
    use super::*;
    use corium_store::MemoryStore;

    #[tokio::test]
    async fn a_catalogued_database_without_a_root_has_no_owner() {
        let store = MemoryStore::default();
        let view = read(&store, "absent", Duration::from_secs(1)).await.unwrap();
        assert_eq!(
            view,
            RootView {
                exists: false,
                root: None
            }
        );
        store
            .cas_root(&meta_root_name("cold"), None, b"meta")
            .await
            .unwrap();
        let view = read(&store, "cold", Duration::from_secs(1)).await.unwrap();
        assert!(view.exists && view.live_owner(0).is_none());
    }
}
