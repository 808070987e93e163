//! `corium-fleet-transactor`'s flags, as clap parses them and as the
//! `--config` file spells them.

use std::net::SocketAddr;
use std::path::PathBuf;

use corium_fleet_common::settings::{LogFlags, MembershipFlags, RequestSizeFlags, ServerTlsFlags};
use serde::{Deserialize, Serialize};

/// `corium-fleet-transactor` flags. Every flag can also be set in the file
/// given to `--config` (same names, `snake_case`); a flag given on the command
/// line wins over the file. The flag groups come last: each heads the flags
/// after it in `--help`.
#[derive(Debug, Default, clap::Parser, Serialize, Deserialize)]
#[command(
    name = "corium-fleet-transactor",
    version,
    about = "A Corium Fleet transactor node"
)]
#[serde(default)]
pub struct Args {
    /// TOML file with any of the settings below.
    #[arg(long, env = "CORIUM_FLEET_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Stable node id, unique in the fleet (e.g. the `StatefulSet` pod name).
    #[arg(long, env = "CORIUM_FLEET_NODE_ID")]
    pub node_id: Option<String>,
    /// Failure domain (zone); candidates spread across zones.
    #[arg(long, env = "CORIUM_FLEET_ZONE")]
    pub zone: Option<String>,
    /// File holding the zone (e.g. written by an init container from the
    /// Kubernetes node's `topology.kubernetes.io/zone` label); used when
    /// --zone is not given. Surrounding whitespace is ignored.
    #[arg(long)]
    pub zone_file: Option<PathBuf>,
    /// Relative capacity for placement [default: 1].
    #[arg(long)]
    pub weight: Option<u32>,
    /// gRPC listen address [default: 127.0.0.1:7001].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Admin HTTP listen address for /metrics, /healthz, /readyz
    /// [default: 127.0.0.1:9101].
    #[arg(long)]
    pub admin_listen: Option<SocketAddr>,
    /// Internal endpoint other fleet members and the ingress use to reach this
    /// node; written into the lease record [default: `http://LISTEN`].
    #[arg(long)]
    pub advertise: Option<String>,
    /// Write-lease time to live in milliseconds; renewals run every third of
    /// it, and it bounds failover time after a crash [default: 5000].
    #[arg(long)]
    pub lease_ttl_ms: Option<i64>,
    /// Release and drop a database's cell after this long with no call and
    /// no subscription (0: never); its next request activates it again. A
    /// database whose open took longer is kept idle longer, 600 times its
    /// open time (an open of 1 s: 10 minutes), at most an hour: an idle
    /// database costs a lease renewal every third of the TTL and a few
    /// timers, a large one's next open costs its history [default: 30000].
    #[arg(long)]
    pub idle_evict_after_ms: Option<u64>,
    /// Smallest `retention_millis` a `GcDeletedDatabases` call may ask for:
    /// an unreachable blob younger than this may belong to an index a live
    /// database is still publishing, so it is never swept [default: 3600000].
    #[arg(long)]
    pub gc_min_retention_ms: Option<u64>,
    /// How long a drain (SIGTERM) may take, in milliseconds: set it a few
    /// seconds below the pod's `terminationGracePeriodSeconds` (the chart
    /// does). Databases are handed to their next candidate, more at once if
    /// the pace would miss the deadline; those not handed over in time are
    /// released, so their successor activates them on the next request
    /// without waiting out the lease [default: 50000].
    #[arg(long)]
    pub drain_deadline_ms: Option<u64>,
    /// Most `Subscribe` streams this node serves at once; more are refused
    /// `RESOURCE_EXHAUSTED` [default: 10000].
    #[arg(long)]
    pub max_subscriptions: Option<usize>,
    /// Most `Subscribe` streams one database serves at once [default: 1000].
    #[arg(long)]
    pub max_subscriptions_per_database: Option<usize>,
    /// Most `Subscribe` streams one principal has open on this node at once
    /// (every anonymous caller is the one anonymous principal)
    /// [default: 5000].
    #[arg(long)]
    pub max_subscriptions_per_principal: Option<usize>,
    /// Client calls running at once on this node; more wait in a queue
    /// [default: 256].
    #[arg(long)]
    pub max_inflight_calls: Option<usize>,
    /// Client calls waiting for a place at once; more are refused
    /// `RESOURCE_EXHAUSTED` at once [default: 1024].
    #[arg(long)]
    pub max_queued_calls: Option<usize>,
    /// How long a call waits for a place before it is refused
    /// `RESOURCE_EXHAUSTED`, in milliseconds [default: 500].
    #[arg(long)]
    pub max_queue_wait_ms: Option<u64>,
    /// Client calls running or waiting at once for one database, so one hot
    /// database cannot take every place [default: 128].
    #[arg(long)]
    pub max_inflight_per_database: Option<usize>,
    /// Calls a second one principal may start on this node (the burst is one
    /// second's worth); 0: no limit. Every caller without credentials is the
    /// one anonymous principal [default: 0].
    #[arg(long)]
    pub rate_limit_per_principal: Option<u32>,
    /// Calls waiting at once on this node for a database to reach a basis
    /// (`Sync(t)`, `corium-min-basis`, as-of views); a wait holds no work
    /// place, and more are refused `RESOURCE_EXHAUSTED` [default: 4096].
    #[arg(long)]
    pub max_basis_waits: Option<usize>,
    /// Calls waiting at once for one database's basis [default: 512].
    #[arg(long)]
    pub max_basis_waits_per_database: Option<usize>,
    /// Calls one principal has waiting for a basis at once (every anonymous
    /// caller is the one anonymous principal) [default: 256].
    #[arg(long)]
    pub max_basis_waits_per_principal: Option<usize>,
    /// Node-registry record time to live in milliseconds [default: 10000].
    #[arg(long)]
    pub registry_ttl_ms: Option<u64>,
    /// How often the registry record is renewed and the live members re-read,
    /// in milliseconds [default: 3000].
    #[arg(long)]
    pub registry_renew_ms: Option<u64>,
    /// `--storage-key`: the keys of databases encrypted at rest.
    #[command(flatten)]
    #[serde(flatten)]
    pub storage_keys: corium_fleet_store::keys::StorageKeyFlags,
    /// Certificate name (CN or DNS name) that marks an ingress peer, whose
    /// `corium-principal` is trusted; repeatable [default: corium-fleet-ingress].
    #[arg(long = "ingress-identity", help_heading = "TLS")]
    pub ingress_identities: Option<Vec<String>>,
    /// The node's memory budget: what the process holds (`--memory-measure`)
    /// is kept under it. Past it, caches are dropped (hot standbys first),
    /// idle databases evicted (least recently used first), the largest open
    /// database — idle or busy — handed to a candidate with room, and when
    /// no candidate has room, writes are refused `RESOURCE_EXHAUSTED` until
    /// there is; an activation that finds no room is refused too. 0: no
    /// budget [default: the largest budget whose bound, 1.25 × budget + 64
    /// MiB, fits the container's cgroup memory limit (1 GiB: 768 MiB); none
    /// without a limit].
    #[arg(long)]
    pub memory_budget_mib: Option<u64>,
    /// How the node measures what it holds against its budget: `allocator`
    /// (jemalloc's own accounting of the pages it keeps, each database's
    /// share from its datoms at the cost of a datom measured from the heap)
    /// or `datoms` (an estimate: 6,000 bytes a datom recorded, plus a 40 MiB
    /// base; deterministic, what the policy tests use) [default: allocator].
    #[arg(long, value_parser = ["allocator", "datoms"])]
    pub memory_measure: Option<String>,
    /// A read-only `PostgreSQL` connection string that `GetStorageInfo`
    /// hands to storage-aware clients (stock `corium backup`), as a stock
    /// transactor's flag of the same name; never derived from --storage
    /// [default: none: discovery of a `PostgreSQL` fleet's storage is refused].
    #[arg(long, env = "CORIUM_POSTGRES_READ_ONLY_URL", hide_env_values = true)]
    pub postgres_read_only_url: Option<String>,
    /// A read-only S3 access key id that `GetStorageInfo` hands to
    /// storage-aware clients, with --s3-read-only-secret-access-key
    /// [default: none: discovery of an S3 fleet's storage is refused].
    #[arg(
        long,
        env = "CORIUM_S3_READ_ONLY_ACCESS_KEY_ID",
        requires = "s3_read_only_secret_access_key"
    )]
    pub s3_read_only_access_key_id: Option<String>,
    /// The secret of --s3-read-only-access-key-id.
    #[arg(
        long,
        env = "CORIUM_S3_READ_ONLY_SECRET_ACCESS_KEY",
        hide_env_values = true,
        requires = "s3_read_only_access_key_id"
    )]
    pub s3_read_only_secret_access_key: Option<String>,
    /// How long the record of a request id (`corium-request-id`, or the one
    /// the ingress assigns) is kept, in seconds: a resend within it is
    /// answered from the record, never committed twice; older records are
    /// retracted so that exactly-once does not grow a database without end,
    /// and a time-ordered id (a version-7 UUID) older than this is refused. 0 keeps
    /// them for ever [default: 86400, a day].
    #[arg(long)]
    pub request_id_retention_secs: Option<u64>,
    /// Load-aware placement: compare this node's client calls per second
    /// with the fleet's mean and, while it stays more than 25 % (and 20
    /// calls/s) above it, hand one database at a time to a less busy
    /// candidate with room (a graceful handoff; at most one a minute).
    /// `corium-fleet rebalance --dry-run` shows what would move
    /// [default: true].
    #[arg(long)]
    pub load_balance: Option<bool>,
    /// How often load-aware placement compares the loads, in milliseconds;
    /// a node moves a database only after three comparisons in a row find it
    /// above the band [default: 10000].
    #[arg(long)]
    pub load_balance_interval_ms: Option<u64>,
    /// Memory for reading a database's log in one go while it activates
    /// (one query on `PostgreSQL`), shared by concurrent activations, at most
    /// 64 MiB each; 0 turns read-ahead off [default: 256].
    #[arg(long)]
    pub activation_read_ahead_mib: Option<usize>,
    /// Memory for keeping warm the databases this node is the first standby
    /// of (their log records and index blobs, refreshed while the owner
    /// serves), so a takeover after a crash reads only the tail; 0 turns
    /// it off [default: 64].
    #[arg(long)]
    pub warm_standby_mib: Option<usize>,
    /// How often warm databases are refreshed: each refresh lists the log
    /// once (on S3, one request per 1,000 records), so this trades storage
    /// requests for the tail a takeover reads [default: 5000].
    #[arg(long)]
    pub warm_standby_interval_ms: Option<u64>,
    /// Databases this node follows at most as their first standby, each a
    /// whole database value kept current from the owner's stream, so that a
    /// handoff or a takeover here promotes it in place instead of reading
    /// the whole history; their memory is charged to the budget and dropped
    /// first past it. 0 turns hot standbys off [default: 16].
    #[arg(long)]
    pub hot_standbys: Option<usize>,
    /// Read replicas (`corium.v1.PeerServer` reads) this node keeps at most;
    /// past it the least recently used is evicted. 0 turns hosted reads off
    /// on this node [default: 64].
    #[arg(long)]
    pub max_replicas: Option<u64>,
    /// A read replica unused this long is evicted, its memory and its
    /// subscription to the owner released [default: 300000].
    #[arg(long)]
    pub replica_idle_ms: Option<u64>,
    /// How often a read replica asks its owner how far the database is; a
    /// replica that has not heard from the owner in three periods, or has
    /// fallen behind where the owner was one period ago, refuses reads
    /// [default: 500].
    #[arg(long)]
    pub replica_follow_interval_ms: Option<u64>,
    /// Client authentication: stock Corium's flags, the same as the
    /// ingress's (flags and environment only; secrets stay out of the
    /// configuration file).
    #[command(flatten)]
    #[serde(skip)]
    pub auth: corium_fleet_common::auth::AuthFlags,
    /// Policy authorization: stock Corium's `--authz-*` flags.
    #[command(flatten)]
    #[serde(skip)]
    pub authz: crate::authz::AuthzFlags,
    /// The shared store.
    #[command(flatten)]
    #[serde(flatten)]
    pub storage: corium_fleet_store::StorageFlags,
    /// The fleet's members, candidates and placement map.
    #[command(flatten)]
    #[serde(flatten)]
    pub membership: MembershipFlags,
    /// The node's mTLS: its certificate and the fleet CA.
    #[command(flatten)]
    #[serde(flatten)]
    pub tls: ServerTlsFlags,
    /// `--max-request-bytes`: the largest request message a client may
    /// send (the ingress's limit too).
    #[command(flatten)]
    #[serde(flatten)]
    pub request_size: RequestSizeFlags,
    /// `--log`, `--log-format`.
    #[command(flatten)]
    #[serde(flatten)]
    pub logging: LogFlags,
}
