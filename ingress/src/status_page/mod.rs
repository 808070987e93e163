//! The fleet as a picture, on the ingress's admin port: `GET /status` is a
//! self-contained HTML page (inline CSS and script, no external assets, no
//! build step) that polls `GET /status.json` every two seconds and draws
//! the nodes grouped by zone, the databases each owns (with lease versions)
//! and stands by for, each node's load, the databases without a live owner,
//! and the ownership moves this ingress has seen.
//!
//! `/status.json` is this ingress's own view, read from storage (the
//! ingress has the same access to the shared store as the nodes; it asks no
//! node anything):
//!
//! - the node registry (`fleet-node:*`): members, zones, endpoints, record
//!   expiry, the databases each lists as owned, and the load it published at
//!   its last renewal (calls running and waiting, subscriptions, a call
//!   counter from which a rate is derived between two renewals);
//! - the root record of every database some record lists as owned: the
//!   lease holder, its version and expiry. Databases nobody owns are not
//!   read (that would be a catalog scan); a database drops out of view
//!   once every owner released it;
//! - standby: the other candidates of each owned database, placed as this
//!   ingress places calls (the registry's live members or `--member`, the
//!   placement map, `--replicas`), which is what a node calls standby;
//! - moves: the owner of each database is compared with the one seen by the
//!   previous poll (from any viewer), so moves are as fine-grained as the
//!   polling, and kept in memory (the last 100; a restarted ingress starts
//!   afresh).
//!
//! Every storage read is bounded (the registry by `--storage-timeout`, each
//! root likewise, all of them together by twice that), at most 2,000
//! databases are read, and one snapshot serves every request for a second,
//! so many open pages cost one set of reads a second.
//!
//! **No authentication, by decision.** The admin port is the operator's
//! plaintext port (`docs/security.md`, `docs/kubernetes.md`): probes must
//! reach it without credentials, and the chart's network policy admits only
//! the release's namespace (or `networkPolicy.adminFrom`) to it. It already
//! serves `/metrics` and the nodes' `/debug/root-ops`, which name the same
//! nodes and databases. The page adds nothing more sensitive — node ids,
//! zones, internal endpoints, database names, lease versions and load;
//! never data, credentials or request contents — and it can change
//! nothing: it offers no handoff or any other action (those stay on the
//! authenticated gRPC operator surface). Where database names must not be
//! visible to whoever can reach the admin port, keep that port closed to
//! them, as for `/metrics`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corium_fleet_common::owner::{node_of, now_unix_ms};
use corium_fleet_common::placement_map;
use corium_fleet_store::registry::{self, Load, Members, Record};
use corium_fleet_store::roots::{self, RootView};
use corium_store::FullStore;
use futures::StreamExt as _;
use serde::Serialize;

/// The page: static; its script fetches `/status.json`.
const PAGE: &str = include_str!("page.html");
/// At most this many databases are read and drawn per snapshot.
const MAX_DATABASES: usize = 2_000;
/// Root reads in flight at once.
const READS_AT_ONCE: usize = 16;
/// A snapshot younger than this is served again.
const REUSE: Duration = Duration::from_secs(1);
/// Ownership moves kept.
const MOVES_KEPT: usize = 100;

/// The status page's sources and what it remembers between polls.
pub(crate) struct StatusPage {
    store: Arc<dyn FullStore>,
    members: Members,
    map: placement_map::Watched,
    replicas: usize,
    storage_timeout: Duration,
    /// Held while a snapshot is built, so concurrent polls share one.
    seen: tokio::sync::Mutex<Seen>,
}

/// What earlier polls saw.
#[derive(Default)]
struct Seen {
    /// The last snapshot, and when it was built.
    last: Option<(Instant, String)>,
    /// Each database's live owner (`None`: no live owner) and lease version.
    owners: HashMap<String, (Option<String>, u64)>,
    /// Moves, newest last.
    moves: VecDeque<Move>,
    /// Per node: the last load reading and the rate derived from the one
    /// before it.
    loads: HashMap<String, LoadSeen>,
}

/// One node's load readings.
struct LoadSeen {
    incarnation: String,
    calls_total: u64,
    expires_unix_ms: i64,
    rate: Option<f64>,
}

/// `/status.json`.
#[derive(Serialize)]
struct Snapshot {
    /// This ingress's clock when the snapshot was built.
    generated_unix_ms: i64,
    /// Candidates per database.
    replicas: usize,
    nodes: Vec<NodeView>,
    databases: Vec<DatabaseView>,
    /// Newest first.
    moves: Vec<Move>,
    /// More databases are owned than were read.
    truncated: bool,
    /// Reads that failed or timed out.
    errors: Vec<String>,
}

/// One node.
#[derive(Serialize)]
struct NodeView {
    node_id: String,
    zone: String,
    weight: u32,
    endpoint: String,
    incarnation: String,
    /// It has a registry record (a static member without one, or a node a
    /// root names that has none, does not).
    registered: bool,
    /// Its record is unexpired.
    live: bool,
    expires_unix_ms: i64,
    /// As published at its last renewal.
    load: Option<Load>,
    /// Client calls a second between its last two renewals seen here.
    calls_per_second: Option<f64>,
    /// Databases whose root names it as the live lease holder.
    owned: Vec<Owned>,
    /// Databases it is a candidate for while another node owns them.
    standby: Vec<String>,
}

/// A database a node owns.
#[derive(Serialize)]
struct Owned {
    database: String,
    lease_version: u64,
}

/// One database.
#[derive(Serialize)]
struct DatabaseView {
    database: String,
    /// In the catalog.
    exists: bool,
    /// The node named by the root (live or not).
    owner: Option<String>,
    /// The lease is unexpired.
    owner_live: bool,
    lease_version: u64,
    lease_expires_unix_ms: i64,
    /// Node ids, best first.
    candidates: Vec<String>,
    /// Why the root could not be read.
    error: Option<String>,
}

/// A change of a database's live owner between two polls.
#[derive(Clone, Serialize)]
struct Move {
    database: String,
    /// `None`: there was no live owner.
    from: Option<String>,
    /// `None`: there is no live owner now (released, lapsed, or dropped
    /// from every owned list).
    to: Option<String>,
    lease_version: u64,
    seen_unix_ms: i64,
}

impl StatusPage {
    /// A page over `store`, placing as this ingress does (`members`, `map`,
    /// `replicas`), each storage read bounded by `storage_timeout`.
    #[must_use]
    pub(crate) fn new(
        store: &Arc<dyn FullStore>,
        members: &Members,
        map: &placement_map::Watched,
        replicas: usize,
        storage_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            store: Arc::clone(store),
            members: members.clone(),
            map: map.clone(),
            replicas,
            storage_timeout,
            seen: tokio::sync::Mutex::default(),
        })
    }

    /// `GET /status`: the page.
    #[must_use]
    pub(crate) fn page() -> (u16, String) {
        (200, PAGE.to_owned())
    }

    /// `GET /status.json`: the snapshot (one at most a second old), or 503
    /// with `{"error": …}` when the registry cannot be read.
    pub(crate) async fn json(&self) -> (u16, String) {
        let mut seen = self.seen.lock().await;
        if let Some((built, json)) = &seen.last
            && built.elapsed() < REUSE
        {
            return (200, json.clone());
        }
        match self.snapshot(&mut seen).await {
            Ok(snapshot) => {
                let json = serde_json::to_string(&snapshot).unwrap_or_default();
                seen.last = Some((Instant::now(), json.clone()));
                (200, json)
            }
            Err(error) => (503, serde_json::json!({ "error": error }).to_string()),
        }
    }

    /// Reads the registry and the owned databases' roots, and updates what
    /// earlier polls saw.
    async fn snapshot(&self, seen: &mut Seen) -> Result<Snapshot, String> {
        let records = tokio::time::timeout(self.storage_timeout, registry::records(self.store.as_ref()))
            .await
            .map_err(|_| "the node registry did not answer in time".to_owned())?
            .map_err(|error| format!("cannot read the node registry: {error}"))?;
        let listed: BTreeSet<String> = records
            .iter()
            .flat_map(|record| record.owned.iter().cloned())
            .collect();
        let truncated = listed.len() > MAX_DATABASES;
        let read = self.read_roots(listed.into_iter().take(MAX_DATABASES)).await;
        let now = now_unix_ms();
        let mut errors = Vec::new();
        let databases: Vec<DatabaseView> = read
            .into_iter()
            .map(|(db, view)| self.database(db, view, now, &mut errors))
            .collect();
        record_moves(seen, &databases, now);
        let nodes = self.nodes(&records, &databases, seen);
        Ok(Snapshot {
            generated_unix_ms: now,
            replicas: self.replicas,
            nodes,
            databases,
            moves: seen.moves.iter().rev().cloned().collect(),
            truncated,
            errors,
        })
    }

    /// The roots of `dbs`, at most [`READS_AT_ONCE`] at a time, each bounded
    /// by the storage timeout and all of them by twice that; `Err` for a
    /// read that failed or was not made in time.
    async fn read_roots(
        &self,
        dbs: impl Iterator<Item = String>,
    ) -> BTreeMap<String, Result<RootView, String>> {
        let dbs: Vec<String> = dbs.collect();
        let store = self.store.as_ref();
        let timeout = self.storage_timeout;
        let mut read: BTreeMap<String, Result<RootView, String>> = futures::stream::iter(dbs.clone())
            .map(|db| async move {
                let view = roots::read(store, &db, timeout)
                    .await
                    .map_err(|error| error.to_string());
                (db, view)
            })
            .buffer_unordered(READS_AT_ONCE)
            .take_until(tokio::time::sleep(timeout * 2))
            .collect()
            .await;
        for db in dbs {
            read.entry(db)
                .or_insert_with(|| Err("not read in time".to_owned()));
        }
        read
    }

    /// One database's view from its root.
    fn database(
        &self,
        db: String,
        view: Result<RootView, String>,
        now: i64,
        errors: &mut Vec<String>,
    ) -> DatabaseView {
        let members = self.members.get();
        let candidates = placement_map::candidates(&db, &members, self.replicas, &self.map.get())
            .into_iter()
            .map(|member| member.node_id.clone())
            .collect();
        match view {
            Ok(view) => {
                let root = view.root.as_ref();
                DatabaseView {
                    owner: root
                        .filter(|root| !root.owner.is_empty())
                        .map(|root| node_of(&root.owner).to_owned()),
                    owner_live: view.live_owner(now).is_some(),
                    lease_version: root.map_or(0, |root| root.lease_version),
                    lease_expires_unix_ms: root.map_or(0, |root| root.lease_expires_unix_ms),
                    exists: view.exists,
                    database: db,
                    candidates,
                    error: None,
                }
            }
            Err(error) => {
                errors.push(format!("{db}: {error}"));
                DatabaseView {
                    database: db,
                    exists: true,
                    owner: None,
                    owner_live: false,
                    lease_version: 0,
                    lease_expires_unix_ms: 0,
                    candidates,
                    error: Some(error),
                }
            }
        }
    }

    /// Every node: the registry's records, static members without one, and
    /// any node a root names that has neither; with what it owns and stands
    /// by for, and its load.
    fn nodes(&self, records: &[Record], databases: &[DatabaseView], seen: &mut Seen) -> Vec<NodeView> {
        let now = now_unix_ms();
        let mut nodes: BTreeMap<String, NodeView> = BTreeMap::new();
        for record in records {
            let rate = observe_load(seen, record);
            nodes.insert(
                record.node_id.clone(),
                NodeView {
                    node_id: record.node_id.clone(),
                    zone: record.zone.clone(),
                    weight: record.weight,
                    endpoint: record.endpoint.clone(),
                    incarnation: record.incarnation.clone(),
                    registered: true,
                    live: record.expires_unix_ms > now,
                    expires_unix_ms: record.expires_unix_ms,
                    load: record.load,
                    calls_per_second: rate,
                    owned: Vec::new(),
                    standby: Vec::new(),
                },
            );
        }
        seen.loads.retain(|node, _| nodes.contains_key(node));
        let unregistered = |node_id: &str| NodeView {
            node_id: node_id.to_owned(),
            zone: String::new(),
            weight: 0,
            endpoint: String::new(),
            incarnation: String::new(),
            registered: false,
            live: false,
            expires_unix_ms: 0,
            load: None,
            calls_per_second: None,
            owned: Vec::new(),
            standby: Vec::new(),
        };
        for member in self.members.get().iter() {
            nodes.entry(member.node_id.clone()).or_insert_with(|| NodeView {
                zone: member.zone.clone(),
                weight: member.weight,
                endpoint: member.endpoint.clone(),
                ..unregistered(&member.node_id)
            });
        }
        for db in databases.iter().filter(|db| db.owner_live) {
            let Some(owner) = &db.owner else { continue };
            nodes
                .entry(owner.clone())
                .or_insert_with(|| unregistered(owner))
                .owned
                .push(Owned {
                    database: db.database.clone(),
                    lease_version: db.lease_version,
                });
            for candidate in db.candidates.iter().filter(|candidate| *candidate != owner) {
                if let Some(node) = nodes.get_mut(candidate) {
                    node.standby.push(db.database.clone());
                }
            }
        }
        nodes.into_values().collect()
    }
}

/// Records `record`'s load reading and returns the node's call rate: the
/// counter's growth between its last two renewals seen here (a new
/// incarnation starts over).
fn observe_load(seen: &mut Seen, record: &Record) -> Option<f64> {
    let load = record.load?;
    let entry = seen
        .loads
        .entry(record.node_id.clone())
        .or_insert_with(|| LoadSeen {
            incarnation: record.incarnation.clone(),
            calls_total: load.calls_total,
            expires_unix_ms: record.expires_unix_ms,
            rate: None,
        });
    if entry.incarnation != record.incarnation || load.calls_total < entry.calls_total {
        *entry = LoadSeen {
            incarnation: record.incarnation.clone(),
            calls_total: load.calls_total,
            expires_unix_ms: record.expires_unix_ms,
            rate: None,
        };
    } else if record.expires_unix_ms > entry.expires_unix_ms {
        // Each renewal sets the expiry one TTL after its reading, so the
        // expiries are as far apart as the readings.
        #[allow(clippy::cast_precision_loss)]
        let rate = (load.calls_total - entry.calls_total) as f64
            / ((record.expires_unix_ms - entry.expires_unix_ms) as f64 / 1000.0);
        entry.rate = Some(rate);
        entry.calls_total = load.calls_total;
        entry.expires_unix_ms = record.expires_unix_ms;
    }
    entry.rate
}

/// Compares each database's live owner with the previous poll's and keeps
/// the changes. A database no longer listed as owned by anyone has no live
/// owner now. Databases whose root could not be read are left as they were.
fn record_moves(seen: &mut Seen, databases: &[DatabaseView], now: i64) {
    let mut current: HashMap<String, (Option<String>, u64)> = HashMap::new();
    for db in databases {
        if db.error.is_some() {
            if let Some(previous) = seen.owners.get(&db.database) {
                current.insert(db.database.clone(), previous.clone());
            }
            continue;
        }
        let owner = db.owner.clone().filter(|_| db.owner_live);
        current.insert(db.database.clone(), (owner, db.lease_version));
    }
    let first = seen.owners.is_empty() && seen.moves.is_empty();
    let mut moves = Vec::new();
    for (db, (owner, lease_version)) in &current {
        match seen.owners.get(db) {
            Some((previous, _)) if previous != owner => moves.push(Move {
                database: db.clone(),
                from: previous.clone(),
                to: owner.clone(),
                lease_version: *lease_version,
                seen_unix_ms: now,
            }),
            // First seen with an owner, after the first poll: it became
            // active (from no live owner).
            None if !first && owner.is_some() => moves.push(Move {
                database: db.clone(),
                from: None,
                to: owner.clone(),
                lease_version: *lease_version,
                seen_unix_ms: now,
            }),
            _ => {}
        }
    }
    for (db, (previous, lease_version)) in &seen.owners {
        if previous.is_some() && !current.contains_key(db) {
            moves.push(Move {
                database: db.clone(),
                from: previous.clone(),
                to: None,
                lease_version: *lease_version,
                seen_unix_ms: now,
            });
        }
    }
    moves.sort_by(|a, b| a.database.cmp(&b.database));
    seen.moves.extend(moves);
    while seen.moves.len() > MOVES_KEPT {
        seen.moves.pop_front();
    }
    seen.owners = current;
}

#[cfg(test)]
mod tests {
    use super::*;
    use corium_fleet_common::placement::Member;
    use corium_store::{DbRoot, RootStore as _};

    fn member(id: &str, zone: &str) -> Member {
        Member {
            node_id: id.to_owned(),
            zone: zone.to_owned(),
            weight: 1,
            endpoint: format!("http://{id}"),
        }
    }

    async fn put(store: &corium_store::MemoryStore, name: &str, value: &[u8]) {
        let current = store.get_root(name).await.unwrap();
        store.cas_root(name, current.as_deref(), value).await.unwrap();
    }

    async fn record(store: &corium_store::MemoryStore, id: &str, owned: &[&str], calls: u64, expires: i64) {
        let record = Record {
            node_id: id.to_owned(),
            incarnation: "i".to_owned(),
            zone: format!("zone-{id}"),
            weight: 1,
            endpoint: format!("http://{id}"),
            expires_unix_ms: expires,
            owned: owned.iter().map(|db| (*db).to_owned()).collect(),
            load: Some(Load {
                calls_total: calls,
                ..Load::default()
            }),
            features: Vec::new(),
            storage_keys: Vec::new(),
        };
        put(
            store,
            &format!("fleet-node:{id}"),
            &serde_json::to_vec(&record).unwrap(),
        )
        .await;
    }

    async fn owner(store: &corium_store::MemoryStore, db: &str, node: &str, version: u64) {
        put(store, &corium_store::meta_root_name(db), b"meta").await;
        let root = DbRoot {
            format_version: corium_store::FORMAT_VERSION,
            lease_version: version,
            owner: format!("{node}/i/1"),
            lease_expires_unix_ms: now_unix_ms() + 60_000,
            owner_endpoint: format!("http://{node}"),
            index_basis_t: 0,
            roots: None,
            history_roots: None,
            next_entity_id: 0,
            last_tx_instant: 0,
            key_manifest_version: 0,
        };
        put(store, &corium_store::db_root_name(db), &root.encode()).await;
    }

    #[tokio::test]
    async fn draws_owners_standbys_load_and_moves_from_storage() {
        let store = corium_store::MemoryStore::default();
        let far = now_unix_ms() + 60_000;
        record(&store, "a", &["orders"], 100, far).await;
        record(&store, "b", &[], 0, far).await;
        owner(&store, "orders", "a", 3).await;
        let shared: Arc<dyn FullStore> = Arc::new(store.clone());
        let page = StatusPage::new(
            &shared,
            &Members::new(vec![member("a", "zone-a"), member("b", "zone-b")]),
            &placement_map::Watched::default(),
            2,
            Duration::from_secs(1),
        );
        let (code, json) = page.json().await;
        assert_eq!(code, 200, "{json}");
        let snapshot: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(snapshot["nodes"][0]["owned"][0]["database"], "orders");
        assert_eq!(snapshot["nodes"][0]["owned"][0]["lease_version"], 3);
        assert_eq!(snapshot["nodes"][1]["standby"][0], "orders");
        assert_eq!(snapshot["moves"].as_array().unwrap().len(), 0);

        // The database moves to b; a's next renewal reports 100 more calls
        // over 2 s.
        owner(&store, "orders", "b", 4).await;
        record(&store, "a", &[], 300, far + 2_000).await;
        record(&store, "b", &["orders"], 0, far).await;
        page.seen.lock().await.last = None;
        let (_, json) = page.json().await;
        let snapshot: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(snapshot["nodes"][1]["owned"][0]["database"], "orders");
        assert_eq!(snapshot["nodes"][0]["standby"][0], "orders");
        assert_eq!(snapshot["nodes"][0]["calls_per_second"], 100.0);
        let moves = &snapshot["moves"];
        assert_eq!(moves[0]["database"], "orders", "{moves}");
        assert_eq!(
            (moves[0]["from"].as_str(), moves[0]["to"].as_str()),
            (Some("a"), Some("b"))
        );
        assert_eq!(moves[0]["lease_version"], 4);
    }

    #[tokio::test]
    async fn an_empty_registry_is_an_empty_fleet() {
        let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
        let page = StatusPage::new(
            &store,
            &Members::default(),
            &placement_map::Watched::default(),
            2,
            Duration::from_millis(100),
        );
        let (code, json) = page.json().await;
        assert_eq!(code, 200, "{json}");
        assert!(json.contains("\"nodes\":[]"), "{json}");
        assert_eq!(StatusPage::page().0, 200);
        assert!(StatusPage::page().1.contains("/status.json"));
    }
}
