//! The validated ingress configuration the rest of the ingress reads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use corium_fleet_common::settings::{FleetTls, Identity, Membership};
use corium_fleet_store::StorageSettings;

/// The failover buffer's bounds (`--failover-buffer-*`): calls held while
/// their database's ownership moves.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct FailoverBufferLimits {
    /// Calls held for one database (0: holding is off).
    pub per_database: usize,
    /// Calls held in all.
    pub calls: usize,
    /// Request bytes held in all.
    pub bytes: usize,
}

/// The retry budget (`--retry-budget-*`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryBudgetSettings {
    /// Retries per call taken (0 to 10).
    pub ratio: f64,
    /// Retries a second always allowed, whatever the ratio.
    pub min_per_second: u32,
}

/// Client connections open at once (`--max-connections*`), both at least 1.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct ConnectionCaps {
    /// In all.
    pub total: usize,
    /// From one client address.
    pub per_client: usize,
}

/// The client-facing TLS listener (`--tls-listen`, `--tls-cert`,
/// `--tls-key`).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TlsListener {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The certificate it serves.
    pub identity: Identity,
    /// Client certificates it verifies (`--tls-client-ca`), if any.
    pub client_certificates: Option<ClientCertificates>,
}

/// Client certificates on the TLS listener (`--tls-client-ca`,
/// `--tls-require-client-cert`).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ClientCertificates {
    /// The CA they must chain to.
    pub ca: PathBuf,
    /// Whether a client without one is refused at the handshake (else a
    /// certificate is optional).
    pub required: bool,
}

/// A validated ingress configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Client listener (gRPC over HTTP/2 cleartext).
    pub listen: SocketAddr,
    /// Admin HTTP listener (`/metrics`, `/healthz`, `/readyz`).
    pub admin_listen: SocketAddr,
    /// Whether a loopback peer reads the admin port's status pages without
    /// an operator's token.
    pub admin_trust_loopback: bool,
    /// The shared store, the data directory of a filesystem fleet, the
    /// `PostgreSQL` pool.
    pub storage: StorageSettings,
    /// The static member list (empty: follow the node registry in storage
    /// instead), candidates per database (must match the transactors'),
    /// the transactors' placement map file, whether a node's certificate
    /// must name its node id (mTLS hop).
    pub membership: Membership,
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
    /// The failover buffer's bounds.
    pub failover_buffer: FailoverBufferLimits,
    /// How long shutdown waits for calls in flight.
    pub drain_timeout: Duration,
    /// The retry budget.
    pub retry_budget: RetryBudgetSettings,
    /// Client connections open at once.
    pub max_connections: ConnectionCaps,
    /// How long a cleartext client may stay silent after connecting.
    pub preface_timeout: Duration,
    /// The client-facing TLS listener, its identity and client
    /// certificates.
    pub tls_listen: Option<TlsListener>,
    /// The mTLS hop: this ingress's client identity and the fleet CA.
    pub upstream: Option<FleetTls>,
    /// How clients authenticate (stock Corium's flags, validated).
    pub auth: corium_fleet_common::auth::AuthFlags,
}
