//! Ingress configuration: flags, an optional TOML file, validation.
//!
//! Layout:
//! - [`args`] — the flags ([`Args`]), also the `--config` file's keys;
//! - [`resolved`] — the validated [`Config`] (and its TLS [`Identity`]);
//! - this file — merging the file under the flags, and the checks.

mod args;
mod resolved;

pub use args::Args;
pub use resolved::{Config, Identity};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use corium_fleet_common::placement::{self, Member};
use corium_fleet_common::process::ConfigError;

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
            admin_trust_loopback: self.admin_trust_loopback.or(file.admin_trust_loopback),
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
            worker_threads: self.worker_threads.or(file.worker_threads),
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
            failover_buffer_per_database: self
                .failover_buffer_per_database
                .or(file.failover_buffer_per_database),
            failover_buffer_calls: self.failover_buffer_calls.or(file.failover_buffer_calls),
            failover_buffer_mib: self.failover_buffer_mib.or(file.failover_buffer_mib),
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
            admin_trust_loopback: self.admin_trust_loopback.unwrap_or(true),
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
            worker_threads: self.worker_threads.unwrap_or(0),
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
            failover_buffer: (
                self.failover_buffer_per_database.unwrap_or(64),
                self.failover_buffer_calls.unwrap_or(1024),
                self.failover_buffer_mib.unwrap_or(64).saturating_mul(1 << 20),
            ),
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
