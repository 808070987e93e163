//! The validated node configuration the rest of the node reads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use corium_fleet_common::placement::Member;

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

/// The node's mTLS material.
#[derive(Clone, Debug)]
pub struct Tls {
    /// PEM certificate this node serves (`--tls-cert`).
    pub cert: PathBuf,
    /// PEM private key of `cert` (`--tls-key`).
    pub key: PathBuf,
    /// PEM CA that client certificates must chain to (`--tls-client-ca`).
    pub client_ca: PathBuf,
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
    /// The shared store.
    pub storage: corium_fleet_store::Storage,
    /// Local data directory.
    pub data_dir: PathBuf,
    /// Lease TTL of every database this node owns.
    pub lease_ttl: Duration,
    /// Every member, this node included (only this node when the members
    /// come from the registry).
    pub members: Vec<Member>,
    /// Whether `members` is a static `--member` list (else: the registry).
    pub static_members: bool,
    /// How long a registry record lives without renewal.
    pub registry_ttl: Duration,
    /// How often this node renews its registry record.
    pub registry_renew: Duration,
    /// Candidates per database.
    pub replicas: usize,
    /// `--placement-map`, checked against the members once they are known.
    pub placement_map: Option<PathBuf>,
    /// How long graceful shutdown waits for in-flight calls per database.
    pub drain_timeout: Duration,
    /// Bound on one storage call made to decide ownership.
    pub storage_timeout: Duration,
    /// Connections in the `PostgreSQL` pool (at least 1).
    pub storage_pool_size: usize,
    /// The node's activation read-ahead budget in MiB (0: off).
    pub activation_read_ahead_mib: usize,
    /// The node's warm-standby budget in MiB (0: off).
    pub warm_standby_mib: usize,
    /// How often warm databases are refreshed (positive).
    pub warm_standby_interval: Duration,
    /// Hosted read replicas: how many, how long kept idle, how often each
    /// checks it still follows its owner.
    pub read_replicas: ReplicaSettings,
    /// Quick ACKs on `PostgreSQL` connections (`store/src/pg_connect.rs`).
    pub postgres_quick_ack: bool,
    /// How long a drain may take before the databases not yet handed over
    /// are only released.
    pub drain_deadline: Duration,
    /// Idle interval after which a cell is released and dropped.
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
    /// mTLS on the gRPC port (plaintext when `None`).
    pub tls: Option<Tls>,
    /// Certificate names that mark an ingress peer.
    pub ingress_identities: Vec<String>,
    /// How direct callers authenticate and who is an operator (stock
    /// Corium's flags, validated).
    pub auth: corium_fleet_common::auth::AuthFlags,
    /// The policy database, if authorization follows one.
    pub authz: crate::authz::AuthzFlags,
    /// Whether a peer's certificate must name its node id (mTLS).
    pub verify_node_identity: bool,
}
