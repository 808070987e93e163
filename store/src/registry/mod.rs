//! The node registry: every node keeps a record
//! `{node_id, incarnation, zone, weight, endpoint, expires}` under
//! `fleet-node:<node-id>` in the shared root store, renewed like a lease.
//! The live members are the unexpired records; a node that stops renewing
//! drops out of everyone's view within one TTL, and one that stops
//! gracefully deletes its record at once. Each record also lists the
//! databases the node owns, which is what standby candidates watch. A second process with a live
//! node id is refused at start. With static `--member`s the registry still
//! guards node ids but placement uses the static list.
//!
//! Layout: this file holds the record, registration and renewal;
//! `follow.rs` ([`follow()`]) reads every record in one go on a timer for
//! everything on a node that needs them (members view, standby watcher).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use corium_fleet_common::owner::now_unix_ms;
use corium_fleet_common::placement::Member;
use corium_store::{FullStore, RootStore, StoreError};
use serde::{Deserialize, Serialize};

mod follow;

pub use follow::{MAX_REGISTRY_BYTES, follow, period, read_records};

/// Root-name prefix of registry records.
pub const PREFIX: &str = "fleet-node:";

/// One node's registry record.
#[derive(Clone, Debug, Eq, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The node id; the record lives under `fleet-node:<node_id>`, so at
    /// most one record exists per id.
    pub node_id: String,
    /// Process incarnation: tells two processes with one node id apart.
    pub incarnation: String,
    /// Failure domain, as in [`Member::zone`].
    pub zone: String,
    /// Relative placement capacity, as in [`Member::weight`].
    pub weight: u32,
    /// Internal endpoint.
    pub endpoint: String,
    /// When the record stops counting as live (milliseconds since the Unix
    /// epoch); each renewal pushes it one TTL ahead.
    pub expires_unix_ms: i64,
    /// The databases this node owned at its last renewal. Candidates watch
    /// exactly these for a lapsed lease (the record of a node that died stays
    /// readable after it expires), so standby work follows the number of
    /// active databases, not the size of the catalog.
    #[serde(default)]
    pub owned: Vec<String>,
    /// How busy the node was at its last renewal (`None` from nodes that
    /// predate it). Status views read it; a node over its memory budget
    /// sends an activation to a candidate whose load shows room ([`Loads`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Load>,
    /// The formats this node reads beyond the first release's
    /// ([`OWNED_REQUEST_IDS`], …): a node writes a new format only once
    /// every live member lists it ([`Features`]), so a rolling upgrade never
    /// has an old node meet a record it cannot read. Nodes that predate the
    /// list have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// The storage key ids this node resolves (`--storage-key`; ids only,
    /// never material): placement views show which candidates of an
    /// encrypted database lack its key. Nodes that predate the list, and
    /// nodes with no keys, have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage_keys: Vec<String>,
}

/// The feature of request-id records that name their owner
/// (`transactor/src/request_id/key.rs`).
pub const OWNED_REQUEST_IDS: &str = "owned-request-ids";

/// The features every live member lists: what the fleet may write now.
#[derive(Clone, Default)]
pub struct Features(Arc<RwLock<Arc<std::collections::BTreeSet<String>>>>);

impl Features {
    /// Takes the features every live record of `records` lists (none when
    /// no record is live: nothing new is written on a guess).
    pub fn set_live(&self, records: &[Record]) {
        let now = now_unix_ms();
        let mut live = records.iter().filter(|record| record.expires_unix_ms > now);
        let common = match live.next() {
            None => std::collections::BTreeSet::new(),
            Some(first) => {
                let mut common: std::collections::BTreeSet<String> = first.features.iter().cloned().collect();
                for record in live {
                    common.retain(|feature| record.features.contains(feature));
                }
                common
            }
        };
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(common);
    }

    /// Whether every live member reads `feature`.
    #[must_use]
    pub fn has(&self, feature: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(feature)
    }
}

/// How busy a node was when it renewed its record: its client calls and
/// subscriptions. One reading every renewal; a rate is the difference of
/// two readings' `calls_total` over their records' expiry difference.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// Client calls running.
    pub calls_running: u32,
    /// Client calls waiting for a place.
    pub calls_waiting: u32,
    /// Open subscriptions.
    pub subscriptions: u32,
    /// Client calls admitted since the process started.
    pub calls_total: u64,
    /// What the node is estimated to hold against its memory budget, in
    /// bytes (0 from nodes that predate it).
    #[serde(default)]
    pub memory_used_bytes: u64,
    /// Its memory budget in bytes (0: none, or a node that predates it).
    #[serde(default)]
    pub memory_budget_bytes: u64,
    /// Client calls per second to its databases over the last load-balance
    /// interval (0 from nodes that predate it): what load-aware placement
    /// evens out.
    #[serde(default)]
    pub calls_per_second: u32,
    /// Its process's CPU over the same interval, in percent of one core.
    #[serde(default)]
    pub cpu_percent: u32,
}

impl Load {
    /// Whether the node had room for `bytes` more at its last renewal: it
    /// has no budget (or predates one), or its estimate plus `bytes` stays
    /// below it (`bytes` 0: any room at all).
    #[must_use]
    pub const fn has_memory_room(&self, bytes: u64) -> bool {
        self.memory_budget_bytes == 0
            || self.memory_used_bytes.saturating_add(bytes) < self.memory_budget_bytes
    }
}

/// Each live member's load at its last renewal, by node id: where a node
/// looks for a candidate with room. A hint as old as one registry period;
/// the chosen node's own budget decides.
#[derive(Clone, Default)]
pub struct Loads(Arc<RwLock<Arc<std::collections::HashMap<String, Load>>>>);

impl Loads {
    /// Takes the loads of the live records of `records`.
    pub fn set_live(&self, records: &[Record]) {
        let now = now_unix_ms();
        let live = records
            .iter()
            .filter(|record| record.expires_unix_ms > now)
            .filter_map(|record| record.load.map(|load| (record.node_id.clone(), load)))
            .collect();
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(live);
    }

    /// The last load `node_id` published, if it is live and published one.
    #[must_use]
    pub fn get(&self, node_id: &str) -> Option<Load> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(node_id)
            .copied()
    }

    /// Whether `node_id` had room for `bytes` more at its last renewal
    /// ([`Load::has_memory_room`]); a node with no published load (not yet
    /// read, one that predates loads) counts as having room — its own
    /// budget still refuses.
    #[must_use]
    pub fn has_memory_room(&self, node_id: &str, bytes: u64) -> bool {
        self.get(node_id).is_none_or(|load| load.has_memory_room(bytes))
    }
}

impl Record {
    fn name(&self) -> String {
        format!("{PREFIX}{}", self.node_id)
    }

    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }

    /// As a placement member.
    #[must_use]
    pub fn member(&self) -> Member {
        Member {
            node_id: self.node_id.clone(),
            zone: self.zone.clone(),
            weight: self.weight,
            endpoint: self.endpoint.clone(),
        }
    }
}

/// Why registration failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Another incarnation holds the node id and kept renewing its record
    /// while this one waited: two live processes would share one id.
    #[error(
        "node id {node_id:?} is already live (incarnation {incarnation}, endpoint {endpoint}) until \
         {expires_unix_ms}; a second node with the same id refuses to serve"
    )]
    Duplicate {
        /// The contested node id.
        node_id: String,
        /// The live holder's incarnation.
        incarnation: String,
        /// The live holder's endpoint.
        endpoint: String,
        /// The live holder's record expiry (milliseconds since the Unix
        /// epoch).
        expires_unix_ms: i64,
    },
    /// The root store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The current member list, shared by everything that places databases.
#[derive(Clone, Default)]
pub struct Members(Arc<RwLock<Arc<Vec<Member>>>>);

impl Members {
    /// A member list starting from `members` (the static `--member` list,
    /// or empty until the registry is first read).
    #[must_use]
    pub fn new(members: Vec<Member>) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(members))))
    }

    /// A snapshot of the members.
    #[must_use]
    pub fn get(&self) -> Arc<Vec<Member>> {
        Arc::clone(&self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn set(&self, members: Vec<Member>) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(members);
    }

    /// Takes the live members of `records`; kept as they were when none is
    /// live (a registry read that found nothing is no reason to place
    /// every database nowhere).
    pub fn set_live(&self, records: &[Record]) {
        let live = live_members(records);
        if !live.is_empty() {
            self.set(live);
        }
    }
}

/// Writes `record` for the first time. A live record of another
/// incarnation under the same node id is either a crashed predecessor
/// (its expiry stays put: wait it out, then take the id) or a live
/// duplicate (it renews while we watch: refuse).
///
/// # Errors
/// [`RegistryError::Duplicate`], or storage.
pub async fn register(store: &dyn RootStore, record: &Record) -> Result<(), RegistryError> {
    let mut watched: Option<(String, i64)> = None;
    loop {
        let current = store.get_root(&record.name()).await?;
        if let Some(existing) = current.as_deref().and_then(Record::decode)
            && existing.incarnation != record.incarnation
            && existing.expires_unix_ms > now_unix_ms()
        {
            let renewed = watched.as_ref().is_some_and(|(incarnation, expiry)| {
                *incarnation == existing.incarnation && existing.expires_unix_ms > *expiry
            });
            if renewed {
                return Err(RegistryError::Duplicate {
                    node_id: existing.node_id,
                    incarnation: existing.incarnation,
                    endpoint: existing.endpoint,
                    expires_unix_ms: existing.expires_unix_ms,
                });
            }
            let wait = existing
                .expires_unix_ms
                .saturating_sub(now_unix_ms())
                .clamp(0, 60_000);
            tracing::info!(
                node = %existing.node_id,
                other = %existing.incarnation,
                wait_ms = wait,
                "node id held by another incarnation; waiting for it to expire or renew"
            );
            watched = Some((existing.incarnation, existing.expires_unix_ms));
            tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0) + 50)).await;
            continue;
        }
        match store
            .cas_root(&record.name(), current.as_deref(), &record.encode())
            .await
        {
            Ok(()) => return Ok(()),
            Err(StoreError::CasFailed { .. }) => {}
            Err(error) => return Err(error.into()),
        }
    }
}

/// The live members recorded in the registry, sorted by node id.
///
/// # Errors
/// Storage.
pub async fn live(store: &dyn RootStore) -> Result<Vec<Member>, StoreError> {
    Ok(live_members(&records(store).await?))
}

/// The unexpired records' members, sorted by node id.
#[must_use]
pub fn live_members(records: &[Record]) -> Vec<Member> {
    let now = now_unix_ms();
    let mut members: Vec<Member> = records
        .iter()
        .filter(|record| record.expires_unix_ms > now)
        .map(Record::member)
        .collect();
    members.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    members
}

/// Reads the live members into `members` once (kept as they were when the
/// registry cannot be read or is empty).
pub async fn refresh(store: &dyn RootStore, members: &Members) {
    match tokio::time::timeout(Duration::from_secs(5), live(store)).await {
        Ok(Ok(live)) if !live.is_empty() => members.set(live),
        Ok(Ok(_)) => {}
        Ok(Err(error)) => tracing::warn!(%error, "cannot read the node registry"),
        Err(_) => tracing::warn!("node registry read timed out"),
    }
}

/// Every record in the registry, expired ones included (a dead node's last
/// owned list is what its databases' candidates watch). O(nodes) reads.
///
/// # Errors
/// Storage.
pub async fn records(store: &dyn RootStore) -> Result<Vec<Record>, StoreError> {
    let mut records = Vec::new();
    for name in store.list_roots(PREFIX).await? {
        if let Some(record) = store.get_root(&name).await?.as_deref().and_then(Record::decode) {
            records.push(record);
        }
    }
    Ok(records)
}

/// Renews this node's record every `renew` (expiry `ttl` ahead), with what
/// it `published` at that moment (its owned databases and its load), until
/// `stop`, then deletes it so the others drop this node at once.
pub async fn keep(
    store: Arc<dyn FullStore>,
    mut record: Record,
    ttl: Duration,
    renew: Duration,
    published: impl Fn() -> (Vec<String>, Option<Load>) + Send + Sync,
    changed: Arc<tokio::sync::Notify>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    loop {
        let kicked = tokio::select! {
            () = tokio::time::sleep(renew) => false,
            () = changed.notified() => true,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        if kicked {
            // The owned set changed: publish it soon, coalescing a burst.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        record.expires_unix_ms = now_unix_ms().saturating_add(ttl_ms);
        (record.owned, record.load) = published();
        record.owned.sort();
        let write = async {
            let current = store.get_root(&record.name()).await?;
            if let Some(existing) = current.as_deref().and_then(Record::decode)
                && existing.incarnation != record.incarnation
            {
                tracing::error!(node = %record.node_id, other = %existing.incarnation, "another process took this node id in the registry");
                return Ok::<_, StoreError>(());
            }
            store
                .cas_root(&record.name(), current.as_deref(), &record.encode())
                .await
        };
        match tokio::time::timeout(renew, write).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(node = %record.node_id, %error, "registry renewal failed"),
            Err(_) => tracing::warn!(node = %record.node_id, "registry renewal timed out"),
        }
    }
    let remove = async {
        let current = store.get_root(&record.name()).await?;
        if current
            .as_deref()
            .and_then(Record::decode)
            .is_some_and(|existing| existing.incarnation == record.incarnation)
        {
            store.delete_root(&record.name()).await?;
        }
        Ok::<_, StoreError>(())
    };
    if let Ok(Err(error)) = tokio::time::timeout(Duration::from_secs(2), remove).await {
        tracing::warn!(node = %record.node_id, %error, "cannot remove the registry record");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_is_on_only_when_every_live_member_lists_it() {
        let features = Features::default();
        let with = |id: &str, expires: i64, listed: &[&str]| Record {
            features: listed.iter().map(|feature| (*feature).to_owned()).collect(),
            storage_keys: Vec::new(),
            ..record(id, "i", expires)
        };
        let later = now_unix_ms() + 60_000;
        features.set_live(&[with("a", later, &[OWNED_REQUEST_IDS]), with("b", later, &[])]);
        assert!(!features.has(OWNED_REQUEST_IDS), "b predates it");
        // An expired member no longer holds the fleet back.
        features.set_live(&[with("a", later, &[OWNED_REQUEST_IDS]), with("b", 1, &[])]);
        assert!(features.has(OWNED_REQUEST_IDS));
        features.set_live(&[]);
        assert!(!features.has(OWNED_REQUEST_IDS), "nothing on a guess");
    }

    #[test]
    fn room_is_read_from_live_loads_and_assumed_without_one() {
        let loads = Loads::default();
        let later = now_unix_ms() + 60_000;
        let loaded = |id: &str, expires: i64, used: u64, budget: u64| Record {
            load: Some(Load {
                memory_used_bytes: used,
                memory_budget_bytes: budget,
                ..Load::default()
            }),
            ..record(id, "i", expires)
        };
        loads.set_live(&[
            loaded("full", later, 100, 100),
            loaded("roomy", later, 10, 100),
            loaded("unbudgeted", later, 500, 0),
            loaded("gone", 1, 10, 100),
        ]);
        assert!(!loads.has_memory_room("full", 0), "at the budget is full");
        assert!(loads.has_memory_room("roomy", 0));
        assert!(loads.has_memory_room("roomy", 89), "room for 89 more bytes");
        assert!(!loads.has_memory_room("roomy", 90), "not for 90");
        assert!(
            loads.has_memory_room("unbudgeted", u64::MAX),
            "no budget, never full"
        );
        assert_eq!(loads.get("gone"), None, "an expired record's load is dropped");
        assert!(
            loads.has_memory_room("unknown", 0),
            "no load: its own budget decides"
        );
    }

    fn record(id: &str, incarnation: &str, expires: i64) -> Record {
        Record {
            node_id: id.into(),
            incarnation: incarnation.into(),
            zone: "z".into(),
            weight: 1,
            endpoint: format!("http://{id}"),
            expires_unix_ms: expires,
            owned: Vec::new(),
            load: None,
            features: Vec::new(),
            storage_keys: Vec::new(),
        }
    }

    #[tokio::test]
    async fn crashed_predecessors_are_waited_out_and_live_duplicates_refused() {
        let store = corium_store::MemoryStore::default();
        let far = now_unix_ms() + 60_000;
        register(&store, &record("n1", "a", far)).await.unwrap();
        // The same incarnation re-registers.
        register(&store, &record("n1", "a", far)).await.unwrap();
        // A crashed predecessor (its record never renews) is waited out.
        register(&store, &record("n3", "old", now_unix_ms() + 300))
            .await
            .unwrap();
        register(&store, &record("n3", "new", far)).await.unwrap();
        // A live duplicate (it renews while we wait) is refused.
        register(&store, &record("n4", "live", now_unix_ms() + 300))
            .await
            .unwrap();
        let renewer = {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let current = store.get_root("fleet-node:n4").await.unwrap();
                    let mut live = Record::decode(current.as_deref().unwrap()).unwrap();
                    live.expires_unix_ms = now_unix_ms() + 300;
                    let _ = store
                        .cas_root("fleet-node:n4", current.as_deref(), &live.encode())
                        .await;
                }
            })
        };
        assert!(matches!(
            register(&store, &record("n4", "second", far)).await,
            Err(RegistryError::Duplicate { .. })
        ));
        renewer.await.unwrap();
        // Expired records drop out of the live view; a new incarnation takes
        // an expired id at once.
        register(&store, &record("n2", "c", now_unix_ms() - 1))
            .await
            .unwrap();
        assert!(!live_ids(&store).await.contains(&"n2".to_owned()));
        register(&store, &record("n2", "d", far)).await.unwrap();
        let ids = live_ids(&store).await;
        assert!(
            ids.contains(&"n2".to_owned())
                && ids.contains(&"n3".to_owned())
                && ids.contains(&"n1".to_owned()),
            "{ids:?}"
        );
    }

    async fn live_ids(store: &dyn RootStore) -> Vec<String> {
        live(store)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.node_id)
            .collect()
    }
}
