//! The simulated fleet: several transactor hosts in one process over one
//! shared in-memory store, each seeing it through its own `FaultyStore`.
//! Clients call the hosts' `corium.v1` services in-process; hosts reach
//! each other (handoff, drain) over loopback gRPC like real nodes.

use std::sync::Arc;
use std::time::Duration;

use corium_fleet_common::placement::Member;
use corium_fleet_faults::{FaultyStore, Schedule};
use corium_fleet_proto::fleet::fleet_admin_server::FleetAdminServer;
use corium_fleet_store::postgres::PoolOptions;
use corium_fleet_store::{Storage, StorageSettings};
use corium_fleet_transactor::Node;
use corium_fleet_transactor::config::{Config, Membership};
use corium_fleet_transactor::{FleetAdminSvc, FleetTransactor};
use corium_fleet_transactor::{Running, view_kind};
use corium_protocol::pb::transactor_server::TransactorServer;
use corium_store::{FullStore, LogPlacement, MemoryStore};
use tokio::net::TcpListener;

/// One node slot: its current incarnation, if running.
struct Slot {
    id: String,
    port: u16,
    running: Option<Running>,
    store: Option<Arc<FaultyStore>>,
    admin: Option<tokio::task::JoinHandle<()>>,
    /// When the node died (crash or drain), for the supervisor.
    died: Option<tokio::time::Instant>,
    incarnations: usize,
}

/// The fleet.
pub struct World {
    /// The store every host shares (each through its own `FaultyStore`).
    pub shared: Arc<MemoryStore>,
    /// The hosts' lease TTL.
    pub lease_ttl: Duration,
    members: Vec<Member>,
    slots: Vec<Slot>,
    /// Faults injected by incarnations that are gone: (node, tally).
    past_injected: Vec<(String, std::collections::BTreeMap<&'static str, u64>)>,
    dir: tempfile::TempDir,
}

impl World {
    /// Reserves one loopback admin port per node (the static member list
    /// needs every endpoint up front).
    ///
    /// # Panics
    /// When no temporary directory can be made.
    #[must_use]
    pub fn new(nodes: usize, lease_ttl: Duration) -> Self {
        let mut slots = Vec::new();
        let mut members = Vec::new();
        for n in 0..nodes {
            // Reserved below the ephemeral range and across test processes.
            let port = crate::free_port();
            members.push(Member {
                node_id: format!("node-{n}"),
                zone: format!("zone-{n}"),
                weight: 1,
                endpoint: format!("http://127.0.0.1:{port}"),
            });
            slots.push(Slot {
                id: format!("node-{n}"),
                port,
                running: None,
                store: None,
                admin: None,
                died: None,
                incarnations: 0,
            });
        }
        Self {
            shared: Arc::new(MemoryStore::default()),
            lease_ttl,
            members,
            slots,
            past_injected: Vec::new(),
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    /// Hosts, running or not.
    #[must_use]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are no hosts.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The index of host `node_id`.
    #[must_use]
    pub fn index_of(&self, node_id: &str) -> Option<usize> {
        self.slots.iter().position(|slot| slot.id == node_id)
    }

    fn config(&self, n: usize) -> Config {
        let slot = &self.slots[n];
        let data_dir = self.dir.path().join(format!("{}-{}", slot.id, slot.incarnations));
        Config {
            node_id: slot.id.clone(),
            zone: self.members[n].zone.clone(),
            weight: 1,
            listen: ([127, 0, 0, 1], slot.port).into(),
            admin_listen: ([127, 0, 0, 1], 0).into(),
            advertise: self.members[n].endpoint.clone(),
            storage: StorageSettings {
                backend: Storage::Filesystem,
                data_dir,
                pool: PoolOptions::sized(16),
            },
            lease_ttl: self.lease_ttl,
            membership: Membership {
                members: self.members.clone(),
                replicas: 2,
                placement_map: None,
                verify_node_identity: true,
            },
            static_members: true,
            registry_ttl: self.lease_ttl * 2,
            registry_renew: self.lease_ttl / 2,
            drain_timeout: Duration::from_secs(2),
            drain_deadline: Duration::from_secs(50),
            memory_budget: None,
            memory_from_allocator: false,
            load_balance: None,
            request_id_retention: None,
            storage_info: corium_transactor::StorageInfoConfig::default(),
            activation_read_ahead_mib: 256,
            // Warm standbys on, refreshed often: the fault suite runs with
            // every cache in place.
            warm_standby_mib: 64,
            warm_standby_interval: Duration::from_millis(300),
            // Hot standbys on: handoffs and takeovers in the simulation
            // promote followed values in place, and the fault suite checks
            // them with everything else.
            hot_standbys: 16,
            // No keys: the simulated databases are not encrypted.
            storage_keys: corium_fleet_transactor::config::StorageKeys::default(),
            max_request_bytes: corium_fleet_common::settings::DEFAULT_MAX_REQUEST_BYTES,
            read_replicas: corium_fleet_transactor::config::ReplicaSettings::default(),
            storage_timeout: Duration::from_secs(1),
            idle_evict_after: None,
            gc_min_retention: Duration::from_hours(1),
            max_subscriptions: corium_fleet_transactor::config::SubscriptionLimits {
                per_node: 10_000,
                per_database: 1_000,
                per_principal: 5_000,
            },
            work_limits: corium_fleet_transactor::config::WorkLimitsConfig::default(),
            basis_waits: corium_fleet_transactor::config::WaiterLimits::default(),
            tls: None,
            ingress_identities: Vec::new(),
            auth: corium_fleet_common::auth::AuthFlags::default(),
            authz: corium_fleet_transactor::config::AuthzFlags::default(),
        }
    }

    /// Starts node `n` (a new incarnation) with storage following `schedule`.
    ///
    /// # Panics
    /// When the host cannot start or its admin port cannot be bound.
    pub async fn start(&mut self, n: usize, schedule: Schedule) {
        let store = Arc::new(FaultyStore::new(
            Arc::clone(&self.shared) as Arc<dyn FullStore>,
            schedule,
        ));
        let view_kind = view_kind(LogPlacement::RootStore).expect("native view");
        let config = self.config(n);
        std::fs::create_dir_all(&config.storage.data_dir).expect("data directory");
        let running = corium_fleet_transactor::start(
            config,
            Arc::clone(&store) as Arc<dyn FullStore>,
            None,
            view_kind,
            None,
            corium_fleet_transactor::Hooks::default(),
        )
        .await
        .unwrap_or_else(|error| panic!("node-{n} did not start: {error}"));
        let listener = bind_again(self.slots[n].port).await;
        let svc = FleetAdminServer::new(FleetAdminSvc(Arc::clone(&running.node)));
        // `corium.v1.Transactor` too: a node's hot standbys subscribe to the
        // owner over it, so handoffs and takeovers here promote them.
        let transactor = TransactorServer::new(FleetTransactor(Arc::clone(&running.node)));
        let admin = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .timeout(Duration::from_secs(10))
                .add_service(svc)
                .add_service(transactor)
                .serve_with_incoming(tokio_stream_of(listener))
                .await;
        });
        let slot = &mut self.slots[n];
        if let Some(old) = slot.store.replace(Arc::clone(&store)) {
            self.past_injected.push((slot.id.clone(), old.injected()));
        }
        slot.running = Some(running);
        slot.admin = Some(admin);
        slot.died = None;
        slot.incarnations += 1;
    }

    /// The live host of node `n` (`None`: down).
    #[must_use]
    pub fn host(&self, n: usize) -> Option<Arc<Node>> {
        self.slots[n]
            .running
            .as_ref()
            .map(|running| Arc::clone(&running.node))
    }

    /// Node `n`'s current store wrapper.
    #[must_use]
    pub fn store(&self, n: usize) -> Option<Arc<FaultyStore>> {
        self.slots[n].store.clone()
    }

    /// SIGKILL: storage cut, tasks stopped, nothing released.
    pub fn crash(&mut self, n: usize) {
        let slot = &mut self.slots[n];
        if let Some(store) = &slot.store {
            store.crash_now();
        }
        if let Some(admin) = slot.admin.take() {
            admin.abort();
        }
        if let Some(running) = slot.running.take() {
            running.abandon();
        }
        slot.died.get_or_insert_with(tokio::time::Instant::now);
    }

    /// The end of a SIGTERM, once the node has handed everything off
    /// (`Host::release_all`): it leaves the registry and stops.
    pub async fn stopped(&mut self, n: usize) {
        let Some(running) = self.slots[n].running.take() else {
            return;
        };
        running.stop().await;
        let slot = &mut self.slots[n];
        if let Some(admin) = slot.admin.take() {
            admin.abort();
        }
        if let Some(store) = &slot.store {
            store.crash_now();
        }
        slot.died = Some(tokio::time::Instant::now());
    }

    /// The supervisor: a node whose storage crashed (by schedule) is killed
    /// for good, and any node down for `after` is restarted with clean
    /// storage. Returns the nodes restarted.
    pub async fn supervise(&mut self, after: Duration) -> Vec<usize> {
        for n in 0..self.slots.len() {
            if self.slots[n].store.as_ref().is_some_and(|store| store.crashed())
                && self.slots[n].running.is_some()
            {
                self.crash(n);
            }
        }
        let mut restarted = Vec::new();
        for n in 0..self.slots.len() {
            if self.slots[n].died.is_some_and(|died| died.elapsed() >= after) {
                self.start(n, Schedule::default()).await;
                restarted.push(n);
            }
        }
        restarted
    }

    /// Restarts every node that is down (end of a run).
    pub async fn heal(&mut self) {
        for n in 0..self.slots.len() {
            if self.slots[n].running.is_none() {
                self.start(n, Schedule::default()).await;
            }
        }
    }

    /// Faults injected by every incarnation's store so far, by node
    /// (gone incarnations first).
    #[must_use]
    pub fn injected(&self) -> Vec<(String, std::collections::BTreeMap<&'static str, u64>)> {
        self.past_injected
            .iter()
            .cloned()
            .chain(self.slots.iter().filter_map(|slot| {
                slot.store
                    .as_ref()
                    .map(|store| (slot.id.clone(), store.injected()))
            }))
            .filter(|(_, injected)| !injected.is_empty())
            .collect()
    }

    /// Stops everything (end of a run); the runtime drops what is left.
    pub fn shutdown(&mut self) {
        for n in 0..self.slots.len() {
            self.crash(n);
        }
    }
}

/// Binds a port this world bound before (a restarted node keeps its
/// endpoint); retries briefly while the old listener is torn down.
async fn bind_again(port: u16) -> TcpListener {
    for _ in 0..50 {
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)).await {
            return listener;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot bind 127.0.0.1:{port} again");
}

fn tokio_stream_of(
    listener: TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}
