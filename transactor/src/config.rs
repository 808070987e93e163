//! Node configuration: command-line flags, an optional TOML file, and the
//! checks that turn them into a [`Config`] or a clear error.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use corium_fleet_common::placement::{self, Member};
use corium_fleet_common::process::ConfigError;
use serde::Deserialize;

/// `corium-fleet-transactor` flags. Every flag can also be set in the file
/// given to `--config` (same names, `snake_case`); a flag given on the command
/// line wins over the file.
#[derive(Debug, Default, clap::Parser, Deserialize)]
#[command(
    name = "corium-fleet-transactor",
    version,
    about = "A Corium Fleet transactor node"
)]
#[serde(deny_unknown_fields, default)]
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
    /// Storage: `filesystem` (under --data-dir), `postgres://…`, or
    /// `s3://BUCKET[/PREFIX]` (with --s3-endpoint / AWS_* credentials)
    /// [default: filesystem].
    #[arg(long, env = "CORIUM_FLEET_STORAGE")]
    pub storage: Option<String>,
    /// Data directory: the filesystem store and logs, shared by every node of
    /// a filesystem fleet [default: ./.corium-fleet/data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// S3 endpoint URL (for S3-compatible servers).
    #[arg(long, env = "CORIUM_FLEET_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 region [default: us-east-1].
    #[arg(long, env = "AWS_REGION")]
    pub s3_region: Option<String>,
    /// Write-lease time to live in milliseconds; renewals run every third of
    /// it, and it bounds failover time after a crash [default: 5000].
    #[arg(long)]
    pub lease_ttl_ms: Option<i64>,
    /// Release and drop a database's cell after this long with no call and
    /// no subscription (0: never); its next request activates it again
    /// [default: 600000].
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
    /// Fleet member, repeatable: `NODE_ID=ENDPOINT[,zone=Z][,weight=N]`.
    /// This node is added from its own flags when not listed.
    #[arg(long = "member")]
    pub members: Option<Vec<String>>,
    /// Node-registry record time to live in milliseconds [default: 10000].
    #[arg(long)]
    pub registry_ttl_ms: Option<u64>,
    /// How often the registry record is renewed and the live members re-read,
    /// in milliseconds [default: 3000].
    #[arg(long)]
    pub registry_renew_ms: Option<u64>,
    /// Candidates per database [default: 2].
    #[arg(long)]
    pub replicas: Option<usize>,
    /// Operator placement map: lines `database = node, node` (best first)
    /// that override rendezvous placement. Checked at start (exit 2 with the
    /// line at fault) and re-read every few seconds; a bad edit is refused
    /// and the previous map stays in force.
    #[arg(long)]
    pub placement_map: Option<PathBuf>,
    /// PEM certificate this node serves with. With --tls-key and
    /// --tls-client-ca the gRPC port speaks mTLS only.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// PEM fleet CA: every client must present a certificate it signed.
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,
    /// Certificate name (CN or DNS name) that marks an ingress peer, whose
    /// `corium-principal` is trusted; repeatable [default: corium-fleet-ingress].
    #[arg(long = "ingress-identity")]
    pub ingress_identities: Option<Vec<String>>,
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
    /// With mTLS: a peer node's certificate must name its node id (as a DNS
    /// name) when this node dials it (handoff, drain). Turn off only for
    /// certificates shared by all nodes (the chart's shared-certificate
    /// modes) [default: true].
    #[arg(long, value_name = "BOOL")]
    pub verify_node_identity: Option<bool>,
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
    pub max_subscriptions: crate::service::subscribe::Limits,
    /// Overload shedding: calls running and waiting, per database, per
    /// principal.
    pub work_limits: crate::work_limits::WorkLimitsConfig,
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
            registry_ttl_ms: self.registry_ttl_ms.or(file.registry_ttl_ms),
            registry_renew_ms: self.registry_renew_ms.or(file.registry_renew_ms),
            storage_pool_size: self.storage_pool_size.or(file.storage_pool_size),
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
            max_subscriptions: crate::service::subscribe::Limits {
                per_node: self.max_subscriptions.unwrap_or(10_000),
                per_database: self.max_subscriptions_per_database.unwrap_or(1_000),
                per_principal: self.max_subscriptions_per_principal.unwrap_or(5_000),
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
