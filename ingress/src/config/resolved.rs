//! The validated ingress configuration the rest of the ingress reads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use corium_fleet_common::placement::Member;

/// Files of one TLS identity.
#[derive(Clone, Debug)]
pub struct Identity {
    /// PEM certificate (chain).
    pub cert: PathBuf,
    /// PEM private key of `cert`.
    pub key: PathBuf,
}

/// A validated ingress configuration.
#[derive(Clone, Debug)]
#[allow(clippy::struct_excessive_bools)] // Independent switches, each its own flag.
pub struct Config {
    /// Client listener (gRPC over HTTP/2 cleartext).
    pub listen: SocketAddr,
    /// Admin HTTP listener (`/metrics`, `/healthz`, `/readyz`).
    pub admin_listen: SocketAddr,
    /// Whether a loopback peer reads the admin port's status pages without
    /// an operator's token.
    pub admin_trust_loopback: bool,
    /// Parsed at validation, so a bad `--storage` is a usage error.
    pub storage: corium_fleet_store::Storage,
    /// Data directory of a filesystem fleet.
    pub data_dir: PathBuf,
    /// The static member list, checked unique; empty: follow the node
    /// registry in storage instead.
    pub members: Vec<Member>,
    /// Candidates per database (at least 1; must match the transactors').
    pub replicas: usize,
    /// The transactors' placement map file, if any.
    pub placement_map: Option<PathBuf>,
    /// How long an owner-cache entry is trusted (1 ms to 10 min).
    pub owner_cache_ttl: Duration,
    /// Owner-cache capacity in databases.
    pub owner_cache_capacity: u64,
    /// Largest request body buffered (1 KiB to 256 MiB): the whole body is
    /// held so an attempt can be replayed.
    pub max_request_bytes: usize,
    /// Longest deadline given to a forwarded unary call (positive); shorter
    /// client deadlines are kept.
    pub max_deadline: Duration,
    /// Whether a `Transact` without a request id gets one from the ingress.
    pub assign_request_ids: bool,
    /// Bound on one storage read made to resolve an owner.
    pub storage_timeout: Duration,
    /// Connections in the `PostgreSQL` pool (at least 1).
    pub storage_pool_size: usize,
    /// Threads serving calls; 0: one per CPU the process may use (see
    /// `corium_fleet_common::process::runtime`).
    pub worker_threads: usize,
    /// Bound on connecting to a transactor.
    pub connect_timeout: Duration,
    /// Most requests in flight at once (at least 1); more are refused.
    pub max_concurrent_requests: usize,
    /// Requests a second allowed per client, keyed by principal (by
    /// address for anonymous callers); 0: unlimited.
    pub rate_limit_per_client: u32,
    /// Calls (streams included) open at once from one client address.
    pub max_streams_per_client: usize,
    /// HTTP/2 streams one client connection may open at once.
    pub max_streams_per_connection: u32,
    /// Longest pause in a request body's arrival.
    pub body_progress_timeout: Duration,
    /// Longest a forwarded stream may wait for its client to take a message.
    pub stream_stall_timeout: Duration,
    /// Client connections idle this long are closed (`None`: never).
    pub max_connection_idle: Option<Duration>,
    /// Client connections this old are closed, jittered (`None`: never).
    pub max_connection_age: Option<Duration>,
    /// Whether calls over a node's learned limit are refused here.
    pub adaptive_node_limit: bool,
    /// The failover buffer: calls per database, calls in all, bytes in all.
    pub failover_buffer: (usize, usize, usize),
    /// How long shutdown waits for calls in flight.
    pub drain_timeout: Duration,
    /// The retry budget: retries per call taken, and retries a second
    /// always allowed.
    pub retry_budget: (f64, u32),
    /// Client connections open at once: in total, and from one address
    /// (both at least 1).
    pub max_connections: (usize, usize),
    /// How long a cleartext client may stay silent after connecting.
    pub preface_timeout: Duration,
    /// Client-facing TLS listener and its identity.
    pub tls_listen: Option<(SocketAddr, Identity)>,
    /// The CA of client certificates on the TLS listener, and whether one
    /// is required.
    pub tls_clients: Option<(PathBuf, bool)>,
    /// The mTLS hop: fleet CA and this ingress's client identity.
    pub upstream: Option<(PathBuf, Identity)>,
    /// How clients authenticate (stock Corium's flags, validated).
    pub auth: corium_fleet_common::auth::AuthFlags,
    /// Whether a node's certificate must name its node id (mTLS hop).
    pub verify_node_identity: bool,
}
