//! Ingress configuration: flags, an optional TOML file, validation.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use corium_fleet_common::placement::{self, Member};
use corium_fleet_common::process::ConfigError;
use serde::Deserialize;

/// `corium-fleet-ingress` flags. Every flag can also be set in the file given
/// to `--config` (same names, `snake_case`); a flag on the command line wins.
#[derive(Debug, Default, clap::Parser, Deserialize)]
#[command(
    name = "corium-fleet-ingress",
    version,
    about = "The Corium Fleet ingress: one client address"
)]
#[serde(deny_unknown_fields, default)]
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
    /// Storage the transactors share, read here to find lease holders:
    /// `filesystem` (under --data-dir), `postgres://…` or `s3://BUCKET[/PREFIX]`.
    #[arg(long, env = "CORIUM_FLEET_STORAGE")]
    pub storage: Option<String>,
    /// Data directory of a filesystem fleet [default: ./.corium-fleet/data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// S3 endpoint URL (S3-compatible servers).
    #[arg(long, env = "CORIUM_FLEET_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 region [default: us-east-1].
    #[arg(long, env = "AWS_REGION")]
    pub s3_region: Option<String>,
    /// Transactor member, repeatable: `NODE_ID=ENDPOINT[,zone=Z][,weight=N]`
    /// (the same list the transactors get). Without any, the live members
    /// are read from the node registry in storage.
    #[arg(long = "member")]
    pub members: Option<Vec<String>>,
    /// Candidates per database (as configured on the transactors) [default: 2].
    #[arg(long)]
    pub replicas: Option<usize>,
    /// The transactors' placement map file (same file, same checks), so cold
    /// databases are routed straight to their mapped candidates.
    #[arg(long)]
    pub placement_map: Option<PathBuf>,
    /// How long an owner-cache entry is trusted, in milliseconds [default: 2000].
    #[arg(long)]
    pub owner_cache_ttl_ms: Option<u64>,
    /// Owner-cache capacity in databases [default: 100000].
    #[arg(long)]
    pub owner_cache_capacity: Option<u64>,
    /// Largest request body buffered (and so replayable) [default: 4194304].
    #[arg(long)]
    pub max_request_bytes: Option<usize>,
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
    /// Client listen address for gRPC over TLS (ALPN h2); needs --tls-cert and --tls-key.
    #[arg(long)]
    pub tls_listen: Option<SocketAddr>,
    /// PEM certificate served to clients on --tls-listen.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// PEM CA whose client certificates --tls-listen accepts. A client that
    /// presents one (verified) and no bearer token is the principal
    /// `client-cert/<certificate name>`.
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: refuse TLS clients without a certificate at the
    /// handshake [default: false, a certificate is optional].
    #[arg(long, value_name = "BOOL")]
    pub tls_require_client_cert: Option<bool>,
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
    /// Connections in this process's `PostgreSQL` pool, shared by every
    /// database it serves [default: 16].
    #[arg(long)]
    pub storage_pool_size: Option<usize>,
    /// Log filter (tracing `EnvFilter` syntax) [default: info].
    #[arg(long, env = "CORIUM_FLEET_LOG")]
    pub log: Option<String>,
    /// Log line format: `text`, or `json` (one object a line, with the
    /// current span's fields: the correlation id of a call) [default: text].
    #[arg(long, value_enum, env = "CORIUM_FLEET_LOG_FORMAT")]
    pub log_format: Option<corium_fleet_common::telemetry::LogFormat>,
    /// With the mTLS hop: a node's certificate must name its node id (as a
    /// DNS name), so a registry record pointing one node's id at another
    /// endpoint is refused. Turn off only for certificates shared by all
    /// nodes (the chart's shared-certificate modes) [default: true].
    #[arg(long, value_name = "BOOL")]
    pub verify_node_identity: Option<bool>,
    /// Client authentication: stock Corium's flags (flags and environment
    /// only; secrets stay out of the configuration file).
    #[command(flatten)]
    #[serde(skip)]
    pub auth: corium_fleet_common::auth::AuthFlags,
}

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
pub struct Config {
    /// Client listener (gRPC over HTTP/2 cleartext).
    pub listen: SocketAddr,
    /// Admin HTTP listener (`/metrics`, `/healthz`, `/readyz`).
    pub admin_listen: SocketAddr,
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

impl Args {
    /// Merges the `--config` file under the flags.
    ///
    /// # Errors
    /// The file cannot be read or has unknown or mistyped settings.
    pub fn merged(self) -> Result<Self, ConfigError> {
        let Some(path) = &self.config else { return Ok(self) };
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read config file {}: {error}", path.display()))?;
        let file: Args =
            toml::from_str(&text).map_err(|error| format!("config file {}: {error}", path.display()))?;
        Ok(Self {
            config: self.config,
            listen: self.listen.or(file.listen),
            admin_listen: self.admin_listen.or(file.admin_listen),
            storage: self.storage.or(file.storage),
            data_dir: self.data_dir.or(file.data_dir),
            s3_endpoint: self.s3_endpoint.or(file.s3_endpoint),
            s3_region: self.s3_region.or(file.s3_region),
            members: self.members.or(file.members),
            replicas: self.replicas.or(file.replicas),
            owner_cache_ttl_ms: self.owner_cache_ttl_ms.or(file.owner_cache_ttl_ms),
            owner_cache_capacity: self.owner_cache_capacity.or(file.owner_cache_capacity),
            max_request_bytes: self.max_request_bytes.or(file.max_request_bytes),
            placement_map: self.placement_map.or(file.placement_map),
            max_deadline_ms: self.max_deadline_ms.or(file.max_deadline_ms),
            assign_request_ids: self.assign_request_ids.or(file.assign_request_ids),
            storage_pool_size: self.storage_pool_size.or(file.storage_pool_size),
            log: self.log.or(file.log),
            log_format: self.log_format.or(file.log_format),
            tls_listen: self.tls_listen.or(file.tls_listen),
            max_concurrent_requests: self.max_concurrent_requests.or(file.max_concurrent_requests),
            rate_limit_per_client: self.rate_limit_per_client.or(file.rate_limit_per_client),
            max_streams_per_client: self.max_streams_per_client.or(file.max_streams_per_client),
            max_streams_per_connection: self
                .max_streams_per_connection
                .or(file.max_streams_per_connection),
            body_progress_timeout_ms: self.body_progress_timeout_ms.or(file.body_progress_timeout_ms),
            stream_stall_timeout_ms: self.stream_stall_timeout_ms.or(file.stream_stall_timeout_ms),
            max_connection_idle_ms: self.max_connection_idle_ms.or(file.max_connection_idle_ms),
            max_connection_age_ms: self.max_connection_age_ms.or(file.max_connection_age_ms),
            adaptive_node_limit: self.adaptive_node_limit.or(file.adaptive_node_limit),
            drain_timeout_ms: self.drain_timeout_ms.or(file.drain_timeout_ms),
            retry_budget_ratio: self.retry_budget_ratio.or(file.retry_budget_ratio),
            retry_budget_min_per_second: self
                .retry_budget_min_per_second
                .or(file.retry_budget_min_per_second),
            max_connections: self.max_connections.or(file.max_connections),
            max_connections_per_client: self
                .max_connections_per_client
                .or(file.max_connections_per_client),
            preface_timeout_ms: self.preface_timeout_ms.or(file.preface_timeout_ms),
            tls_cert: self.tls_cert.or(file.tls_cert),
            tls_key: self.tls_key.or(file.tls_key),
            tls_client_ca: self.tls_client_ca.or(file.tls_client_ca),
            tls_require_client_cert: self.tls_require_client_cert.or(file.tls_require_client_cert),
            upstream_ca: self.upstream_ca.or(file.upstream_ca),
            upstream_cert: self.upstream_cert.or(file.upstream_cert),
            upstream_key: self.upstream_key.or(file.upstream_key),
            verify_node_identity: self.verify_node_identity.or(file.verify_node_identity),
            auth: self.auth,
        })
    }

    /// Validates into a [`Config`].
    ///
    /// # Errors
    /// A message naming the flag at fault.
    // One flag after another: long, and clearer whole.
    #[allow(clippy::too_many_lines)]
    pub fn validate(self) -> Result<Config, ConfigError> {
        self.auth.validate()?;
        let members = self
            .members
            .unwrap_or_default()
            .iter()
            .map(|text| {
                text.parse::<Member>()
                    .map_err(|error| format!("--member: {error}"))
            })
            .collect::<Result<Vec<_>, _>>()?;

        placement::check_unique(&members).map_err(|error| format!("--member: {error}"))?;
        let replicas = self.replicas.unwrap_or(placement::DEFAULT_REPLICAS);
        if replicas == 0 {
            return Err(ConfigError::from("--replicas must be at least 1"));
        }
        let max_request_bytes = self.max_request_bytes.unwrap_or(4 * 1024 * 1024);
        if !(1024..=256 * 1024 * 1024).contains(&max_request_bytes) {
            return Err(ConfigError::from(format!(
                "--max-request-bytes {max_request_bytes}: must be between 1024 and 268435456"
            )));
        }
        let owner_cache_ttl_ms = self.owner_cache_ttl_ms.unwrap_or(2_000);
        if !(1..=600_000).contains(&owner_cache_ttl_ms) {
            return Err(ConfigError::from(format!(
                "--owner-cache-ttl-ms {owner_cache_ttl_ms}: must be between 1 and 600000"
            )));
        }
        let max_deadline = positive_ms("--max-deadline-ms", self.max_deadline_ms, 60_000)?;
        let storage = corium_fleet_store::Storage::parse(
            self.storage.as_deref().unwrap_or("filesystem"),
            self.s3_endpoint,
            self.s3_region,
        )
        .map_err(|error| format!("--storage: {error}"))?;
        let tls_listen = match (self.tls_listen, self.tls_cert, self.tls_key) {
            (None, None, None) => None,
            (Some(addr), Some(cert), Some(key)) => Some((addr, Identity { cert, key })),
            _ => {
                return Err(ConfigError::from(
                    "--tls-listen, --tls-cert and --tls-key go together",
                ));
            }
        };
        let tls_clients = client_certificates(
            self.tls_client_ca,
            self.tls_require_client_cert,
            tls_listen.is_some(),
        )?;
        let upstream = upstream_identity(self.upstream_ca, self.upstream_cert, self.upstream_key)?;
        check_member_schemes(&members, upstream.is_some())?;
        Ok(Config {
            listen: self
                .listen
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 4334))),
            admin_listen: self
                .admin_listen
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9102))),
            storage,
            data_dir: self
                .data_dir
                .unwrap_or_else(|| PathBuf::from(".corium-fleet/data")),
            members,
            replicas,
            placement_map: self.placement_map,
            owner_cache_ttl: Duration::from_millis(owner_cache_ttl_ms),
            owner_cache_capacity: self.owner_cache_capacity.unwrap_or(100_000),
            max_request_bytes,
            max_deadline,
            assign_request_ids: self.assign_request_ids.unwrap_or(true),
            storage_timeout: Duration::from_secs(5),
            storage_pool_size: at_least_one(
                "--storage-pool-size",
                self.storage_pool_size,
                corium_fleet_store::DEFAULT_POOL_SIZE,
            )?,
            connect_timeout: Duration::from_secs(2),
            tls_listen,
            tls_clients,
            upstream,
            max_concurrent_requests: at_least_one(
                "--max-concurrent-requests",
                self.max_concurrent_requests,
                4096,
            )?,
            rate_limit_per_client: self.rate_limit_per_client.unwrap_or(0),
            max_streams_per_client: at_least_one(
                "--max-streams-per-client",
                self.max_streams_per_client,
                1000,
            )?,
            max_streams_per_connection: at_least_one(
                "--max-streams-per-connection",
                self.max_streams_per_connection,
                256,
            )?,
            body_progress_timeout: positive_ms(
                "--body-progress-timeout-ms",
                self.body_progress_timeout_ms,
                10_000,
            )?,
            stream_stall_timeout: positive_ms(
                "--stream-stall-timeout-ms",
                self.stream_stall_timeout_ms,
                60_000,
            )?,
            max_connection_idle: Some(self.max_connection_idle_ms.unwrap_or(300_000))
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            max_connection_age: self
                .max_connection_age_ms
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            adaptive_node_limit: self.adaptive_node_limit.unwrap_or(true),
            drain_timeout: positive_ms("--drain-timeout-ms", self.drain_timeout_ms, 20_000)?,
            retry_budget: retry_budget(self.retry_budget_ratio, self.retry_budget_min_per_second)?,
            max_connections: connection_caps(self.max_connections, self.max_connections_per_client)?,
            preface_timeout: positive_ms("--preface-timeout-ms", self.preface_timeout_ms, 10_000)?,
            verify_node_identity: self.verify_node_identity.unwrap_or(true),
            auth: self.auth,
        })
    }
}

/// `--upstream-ca`, `--upstream-cert` and `--upstream-key`, all or none.
fn upstream_identity(
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<(PathBuf, Identity)>, ConfigError> {
    match (ca, cert, key) {
        (None, None, None) => Ok(None),
        (Some(ca), Some(cert), Some(key)) => Ok(Some((ca, Identity { cert, key }))),
        _ => Err(ConfigError::from(
            "--upstream-ca, --upstream-cert and --upstream-key go together (the hop is mutual TLS)",
        )),
    }
}

/// A count flag that must be at least 1.
fn at_least_one<T: From<u8> + PartialEq>(flag: &str, value: Option<T>, default: T) -> Result<T, ConfigError> {
    let value = value.unwrap_or(default);
    if value == T::from(0) {
        return Err(ConfigError::from(format!("{flag} must be at least 1")));
    }
    Ok(value)
}

/// A millisecond flag that must be positive.
fn positive_ms(flag: &str, value: Option<u64>, default: u64) -> Result<Duration, ConfigError> {
    match value.unwrap_or(default) {
        0 => Err(ConfigError::from(format!("{flag} must be positive"))),
        ms => Ok(Duration::from_millis(ms)),
    }
}

/// `--retry-budget-ratio` (0 to 10) and `--retry-budget-min-per-second`.
fn retry_budget(ratio: Option<f64>, floor: Option<u32>) -> Result<(f64, u32), ConfigError> {
    let ratio = ratio.unwrap_or(0.2);
    if !(0.0..=10.0).contains(&ratio) {
        return Err(ConfigError::from(format!(
            "--retry-budget-ratio {ratio}: must be between 0 and 10"
        )));
    }
    Ok((ratio, floor.unwrap_or(10)))
}

/// `--tls-client-ca` and `--tls-require-client-cert`: the CA and whether a
/// certificate is required (only with the TLS listener).
fn client_certificates(
    ca: Option<PathBuf>,
    required: Option<bool>,
    tls_listener: bool,
) -> Result<Option<(PathBuf, bool)>, ConfigError> {
    match (ca, required) {
        (Some(_), _) if !tls_listener => Err(ConfigError::from("--tls-client-ca needs --tls-listen")),
        (Some(ca), required) => Ok(Some((ca, required.unwrap_or(false)))),
        (None, Some(_)) => Err(ConfigError::from(
            "--tls-require-client-cert needs --tls-client-ca",
        )),
        (None, None) => Ok(None),
    }
}

/// `--max-connections` and `--max-connections-per-client`, with their
/// defaults; neither may be 0.
fn connection_caps(total: Option<usize>, per_client: Option<usize>) -> Result<(usize, usize), ConfigError> {
    match (total.unwrap_or(10_000), per_client.unwrap_or(1_000)) {
        (0, _) | (_, 0) => Err(ConfigError::from(
            "--max-connections and --max-connections-per-client must be at least 1",
        )),
        caps => Ok(caps),
    }
}

/// Members must match the hop: `https://` needs the mTLS identity, and with
/// it a cleartext `http://` member is refused (the principal would travel
/// unprotected).
fn check_member_schemes(members: &[Member], mtls: bool) -> Result<(), ConfigError> {
    if let Some(member) = members.iter().find(|m| m.endpoint.starts_with("http://"))
        && mtls
    {
        return Err(ConfigError::from(format!(
            "--member {}={}: the hop to nodes is mutual TLS (--upstream-*); a cleartext member is refused",
            member.node_id, member.endpoint
        )));
    }
    if let Some(member) = members.iter().find(|m| m.endpoint.starts_with("https://"))
        && !mtls
    {
        return Err(ConfigError::from(format!(
            "--member {}={}: https members need --upstream-ca, --upstream-cert and --upstream-key",
            member.node_id, member.endpoint
        )));
    }
    Ok(())
}
