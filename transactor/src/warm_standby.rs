//! Warm standbys: which databases this node keeps warm, and the loop that
//! refreshes them (the memory is `read_ahead::WarmSet`).
//!
//! A node keeps warm each database it is the *first standby* of: the node
//! registry says another process owns it, and this node is the
//! highest-ranked candidate other than that owner, so its takeover comes
//! first when the owner's lease lapses (`standby::stagger`). Like the
//! standby watcher's, the work follows the active databases: one that
//! nobody owns is not kept warm. Each refresh lists the database's log and
//! reads what is new (and the index blobs when the owner published again),
//! every `--warm-standby-interval-ms`, within half the room the node's
//! memory budget leaves (`WarmSet::limit_to_room`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use corium_fleet_store::registry::Record;

use crate::host::Host;

/// The longest one database's refresh may take; what it read by then is
/// kept, the rest is read by the next refresh or the takeover.
const REFRESH_DEADLINE: Duration = Duration::from_secs(30);

/// Refreshes the databases this node is the first standby of, every
/// `--warm-standby-interval-ms`, until `shutdown`. Returns at once when
/// warming is off.
pub(crate) async fn run(
    host: Arc<Host>,
    registry: tokio::sync::watch::Receiver<Arc<Vec<Record>>>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let warm = Arc::clone(&host.template.read_ahead.warm);
    if !warm.enabled() {
        return;
    }
    let mut every = corium_fleet_common::every::Every::new(host.config.warm_standby_interval, shutdown);
    while every.tick().await {
        if host.is_stopping() {
            return;
        }
        let records = Arc::clone(&registry.borrow());
        let dbs: HashSet<String> = crate::standby::first_standby_of(&host, &records)
            .into_keys()
            .collect();
        warm.retain(&dbs);
        if dbs.is_empty() {
            continue;
        }
        // A cache under the node's memory budget: at most half the room its
        // firm memory leaves, measured now, before this round reads.
        warm.limit_to_room(host.memory_use().await.room_for_caches());
        for db in &dbs {
            if host.cell(db).is_some() {
                continue;
            }
            match tokio::time::timeout(REFRESH_DEADLINE, warm.refresh(db, host.template.base.as_ref())).await
            {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::debug!(db, %error, "warm standby refresh failed; a takeover reads the rest");
                }
                Err(_) => tracing::debug!(db, "warm standby refresh ran out of time; kept what it read"),
            }
        }
    }
}
