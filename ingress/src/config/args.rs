//! `corium-fleet-ingress`'s flags, as clap parses them and as the
//! `--config` file spells them.

use std::net::SocketAddr;
use std::path::PathBuf;

use corium_fleet_common::settings::{LogFlags, MembershipFlags, RequestSizeFlags, ServerTlsFlags};
use serde::{Deserialize, Serialize};

/// `corium-fleet-ingress` flags. Every flag can also be set in the file given
/// to `--config` (same names, `snake_case`); a flag on the command line wins.
/// The flag groups come last: each heads the flags after it in `--help`.
#[derive(Debug, Default, clap::Parser, Serialize, Deserialize)]
#[command(
    name = "corium-fleet-ingress",
    version,
    about = "The Corium Fleet ingress: one client address"
)]
#[serde(default)]
pub struct Args {
    /// TOML file with any of the settings below.
    #[arg(long, env = "CORIUM_FLEET_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Client listen address (gRPC over HTTP/2 cleartext) [default: 127.0.0.1:4334].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Admin HTTP listen address for /metrics, /healthz, /readyz [default: 127.0.0.1:9102].
    #[arg(long)]
    pub admin_listen: Option<SocketAddr>,
    /// Let a connection from a loopback address read the admin port's
    /// /status and /status.json without an operator's token (`kubectl
    /// port-forward` arrives from loopback). Turn off where every connection
    /// arrives from loopback whoever made it (a service-mesh sidecar)
    /// [default: true].
    #[arg(long, value_name = "BOOL")]
    pub admin_trust_loopback: Option<bool>,
    /// How long an owner-cache entry is trusted, in milliseconds [default: 2000].
    #[arg(long)]
    pub owner_cache_ttl_ms: Option<u64>,
    /// Owner-cache capacity in databases [default: 100000].
    #[arg(long)]
    pub owner_cache_capacity: Option<u64>,
    /// `--max-request-bytes`: the largest request a client may send, the
    /// nodes' limit too (each request is buffered whole, and so replayable).
    #[command(flatten)]
    #[serde(flatten)]
    pub request_size: RequestSizeFlags,
    /// Longest deadline given to a forwarded unary call, in milliseconds;
    /// shorter client deadlines are kept [default: 60000].
    #[arg(long)]
    pub max_deadline_ms: Option<u64>,
    /// Give a `Transact` that arrives without `corium-request-id` one of the
    /// ingress's own, so the owner commits it at most once and a failure on
    /// the hop to the owner (an owner killed after its log append, a broken
    /// connection) is retried with the same id and answered with the
    /// committed result: exactly-once for stock clients [default: true].
    #[arg(long, value_name = "BOOL")]
    pub assign_request_ids: Option<bool>,
    /// Most requests in flight at once; more are refused `RESOURCE_EXHAUSTED`
    /// [default: 4096].
    #[arg(long)]
    pub max_concurrent_requests: Option<usize>,
    /// Requests a second allowed per client: its principal when it
    /// authenticated, else its address (0: unlimited) [default: 0].
    #[arg(long)]
    pub rate_limit_per_client: Option<u32>,
    /// Calls open at once from one client address, streams included until
    /// they end; more are refused `RESOURCE_EXHAUSTED` [default: 1000].
    #[arg(long)]
    pub max_streams_per_client: Option<usize>,
    /// HTTP/2 streams one client connection may open at once (the
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` the ingress announces) [default: 256].
    #[arg(long)]
    pub max_streams_per_connection: Option<u32>,
    /// Refuse a request whose body stops arriving for this many
    /// milliseconds (within its deadline) [default: 10000].
    #[arg(long)]
    pub body_progress_timeout_ms: Option<u64>,
    /// Reset a forwarded stream (a subscription) whose client has not taken
    /// the next message for this many milliseconds, freeing its place at the
    /// node [default: 60000].
    #[arg(long)]
    pub stream_stall_timeout_ms: Option<u64>,
    /// Close (GOAWAY) a client connection with no call open for this many
    /// milliseconds; 0: never [default: 300000].
    #[arg(long)]
    pub max_connection_idle_ms: Option<u64>,
    /// Close (GOAWAY, calls in flight finish) a client connection this many
    /// milliseconds old, ±10 % jitter, so clients spread over ingress pods
    /// added later; 0: never [default: 0].
    #[arg(long)]
    pub max_connection_age_ms: Option<u64>,
    /// How long shutdown (SIGTERM) waits for calls and streams in flight
    /// after telling every client connection to go (GOAWAY), in
    /// milliseconds: a few seconds below the pod's
    /// `terminationGracePeriodSeconds` [default: 20000].
    #[arg(long)]
    pub drain_timeout_ms: Option<u64>,
    /// Learn each node's limit of open calls from its refusals and refuse
    /// calls over it here, without the hop [default: true].
    #[arg(long, value_name = "BOOL")]
    pub adaptive_node_limit: Option<bool>,
    /// Calls of one database held (sent again until answered or out of
    /// time) while its ownership moves, after a second `NotOwner` or refused
    /// connection; 0 turns holding off [default: 64].
    #[arg(long)]
    pub failover_buffer_per_database: Option<usize>,
    /// Calls held in all [default: 1024].
    #[arg(long)]
    pub failover_buffer_calls: Option<usize>,
    /// Request bytes held in all, in MiB [default: 64].
    #[arg(long)]
    pub failover_buffer_mib: Option<usize>,
    /// Retries the ingress may add, as a fraction of the calls it takes,
    /// for attempts that reached a node and failed (a typed `NotOwner` or a
    /// refused connection cost no budget) [default: 0.2].
    #[arg(long)]
    pub retry_budget_ratio: Option<f64>,
    /// Retries a second the ingress may always make, whatever the ratio
    /// [default: 10].
    #[arg(long)]
    pub retry_budget_min_per_second: Option<u32>,
    /// Most client connections open at once; more are closed as soon as
    /// they are accepted [default: 10000].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Most client connections from one address (behind a load balancer,
    /// every client may share one) [default: 1000].
    #[arg(long)]
    pub max_connections_per_client: Option<usize>,
    /// Close a cleartext client connection that sends nothing (no HTTP/2
    /// preface) within this many milliseconds [default: 10000].
    #[arg(long)]
    pub preface_timeout_ms: Option<u64>,
    /// Threads that serve calls. 0: one per CPU this process may use (its
    /// CPU affinity and cgroup quota, so a pod limited to one CPU gets one).
    /// With one, the process runs a single-threaded runtime: no hand-offs
    /// between threads on a call's path, the cheapest per call (design note
    /// 0018); scale such ingresses out, one per CPU [default: 0].
    #[arg(long)]
    pub worker_threads: Option<usize>,
    /// Client authentication: stock Corium's flags (flags and environment
    /// only; secrets stay out of the configuration file).
    #[command(flatten)]
    #[serde(skip)]
    pub auth: corium_fleet_common::auth::AuthFlags,
    /// The shared store, read here to find lease holders.
    #[command(flatten)]
    #[serde(flatten)]
    pub storage: corium_fleet_store::StorageFlags,
    /// The transactors' members, candidates and placement map (the same as
    /// theirs), so cold databases are routed straight to their candidates.
    #[command(flatten)]
    #[serde(flatten)]
    pub membership: MembershipFlags,
    /// The client TLS listener.
    #[command(flatten)]
    #[serde(flatten)]
    pub client_tls: ClientTlsFlags,
    /// The mTLS hop to the nodes.
    #[command(flatten)]
    #[serde(flatten)]
    pub upstream: UpstreamFlags,
    /// `--log`, `--log-format`.
    #[command(flatten)]
    #[serde(flatten)]
    pub logging: LogFlags,
}

/// The client-facing TLS listener: its address, the certificate it serves
/// and the client certificates it verifies.
#[derive(clap::Args, Clone, Debug, Default, Serialize, Deserialize)]
#[command(next_help_heading = "TLS")]
#[serde(default)]
pub struct ClientTlsFlags {
    /// Client listen address for gRPC over TLS (ALPN h2); needs --tls-cert and --tls-key.
    #[arg(long)]
    pub tls_listen: Option<SocketAddr>,
    /// Its certificate and client CA.
    #[command(flatten)]
    #[serde(flatten)]
    pub server: ServerTlsFlags,
    /// With --tls-client-ca: refuse TLS clients without a certificate at the
    /// handshake [default: false, a certificate is optional].
    #[arg(long, value_name = "BOOL")]
    pub tls_require_client_cert: Option<bool>,
}

/// The mTLS hop to the nodes, all three or none (then the hop is h2c).
#[derive(clap::Args, Clone, Debug, Default, Serialize, Deserialize)]
#[command(next_help_heading = "TLS")]
#[serde(default)]
pub struct UpstreamFlags {
    /// PEM fleet CA that transactor certificates must chain to (mTLS hop).
    #[arg(long)]
    pub upstream_ca: Option<PathBuf>,
    /// PEM client certificate this ingress presents to transactors; its name
    /// must be one the transactors list with --ingress-identity.
    #[arg(long)]
    pub upstream_cert: Option<PathBuf>,
    /// PEM private key of --upstream-cert.
    #[arg(long)]
    pub upstream_key: Option<PathBuf>,
}
