//! The validated node configuration the rest of the node reads.

use std::net::SocketAddr;
use std::time::Duration;

/// The node's read-replica settings (`--max-replicas`, `--replica-idle-ms`,
/// `--replica-follow-interval-ms`).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct ReplicaSettings {
    /// Replicas kept at most (0: hosted reads are off on this node).
    pub max: u64,
    /// Unused this long, a replica is evicted.
    pub idle: Duration,
    /// How often a replica asks its owner how far the database is.
    pub follow_interval: Duration,
}

impl Default for ReplicaSettings {
    fn default() -> Self {
        Self {
            max: 64,
            idle: Duration::from_mins(5),
            follow_interval: Duration::from_millis(500),
        }
    }
}

/// How many subscriptions this node serves at once: in all, per database,
/// per principal.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct SubscriptionLimits {
    /// On this node.
    pub per_node: usize,
    /// For one database.
    pub per_database: usize,
    /// For one principal (every anonymous caller is the one anonymous
    /// principal).
    pub per_principal: usize,
}

/// A validated node configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node's id: unique in the fleet, stable across restarts.
    pub node_id: String,
    /// Its failure domain (placement spreads candidates over zones).
    pub zone: String,
    /// Its placement capacity, relative to the other members.
    pub weight: u32,
    /// gRPC listen address.
    pub listen: SocketAddr,
    /// Admin HTTP listen address.
    pub admin_listen: SocketAddr,
    /// The internal endpoint other fleet members and ingresses reach it at.
    pub advertise: String,
    /// The shared store, the data directory, the `PostgreSQL` pool.
    pub storage: corium_fleet_store::StorageSettings,
    /// Lease TTL of every database this node owns.
    pub lease_ttl: Duration,
    /// Every member, this node included (only this node when the members
    /// come from the registry); candidates per database; the placement map
    /// (checked against the members once they are known); whether a peer's
    /// certificate must name its node id.
    pub membership: corium_fleet_common::settings::Membership,
    /// Whether `membership.members` is a static `--member` list (else: the
    /// registry).
    pub static_members: bool,
    /// How long a registry record lives without renewal.
    pub registry_ttl: Duration,
    /// How often this node renews its registry record.
    pub registry_renew: Duration,
    /// How long graceful shutdown waits for in-flight calls per database.
    pub drain_timeout: Duration,
    /// Bound on one storage call made to decide ownership.
    pub storage_timeout: Duration,
    /// The node's memory budget in bytes (`None`: none): what its open
    /// databases, read-ahead and base are estimated to hold stays under it
    /// (`host/memory.rs`).
    pub memory_budget: Option<u64>,
    /// Whether what the node holds is measured from the allocator (`true`,
    /// the default) or estimated from datoms (`--memory-measure datoms`).
    pub memory_from_allocator: bool,
    /// The read-only storage access `GetStorageInfo` describes
    /// (`--postgres-read-only-url`, `--s3-read-only-*`): separately
    /// provisioned, never the node's own credentials.
    pub storage_info: corium_transactor::StorageInfoConfig,
    /// How long a request id's record is kept (`None`: for ever): older
    /// records are retracted, so exactly-once holds within this window
    /// (`request_id/retention.rs`, `host/retention.rs`).
    pub request_id_retention: Option<Duration>,
    /// How often the node compares its calls per second with the fleet's
    /// and may hand a database to a less busy candidate (`host/balance.rs`);
    /// `None`: never (`--load-balance false`).
    pub load_balance: Option<Duration>,
    /// The node's activation read-ahead budget in MiB (0: off).
    pub activation_read_ahead_mib: usize,
    /// The node's warm-standby budget in MiB (0: off).
    pub warm_standby_mib: usize,
    /// How often warm databases are refreshed (positive).
    pub warm_standby_interval: Duration,
    /// Databases followed at most as their first standby (`hot_standby`;
    /// 0: none).
    pub hot_standbys: usize,
    /// The key-encryption keys this node resolves (`--storage-key`),
    /// resolved at start; every cell opens with them.
    pub storage_keys: corium_fleet_store::keys::StorageKeys,
    /// The largest request message a client may send (`--max-request-bytes`,
    /// the ingress's limit too): the client-facing services' decoding limit.
    pub max_request_bytes: usize,
    /// Hosted read replicas: how many, how long kept idle, how often each
    /// checks it still follows its owner.
    pub read_replicas: ReplicaSettings,
    /// How long a drain may take before the databases not yet handed over
    /// are only released.
    pub drain_deadline: Duration,
    /// Idle interval after which a cell is released and dropped (the
    /// floor: `Cell::idle_limit` keeps a database that is slow to open
    /// longer).
    pub idle_evict_after: Option<Duration>,
    /// The retention floor of `GcDeletedDatabases`: blobs younger than this
    /// are never swept (an index being published references them soon).
    pub gc_min_retention: Duration,
    /// Most subscriptions served at once by this node, per database and per
    /// principal: each holds a task, a 64-item buffer and keeps its cell
    /// from idle eviction.
    pub max_subscriptions: SubscriptionLimits,
    /// Overload shedding: calls running and waiting, per database, per
    /// principal.
    pub work_limits: crate::work_limits::WorkLimitsConfig,
    /// Calls waiting for a basis: on the node, per database, per principal
    /// (they hold no work place; `waiters.rs`).
    pub basis_waits: crate::waiters::WaiterLimits,
    /// mTLS on the gRPC port and to peers (plaintext when `None`): this
    /// node's certificate, the fleet CA its callers' and peers'
    /// certificates chain to.
    pub tls: Option<corium_fleet_common::settings::FleetTls>,
    /// Certificate names that mark an ingress peer.
    pub ingress_identities: Vec<String>,
    /// How direct callers authenticate and who is an operator (stock
    /// Corium's flags, validated).
    pub auth: corium_fleet_common::auth::AuthFlags,
    /// The policy database, if authorization follows one.
    pub authz: crate::authz::AuthzFlags,
}
