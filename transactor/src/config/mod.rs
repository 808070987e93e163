//! Node configuration: command-line flags, an optional TOML file, and the
//! checks that turn them into a [`Config`] or a clear error.
//!
//! Layout:
//! - [`args`] — the flags ([`Args`]), also the `--config` file's keys;
//! - [`resolved`] — the validated [`Config`], whose storage, membership and
//!   TLS are the shared groups' ([`StorageSettings`], [`Membership`],
//!   [`FleetTls`], validated by their own groups);
//! - this file — merging the file under the flags, and the node's checks.

mod args;
mod resolved;

pub use args::Args;
pub use corium_fleet_store::keys::StorageKeys;
pub use resolved::{Config, ReplicaSettings, SubscriptionLimits};

// The settings of the shared flag groups and of the node's parts, as a
// `Config` names them.
pub use crate::authz::AuthzFlags;
pub use crate::waiters::WaiterLimits;
pub use crate::work_limits::WorkLimitsConfig;
pub use corium_fleet_common::settings::{FleetTls, Membership};
pub use corium_fleet_store::StorageSettings;

use std::time::Duration;

use corium_fleet_common::placement::Member;
use corium_fleet_common::process::ConfigError;
use corium_fleet_common::settings;

fn valid_node_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

impl Args {
    /// Merges the `--config` file under the flags (and the environment):
    /// [`settings::merge`]. Authentication is never read from the file.
    ///
    /// # Errors
    /// The file cannot be read or has unknown or mistyped settings.
    pub fn merged(self) -> Result<Self, ConfigError> {
        let Some(path) = &self.config else {
            return Ok(self);
        };
        let file = settings::merge(&self, path)?;
        Ok(Self {
            config: self.config,
            auth: self.auth,
            authz: self.authz,
            ..file
        })
    }

    /// Validates into a [`Config`].
    ///
    /// # Errors
    /// A message naming the flag at fault and what it accepts.
    // One flag after another, each checked where it is read: splitting
    // this would scatter the flag checks away from their flags.
    #[allow(clippy::too_many_lines)]
    pub fn validate(self) -> Result<Config, ConfigError> {
        self.auth.validate()?;
        if self.auth.is_open() && self.authz.authz_db.is_some() {
            return Err(ConfigError::from(
                "--serve-open disables authentication; it cannot be combined with --authz-db",
            ));
        }
        let node_id = self
            .node_id
            .ok_or("--node-id is required (a stable, unique node id)")?;
        if !valid_node_id(&node_id) {
            return Err(ConfigError::from(format!(
                "--node-id {node_id:?}: use 1-63 letters, digits, '-', '_' or '.'"
            )));
        }
        let listen = self
            .listen
            .unwrap_or_else(|| "127.0.0.1:7001".parse().unwrap_or_else(|_| unreachable!()));
        let admin_listen = self
            .admin_listen
            .unwrap_or_else(|| "127.0.0.1:9101".parse().unwrap_or_else(|_| unreachable!()));
        let tls = self.tls.mutual()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let advertise = self.advertise.unwrap_or_else(|| format!("{scheme}://{listen}"));
        if !(advertise.starts_with("http://") || advertise.starts_with("https://")) {
            return Err(ConfigError::from(format!(
                "--advertise {advertise:?}: must be an http:// or https:// URL"
            )));
        }
        let lease_ttl_ms = self.lease_ttl_ms.unwrap_or(5_000);
        if !(300..=600_000).contains(&lease_ttl_ms) {
            return Err(ConfigError::from(format!(
                "--lease-ttl-ms {lease_ttl_ms}: must be between 300 and 600000"
            )));
        }
        for (flag, value) in [
            ("--max-inflight-calls", self.max_inflight_calls),
            ("--max-inflight-per-database", self.max_inflight_per_database),
            ("--max-basis-waits", self.max_basis_waits),
            (
                "--max-basis-waits-per-database",
                self.max_basis_waits_per_database,
            ),
            (
                "--max-basis-waits-per-principal",
                self.max_basis_waits_per_principal,
            ),
        ] {
            if value == Some(0) {
                return Err(ConfigError::from(format!("{flag} must be at least 1")));
            }
        }
        let zone = match (self.zone, &self.zone_file) {
            (Some(zone), _) => zone,
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|error| format!("--zone-file {}: {error}", path.display()))?
                .trim()
                .to_owned(),
            (None, None) => String::new(),
        };
        if tls.is_some() && !advertise.starts_with("https://") {
            return Err(ConfigError::from(format!(
                "--advertise {advertise:?}: a node serving mTLS must advertise an https:// endpoint"
            )));
        }
        let weight = self.weight.unwrap_or(1);
        let registry_ttl = Duration::from_millis(self.registry_ttl_ms.unwrap_or(10_000));
        let registry_renew = Duration::from_millis(self.registry_renew_ms.unwrap_or(3_000));
        if registry_renew.is_zero() || registry_renew >= registry_ttl {
            return Err(ConfigError::from(
                "--registry-renew-ms must be positive and below --registry-ttl-ms",
            ));
        }
        let mut membership = self
            .membership
            .validate(tls.is_some(), "--tls-cert, --tls-key and --tls-client-ca")?;
        let static_members = !membership.members.is_empty();
        match membership.members.iter().find(|member| member.node_id == node_id) {
            Some(me) if me.endpoint != advertise => {
                return Err(ConfigError::from(format!(
                    "--member {node_id}={} disagrees with this node's --advertise {advertise}",
                    me.endpoint
                )));
            }
            Some(_) => {}
            None => membership.members.push(Member {
                node_id: node_id.clone(),
                zone: zone.clone(),
                weight,
                endpoint: advertise.clone(),
            }),
        }
        let storage = self.storage.validate()?;
        let storage_info = storage_info(
            &storage,
            self.postgres_read_only_url,
            self.s3_read_only_access_key_id
                .zip(self.s3_read_only_secret_access_key),
        )?;
        Ok(Config {
            node_id,
            zone,
            weight,
            listen,
            admin_listen,
            advertise,
            storage,
            lease_ttl: Duration::from_millis(lease_ttl_ms.unsigned_abs()),
            membership,
            drain_timeout: Duration::from_secs(10),
            storage_timeout: Duration::from_secs(5),
            memory_budget: corium_fleet_common::memory::budget_bytes(
                self.memory_budget_mib,
                corium_fleet_common::memory::cgroup_limit_bytes(),
            ),
            memory_from_allocator: self.memory_measure.as_deref() != Some("datoms"),
            storage_info,
            request_id_retention: match self.request_id_retention_secs.unwrap_or(86_400) {
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
            load_balance: match (
                self.load_balance.unwrap_or(true),
                self.load_balance_interval_ms.unwrap_or(10_000),
            ) {
                (false, _) => None,
                (true, 0) => return Err(ConfigError::from("--load-balance-interval-ms must be positive")),
                (true, ms) => Some(Duration::from_millis(ms)),
            },
            activation_read_ahead_mib: self.activation_read_ahead_mib.unwrap_or(256),
            warm_standby_mib: self.warm_standby_mib.unwrap_or(64),
            warm_standby_interval: match self.warm_standby_interval_ms.unwrap_or(5_000) {
                0 => {
                    return Err(ConfigError::from(
                        "--warm-standby-interval-ms must be positive (turn warming off with --warm-standby-mib 0)",
                    ));
                }
                ms => Duration::from_millis(ms),
            },
            hot_standbys: self.hot_standbys.unwrap_or(16),
            storage_keys: self.storage_keys.resolve()?,
            max_request_bytes: self.request_size.validate()?,
            read_replicas: ReplicaSettings {
                max: self.max_replicas.unwrap_or(64),
                idle: match self.replica_idle_ms.unwrap_or(300_000) {
                    0 => return Err(ConfigError::from("--replica-idle-ms must be positive")),
                    ms => Duration::from_millis(ms),
                },
                follow_interval: match self.replica_follow_interval_ms.unwrap_or(500) {
                    0 => return Err(ConfigError::from("--replica-follow-interval-ms must be positive")),
                    ms => Duration::from_millis(ms),
                },
            },
            drain_deadline: match self.drain_deadline_ms.unwrap_or(50_000) {
                0 => return Err(ConfigError::from("--drain-deadline-ms must be positive")),
                ms => Duration::from_millis(ms),
            },
            tls,
            static_members,
            registry_ttl,
            registry_renew,
            idle_evict_after: match self.idle_evict_after_ms.unwrap_or(30_000) {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
            gc_min_retention: Duration::from_millis(self.gc_min_retention_ms.unwrap_or(3_600_000)),
            max_subscriptions: SubscriptionLimits {
                per_node: self.max_subscriptions.unwrap_or(10_000),
                per_database: self.max_subscriptions_per_database.unwrap_or(1_000),
                per_principal: self.max_subscriptions_per_principal.unwrap_or(5_000),
            },
            basis_waits: {
                let default = crate::waiters::WaiterLimits::default();
                crate::waiters::WaiterLimits {
                    per_node: self.max_basis_waits.unwrap_or(default.per_node),
                    per_database: self.max_basis_waits_per_database.unwrap_or(default.per_database),
                    per_principal: self
                        .max_basis_waits_per_principal
                        .unwrap_or(default.per_principal),
                }
            },
            work_limits: {
                let default = crate::work_limits::WorkLimitsConfig::default();
                crate::work_limits::WorkLimitsConfig {
                    max_inflight: self.max_inflight_calls.unwrap_or(default.max_inflight),
                    max_queued: self.max_queued_calls.unwrap_or(default.max_queued),
                    max_queue_wait: self
                        .max_queue_wait_ms
                        .map_or(default.max_queue_wait, Duration::from_millis),
                    max_per_database: self.max_inflight_per_database.unwrap_or(default.max_per_database),
                    rate_per_principal: self.rate_limit_per_principal.unwrap_or(0),
                }
            },
            ingress_identities: self
                .ingress_identities
                .unwrap_or_else(|| vec!["corium-fleet-ingress".to_owned()]),
            auth: self.auth,
            authz: self.authz,
        })
    }
}

/// The read-only access `GetStorageInfo` describes: the given `PostgreSQL`
/// URL; for S3, the given static key with the fleet's own endpoint and
/// region (where clients find the same bucket).
///
/// # Errors
/// Read-only access for another kind of storage than the fleet's: it would
/// be ignored, and a backup the operator believes configured would fail.
fn storage_info(
    storage: &corium_fleet_store::StorageSettings,
    postgres_read_only_url: Option<String>,
    s3_read_only_key: Option<(String, String)>,
) -> Result<corium_transactor::StorageInfoConfig, ConfigError> {
    let kind = storage.backend.describe();
    if postgres_read_only_url.is_some()
        && !matches!(storage.backend, corium_fleet_store::Storage::Postgres { .. })
    {
        return Err(ConfigError::from(format!(
            "--postgres-read-only-url (CORIUM_POSTGRES_READ_ONLY_URL) is for a PostgreSQL fleet; this node's storage is {kind}"
        )));
    }
    if s3_read_only_key.is_some() && !matches!(storage.backend, corium_fleet_store::Storage::S3 { .. }) {
        return Err(ConfigError::from(format!(
            "--s3-read-only-access-key-id (CORIUM_S3_READ_ONLY_ACCESS_KEY_ID) is for an S3 fleet; this node's storage is {kind}"
        )));
    }
    let s3 = match (&storage.backend, s3_read_only_key) {
        (
            corium_fleet_store::Storage::S3 { endpoint, region, .. },
            Some((access_key_id, secret_access_key)),
        ) => Some(corium_transactor::S3ReadOnlyConfig::new(
            Some(region.clone()),
            endpoint.clone(),
            corium_transactor::S3ReadOnlyCredentials::Static {
                access_key_id,
                secret_access_key,
                session_token: None,
            },
        )),
        _ => None,
    };
    Ok(corium_transactor::StorageInfoConfig {
        postgres_connection_string: postgres_read_only_url,
        s3,
        plugin_config: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The flags, validated; a refusal as the operator reads it.
    fn parse(args: &[&str]) -> Result<Config, String> {
        let mut all = vec!["corium-fleet-transactor"];
        all.extend_from_slice(args);
        Args::try_parse_from(all)
            .map_err(|e| e.to_string())?
            .merged()
            .and_then(Args::validate)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn defaults_are_a_single_filesystem_node() {
        let config = parse(&["--node-id", "n1"]).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:7001");
        assert_eq!(config.advertise, "http://127.0.0.1:7001");
        assert!(matches!(
            config.storage.backend,
            corium_fleet_store::Storage::Filesystem
        ));
        assert_eq!(config.membership.members.len(), 1);
    }

    #[test]
    fn bad_input_names_the_flag() {
        let cases: [(&[&str], &str); 7] = [
            (&[], "--node-id"),
            (&["--node-id", "a b"], "--node-id"),
            (&["--node-id", "n", "--storage", "mysql://x"], "unknown storage"),
            (&["--node-id", "n", "--storage", "s3://"], "bucket"),
            (&["--node-id", "n", "--lease-ttl-ms", "5"], "--lease-ttl-ms"),
            (&["--node-id", "n", "--member", "x"], "--member"),
            (
                &[
                    "--node-id",
                    "n",
                    "--member",
                    "a=http://x",
                    "--member",
                    "a=http://y",
                ],
                "twice",
            ),
        ];
        for (args, names) in cases {
            let refused = parse(args).unwrap_err();
            assert!(refused.contains(names), "{args:?}: {refused}");
        }
    }

    #[test]
    fn read_only_access_for_another_kind_of_storage_is_refused() {
        let refused = parse(&[
            "--node-id",
            "n1",
            "--postgres-read-only-url",
            "postgres://ro@db/x",
        ])
        .unwrap_err();
        assert!(
            refused.contains("--postgres-read-only-url") && refused.contains("filesystem"),
            "{refused}"
        );
        let s3_key = [
            "--s3-read-only-access-key-id",
            "id",
            "--s3-read-only-secret-access-key",
            "secret",
        ];
        let mut args = vec!["--node-id", "n1", "--storage", "postgres://fleet@db/x"];
        args.extend_from_slice(&s3_key);
        let refused = parse(&args).unwrap_err();
        assert!(
            refused.contains("--s3-read-only-access-key-id") && refused.contains("postgres://"),
            "{refused}"
        );
        let mut args = vec!["--node-id", "n1", "--storage", "s3://bucket/fleet"];
        args.extend_from_slice(&s3_key);
        let config = parse(&args).unwrap();
        assert!(config.storage_info.s3.is_some());
        let config = parse(&[
            "--node-id",
            "n1",
            "--storage",
            "postgres://fleet@db/x",
            "--postgres-read-only-url",
            "postgres://ro@db/x",
        ])
        .unwrap();
        assert!(config.storage_info.postgres_connection_string.is_some());
    }

    #[test]
    fn warm_standbys_are_on_by_default_and_a_zero_interval_is_refused() {
        let config = parse(&["--node-id", "n1"]).unwrap();
        assert_eq!(config.warm_standby_mib, 64);
        assert_eq!(config.warm_standby_interval, Duration::from_secs(5));
        assert!(
            parse(&["--node-id", "n1", "--warm-standby-interval-ms", "0"])
                .unwrap_err()
                .contains("--warm-standby-interval-ms")
        );
        let off = parse(&["--node-id", "n1", "--warm-standby-mib", "0"]).unwrap();
        assert_eq!(off.warm_standby_mib, 0);
    }

    #[test]
    fn config_file_fills_what_flags_leave_out() {
        let dir = std::env::temp_dir().join(format!("cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("node.toml");
        std::fs::write(
            &file,
            "node_id = \"from-file\"\nzone = \"z\"\nlease_ttl_ms = 2000\nstorage = \"postgres://u@h/db\"\n",
        )
        .unwrap();
        let config = parse(&["--config", file.to_str().unwrap(), "--zone", "flag"]).unwrap();
        assert_eq!(config.node_id, "from-file");
        assert_eq!(config.zone, "flag");
        assert_eq!(config.lease_ttl, Duration::from_secs(2));
        assert!(matches!(
            config.storage.backend,
            corium_fleet_store::Storage::Postgres { .. }
        ));
        std::fs::write(&file, "nodeid = 1\n").unwrap();
        assert!(
            parse(&["--config", file.to_str().unwrap()])
                .unwrap_err()
                .contains("config file")
        );
    }

    /// Every key `charts/corium-fleet/templates/transactor-configmap.yaml`
    /// renders into a node's `node.toml` (`transactor.limits` through
    /// `corium-fleet.transactor.limitKeys`; `members` or the registry's
    /// two), and the flags its `StatefulSet` passes, parse and land where
    /// they should.
    #[test]
    fn the_charts_node_toml_and_flags_parse() {
        let dir = tempfile::tempdir().unwrap();
        let (file, zone) = (dir.path().join("node.toml"), dir.path().join("zone"));
        std::fs::write(&zone, "eu-west-1a\n").unwrap();
        let endpoint =
            |n: u8| format!("https://fleet-transactor-{n}.fleet-transactor-headless.default.svc:7001");
        let sample = format!(
            r#"
listen = "0.0.0.0:7001"
admin_listen = "0.0.0.0:9101"
data_dir = "/var/lib/corium-fleet"
weight = 2
lease_ttl_ms = 5000
replicas = 2
drain_deadline_ms = 20000
storage_pool_size = 8
max_inflight_calls = 256
max_inflight_per_database = 128
max_queue_wait_ms = 500
max_queued_calls = 1024
max_subscriptions = 10000
max_subscriptions_per_database = 1000
max_subscriptions_per_principal = 700
rate_limit_per_principal = 0
max_request_bytes = 8388608
max_replicas = 12
replica_idle_ms = 60000
warm_standby_mib = 32
members = [
  "fleet-transactor-0={}",
  "fleet-transactor-1={}",
]
placement_map = "/etc/corium-fleet/placement/placement.map"
"#,
            endpoint(0),
            endpoint(1)
        );
        std::fs::write(&file, sample).unwrap();
        let advertise = endpoint(1);
        let args = [
            "--config",
            file.to_str().unwrap(),
            "--node-id",
            "fleet-transactor-1",
            "--advertise",
            &advertise,
            "--zone-file",
            zone.to_str().unwrap(),
            "--tls-cert",
            "/etc/corium-fleet/tls/tls.crt",
            "--tls-key",
            "/etc/corium-fleet/tls/tls.key",
            "--tls-client-ca",
            "/etc/corium-fleet/tls/ca.crt",
            "--verify-node-identity",
            "false",
            "--ingress-identity",
            "fleet-ingress",
            "--require-auth",
            "--operator-role",
            "ops",
        ];
        let config = parse(&args).unwrap();
        assert_eq!(config.zone, "eu-west-1a");
        assert_eq!(config.weight, 2);
        assert_eq!(
            config.storage.data_dir,
            std::path::PathBuf::from("/var/lib/corium-fleet")
        );
        assert_eq!(config.storage.pool.size, 8);
        assert_eq!(config.drain_deadline, Duration::from_secs(20));
        assert_eq!(config.membership.members.len(), 2);
        assert!(config.static_members);
        assert!(!config.membership.verify_node_identity);
        assert!(config.membership.placement_map.is_some());
        assert_eq!(
            config.tls.unwrap().ca,
            std::path::PathBuf::from("/etc/corium-fleet/tls/ca.crt")
        );
        assert_eq!(config.ingress_identities, ["fleet-ingress"]);
        assert_eq!(config.work_limits.max_inflight, 256);
        assert_eq!(config.max_request_bytes, 8 * 1024 * 1024);
        assert_eq!(config.max_subscriptions.per_principal, 700);
        assert_eq!(config.read_replicas.max, 12);
        assert_eq!(config.read_replicas.idle, Duration::from_mins(1));
        assert_eq!(config.warm_standby_mib, 32);
        // Without members: the registry's settings instead.
        std::fs::write(
            &file,
            "listen = \"0.0.0.0:7001\"\nzone = \"z2\"\nregistry_ttl_ms = 12000\nregistry_renew_ms = 4000\n",
        )
        .unwrap();
        let config = parse(&["--config", file.to_str().unwrap(), "--node-id", "n1"]).unwrap();
        assert!(!config.static_members);
        assert_eq!(config.zone, "z2");
        assert_eq!(config.registry_ttl, Duration::from_secs(12));
        assert_eq!(config.registry_renew, Duration::from_secs(4));
    }

    #[test]
    fn the_shared_groups_check_members_against_the_nodes_tls() {
        let tls = [
            "--node-id",
            "n1",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--tls-client-ca",
            "ca.pem",
        ];
        let mut cleartext = tls.to_vec();
        cleartext.extend(["--member", "n2=http://n2:7001"]);
        let error = parse(&cleartext).unwrap_err();
        assert!(
            error.contains("--member n2=http://n2:7001") && error.contains("cleartext"),
            "{error}"
        );
        let error = parse(&["--node-id", "n1", "--member", "n2=https://n2:7001"]).unwrap_err();
        assert!(
            error.contains("--member n2=https://n2:7001") && error.contains("--tls-cert"),
            "{error}"
        );
        let error = parse(&["--node-id", "n1", "--tls-cert", "c.pem"]).unwrap_err();
        assert!(
            error.contains("--tls-cert, --tls-key and --tls-client-ca"),
            "{error}"
        );
        let config = parse(&tls).unwrap();
        assert_eq!(config.advertise, "https://127.0.0.1:7001");
        assert_eq!(
            config.tls.unwrap().identity.cert,
            std::path::PathBuf::from("c.pem")
        );
        let file = std::env::temp_dir().join(format!("cfg-typo-{}.toml", std::process::id()));
        std::fs::write(&file, "lease_ttl_ms = \"5s\"\n").unwrap();
        let error = parse(&["--config", file.to_str().unwrap(), "--node-id", "n1"]).unwrap_err();
        assert!(error.contains("`lease_ttl_ms`"), "{error}");
    }
}
