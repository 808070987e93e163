//! Ingress configuration: flags, an optional TOML file, validation.
//!
//! Layout:
//! - [`args`] — the flags ([`Args`]), also the `--config` file's keys;
//! - [`resolved`] — the validated [`Config`] and its named pieces; its
//!   storage, membership and TLS identities are the shared groups'
//!   ([`StorageSettings`], [`Membership`], [`Identity`], [`FleetTls`]);
//! - this file — merging the file under the flags, and the ingress's checks.

mod args;
mod resolved;

pub use args::{Args, ClientTlsFlags, UpstreamFlags};
pub use resolved::{
    ClientCertificates, Config, ConnectionCaps, FailoverBufferLimits, RetryBudgetSettings, TlsListener,
};

// The settings of the shared flag groups, as a `Config` names them.
pub use corium_fleet_common::settings::{FleetTls, Identity, Membership};
pub use corium_fleet_store::StorageSettings;

use std::net::SocketAddr;
use std::time::Duration;

use corium_fleet_common::process::ConfigError;
use corium_fleet_common::settings::{self, ServerTlsFlags};

impl Args {
    /// Merges the `--config` file under the flags (and the environment):
    /// [`settings::merge`]. Authentication is never read from the file.
    ///
    /// # Errors
    /// The file cannot be read or has unknown or mistyped settings.
    pub fn merged(self) -> Result<Self, ConfigError> {
        let Some(path) = &self.config else { return Ok(self) };
        let file = settings::merge(&self, path)?;
        Ok(Self {
            config: self.config,
            auth: self.auth,
            ..file
        })
    }

    /// Validates into a [`Config`].
    ///
    /// # Errors
    /// A message naming the flag at fault.
    pub fn validate(self) -> Result<Config, ConfigError> {
        self.auth.validate()?;
        let upstream = self.upstream.validate()?;
        let membership = self.membership.validate(
            upstream.is_some(),
            "--upstream-ca, --upstream-cert and --upstream-key",
        )?;
        let max_request_bytes = self.request_size.validate()?;
        let owner_cache_ttl_ms = self.owner_cache_ttl_ms.unwrap_or(2_000);
        if !(1..=600_000).contains(&owner_cache_ttl_ms) {
            return Err(ConfigError::from(format!(
                "--owner-cache-ttl-ms {owner_cache_ttl_ms}: must be between 1 and 600000"
            )));
        }
        let max_deadline = positive_ms("--max-deadline-ms", self.max_deadline_ms, 60_000)?;
        let storage = self.storage.validate()?;
        let tls_listen = self.client_tls.validate()?;
        Ok(Config {
            listen: self
                .listen
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 4334))),
            admin_listen: self
                .admin_listen
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9102))),
            admin_trust_loopback: self.admin_trust_loopback.unwrap_or(true),
            storage,
            membership,
            owner_cache_ttl: Duration::from_millis(owner_cache_ttl_ms),
            owner_cache_capacity: self.owner_cache_capacity.unwrap_or(100_000),
            max_request_bytes,
            max_deadline,
            assign_request_ids: self.assign_request_ids.unwrap_or(true),
            storage_timeout: Duration::from_secs(5),
            worker_threads: self.worker_threads.unwrap_or(0),
            connect_timeout: Duration::from_secs(2),
            tls_listen,
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
            failover_buffer: FailoverBufferLimits {
                per_database: self.failover_buffer_per_database.unwrap_or(64),
                calls: self.failover_buffer_calls.unwrap_or(1024),
                bytes: self.failover_buffer_mib.unwrap_or(64).saturating_mul(1 << 20),
            },
            drain_timeout: positive_ms("--drain-timeout-ms", self.drain_timeout_ms, 20_000)?,
            retry_budget: retry_budget(self.retry_budget_ratio, self.retry_budget_min_per_second)?,
            max_connections: connection_caps(self.max_connections, self.max_connections_per_client)?,
            preface_timeout: positive_ms("--preface-timeout-ms", self.preface_timeout_ms, 10_000)?,
            auth: self.auth,
        })
    }
}

impl ClientTlsFlags {
    /// `--tls-listen` with `--tls-cert` and `--tls-key` (all or none), and
    /// the client certificates it verifies: `--tls-client-ca` (only with
    /// the listener) and `--tls-require-client-cert` (only with the CA).
    ///
    /// # Errors
    /// A message naming the flags at fault.
    pub fn validate(self) -> Result<Option<TlsListener>, ConfigError> {
        let ServerTlsFlags {
            tls_cert,
            tls_key,
            tls_client_ca,
        } = self.server;
        let client_certificates = match (tls_client_ca, self.tls_require_client_cert) {
            (Some(_), _) if self.tls_listen.is_none() => {
                return Err(ConfigError::from("--tls-client-ca needs --tls-listen"));
            }
            (Some(ca), required) => Some(ClientCertificates {
                ca,
                required: required.unwrap_or(false),
            }),
            (None, Some(_)) => {
                return Err(ConfigError::from(
                    "--tls-require-client-cert needs --tls-client-ca",
                ));
            }
            (None, None) => None,
        };
        match (self.tls_listen, tls_cert, tls_key) {
            (None, None, None) => Ok(None),
            (Some(addr), Some(cert), Some(key)) => Ok(Some(TlsListener {
                addr,
                identity: Identity { cert, key },
                client_certificates,
            })),
            _ => Err(ConfigError::from(
                "--tls-listen, --tls-cert and --tls-key go together",
            )),
        }
    }
}

impl UpstreamFlags {
    /// The hop's mTLS: `--upstream-ca`, `--upstream-cert` and
    /// `--upstream-key`, all or none (`None`: h2c).
    ///
    /// # Errors
    /// Some but not all of the three.
    pub fn validate(self) -> Result<Option<FleetTls>, ConfigError> {
        FleetTls::all_or_none(
            self.upstream_ca,
            self.upstream_cert,
            self.upstream_key,
            "--upstream-ca, --upstream-cert and --upstream-key go together (the hop is mutual TLS)",
        )
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
fn retry_budget(ratio: Option<f64>, floor: Option<u32>) -> Result<RetryBudgetSettings, ConfigError> {
    let ratio = ratio.unwrap_or(0.2);
    if !(0.0..=10.0).contains(&ratio) {
        return Err(ConfigError::from(format!(
            "--retry-budget-ratio {ratio}: must be between 0 and 10"
        )));
    }
    Ok(RetryBudgetSettings {
        ratio,
        min_per_second: floor.unwrap_or(10),
    })
}

/// `--max-connections` and `--max-connections-per-client`, with their
/// defaults; neither may be 0.
fn connection_caps(total: Option<usize>, per_client: Option<usize>) -> Result<ConnectionCaps, ConfigError> {
    match (total.unwrap_or(10_000), per_client.unwrap_or(1_000)) {
        (0, _) | (_, 0) => Err(ConfigError::from(
            "--max-connections and --max-connections-per-client must be at least 1",
        )),
        (total, per_client) => Ok(ConnectionCaps { total, per_client }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The flags, validated; a refusal as the operator reads it.
    fn parse(args: &[&str]) -> Result<Config, String> {
        let flags = std::iter::once("corium-fleet-ingress").chain(args.iter().copied());
        let args = Args::try_parse_from(flags).map_err(|error| error.to_string())?;
        args.merged()
            .and_then(Args::validate)
            .map_err(|error| error.to_string())
    }

    /// `text` as a config file named after `test`, and its path.
    fn config_file(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ingress-cfg-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ingress.toml");
        std::fs::write(&file, text).unwrap();
        file
    }

    const UPSTREAM: [&str; 6] = [
        "--upstream-ca",
        "ca.pem",
        "--upstream-cert",
        "ingress.pem",
        "--upstream-key",
        "ingress.key",
    ];

    #[test]
    fn defaults_are_a_cleartext_filesystem_ingress_following_the_registry() {
        let config = parse(&[]).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:4334");
        assert_eq!(config.admin_listen.to_string(), "127.0.0.1:9102");
        assert_eq!(config.storage.backend, corium_fleet_store::Storage::Filesystem);
        assert_eq!(
            config.storage.pool,
            corium_fleet_store::postgres::PoolOptions::sized(16)
        );
        assert!(config.membership.members.is_empty());
        assert_eq!(config.membership.replicas, 2);
        assert!(config.membership.verify_node_identity);
        assert_eq!(
            config.failover_buffer,
            FailoverBufferLimits {
                per_database: 64,
                calls: 1024,
                bytes: 64 << 20,
            }
        );
        assert_eq!(
            config.retry_budget,
            RetryBudgetSettings {
                ratio: 0.2,
                min_per_second: 10,
            }
        );
        assert_eq!(
            config.max_connections,
            ConnectionCaps {
                total: 10_000,
                per_client: 1_000,
            }
        );
        assert!(config.tls_listen.is_none() && config.upstream.is_none());
    }

    #[test]
    fn bad_input_names_the_flag() {
        for (args, flag) in [
            (&["--member", "x"][..], "--member"),
            (&["--member", "a=http://x", "--member", "a=http://y"], "twice"),
            (&["--replicas", "0"], "--replicas"),
            (&["--storage", "mysql://x"], "--storage"),
            (&["--storage-pool-size", "0"], "--storage-pool-size"),
            (&["--max-request-bytes", "10"], "--max-request-bytes"),
            (&["--owner-cache-ttl-ms", "0"], "--owner-cache-ttl-ms"),
            (&["--retry-budget-ratio", "11"], "--retry-budget-ratio"),
            (&["--max-connections", "0"], "--max-connections"),
            (&["--max-deadline-ms", "0"], "--max-deadline-ms"),
            (
                &["--tls-listen", "127.0.0.1:4443"],
                "--tls-listen, --tls-cert and --tls-key",
            ),
            (
                &["--tls-client-ca", "ca.pem"],
                "--tls-client-ca needs --tls-listen",
            ),
            (
                &["--upstream-ca", "ca.pem"],
                "--upstream-ca, --upstream-cert and --upstream-key",
            ),
            // An https member needs the mTLS hop.
            (&["--member", "a=https://a:7001"], "--upstream-ca"),
        ] {
            let error = parse(args).unwrap_err();
            assert!(error.contains(flag), "{args:?}: {error}");
        }
        let mut cleartext_member = UPSTREAM.to_vec();
        cleartext_member.extend(["--member", "a=http://a:7001"]);
        let error = parse(&cleartext_member).unwrap_err();
        assert!(
            error.contains("--member a=http://a:7001") && error.contains("cleartext"),
            "{error}"
        );
    }

    #[test]
    fn tls_settings_are_named() {
        let mut args = UPSTREAM.to_vec();
        args.extend([
            "--member",
            "a=https://a:7001",
            "--tls-listen",
            "0.0.0.0:4443",
            "--tls-cert",
            "public.pem",
            "--tls-key",
            "public.key",
            "--tls-client-ca",
            "clients.pem",
            "--tls-require-client-cert",
            "true",
        ]);
        let config = parse(&args).unwrap();
        let upstream = config.upstream.unwrap();
        assert_eq!(upstream.ca.to_str(), Some("ca.pem"));
        assert_eq!(upstream.identity.cert.to_str(), Some("ingress.pem"));
        let listener = config.tls_listen.unwrap();
        assert_eq!(listener.addr.to_string(), "0.0.0.0:4443");
        assert_eq!(listener.identity.key.to_str(), Some("public.key"));
        assert_eq!(
            listener.client_certificates,
            Some(ClientCertificates {
                ca: "clients.pem".into(),
                required: true,
            })
        );
    }

    #[test]
    fn config_file_fills_what_flags_leave_out() {
        let file = config_file(
            "fills",
            "replicas = 3\nfailover_buffer_mib = 1\nmembers = [\"a=http://a:7001\"]\nstorage = \"postgres://u@h/db\"\n",
        );
        let path = file.to_str().unwrap();
        let config = parse(&["--config", path, "--replicas", "4"]).unwrap();
        assert_eq!(config.membership.replicas, 4);
        assert_eq!(config.membership.members.len(), 1);
        assert_eq!(config.failover_buffer.bytes, 1 << 20);
        assert!(matches!(
            config.storage.backend,
            corium_fleet_store::Storage::Postgres { .. }
        ));
        let file = config_file("unknown", "replica = 3\n");
        let error = parse(&["--config", file.to_str().unwrap()]).unwrap_err();
        assert!(
            error.contains("config file") && error.contains("`replica`"),
            "{error}"
        );
        // Secrets never come from the file.
        let file = config_file("secret", "serve_token = \"t\"\n");
        let error = parse(&["--config", file.to_str().unwrap()]).unwrap_err();
        assert!(error.contains("unknown setting `serve_token`"), "{error}");
    }

    /// Every key `charts/corium-fleet/templates/ingress-configmap.yaml`
    /// renders into the ingress's `node.toml` (`ingress.limits` through
    /// `corium-fleet.ingress.limitKeys`), and the flags its deployment
    /// passes, parse and land where they should.
    #[test]
    fn the_charts_ingress_toml_and_flags_parse() {
        let file = config_file(
            "chart",
            r#"
listen = "0.0.0.0:4334"
admin_listen = "0.0.0.0:9102"
replicas = 2
assign_request_ids = true
drain_timeout_ms = 20000
storage_pool_size = 8
adaptive_node_limit = true
body_progress_timeout_ms = 10000
max_concurrent_requests = 4096
max_request_bytes = 8388608
max_connection_age_ms = 0
max_connection_idle_ms = 300000
max_connections = 10000
max_connections_per_client = 1000
max_streams_per_client = 1000
max_streams_per_connection = 256
preface_timeout_ms = 10000
rate_limit_per_client = 0
retry_budget_min_per_second = 10
retry_budget_ratio = 0.5
stream_stall_timeout_ms = 60000
members = [
  "corium-fleet-transactor-0=https://corium-fleet-transactor-0.corium-fleet-transactor-headless.default.svc:7001",
  "corium-fleet-transactor-1=https://corium-fleet-transactor-1.corium-fleet-transactor-headless.default.svc:7001",
]
placement_map = "/etc/corium-fleet/placement/placement.map"
"#,
        );
        let mut args = vec!["--config", file.to_str().unwrap()];
        args.extend(UPSTREAM);
        args.extend([
            "--verify-node-identity",
            "false",
            "--tls-listen",
            "0.0.0.0:4443",
            "--tls-cert",
            "/etc/corium-fleet/public-tls/tls.crt",
            "--tls-key",
            "/etc/corium-fleet/public-tls/tls.key",
            "--serve-token",
            "secret",
            "--operator-role",
            "ops",
        ]);
        let config = parse(&args).unwrap();
        assert_eq!(config.listen.to_string(), "0.0.0.0:4334");
        assert_eq!(config.storage.pool.size, 8);
        assert_eq!(config.drain_timeout, Duration::from_secs(20));
        assert!((config.retry_budget.ratio - 0.5).abs() < f64::EPSILON);
        assert_eq!(config.membership.members.len(), 2);
        assert!(!config.membership.verify_node_identity);
        assert!(config.membership.placement_map.is_some());
        assert!(config.tls_listen.is_some() && config.upstream.is_some());
        assert_eq!(config.auth.serve_token.as_deref(), Some("secret"));
        assert_eq!(config.max_request_bytes, 8 * 1024 * 1024);
    }
}
