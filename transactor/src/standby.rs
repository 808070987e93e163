//! Standby: how a node sees the databases it is a candidate for, and the
//! watcher that takes one over when its owner's lease lapses.
//!
//! Only candidates watch (invariant 5), and only databases some other
//! process owns: the watcher reads the node registry (each record lists its
//! node's owned databases), keeps those this node is a candidate for, and
//! reads only their roots. A lease that *lapsed* (expiry passed, never released) means its
//! owner died or was partitioned: the candidates take over, staggered by
//! rank so the preferred one normally wins without a race (the root CAS
//! decides if they do race). A *released* lease (expiry 0) is a graceful
//! hand-back; such a cold database is activated on its next request.

use std::sync::Arc;
use std::time::Duration;

use corium_fleet_store::registry::Record;
use corium_store::DbRoot;

use crate::host::{Host, RootView, node_of, now_unix_ms};

/// A database as this node sees it.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum Standing {
    /// This node holds the lease.
    Owned,
    /// A candidate here; another live owner holds the lease.
    Standby,
    /// A candidate here; no live owner.
    Cold,
    /// Not a candidate here and not owned.
    Elsewhere,
}

impl Standing {
    /// The label used in status output and metrics.
    #[must_use]
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Owned => "owned",
            Self::Standby => "standby",
            Self::Cold => "cold",
            Self::Elsewhere => "elsewhere",
        }
    }
}

/// The node serving a database another process owns, as the registry names
/// it: where a hot standby follows it.
#[derive(Clone, Debug, Eq, PartialEq)]
pub(crate) struct OwnerNode {
    /// The owner's node id (over mTLS its certificate must name it).
    pub(crate) node_id: String,
    /// Its internal endpoint.
    pub(crate) endpoint: String,
}

/// The databases `records` say another process owns whose first candidate
/// other than that owner is this node (it takes over first: [`stagger`]),
/// with that owner, in name order.
pub(crate) fn first_standby_of(
    host: &Host,
    records: &[Record],
) -> std::collections::BTreeMap<String, OwnerNode> {
    let mut dbs = std::collections::BTreeMap::new();
    for record in records
        .iter()
        .filter(|record| record.node_id != host.config.node_id)
    {
        for db in &record.owned {
            if host.cell(db).is_some() {
                continue;
            }
            let first = host
                .candidates(db)
                .into_iter()
                .find(|member| member.node_id != record.node_id);
            if first.is_some_and(|member| member.node_id == host.config.node_id) {
                dbs.insert(
                    db.clone(),
                    OwnerNode {
                        node_id: record.node_id.clone(),
                        endpoint: record.endpoint.clone(),
                    },
                );
            }
        }
    }
    dbs
}

/// Classifies `db` from its root.
#[must_use]
pub(crate) fn standing(host: &Host, db: &str, view: &RootView, now_ms: i64) -> Standing {
    if host.cell(db).is_some() {
        return Standing::Owned;
    }
    if host.rank(db).is_none() {
        return Standing::Elsewhere;
    }
    if view.live_owner(now_ms).is_some() {
        Standing::Standby
    } else {
        Standing::Cold
    }
}

/// How long after a lapse a candidate of `rank` waits before taking over:
/// rank 0 at once, each lower rank a further tenth of the TTL.
#[must_use]
pub(crate) fn stagger(lease_ttl: Duration, rank: usize) -> Duration {
    lease_ttl / 10 * u32::try_from(rank).unwrap_or(u32::MAX)
}

/// Whether a lapsed lease should be taken over now by a candidate of `rank`
/// (`own` says whether an owner is one of this process's cells).
#[must_use]
pub(crate) fn takeover_due(
    root: &DbRoot,
    own: impl Fn(&str) -> bool,
    rank: usize,
    lease_ttl: Duration,
    now_ms: i64,
) -> bool {
    let lapsed = !root.owner.is_empty() && !own(&root.owner) && root.lease_expires_unix_ms != 0;
    let wait = i64::try_from(stagger(lease_ttl, rank).as_millis()).unwrap_or(i64::MAX);
    lapsed && now_ms >= root.lease_expires_unix_ms.saturating_add(wait)
}

/// The databases to watch: those the registry says another process owns
/// (its last published owned list, kept readable after a node dies), of
/// which this node is a candidate. No storage read: the records are the
/// node's one registry read of the period ([`registry::follow`]), and a
/// database nobody owns needs no watching (its next request activates it),
/// so standby work follows the active databases.
///
/// [`registry::follow`]: corium_fleet_store::registry::follow
fn watched(host: &Host, records: &[Record]) -> std::collections::BTreeSet<String> {
    records
        .iter()
        .filter(|record| !(record.node_id == host.config.node_id && record.incarnation == host.incarnation))
        .flat_map(|record| record.owned.iter())
        .filter(|db| host.cell(db).is_none() && host.rank(db).is_some())
        .cloned()
        .collect()
}

/// The watcher loop: one round per registry read (every third of the lease
/// TTL at most, see [`registry::period`]), until `shutdown` or until the
/// registry is no longer followed.
///
/// [`registry::period`]: corium_fleet_store::registry::period
pub(crate) async fn watch(
    host: Arc<Host>,
    mut registry: tokio::sync::watch::Receiver<Arc<Vec<Record>>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            changed = registry.changed() => if changed.is_err() { return },
            () = corium_fleet_common::signal::until_true(&mut shutdown) => return,
        }
        if host.is_stopping() {
            return;
        }
        let records = Arc::clone(&registry.borrow_and_update());
        let dbs = watched(&host, &records);
        let mut standby = 0;
        for db in dbs {
            let Some(rank) = host.rank(&db) else { continue };
            if host.cell(&db).is_some() {
                continue;
            }
            let Ok(view) = host.read_root(&db).await else {
                continue;
            };
            if standing(&host, &db, &view, now_unix_ms()) == Standing::Standby {
                standby += 1;
            }
            if let Some(root) = &view.root {
                take_over_if_due(&host, &db, rank, root, "lease lapsed; taking over").await;
            }
        }
        host.metrics
            .standby
            .store(standby, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Takes `db` over at the moment its owner's lease can lapse, when this
/// node is a candidate: called when a hot standby lost its owner's stream
/// (a crash closes it at once), so the takeover does not wait for the
/// watcher's next round (up to a third of the TTL later). One root read
/// now, one at the expiry (plus this node's stagger); nothing when the
/// owner renewed meanwhile or released the lease, which the watcher's
/// rounds then follow as before. At most one pending per database.
pub(crate) async fn take_over_when_lapsed(host: Arc<Host>, db: String) {
    let Some(rank) = host.rank(&db) else { return };
    if host.cell(&db).is_some() || !host.lapse_watch(&db) {
        return;
    }
    let _pending = LapseWatch { host: &host, db: &db };
    let Ok(view) = host.read_root(&db).await else {
        return;
    };
    let Some(root) = view
        .live_owner(now_unix_ms())
        .filter(|root| !host.template.is_own(&root.owner))
    else {
        return;
    };
    let wait_ms = root
        .lease_expires_unix_ms
        .saturating_sub(now_unix_ms())
        .saturating_add(i64::try_from(stagger(host.config.lease_ttl, rank).as_millis()).unwrap_or(i64::MAX));
    // A lease runs at most one TTL ahead; anything else is not a lapse to wait for.
    let Ok(wait) = u64::try_from(wait_ms) else { return };
    if Duration::from_millis(wait) > host.config.lease_ttl * 2 {
        return;
    }
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let Ok(view) = host.read_root(&db).await else {
        return;
    };
    if let Some(root) = &view.root
        && host.cell(&db).is_none()
    {
        take_over_if_due(
            &host,
            &db,
            rank,
            root,
            "lease lapsed after its owner's stream broke; taking over",
        )
        .await;
    }
}

/// Takes `db` over (an activation) when `root`'s lease lapsed for a
/// candidate of `rank` ([`takeover_due`]), saying `why`.
async fn take_over_if_due(host: &Arc<Host>, db: &str, rank: usize, root: &DbRoot, why: &'static str) {
    if !takeover_due(
        root,
        |owner| host.template.is_own(owner),
        rank,
        host.config.lease_ttl,
        now_unix_ms(),
    ) {
        return;
    }
    tracing::info!(
        db,
        rank,
        previous_owner = node_of(&root.owner),
        lease_version = root.lease_version,
        "{why}"
    );
    if let Err(status) = host.activate(db, true).await {
        tracing::info!(db, %status, "takeover not done");
    }
}

/// A database's pending [`take_over_when_lapsed`], cleared when dropped.
struct LapseWatch<'a> {
    host: &'a Host,
    db: &'a str,
}

impl Drop for LapseWatch<'_> {
    fn drop(&mut self) {
        self.host.lapse_watched(self.db);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(owner: &str, expires: i64) -> DbRoot {
        DbRoot {
            format_version: corium_store::FORMAT_VERSION,
            lease_version: 3,
            owner: owner.into(),
            lease_expires_unix_ms: expires,
            owner_endpoint: String::new(),
            index_basis_t: 0,
            roots: None,
            history_roots: None,
            next_entity_id: 0,
            last_tx_instant: 0,
            key_manifest_version: 0,
        }
    }

    #[test]
    fn lapsed_leases_are_taken_over_in_rank_order() {
        let ttl = Duration::from_secs(1);
        let lapsed = root("n1/a", 10_000);
        let not_own = |_: &str| false;
        assert!(!takeover_due(&lapsed, not_own, 0, ttl, 9_999));
        assert!(takeover_due(&lapsed, not_own, 0, ttl, 10_000));
        assert!(!takeover_due(&lapsed, not_own, 1, ttl, 10_050));
        assert!(takeover_due(&lapsed, not_own, 1, ttl, 10_100));
    }

    #[test]
    fn released_and_own_leases_are_not_taken_over() {
        let ttl = Duration::from_secs(1);
        let own = |owner: &str| owner.starts_with("n2/b.");
        assert!(!takeover_due(&root("n1/a.1", 0), own, 0, ttl, 50_000));
        assert!(!takeover_due(&root("n2/b.3", 10), own, 0, ttl, 50_000));
        assert!(!takeover_due(&root("", 10), own, 0, ttl, 50_000));
    }
}
