//! A cell's life on this node after activation: the monitor (deposition,
//! idle eviction, rebalancing when no longer a candidate, renewal counts),
//! graceful eviction, and the reset of a cell whose commit failed in
//! storage.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Host, now_unix_ms};
use crate::cell::Cell;

impl Host {
    /// Watches one cell until it closes: drops it when Corium deposes it,
    /// evicts it (graceful release) once idle past the configured interval,
    /// and counts lease renewals (expiry moving forward) and renewal failures
    /// (expiry passing).
    pub(super) async fn monitor(self: Arc<Self>, cell: Arc<Cell>) {
        let mut deposed = cell.node.shutdown_watch();
        let mut closed = cell.closed();
        let period = (self.config.lease_ttl / 3).max(Duration::from_millis(50));
        let mut last_expiry = cell.lease().await.map_or(0, |lease| lease.expires_unix_ms);
        let mut failing = false;
        // Consecutive ticks on which this node was not a candidate.
        let mut misplaced = 0u32;
        loop {
            tokio::select! {
                changed = deposed.changed() => {
                    let stopped = changed.is_err();
                    let reason = if stopped { None } else { deposed.borrow().clone() };
                    if stopped || reason.is_some() {
                        self.metrics.depositions.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(db = %cell.db, lease_version = cell.lease_version, reason = reason.as_deref().unwrap_or("node stopped"), "cell deposed; dropping it");
                        cell.close();
                        self.remove(&cell);
                        return;
                    }
                }
                _ = closed.changed() => {
                    self.remove(&cell);
                    return;
                }
                () = tokio::time::sleep(period) => {
                    if let Some(limit) = self.config.idle_evict_after.map(|floor| cell.idle_limit(floor))
                        && cell.idle_for().is_some_and(|idle| idle >= limit)
                    {
                        tracing::info!(db = %cell.db, lease_version = cell.lease_version, idle_ms = limit.as_millis(), "idle; releasing the lease and evicting");
                        self.metrics.idle_evictions.fetch_add(1, Ordering::Relaxed);
                        self.evict(&cell).await;
                        return;
                    }
                    if self.rank(&cell.db).is_some() || self.is_stopping() {
                        misplaced = 0;
                    } else {
                        misplaced += 1;
                        // Twice in a row, so a momentary membership blip
                        // does not move anything.
                        if misplaced >= 2 {
                            let candidates = self.candidates(&cell.db);
                            if !candidates.is_empty() {
                                tracing::info!(db = %cell.db, to = %candidates[0].node_id, "no longer a candidate; handing off");
                                self.metrics.rebalances.fetch_add(1, Ordering::Relaxed);
                                let host = Arc::clone(&self);
                                let db = cell.db.clone();
                                tokio::spawn(async move { host.hand_to_first(&db, candidates, "rebalance").await });
                                return;
                            }
                        }
                    }
                    let Ok(lease) = cell.lease().await else { continue };
                    if lease.expires_unix_ms > last_expiry {
                        self.metrics.lease_renewals.fetch_add(1, Ordering::Relaxed);
                        last_expiry = lease.expires_unix_ms;
                        failing = false;
                    } else if !failing && lease.expires_unix_ms <= now_unix_ms() {
                        failing = true;
                        self.metrics.lease_renewal_failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(db = %cell.db, lease_version = cell.lease_version, "lease renewal failed; not serving until it recovers");
                    }
                }
            }
        }
    }

    /// Publishes `cell`'s indexes (bounded by the drain timeout), so the
    /// next owner's recovery replays a short log tail. Failures only cost
    /// that owner a longer recovery.
    pub(super) async fn publish_indexes(&self, cell: &Cell) {
        // Never beside a delete of the database (see `Cell::publication`):
        // after one, Corium no longer hosts it and this publishes nothing.
        let _publication = cell.publication.lock().await;
        let started = Instant::now();
        match tokio::time::timeout(self.config.drain_timeout, cell.node.request_index(&cell.db)).await {
            Ok(Ok(basis)) => {
                tracing::debug!(db = %cell.db, index_basis_t = basis, elapsed_ms = started.elapsed().as_millis(), "indexes published before release");
            }
            Ok(Err(error)) => tracing::warn!(db = %cell.db, %error, "cannot publish indexes before release"),
            Err(_) => tracing::warn!(db = %cell.db, "publishing indexes before release timed out"),
        }
    }

    /// Gracefully evicts one cell: publish its indexes, stop routing to it,
    /// drain, release, drop.
    pub async fn evict(&self, cell: &Arc<Cell>) {
        self.publish_indexes(cell).await;
        self.release(cell).await;
    }

    /// Evicts one cell without publishing its indexes first (an eviction for
    /// memory: a publication would take memory as large as the database just
    /// when the node has none; the next open reads a longer tail).
    pub(super) async fn evict_for_memory(&self, cell: &Arc<Cell>) {
        self.release(cell).await;
    }

    async fn release(&self, cell: &Arc<Cell>) {
        let drained = self.close_and_release(cell).await;
        self.metrics.evictions.fetch_add(1, Ordering::Relaxed);
        tracing::info!(db = %cell.db, lease_version = cell.lease_version, drained, "lease released");
    }

    /// Stops routing to `cell` (closing: not served, not re-activated while
    /// this runs), drains it and releases its lease. Returns whether every
    /// call in flight finished within the drain timeout.
    pub(super) async fn close_and_release(&self, cell: &Arc<Cell>) -> bool {
        let closing = self.closing_guard(&cell.db);
        self.remove(cell);
        let drained = cell
            .evict(&self.base, self.config.drain_timeout, self.rerelease_window())
            .await;
        drop(closing);
        drained
    }

    /// Resets `cell` in the background if a commit on it failed in storage
    /// (see `Cell::commit`).
    pub fn reset_if_failed(self: &Arc<Self>, cell: &Arc<Cell>) {
        if cell.storage_failed() {
            let (host, cell) = (Arc::clone(self), Arc::clone(cell));
            tokio::spawn(async move { host.reset(&cell).await });
        }
    }

    /// Drops a cell whose in-memory state may no longer match storage and
    /// releases its lease, so the next request recovers the database from
    /// storage (crash-only: recovery is the one path that knows what is
    /// durable). No index publication first: storage just failed.
    pub async fn reset(&self, cell: &Arc<Cell>) {
        let current = self.cell(&cell.db);
        if !current.is_some_and(|current| Arc::ptr_eq(&current, cell)) {
            return;
        }
        let drained = self.close_and_release(cell).await;
        self.metrics.resets.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(db = %cell.db, lease_version = cell.lease_version, drained, "cell reset after a commit failed in storage; the next request recovers it from storage");
    }

    /// Drops a cell whose database was deleted (its lease record is gone).
    pub fn forget(&self, cell: &Arc<Cell>) {
        cell.close();
        self.remove(cell);
    }

    /// How long an evicted cell's lease is watched for a late renewal: one
    /// renewal period plus a second.
    pub(super) fn rerelease_window(&self) -> Duration {
        self.config.lease_ttl / 3 + Duration::from_secs(1)
    }
}
