//! Giving a cell's lease back: drain, release, and watch for the renewal
//! race (design note 0002).

use std::sync::Arc;
use std::time::Duration;

use corium_store::{DbRoot, FullStore, db_root_name};
use corium_transactor::lease::{self, Lease};

use super::{Cell, GATE_PERMITS};

impl Cell {
    /// Graceful eviction: stop admitting, wait (bounded) for in-flight calls,
    /// release the lease, and watch in the background (`recheck`) that a
    /// renewal already in flight did not re-extend it. Returns whether every
    /// in-flight call finished in time.
    pub async fn evict(
        &self,
        store: &Arc<dyn FullStore>,
        drain_timeout: Duration,
        recheck: Duration,
    ) -> bool {
        let drained = tokio::time::timeout(drain_timeout, self.gate.acquire_many(GATE_PERMITS))
            .await
            .is_ok_and(|permit| permit.is_ok());
        let held = self.lease().await.ok();
        self.close();
        self.node.release_leases().await;
        if let Some(held) = held {
            tokio::spawn(rerelease(Arc::clone(store), self.db.clone(), held, recheck));
        }
        drained
    }
}

/// The renewal race: `release_leases` does not take the commit lock, so a
/// renewal already in flight can re-extend a released lease. For `window`
/// (one renewal period and then some) re-read the root and release again
/// if the released owner and version are back with a live expiry. A new
/// owner (another cell, here or elsewhere) is never touched: the check is
/// on the exact owner id and version.
async fn rerelease(store: Arc<dyn FullStore>, db: String, held: Lease, window: Duration) {
    let deadline = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < deadline {
        let root = match store.get_root(&db_root_name(&db)).await {
            Ok(root) => root.as_deref().and_then(DbRoot::decode),
            Err(error) => {
                tracing::warn!(db = %db, %error, "cannot re-check released lease");
                return;
            }
        };
        match root {
            Some(root) if root.owner == held.owner && root.lease_version == held.version => {
                if root.lease_expires_unix_ms != 0
                    && let Err(error) = lease::release(store.as_ref(), &db, &held).await
                {
                    tracing::warn!(db = %db, %error, "lease re-release failed");
                }
            }
            // Someone else owns it now, or it is gone: nothing to watch.
            _ => return,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
