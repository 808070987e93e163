//! Node configuration: command-line flags, an optional TOML file, and the
//! checks that turn them into a [`Config`] or a clear error.
//!
//! Layout:
//! - [`args`] — the flags ([`Args`]), also the `--config` file's keys;
//! - [`resolved`] — the validated [`Config`] (and its [`Tls`]);
//! - this file — merging the file under the flags, and the checks.

mod args;
mod resolved;

pub use args::Args;
pub use resolved::{Config, ReplicaSettings, SubscriptionLimits, Tls};

// The settings of the node's parts, as a `Config` names them.
pub use crate::authz::AuthzFlags;
pub use crate::waiters::WaiterLimits;
pub use crate::work_limits::WorkLimitsConfig;

use std::path::PathBuf;
use std::time::Duration;

use corium_fleet_common::placement::{self, Member};
use corium_fleet_common::process::ConfigError;

fn valid_node_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

impl Args {
    /// Merges the `--config` file under the flags.
    ///
    /// # Errors
    /// The file cannot be read or has unknown or mistyped settings.
    pub fn merged(self) -> Result<Self, ConfigError> {
        let Some(path) = &self.config else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read config file {}: {error}", path.display()))?;
        let file: Args =
            toml::from_str(&text).map_err(|error| format!("config file {}: {error}", path.display()))?;
        Ok(Self {
            config: self.config,
            node_id: self.node_id.or(file.node_id),
            zone: self.zone.or(file.zone),
            zone_file: self.zone_file.or(file.zone_file),
            tls_cert: self.tls_cert.or(file.tls_cert),
            tls_key: self.tls_key.or(file.tls_key),
            tls_client_ca: self.tls_client_ca.or(file.tls_client_ca),
            ingress_identities: self.ingress_identities.or(file.ingress_identities),
            verify_node_identity: self.verify_node_identity.or(file.verify_node_identity),
            auth: self.auth,
            authz: self.authz,
            weight: self.weight.or(file.weight),
            listen: self.listen.or(file.listen),
            admin_listen: self.admin_listen.or(file.admin_listen),
            advertise: self.advertise.or(file.advertise),
            storage: self.storage.or(file.storage),
            data_dir: self.data_dir.or(file.data_dir),
            s3_endpoint: self.s3_endpoint.or(file.s3_endpoint),
            s3_region: self.s3_region.or(file.s3_region),
            lease_ttl_ms: self.lease_ttl_ms.or(file.lease_ttl_ms),
            members: self.members.or(file.members),
            replicas: self.replicas.or(file.replicas),
            placement_map: self.placement_map.or(file.placement_map),
            idle_evict_after_ms: self.idle_evict_after_ms.or(file.idle_evict_after_ms),
            gc_min_retention_ms: self.gc_min_retention_ms.or(file.gc_min_retention_ms),
            drain_deadline_ms: self.drain_deadline_ms.or(file.drain_deadline_ms),
            max_subscriptions: self.max_subscriptions.or(file.max_subscriptions),
            max_subscriptions_per_database: self
                .max_subscriptions_per_database
                .or(file.max_subscriptions_per_database),
            max_subscriptions_per_principal: self
                .max_subscriptions_per_principal
                .or(file.max_subscriptions_per_principal),
            max_inflight_calls: self.max_inflight_calls.or(file.max_inflight_calls),
            max_queued_calls: self.max_queued_calls.or(file.max_queued_calls),
            max_queue_wait_ms: self.max_queue_wait_ms.or(file.max_queue_wait_ms),
            max_inflight_per_database: self.max_inflight_per_database.or(file.max_inflight_per_database),
            rate_limit_per_principal: self.rate_limit_per_principal.or(file.rate_limit_per_principal),
            max_basis_waits: self.max_basis_waits.or(file.max_basis_waits),
            max_basis_waits_per_database: self
                .max_basis_waits_per_database
                .or(file.max_basis_waits_per_database),
            max_basis_waits_per_principal: self
                .max_basis_waits_per_principal
                .or(file.max_basis_waits_per_principal),
            registry_ttl_ms: self.registry_ttl_ms.or(file.registry_ttl_ms),
            registry_renew_ms: self.registry_renew_ms.or(file.registry_renew_ms),
            storage_pool_size: self.storage_pool_size.or(file.storage_pool_size),
            activation_read_ahead_mib: self.activation_read_ahead_mib.or(file.activation_read_ahead_mib),
            warm_standby_mib: self.warm_standby_mib.or(file.warm_standby_mib),
            warm_standby_interval_ms: self.warm_standby_interval_ms.or(file.warm_standby_interval_ms),
            max_replicas: self.max_replicas.or(file.max_replicas),
            replica_idle_ms: self.replica_idle_ms.or(file.replica_idle_ms),
            replica_follow_interval_ms: self
                .replica_follow_interval_ms
                .or(file.replica_follow_interval_ms),
            postgres_quick_ack: self.postgres_quick_ack.or(file.postgres_quick_ack),
            log: self.log.or(file.log),
            log_format: self.log_format.or(file.log_format),
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
        let scheme = if self.tls_cert.is_some() { "https" } else { "http" };
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
        let replicas = self.replicas.unwrap_or(placement::DEFAULT_REPLICAS);
        if replicas == 0 {
            return Err(ConfigError::from("--replicas must be at least 1"));
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
        let tls = match (self.tls_cert, self.tls_key, self.tls_client_ca) {
            (None, None, None) => None,
            (Some(cert), Some(key), Some(client_ca)) => Some(Tls { cert, key, client_ca }),
            _ => {
                return Err(ConfigError::from(
                    "--tls-cert, --tls-key and --tls-client-ca go together: internal routes are mutual TLS"
                        .to_owned(),
                ));
            }
        };
        if tls.is_some()
            && let Some(member) = self
                .members
                .iter()
                .flatten()
                .find(|member| member.contains("=http://"))
        {
            return Err(ConfigError::from(format!(
                "--member {member}: this node's internal routes are mutual TLS; a cleartext member is refused"
            )));
        }
        if tls.is_some() && !advertise.starts_with("https://") {
            return Err(ConfigError::from(format!(
                "--advertise {advertise:?}: a node serving mTLS must advertise an https:// endpoint"
            )));
        }
        let weight = self.weight.unwrap_or(1);
        let static_members = self.members.as_ref().is_some_and(|members| !members.is_empty());
        let registry_ttl = Duration::from_millis(self.registry_ttl_ms.unwrap_or(10_000));
        let registry_renew = Duration::from_millis(self.registry_renew_ms.unwrap_or(3_000));
        if registry_renew.is_zero() || registry_renew >= registry_ttl {
            return Err(ConfigError::from(
                "--registry-renew-ms must be positive and below --registry-ttl-ms",
            ));
        }
        let mut members = self
            .members
            .unwrap_or_default()
            .iter()
            .map(|text| {
                text.parse::<Member>()
                    .map_err(|error| format!("--member: {error}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        placement::check_unique(&members).map_err(|error| format!("--member: {error}"))?;
        match members.iter().find(|member| member.node_id == node_id) {
            Some(me) if me.endpoint != advertise => {
                return Err(ConfigError::from(format!(
                    "--member {node_id}={} disagrees with this node's --advertise {advertise}",
                    me.endpoint
                )));
            }
            Some(_) => {}
            None => members.push(Member {
                node_id: node_id.clone(),
                zone: zone.clone(),
                weight,
                endpoint: advertise.clone(),
            }),
        }
        let storage = corium_fleet_store::Storage::parse(
            self.storage.as_deref().unwrap_or("filesystem"),
            self.s3_endpoint,
            self.s3_region,
        )
        .map_err(|error| format!("--storage: {error}"))?;
        Ok(Config {
            node_id,
            zone,
            weight,
            listen,
            admin_listen,
            advertise,
            storage,
            data_dir: self
                .data_dir
                .unwrap_or_else(|| PathBuf::from(".corium-fleet/data")),
            lease_ttl: Duration::from_millis(lease_ttl_ms.unsigned_abs()),
            members,
            replicas,
            placement_map: self.placement_map,
            drain_timeout: Duration::from_secs(10),
            storage_timeout: Duration::from_secs(5),
            storage_pool_size: match self
                .storage_pool_size
                .unwrap_or(corium_fleet_store::DEFAULT_POOL_SIZE)
            {
                0 => return Err(ConfigError::from("--storage-pool-size must be at least 1")),
                n => n,
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
            postgres_quick_ack: self.postgres_quick_ack.unwrap_or(true),
            drain_deadline: match self.drain_deadline_ms.unwrap_or(50_000) {
                0 => return Err(ConfigError::from("--drain-deadline-ms must be positive")),
                ms => Duration::from_millis(ms),
            },
            tls,
            static_members,
            registry_ttl,
            registry_renew,
            idle_evict_after: match self.idle_evict_after_ms.unwrap_or(600_000) {
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
            verify_node_identity: self.verify_node_identity.unwrap_or(true),
            auth: self.auth,
            authz: self.authz,
        })
    }
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
        assert!(matches!(config.storage, corium_fleet_store::Storage::Filesystem));
        assert_eq!(config.members.len(), 1);
    }

    #[test]
    fn bad_input_names_the_flag() {
        assert!(parse(&[]).unwrap_err().contains("--node-id"));
        assert!(parse(&["--node-id", "a b"]).unwrap_err().contains("--node-id"));
        assert!(
            parse(&["--node-id", "n", "--storage", "mysql://x"])
                .unwrap_err()
                .contains("unknown storage")
        );
        assert!(
            parse(&["--node-id", "n", "--storage", "s3://"])
                .unwrap_err()
                .contains("bucket")
        );
        assert!(
            parse(&["--node-id", "n", "--lease-ttl-ms", "5"])
                .unwrap_err()
                .contains("--lease-ttl-ms")
        );
        assert!(
            parse(&["--node-id", "n", "--member", "x"])
                .unwrap_err()
                .contains("--member")
        );
        assert!(
            parse(&[
                "--node-id",
                "n",
                "--member",
                "a=http://x",
                "--member",
                "a=http://y"
            ])
            .unwrap_err()
            .contains("twice")
        );
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
            config.storage,
            corium_fleet_store::Storage::Postgres { .. }
        ));
        std::fs::write(&file, "nodeid = 1\n").unwrap();
        assert!(
            parse(&["--config", file.to_str().unwrap()])
                .unwrap_err()
                .contains("config file")
        );
    }
}
